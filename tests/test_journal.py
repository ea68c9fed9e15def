"""The durable journal on its own: order, durability across reopen, the hash chain finding every
kind of tampering, refusing a corrupt file with a way out, retention that never deletes what the
broker has not acknowledged, and a writer that fails loudly when the disk is full."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from tableside.cli import main
from tableside.daemon.journal import (
    QUIET_S,
    Journal,
    JournalCorrupt,
    JournalError,
    RedoLog,
    export_records,
    verify_file,
)


def payload(seq: int, **extra: object) -> bytes:
    return json.dumps({"seq": seq, "table": "t1", **extra}).encode()


async def fill(journal: Journal, count: int, topic: str = "tableside/t1/x") -> list[int]:
    seqs = []
    for _ in range(count):
        seq = journal.next_seq
        assert journal.append(topic, payload, retain=False, key=None).seq == seq
        seqs.append(seq)
    await journal.wait_durable(seqs[-1])
    # and in SQLite (a transaction after the log's sync), for the tests that read it directly
    await journal.wait_stored(seqs[-1])
    return seqs


async def make(path: Path, count: int, **kwargs: object) -> Journal:
    journal = Journal(path, "t1", **kwargs)  # type: ignore[arg-type]
    journal.open()
    journal.start()
    await fill(journal, count)
    return journal


async def test_records_survive_reopen_and_numbering_carries_on(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    journal = await make(path, 50)
    journal.mark_acked(19)
    journal.close()
    again = Journal(path, "t1")
    again.open()
    assert again.next_seq == 50
    assert again.acked == 19
    again.start()
    records = await again.read_from(20, 100)  # not in memory any more: read from disk
    assert [r.seq for r in records] == list(range(20, 50))
    assert json.loads(records[0].payload)["seq"] == 20
    await fill(again, 5)
    again.close()
    summary, problems = verify_file(path)
    assert problems == []
    assert summary["first_seq"] == 0 and summary["last_seq"] == 54 and summary["records"] == 55


async def test_the_journal_numbers_what_it_is_given(tmp_path: Path) -> None:
    """One outbox numbers: each record gets the next seq, after what the journal holds, and
    its payload is made with it; nothing is carried in to be checked back."""
    journal = await make(tmp_path / "j.sqlite", 3)
    try:
        records = [journal.append("t", payload, retain=False, key=None) for _ in range(3)]
        assert [r.seq for r in records] == [3, 4, 5] and journal.next_seq == 6
        assert [json.loads(r.payload)["seq"] for r in records] == [3, 4, 5]
        assert records[1].prev_hash == records[0].hash
    finally:
        journal.close()


async def test_a_killed_writer_loses_nothing_committed(tmp_path: Path) -> None:
    """A process that journals and is SIGKILLed: everything it saw committed is there, the chain
    holds, and the next seq follows the last committed one (no gap, no repeat)."""
    path = tmp_path / "journal.sqlite"
    script = textwrap.dedent(
        f"""
        import asyncio, json, sys
        from pathlib import Path
        from tableside.daemon.journal import Journal
        async def go():
            j = Journal(Path({str(path)!r}), "t1")
            j.open(); j.start()
            while True:
                seq = j.next_seq
                j.append("t", lambda n: json.dumps({{"seq": n}}).encode(), retain=False, key=None)
                if seq % 50 == 0:
                    await j.wait_durable(seq)
                    print("DURABLE", seq, flush=True)
                await asyncio.sleep(0)
        asyncio.run(go())
        """
    )
    cmd = [sys.executable, "-c", script]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)  # noqa: ASYNC220
    assert proc.stdout is not None
    seen = 0
    for line in proc.stdout:
        if not line.startswith("DURABLE"):
            continue  # the journal's own log lines
        seen = int(line.split()[1])
        if seen >= 2000:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    summary, problems = verify_file(path)
    assert problems == []
    # what was reported durable is in the log (SQLite takes a batch after its log sync, so
    # the last batch or two may be only there: opening rolls them forward)
    logged = summary.get("log_last_seq", summary["last_seq"])
    assert logged >= seen
    journal = Journal(path, "t1")
    journal.open()
    assert journal.next_seq == logged + 1
    journal.close()


def tamper(path: Path, sql: str, *args: object) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(sql, args)


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("UPDATE records SET payload = X'7b7d' WHERE seq = 7", "seq 7: edited"),
        ("UPDATE records SET topic = 'tableside/t1/other' WHERE seq = 3", "seq 3: edited"),
        ("DELETE FROM records WHERE seq = 12", "seq 12: missing"),
        (
            "INSERT INTO records SELECT 100, ts, topic, retain, payload, prev_hash, hash "
            "FROM records WHERE seq = 5",
            "seq 30: missing: next record is seq 100",
        ),
        ("UPDATE records SET prev_hash = hash WHERE seq = 20", "seq 20: chain broken"),
    ],
)
async def test_verify_finds_tampering(tmp_path: Path, sql: str, expected: str) -> None:
    path = tmp_path / "journal.sqlite"
    (await make(path, 30)).close()
    tamper(path, sql)
    _, problems = verify_file(path)
    assert any(str(p).startswith(expected) for p in problems), problems
    journal = Journal(path, "t1")
    with pytest.raises(JournalCorrupt, match="tableside journal recover"):
        journal.open()


async def test_rewriting_a_record_with_a_fresh_hash_breaks_the_next_link(tmp_path: Path) -> None:
    """Someone who recomputes the edited record's own hash still breaks the chain after it."""
    from tableside.daemon.journal import record_hash

    path = tmp_path / "journal.sqlite"
    (await make(path, 10)).close()
    with sqlite3.connect(path) as conn:
        seq, ts, topic, retain, _, prev = conn.execute(
            "SELECT seq, ts, topic, retain, payload, prev_hash FROM records WHERE seq = 4"
        ).fetchone()
        forged = payload(4, forged=True)
        digest = record_hash(prev, seq, ts, topic, bool(retain), forged)
        conn.execute("UPDATE records SET payload = ?, hash = ? WHERE seq = 4", (forged, digest))
    _, problems = verify_file(path)
    assert [str(p) for p in problems] == ["seq 5: chain broken: previous hash does not match"]


@pytest.mark.parametrize("log_kept", [True, False], ids=["log kept", "log lost too"])
async def test_unreadable_file_is_refused_and_recovered_after_its_last_seq(
    tmp_path: Path, log_kept: bool
) -> None:
    path = tmp_path / "journal.sqlite"
    (await make(path, 40)).close()
    with open(path, "r+b") as f:  # noqa: ASYNC230  # a test's own small file
        f.write(b"this is no longer a database file")
    with pytest.raises(JournalCorrupt) as caught:
        Journal(path, "t1").open()
    assert "will not start" in str(caught.value) and str(path) in str(caught.value)
    assert main(["journal", "verify", str(path)]) == 1
    if log_kept:
        # The file cannot say where its numbering got to; its log file can.
        assert main(["journal", "recover", str(path), "--table", "t1"]) == 0
    else:
        RedoLog.beside(path).unlink()
        # Nothing says where the numbering got to: the operator must say (a subscriber's log).
        assert main(["journal", "recover", str(path), "--table", "t1"]) == 2
        assert main(["journal", "recover", str(path), "--table", "t1", "--after-seq", "39"]) == 0
    journal = Journal(path, "t1")
    journal.open()
    assert journal.next_seq == 40
    journal.close()
    assert set_aside(tmp_path)


def set_aside(directory: Path) -> list[Path]:
    found = directory.glob("journal.sqlite.corrupt-*")
    return [p for p in found if not p.name.endswith(("-wal", "-shm", ".log", ".mark"))]


async def test_recover_continues_numbering_after_the_highest_seq(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    (await make(path, 25)).close()
    tamper(path, "DELETE FROM records WHERE seq = 10")
    assert main(["journal", "recover", str(path)]) == 0
    (aside,) = set_aside(tmp_path)
    assert verify_file(aside)[1], "the old journal is kept as it was"
    journal = Journal(path, "t1")
    journal.open()
    assert journal.next_seq == 25
    journal.close()
    assert main(["journal", "recover", str(path)]) == 1  # a sound journal is left alone


async def test_retention_deletes_only_acknowledged_records(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    journal = await make(path, 100, retain_days=1 / 86400 / 1000)  # everything is "old"
    try:
        journal.mark_acked(59)
        await fill(journal, 1)  # commits the acknowledged mark with it
        assert journal.prune() == 60
        assert journal.prune() == 0
    finally:
        journal.close()
    summary, problems = verify_file(path)
    assert problems == [], "the chain starts from the anchor of what was deleted"
    assert summary["first_seq"] == 60 and summary["last_seq"] == 100


async def test_size_limit_keeps_unsent_records(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    journal = Journal(path, "t1", max_mb=1)
    journal.open()
    journal.start()
    big = "x" * 2000
    try:
        for _ in range(1500):  # ~3 MB
            journal.append("t", lambda n: payload(n, pad=big), retain=False, key=None)
        await journal.wait_durable(1499)
        assert journal.prune() == 0, "nothing acknowledged: nothing may go"
        journal.mark_acked(1199)
        await fill(journal, 1)
        assert journal.prune() == 1200, "only up to what the broker acknowledged"
        journal.mark_acked(1500)
        await fill(journal, 1)
        assert journal.prune() > 0, "over the limit still: older acknowledged records go"
    finally:
        journal.close()
    summary, problems = verify_file(path)
    assert problems == []
    assert summary["last_seq"] == 1501
    with sqlite3.connect(path) as conn:
        pages, free, size = (conn.execute(f"PRAGMA {p}").fetchone()[0]
                             for p in ("page_count", "freelist_count", "page_size"))  # fmt: skip
    assert (pages - free) * size < 1_000_000 * 1.2


async def test_legacy_sequence_file_is_carried_on(tmp_path: Path) -> None:
    (tmp_path / "seq.json").write_text('{"reserved": 1999, "last": 1234, "clean": false}')
    journal = Journal(tmp_path / "journal.sqlite", "t1")
    journal.open()
    assert journal.next_seq == 2000
    journal.close()


async def test_wrong_table_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    (await make(path, 3)).close()
    with pytest.raises(JournalCorrupt, match="journal of table 't1', not 't2'"):
        Journal(path, "t2").open()


async def test_full_disk_fails_loudly(tmp_path: Path) -> None:
    """SQLite's own "database or disk is full" (a page cap stands in for the disk): the writer
    says so and the failure reaches the event loop, which the daemon turns into its exit."""
    journal = Journal(tmp_path / "journal.sqlite", "t1")
    journal.open()
    assert journal._conn is not None
    pages = journal._conn.execute("PRAGMA page_count").fetchone()[0]
    journal._conn.execute(f"PRAGMA max_page_count = {pages + 2}")
    journal.start()
    assert journal.failed is not None
    for _ in range(200):
        journal.append("t", lambda n: payload(n, pad="y" * 4000), retain=False, key=None)
    async with asyncio.timeout(10):
        with pytest.raises(JournalError, match="full"):
            await journal.failed
    journal.close()


async def test_export_writes_every_record_as_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "journal.sqlite"
    (await make(path, 12)).close()
    capsys.readouterr()  # the journal's own log lines (structlog's default is stdout)
    assert main(["journal", "export", str(path), "--from-seq", "3", "--to-seq", "5"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["seq"] for x in lines] == [3, 4, 5]
    assert lines[0]["payload"] == {"seq": 3, "table": "t1"}
    assert lines[1]["prev_hash"] == lines[0]["hash"]
    assert main(["journal", "verify", str(path)]) == 0
    assert "journal: OK" in capsys.readouterr().out


async def test_group_commit_batches(tmp_path: Path) -> None:
    """A burst of appends costs far fewer commits than records (one fsync per batch)."""
    journal = await make(tmp_path / "j.sqlite", 5000)
    try:
        assert journal.commits < 500
    finally:
        journal.close()
    assert verify_file(tmp_path / "j.sqlite")[1] == []


# -- issue 13, issue 20: lost records are found, never renumbered; a lost -wal is put back ---


def log_of(path: Path) -> RedoLog:
    return RedoLog(RedoLog.beside(path))


async def test_a_journal_whose_wal_was_not_copied_along_is_rolled_forward(tmp_path: Path) -> None:
    """The state folder copied while the journal's newest records were still only in its -wal
    file, and the -wal left behind: the log, copied along, has them; the copy gets them back
    (issue 13 refused it; nothing is lost now), and is not numbered again from seq 30."""
    path = tmp_path / "live" / "journal.sqlite"
    journal = await make(path, 30)
    assert journal._conn is not None
    journal._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # 0..29 in the main file
    await fill(journal, 20)  # 30..49 only in journal.sqlite-wal (and the log)
    copy = tmp_path / "copy"
    copy.mkdir()
    for part in path.parent.iterdir():  # everything but the -wal (and its index)
        if not part.name.endswith(("-wal", "-shm")):
            (copy / part.name).write_bytes(part.read_bytes())
    journal.close()
    summary, problems = verify_file(copy / "journal.sqlite")
    assert problems == [] and summary["last_seq"] == 29
    assert summary["to_roll_forward"] == "30..49" and summary["log_last_seq"] == 49
    again = Journal(copy / "journal.sqlite", "t1")
    again.open()
    assert again.next_seq == 50, "no seq the lost records had is used again"
    again.start()
    assert [json.loads(r.payload)["seq"] for r in await again.read_from(28, 100)] == list(
        range(28, 50)
    ), "the records themselves are back, from the log"
    again.close()
    summary, problems = verify_file(copy / "journal.sqlite")
    assert problems == [] and summary["last_seq"] == 49 and "to_roll_forward" not in summary


def kill_writer_script(path: Path, log_bytes: int) -> str:
    """A process that journals as fast as it can and says what it saw durable."""
    return textwrap.dedent(
        f"""
        import asyncio, json, sqlite3
        from pathlib import Path
        from tableside.daemon.journal import Journal
        async def go():
            j = Journal(Path({str(path)!r}), "t1", log_bytes={log_bytes})
            j.open(); j.start()
            while True:
                seq = j.next_seq
                j.append("t", lambda n: json.dumps({{"seq": n}}).encode(), retain=False,
                         key=f"k{{seq % 5}}")
                if seq % 50 == 0:
                    await j.wait_durable(seq)
                    print("DURABLE", seq, j.log_restarts, flush=True)
                await asyncio.sleep(0)
        asyncio.run(go())
        """
    )


async def test_a_killed_writer_whose_wal_was_deleted_loses_nothing(tmp_path: Path) -> None:
    """SIGKILLed mid-stream, after its log started anew a few times, then its -wal file deleted
    (a clean-up after a crash): what was durable is rolled forward from the log, its ``latest``
    with it. With the log lost too it is refused: nothing can tell how far it went."""
    path = tmp_path / "journal.sqlite"
    script = kill_writer_script(path, 1 << 15)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)  # noqa: ASYNC220
    assert proc.stdout is not None
    seen = 0
    for line in proc.stdout:
        if line.startswith("DURABLE"):
            _, seq, restarts = line.split()
            seen = int(seq)
            if seen >= 1500 and int(restarts) >= 2:
                break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    os.unlink(f"{path}-wal")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(f"{path}-shm")
    # the -wal *and* the log lost: refused (the main file says it keeps a log)
    log = RedoLog.beside(path)
    saved = log.read_bytes()
    log.unlink()
    with pytest.raises(JournalCorrupt, match=r"log file .* is missing") as caught:
        Journal(path, "t1").open()
    assert "journal recover" in str(caught.value)
    log.write_bytes(saved)
    summary, problems = verify_file(path)
    assert problems == [], problems
    assert summary["last_seq"] < seen <= summary["log_last_seq"], "the -wal held the newest"
    journal = Journal(path, "t1")
    journal.open()
    assert journal.next_seq > seen, "everything durable is there"
    newest = {k: json.loads(v)["seq"] for k, v in journal.latest().items()}
    assert max(newest.values()) == journal.next_seq - 1, "latest rolled forward with them"
    journal.close()
    summary, problems = verify_file(path)
    assert problems == [] and summary["last_seq"] >= seen


async def test_an_old_backup_put_back_is_rolled_forward_or_refused_after_the_log_started_anew(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`journal backup` copies a live journal; that copy, put back later, would number seqs
    20.. again. While the log still holds 20.. it is rolled forward; once the log has started
    anew after them (a restart), it is refused and `journal recover` carries on after the
    newest seq; put back where there is no log, refused."""
    path = tmp_path / "journal.sqlite"
    journal = await make(path, 20)
    copy = tmp_path / "backup.sqlite"
    assert main(["journal", "backup", str(path), "-o", str(copy)]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["last_seq"] == 19
    assert main(["journal", "backup", str(path), "-o", str(copy)]) == 2, "never overwritten"
    await fill(journal, 30)
    journal.close()
    assert verify_file(copy)[1] == [], "the copy is a sound journal up to seq 19"
    path.write_bytes(copy.read_bytes())  # closed cleanly: no -wal is left
    again = Journal(path, "t1")
    again.open()  # the log holds 0..49: nothing lost
    assert again.next_seq == 50
    again.close()
    # now the log started anew after 49 (at that opening): the copy again is refused
    path.write_bytes(copy.read_bytes())
    with pytest.raises(JournalCorrupt, match=r"lost: records 20\.\.49 were committed"):
        Journal(path, "t1").open()
    assert main(["journal", "verify", str(path)]) == 1
    assert main(["journal", "recover", str(path)]) == 0
    again = Journal(path, "t1")
    again.open()
    assert again.next_seq == 50
    again.close()
    # put back where there is no log file (a new machine): refused all the same
    elsewhere = tmp_path / "elsewhere" / "journal.sqlite"
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(copy.read_bytes())
    with pytest.raises(JournalCorrupt, match="it is a backup copy"):
        Journal(elsewhere, "t1").open()


async def test_a_deleted_journal_with_its_log_left_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    (await make(path, 12)).close()
    path.unlink()
    with pytest.raises(JournalCorrupt, match="journal is missing but its log file"):
        Journal(path, "t1").open()
    assert main(["journal", "recover", str(path), "--table", "t1"]) == 0
    kept = [p.name for p in os.scandir(tmp_path) if p.name.startswith("journal.sqlite.corrupt-")]
    assert [n for n in kept if n.endswith(".log")], "the old log kept, set aside"
    again = Journal(path, "t1")
    again.open()
    assert again.next_seq == 12
    assert again.head[1] == log_of(path).read().header.base_hash, "anchored to the log's last"
    again.close()


async def test_a_lost_log_file_is_refused(tmp_path: Path) -> None:
    """The log lost: nothing can tell how far the numbering went (whether the -wal went with
    it), so the journal is refused and recovery needs the operator's last seq."""
    path = tmp_path / "journal.sqlite"
    (await make(path, 12)).close()
    RedoLog.beside(path).unlink()
    with pytest.raises(JournalCorrupt, match=r"log file .* is missing"):
        Journal(path, "t1").open()
    assert main(["journal", "recover", str(path)]) == 2, "--after-seq is needed"
    assert main(["journal", "recover", str(path), "--after-seq", "30"]) == 0
    again = Journal(path, "t1")
    again.open()
    assert again.next_seq == 31
    again.close()


async def test_a_torn_log_tail_loses_nothing_that_was_synced(tmp_path: Path) -> None:
    """A power cut during a frame's write leaves it torn: never synced, so never acknowledged
    or sent. Opening reads the log up to it, with the -wal lost too."""
    path = tmp_path / "live" / "journal.sqlite"
    journal = await make(path, 10)
    assert journal._conn is not None
    journal._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # 0..9 in the main file
    await fill(journal, 5)  # 10..14, 15..19: the -wal and the log, a frame or more each
    await fill(journal, 5)
    main_file, frames = path.read_bytes(), RedoLog.beside(path).read_bytes()
    journal.close()

    def put_back(name: str, log: bytes) -> Path:
        copy = tmp_path / name / "journal.sqlite"
        copy.parent.mkdir()
        copy.write_bytes(main_file)  # without its -wal: SQLite ends at 9
        RedoLog.beside(copy).write_bytes(log)
        return copy

    # a frame after the last one, torn: the records before it are all rolled forward
    end = log_of(path).read().size  # where the last whole frame ends
    copy = put_back("garbage", frames[:end] + frames[end - 30 : end] + frames[end + 30 :])
    again = Journal(copy, "t1")
    again.open()
    assert again.next_seq == 20
    again.close()
    started = log_of(copy).read()
    assert (started.header.base_seq, started.records) == (19, []), "started anew after 19"
    # the last frame itself torn: rolled forward up to it, no more
    copy = put_back("torn", frames[: end - 7])
    again = Journal(copy, "t1")
    again.open()
    assert 15 <= again.next_seq < 20, "what came before the torn frame, which was never synced"
    again.close()
    assert verify_file(copy)[1] == []


async def test_a_journal_from_elsewhere_beside_this_log_is_refused(tmp_path: Path) -> None:
    """Another journal of the same table (another machine's) put in this one's place: the
    record at the log's last seq has another hash."""
    path, other = tmp_path / "a" / "journal.sqlite", tmp_path / "b" / "journal.sqlite"
    (await make(path, 10)).close()
    (await make(other, 10)).close()
    path.write_bytes(other.read_bytes())
    with pytest.raises(JournalCorrupt, match="not the journal its log file saw"):
        Journal(path, "t1").open()
    assert main(["journal", "verify", str(path)]) == 1


async def test_a_journal_with_a_mark_file_from_before_the_log_gets_a_log(tmp_path: Path) -> None:
    """A journal as the mark file's journals were (meta ``mark``, ``journal.sqlite.mark``):
    checked against its mark, then given a log; the mark file goes (one truth). One whose
    mark says more than it holds is refused as before."""
    from tableside.daemon.journal.mark import legacy_mark_pack, legacy_mark_path

    path = tmp_path / "journal.sqlite"
    journal = await make(path, 8)
    seq, digest = journal.head
    journal.close()

    def as_before_the_log(marked: int) -> None:
        RedoLog.beside(path).unlink(missing_ok=True)
        tamper(path, "DELETE FROM meta WHERE key = 'log'")
        tamper(path, "INSERT OR REPLACE INTO meta VALUES ('mark', '1')")
        legacy_mark_path(path).write_bytes(legacy_mark_pack(marked, digest) * 2)

    as_before_the_log(seq + 3)
    with pytest.raises(JournalCorrupt, match=r"lost: records 8\.\.10 were committed \(its mark"):
        Journal(path, "t1").open()
    assert main(["journal", "verify", str(path)]) == 1
    as_before_the_log(seq)
    assert main(["journal", "verify", str(path)]) == 0
    old_backup = tmp_path / "old-backup.sqlite"
    old_backup.write_bytes(path.read_bytes())
    tamper(old_backup, "UPDATE meta SET value = 'copy' WHERE key = 'mark'")
    journal = Journal(path, "t1")
    journal.open()
    journal.close()
    assert not legacy_mark_path(path).exists(), "the mark file went: the log is the mark"
    assert log_of(path).read().last == (seq, digest)
    assert verify_file(path)[1] == []
    # an old backup (a copy with a mark file's meta) put back beside the log that has the rest
    journal = await make(path, 5)
    journal.close()
    path.write_bytes(old_backup.read_bytes())
    journal = Journal(path, "t1")
    journal.open()
    assert journal.next_seq == 13, "8..12 rolled forward from the log"
    journal.close()


async def test_a_journal_from_before_the_mark_gets_a_log(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    (await make(path, 8)).close()
    RedoLog.beside(path).unlink()
    tamper(path, "DELETE FROM meta WHERE key = 'log'")
    journal = Journal(path, "t1")
    journal.open()
    journal.close()
    assert log_of(path).read().last[0] == 7


# -- issue 13: recovery keeps the table ----------------------------------------------------


async def test_recover_keeps_the_latest_state_and_holds_the_table(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    journal = Journal(path, "t1")
    journal.open()
    journal.start()
    for n in range(10):
        topic = "tableside/t1/table" if n % 2 else "tableside/t1/device/x/event"
        journal.append(topic, functools.partial(payload, n=n), retain=n % 2 == 1,
                       key=None if n % 2 else f"{topic}#status")  # fmt: skip
    await journal.wait_stored(9)
    before = journal.latest()
    journal.close()
    tamper(path, "UPDATE records SET payload = ? WHERE seq = 3", b"{}")
    assert main(["journal", "recover", str(path)]) == 0
    again = Journal(path, "t1")
    again.open()
    assert again.latest() == before, "the table, each device, each retained topic carried over"
    assert json.loads(before["tableside/t1/table"])["n"] == 9
    assert again.fresh_from_recovery
    again.start()
    await fill(again, 1)
    again.close()
    later = Journal(path, "t1")
    later.open()
    assert not later.fresh_from_recovery, "only until the daemon has restated the table"
    later.close()


# -- issue 13: clock steps change nothing they should not ----------------------------------


async def test_a_wall_clock_stepped_forward_deletes_nothing_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """retain_days = 1 and the wall clock steps forward two days: records one second old are not
    a day old, and none goes (before: every acknowledged record went at once)."""
    path = tmp_path / "journal.sqlite"
    journal = await make(path, 50, retain_days=1)
    try:
        journal.mark_acked(49)
        await fill(journal, 1)
        real = time.time
        monkeypatch.setattr(time, "time", lambda: real() + 2 * 86400)
        assert journal.prune() == 0
        await fill(journal, 5)
        monkeypatch.setattr(time, "time", lambda: real() - 86400)  # and back, past the start
        await fill(journal, 5)
    finally:
        journal.close()
    stamps = [r["journal_ts"] for r in export_records(path)]
    assert len(stamps) == 61
    assert stamps == sorted(stamps), "record times never go back"
    assert stamps[-1] - stamps[0] < 3600, "nor jump with the wall clock"
    # A later run with the wall clock a day behind starts its clock at the newest record.
    reopened = Journal(path, "t1")
    reopened.open()
    assert reopened.clock.now() >= stamps[-1]
    reopened.close()


async def test_verify_of_a_live_journal_finds_nothing_lost(tmp_path: Path) -> None:
    """`journal verify` while the writer commits: the log may be ahead of what verify read
    only if it were read after; it is read before, so a sound live journal is never "lost"."""
    path = tmp_path / "journal.sqlite"
    # verify takes long enough for commits to land meanwhile; SQLite takes each batch as the
    # log does (store_every_s=0), so that what verify reads moves while it reads
    journal = await make(path, 20_000, store_every_s=0.0)
    writing = True

    async def write() -> None:
        while writing:
            await fill(journal, 5)

    writer = asyncio.create_task(write())
    overlapped = 0
    try:
        for _ in range(10):
            before = journal.durable_seq
            summary, problems = await asyncio.to_thread(verify_file, path)
            assert problems == [], problems
            overlapped += journal.durable_seq > before
        # on a loaded machine a verify may now and then finish between two commits
        assert overlapped >= 3, "the writer seldom committed while verify read"
        assert summary["last_seq"] > 20_000
    finally:
        writing = False
        await writer
        journal.close()


# -- issue 10: nothing but the commit in the path a device's ACK waits for ------------------


def wal_size(path: Path) -> int:
    return Path(f"{path}-wal").stat().st_size


async def test_checkpoints_run_off_the_commit_path_and_the_wal_starts_over(
    tmp_path: Path,
) -> None:
    """SQLite's automatic checkpoint (inside a commit) is off; the checkpoint thread's copies
    let the WAL start over, so one record at a time for 3,000 records (a device with one frame
    in flight) leaves a WAL of a few MiB, not one that grows with every commit (~16 KiB each:
    38 MiB here without the writer copying the tail). SQLite takes each record as the log
    does here (``store_every_s=0``): as shipped it takes up to a second's at a time, and one
    device's 3,000 records may not fill a megabyte of WAL."""
    path = tmp_path / "journal.sqlite"
    journal = Journal(path, "t1", store_every_s=0.0)
    journal.open()
    journal.start()
    try:
        assert journal._conn is not None
        assert journal._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        for _ in range(3000):
            seq = journal.next_seq
            journal.append("t", lambda n: payload(n, pad="x" * 300), retain=False, key="k")
            await journal.wait_durable(seq)
        assert journal.checkpoints > 0
        assert wal_size(path) < 16 * 2**20
    finally:
        journal.close()
    assert verify_file(path)[1] == []


async def test_a_slow_sync_hands_the_log_to_the_writer_thread_until_syncs_are_quick_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The event loop syncs the log itself (no hop to the writer thread and back) while its
    syncs are quick. One slower than ``slow_sync_s`` hands the logging to the writer thread,
    so a slow storage does not stall the loop again (its heartbeats, keep-alives and the
    devices' own acknowledgements); once every sync has been quick for ``quick_again_s`` and
    the thread has logged all it was given, the loop takes it back. Nothing is lost or out of
    order, and the log holds each record once."""
    delay = 0.0
    by: list[str] = []
    original = RedoLog.append

    def append(log: RedoLog, batch: list[object]) -> None:
        by.append(threading.current_thread().name)
        time.sleep(delay)
        original(log, batch)  # type: ignore[arg-type]

    monkeypatch.setattr(RedoLog, "append", append)
    path = tmp_path / "journal.sqlite"
    journal = Journal(path, "t1", store_every_s=0.0, slow_sync_s=0.1, quick_again_s=2.0)
    journal.open()
    journal.start()

    def on_loop() -> bool:
        return journal.syncs_on_loop

    try:
        await fill(journal, 3)
        assert set(by) == {"MainThread"} and on_loop()
        delay = 0.15  # the storage turns slow: the loop's next sync is the last it waits on
        await fill(journal, 1)
        assert not on_loop()
        del by[:]
        for _ in range(3):
            await fill(journal, 2)
        assert set(by) == {"journal-writer"}
        delay = 0.0  # quick again: the loop takes the log back once that has lasted
        await fill(journal, 2)
        assert not on_loop()
        await asyncio.sleep(2.1)
        assert on_loop()
        del by[:]
        await fill(journal, 3)
        assert set(by) == {"MainThread"}
    finally:
        journal.close()
    assert verify_file(path)[1] == []
    assert [r["seq"] for r in export_records(path)] == list(range(15))
    logged = [r.seq for r in log_of(path).read().records]
    assert logged == list(range(15))


async def test_a_quiet_journal_syncs_a_waited_record_at_once_and_a_busy_turn_shares_one(
    tmp_path: Path,
) -> None:
    """A device's link asks for its record (``durable``) in the turn that appended it: a quiet
    journal (no sync for ``QUIET_S``) logs it there and then, so the future is done on return
    and the log on disk has it. Records appended in a turn no one waits on in it share one
    sync at the turn's end."""
    path = tmp_path / "journal.sqlite"
    journal = Journal(path, "t1")
    journal.open()
    journal.start()
    try:
        for _ in range(5):
            await asyncio.sleep(QUIET_S * 2)
            seq = journal.append("t", payload, retain=False, key=None).seq
            assert journal.durable(seq).done()
            assert log_of(path).read().last[0] == seq
        syncs = journal._committer.commits
        for _ in range(10):
            journal.append("t", payload, retain=False, key=None)
        assert log_of(path).read().last[0] < journal.next_seq - 1  # not yet: the turn goes on
        await journal.wait_durable(journal.next_seq - 1)
        assert journal._committer.commits == syncs + 1
    finally:
        journal.close()


async def test_a_record_is_acknowledged_and_sent_only_once_the_log_has_it(
    tmp_path: Path,
) -> None:
    """One sync per batch: whenever a record is ``committed`` (the device's ACK) or ``durable``
    (sendable), the log file on disk has it (read by another reader)."""
    path = tmp_path / "journal.sqlite"
    journal = Journal(path, "t1")
    journal.open()
    journal.start()
    try:
        for _ in range(300):
            seq = journal.next_seq
            journal.append("t", payload, retain=False, key=None)
            await journal.wait_durable(seq)
            assert log_of(path).read().last[0] >= seq
    finally:
        journal.close()


async def test_sqlite_never_holds_what_the_log_has_not_synced(tmp_path: Path) -> None:
    """The log first, then SQLite: whatever SQLite holds (read first) the log has, so a power
    cut never leaves SQLite with a record no device or broker could have had; and the last
    batch is in both before ``close`` returns."""
    path = tmp_path / "journal.sqlite"
    journal = Journal(path, "t1")
    journal.open()
    journal.start()
    reader = sqlite3.connect(path)
    logged = set()
    try:
        for burst in range(200):
            for _ in range(burst % 7 + 1):
                journal.append("t", payload, retain=False, key=None)
            (newest,) = reader.execute("SELECT coalesce(max(seq), -1) FROM records").fetchone()
            last = log_of(path).read().last[0]
            assert newest <= last
            logged.add(last)
            await journal.wait_durable(journal.next_seq - 1)
        await journal.wait_durable(journal.next_seq - 1)
        assert len(logged) > 10  # the log moved while records kept coming
    finally:
        reader.close()
        journal.close()
    assert log_of(path).read().last[0] == journal.next_seq - 1
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT max(seq) FROM records").fetchone()[0] == journal.next_seq - 1


# -- issue 31: a first start cut short ------------------------------------------------------


def _lose_journal(path: Path) -> None:
    """The journal's file emptied, its -wal and -shm gone (its log left as it is)."""
    path.write_bytes(b"")
    for suffix in ("-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)


def _cut_first_start(path: Path, how: str) -> None:
    """A table's very first start, cut by a power cut after its log was made (synced) and before
    the journal's own file was: what was not yet durable of the journal is gone. The log is the
    one that start made (base -1, no records); the journal is as the cut leaves it."""
    first = Journal(path, "t1")
    first.open()  # the first start: the journal made, its log started after seq -1
    first.close()
    assert RedoLog(RedoLog.beside(path)).read().last[0] == -1
    _lose_journal(path)
    if how == "no file":  # its directory entry never reached the disk
        path.unlink()
    elif how == "empty file":  # created, nothing of it written
        path.write_bytes(b"")
    else:  # "no tables": SQLite's header written, the schema in a -wal that was lost
        path.unlink()
        sqlite3.connect(path).execute("PRAGMA journal_mode=WAL").close()


@pytest.mark.parametrize("how", ["no file", "empty file", "no tables"])
async def test_a_first_start_cut_short_is_recovered_without_a_seq(
    tmp_path: Path, how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its log proves nothing was ever numbered (it started after seq -1 and holds no record),
    so `journal recover` starts a new journal at seq 0 without `--after-seq`."""
    path = tmp_path / "journal.sqlite"
    _cut_first_start(path, how)
    # the daemon's refusal says what happened and what to run, not that records were lost
    with pytest.raises(JournalCorrupt, match=r"nothing was ever numbered.*first start cut short"
                                             r".*Nothing is lost.*journal recover"):  # fmt: skip
        Journal(path, "t1").open()
    assert main(["journal", "recover", str(path), "--table", "t1"]) == 0
    out = capsys.readouterr().out
    assert "nothing was ever numbered" in out and "starts at seq 0" in out
    again = Journal(path, "t1")
    again.open()
    assert again.next_seq == 0
    again.close()


async def test_a_cut_first_start_whose_log_is_unreadable_still_needs_a_seq(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same state with its log's header torn too: nothing proves no seq was used, so it is
    refused, saying why and what to pass (-1 only if no subscriber ever saw one)."""
    path = tmp_path / "journal.sqlite"
    _cut_first_start(path, "empty file")
    log = RedoLog.beside(path)
    log.write_bytes(log.read_bytes()[:10])
    assert main(["journal", "recover", str(path), "--table", "t1"]) == 2
    err = capsys.readouterr().err
    assert "cannot be read" in err and "--after-seq" in err and "--after-seq -1" in err
    assert main(["journal", "recover", str(path), "--table", "t1", "--after-seq", "-1"]) == 0


async def test_a_cut_first_start_whose_log_holds_records_carries_on_after_them(
    tmp_path: Path,
) -> None:
    """A log that started after seq -1 but holds records is no first start cut short: the
    numbering carries on after its last record, as before."""
    path = tmp_path / "journal.sqlite"
    (await make(path, 3)).close()
    assert RedoLog(RedoLog.beside(path)).read().last[0] == 2  # base -1, records 0..2
    _lose_journal(path)
    assert main(["journal", "recover", str(path), "--table", "t1"]) == 0
    again = Journal(path, "t1")
    again.open()
    assert again.next_seq == 3
    again.close()
