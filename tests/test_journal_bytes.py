"""What the journal writes per record, in bytes (issue 30): what passes through its threads'
write calls (``wchar``) and the pages the kernel charges them for dirtying (``write_bytes``),
read from ``/proc/self/task/TID/io``. docs/benchmarks.md, "Bytes written", has the device's
figures (bench/flash.py); these pin the causes found there.

``write_bytes`` counts only on a file system that writes back (not tmpfs): there it is 0 and
those assertions say nothing."""

from __future__ import annotations

import asyncio
import collections
import json
import os
import sqlite3
import threading
from pathlib import Path

from tableside.daemon.journal import Journal, RedoLog, verify_file
from tableside.daemon.journal.checkpoint import Checkpointer
from tableside.daemon.journal.redo import Header

from .test_journal_parts import chain

TOPIC = "tableside/t1/device/shuffler0/event"
PAGE = os.sysconf("SC_PAGE_SIZE")


def io_of(*threads: str) -> collections.Counter[str]:
    """``/proc/.../io`` of the named threads of this process, summed (they must be alive)."""
    total: collections.Counter[str] = collections.Counter()
    for thread in threading.enumerate():
        if thread.name in threads and thread.native_id is not None:
            text = Path(f"/proc/self/task/{thread.native_id}/io").read_text()
            for line in text.splitlines():
                key, value = line.split(": ")
                total[key] += int(value)
    return total


def this_thread_io() -> collections.Counter[str]:
    text = Path("/proc/thread-self/io").read_text()
    return collections.Counter({k: int(v) for k, v in (ln.split(": ") for ln in text.splitlines())})


def event(seq: int) -> bytes:
    """About what a shuffler's event is (some 300 bytes)."""
    data = {"shuffle_id": seq, "card_count": 52, "pad": "x" * 180}
    return json.dumps(
        {"table": "t1", "seq": seq, "event": "shuffle_complete", "data": data}
    ).encode()


def appended_per_frame(log: RedoLog, frames: int) -> float:
    """``write_bytes`` per append of one ~300-byte record to ``log``, from this thread."""
    records = chain(0, frames)
    before = this_thread_io()["write_bytes"]
    for record in records:
        log.append([record])
    return (this_thread_io()["write_bytes"] - before) / frames


def test_an_append_to_the_log_written_ahead_dirties_a_page_not_a_folio(tmp_path: Path) -> None:
    """The zeros written ahead went in one 5 MiB write: the page cache held them in 2 MiB
    folios, and each append of a frame dirtied one whole (2,097,152 bytes charged per append
    on Linux 6.18's ext4, one 4 KiB block written to the device)."""
    log = RedoLog(tmp_path / "j.sqlite.log", reserve=5 << 20)
    log.create(Header("t1", 0, -1, b"\0" * 32))
    try:
        assert appended_per_frame(log, 64) <= 2 * PAGE
    finally:
        log.close()


async def append_one_at_a_time(journal: Journal, count: int, gap_s: float = 0.0) -> None:
    """As one device sends: each record waited for, then acknowledged by the broker."""
    for _ in range(count):
        seq = journal.append(TOPIC, event, key="shuffler0/event/shuffle_complete").seq
        await journal.wait_durable(seq)
        journal.mark_acked(seq)
        await asyncio.sleep(gap_s)


async def test_a_record_costs_two_pages_of_wal_and_its_log_frame(tmp_path: Path) -> None:
    """One record a commit, as one device with one frame in flight makes: about 2.2 pages of
    WAL each (the records' page, ``latest``'s page; a new page's header now and then) and the
    log's frame. It was 4.2 pages: ``latest`` with its index in a second B-tree, and
    ``meta.acked`` in every commit. And ``write_bytes``: 2 MiB a record (the log's folio)."""
    path = tmp_path / "journal.sqlite"
    journal = Journal(path, "t1")
    journal.open()
    journal.start()
    try:
        await append_one_at_a_time(journal, 20)
        before = io_of("journal-writer", "journal-checkpoint")
        await append_one_at_a_time(journal, 300)
        spent = io_of("journal-writer", "journal-checkpoint") - before
    finally:
        journal.close()
    assert spent["wchar"] / 300 <= 3 * PAGE, spent
    assert spent["write_bytes"] / 300 <= 4 * PAGE, spent
    assert verify_file(path)[1] == []


async def test_a_slow_table_does_not_checkpoint_after_each_record(tmp_path: Path) -> None:
    """A record, then a pause, as a table makes them: each pause of half a second used to copy
    the WAL into the main file (its pages rewritten, the WAL and the file synced, and the next
    commit syncing the WAL's new header) and write ``meta.acked`` on its own: ~35 KB through
    the write calls a record. Now a checkpoint waits for 30 s of quiet (or a megabyte of WAL)."""
    path = tmp_path / "journal.sqlite"
    journal = Journal(path, "t1")
    journal.open()
    journal.start()
    try:
        await append_one_at_a_time(journal, 2)
        before = io_of("journal-writer", "journal-checkpoint")
        await append_one_at_a_time(journal, 4, gap_s=0.7)
        spent = io_of("journal-writer", "journal-checkpoint") - before
        assert journal.checkpoints == 0
    finally:
        journal.close()
    assert spent["wchar"] / 4 <= 3 * PAGE, spent
    assert verify_file(path)[1] == []


async def test_acked_is_written_at_most_every_so_often_and_at_close(tmp_path: Path) -> None:
    """``meta.acked`` goes into a batch's transaction at most every ``acked_every_s`` (a lost
    one only resends, marked ``redelivered``); retention and a clean close write the newest."""
    path = tmp_path / "journal.sqlite"
    journal = Journal(path, "t1", acked_every_s=3600)
    journal.open()
    journal.start()
    try:
        await append_one_at_a_time(journal, 3)  # the first acked goes in (never written yet)
        await append_one_at_a_time(journal, 3)
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as reader:
            (acked,) = reader.execute("SELECT value FROM meta WHERE key = 'acked'").fetchone()
        assert int(acked) < 5, "not in every commit"
        journal.prune()
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as reader:
            (acked,) = reader.execute("SELECT value FROM meta WHERE key = 'acked'").fetchone()
        assert int(acked) == 5, "retention goes by the newest"
        journal.mark_acked(5)
    finally:
        journal.close()
    again = Journal(path, "t1")
    again.open()
    try:
        assert again.recovered_acked == 5
    finally:
        again.close()


async def test_an_older_journal_gets_latest_in_one_tree(tmp_path: Path) -> None:
    """A journal made before (``latest`` a rowid table, its key in an index of its own) is
    rebuilt at its next opening, every row kept."""
    path = tmp_path / "journal.sqlite"
    journal = Journal(path, "t1")
    journal.open()
    journal.start()
    await append_one_at_a_time(journal, 5)
    journal.close()
    with sqlite3.connect(path) as conn:
        conn.executescript("""
            BEGIN;
            CREATE TABLE old (key TEXT PRIMARY KEY, seq INTEGER NOT NULL, payload BLOB NOT NULL);
            INSERT INTO old SELECT * FROM latest;
            DROP TABLE latest;
            ALTER TABLE old RENAME TO latest;
            COMMIT;
        """)
        rows = conn.execute("SELECT * FROM latest").fetchall()
    again = Journal(path, "t1")
    again.open()
    try:
        assert again.latest() == {k: bytes(p) for k, _, p in rows}
    finally:
        again.close()
    with sqlite3.connect(path) as conn:
        (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'latest'").fetchone()
        assert "WITHOUT ROWID" in sql
        assert conn.execute("SELECT * FROM latest").fetchall() == rows
    assert verify_file(path)[1] == []


async def test_a_quiet_checkpoint_waits_for_quiet_and_acked_does_not_put_it_off(
    tmp_path: Path,
) -> None:
    """Asked for only once nothing was committed for ``quiet_s``; ``meta.acked`` written
    meanwhile (idle, a few seconds after the last batch) goes with it, not after it."""
    checkpointer = Checkpointer(tmp_path / "j.sqlite", quiet_s=0.5)
    checkpointer.committed(5_000, queue_empty=True)
    checkpointer.quiet()
    assert not checkpointer.asked, "quiet for less than quiet_s"
    await asyncio.sleep(0.3)
    checkpointer.wrote_while_quiet(4096)
    await asyncio.sleep(0.3)  # 0.6 s since the commit, 0.3 s since acked
    checkpointer.quiet()
    assert checkpointer.asked
