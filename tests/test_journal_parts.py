"""The journal's parts on their own (daemon/journal/: chain, progress, the redo log, checkpoint,
commit, retention, reads), each with the real thing under it (SQLite files, the log file,
threads, the event loop); tests/test_journal.py has the journal as a whole."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tableside.daemon.clock import RunClock
from tableside.daemon.journal import JournalError, Record, RedoLog, record_hash, verify_file
from tableside.daemon.journal.chain import Chain
from tableside.daemon.journal.checkpoint import Checkpointer
from tableside.daemon.journal.commit import Committer
from tableside.daemon.journal.file import GENESIS, SCHEMA, connect_db, read_meta
from tableside.daemon.journal.opening import open_checked
from tableside.daemon.journal.progress import Progress
from tableside.daemon.journal.reads import Reads
from tableside.daemon.journal.redo import Header, decode_frames, decode_log, encode_frame
from tableside.daemon.journal.retention import Retention, last_before


def chain(first: int, count: int, prev: bytes = GENESIS, ts: float = 1000.0) -> list[Record]:
    """Records ``first``.. chained from ``prev``, one second apart."""
    records = []
    for seq in range(first, first + count):
        data = b'{"seq": %d}' % seq
        digest = record_hash(prev, seq, ts + seq, "t", False, data)
        records.append(Record(seq, ts + seq, "t", False, data, prev, digest, f"k{seq % 3}"))
        prev = digest
    return records


async def until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(10):
        while not condition():
            await asyncio.sleep(0.005)


def attached() -> Progress:
    progress = Progress()
    progress.attach(asyncio.get_running_loop())
    return progress


def in_thread(work: Callable[[], None]) -> None:
    thread = threading.Thread(target=work)
    thread.start()
    thread.join()


# -- the chain: numbering on the loop, no I/O -----------------------------------------------


def test_the_chain_numbers_chains_and_never_goes_back_in_time() -> None:
    chain = Chain()
    chain.reset(9, b"\x01" * 32, 500.0)
    clock = RunClock(not_before=2000.0)
    first = chain.next("t/a", lambda n: b"%d" % n, retain=True, key=None, ts=None, clock=clock)
    older = chain.next("t/b", lambda n: b"%d" % n, retain=False, key=None, ts=600.0, clock=clock)
    later = chain.next("t/c", lambda n: b"x", retain=False, key="k", ts=first.ts + 5, clock=clock)
    assert [r.seq for r in (first, older, later)] == [10, 11, 12] and chain.next_seq == 13
    assert first.payload == b"10", "the payload is made with its seq"
    assert first.ts >= 2000.0 and older.ts == first.ts, "an older reading takes the last time"
    assert later.ts == first.ts + 5
    assert (first.key, older.key, later.key) == ("t/a", None, "k"), "retained: by its topic"
    assert first.prev_hash == b"\x01" * 32
    assert [older.prev_hash, later.prev_hash] == [first.hash, older.hash]
    for r in (first, older, later):
        assert r.hash == record_hash(r.prev_hash, r.seq, r.ts, r.topic, r.retain, r.payload)
    assert chain.head == (12, later.hash)


# -- progress: the threads tell the loop ----------------------------------------------------


async def test_progress_wakes_the_devices_acks_before_the_broker() -> None:
    """Two batches told before the loop looked: one wake-up carries the newest, and the
    waiter (a device's ACK) runs before the durable hook (the publisher)."""
    progress = attached()
    order: list[str] = []
    progress.on_durable = lambda: order.append(f"durable {progress.durable_seq}")

    async def device() -> None:
        await progress.wait_durable(2)
        order.append(f"committed {progress.durable_seq}")

    def threads() -> None:  # the loop is blocked meanwhile: it has not looked
        progress.tell(2)
        progress.tell(4)

    waiting = asyncio.create_task(device())
    await asyncio.sleep(0)
    in_thread(threads)
    await progress.wait_durable(4)
    await waiting
    await until(lambda: len(order) == 2)
    assert order == ["committed 4", "durable 4"], "told together: the newest, ACKs first"


async def test_progress_told_from_a_thread_while_the_loop_runs_loses_nothing() -> None:
    progress = attached()
    progress.reset(9)
    seen: list[int] = []
    progress.on_durable = lambda: seen.append(progress.durable_seq)

    def writer() -> None:
        for seq in range(10, 2000):
            progress.tell(seq)

    thread = threading.Thread(target=writer)
    thread.start()
    while thread.is_alive():
        await asyncio.sleep(0)  # the loop looks while the thread tells
    thread.join()
    await progress.wait_durable(1999)
    assert progress.durable_seq == 1999
    await until(lambda: seen[-1:] == [1999])
    assert seen == sorted(set(seen)), "each wake-up told something newer, never older"


async def test_a_threads_failure_reaches_the_loop() -> None:
    progress = attached()
    in_thread(lambda: progress.fail(JournalError("disk full")))
    assert progress.failed is not None
    with pytest.raises(JournalError, match="disk full"):
        await asyncio.wait_for(progress.failed, 5)


# -- the redo log: its codec, no I/O -------------------------------------------------------


records_st = st.lists(
    st.tuples(
        st.floats(0, 2e9),
        st.text(max_size=30),
        st.booleans(),
        st.binary(max_size=300),
        st.none() | st.text(max_size=20),
    ),
    min_size=1,
    max_size=20,
)


@given(batches=st.lists(records_st, min_size=1, max_size=5), cut=st.integers(0, 10_000))
def test_log_frames_round_trip_and_a_torn_tail_is_left_out(
    batches: list[list[tuple[float, str, bool, bytes, str | None]]], cut: int
) -> None:
    """Frames back to records, whole; a log cut anywhere reads as the frames before the cut."""
    header = Header("t1", 3, 3, GENESIS)
    prev, seq, frames, wanted = GENESIS, 4, [], []
    for batch in batches:
        records = []
        for ts, topic, retain, data, key in batch:
            digest = record_hash(prev, seq, ts, topic, retain, data)
            records.append(Record(seq, ts, topic, retain, data, prev, digest, key))
            prev, seq = digest, seq + 1
        frames.append(encode_frame(records, header.seed))
        wanted.append(records)
    raw = header.to_bytes() + b"".join(frames)
    contents = decode_log(raw)
    assert contents.header == header and contents.broken is None and contents.size == len(raw)
    assert decode_log(raw + bytes(5000)).records == contents.records, "zeros written ahead"
    assert contents.records == [r for batch in wanted for r in batch]
    assert contents.last == (seq - 1, prev)
    at = min(cut, len(raw) - len(header.to_bytes()))
    torn = decode_log(raw[: len(header.to_bytes()) + at])
    whole = [len(b"".join(frames[: i + 1])) for i in range(len(frames))]
    kept = sum(1 for end in whole if end <= at)
    assert torn.records == [r for batch in wanted[:kept] for r in batch]
    assert torn.size == len(header.to_bytes()) + (whole[kept - 1] if kept else 0)


def test_a_bad_frame_ends_the_log_and_a_bad_header_is_no_log() -> None:
    records = chain(0, 6)
    head = Header("t1", 0, -1, GENESIS)
    header, seed = head.to_bytes(), head.seed
    first, second = encode_frame(records[:3], seed), encode_frame(records[3:], seed)
    spoilt = bytearray(second)
    spoilt[12] ^= 0x01  # a byte of its body: the CRC no longer checks
    assert decode_log(header + first + bytes(spoilt)).records == records[:3]
    assert decode_frames(b"\x00" * 64, 0, seed) == ([], 0), "zeros written ahead are no frame"
    huge = (1 << 31).to_bytes(4, "big") + b"\x00" * 12
    assert decode_frames(huge, 0, seed) == ([], 0), "a length past the cap is garbage"
    # an older log's frames, left in a recycled file after a new header: not this log's
    newer = Header("t1", 1, -1, GENESIS)
    assert decode_log(newer.to_bytes() + first).records == []
    # a frame that checks but does not chain on: the log is broken there, not read past
    skipped = decode_log(header + encode_frame(records[:2], seed) + encode_frame(records[3:], seed))
    assert skipped.records == records[:2] and skipped.broken is not None
    with pytest.raises(ValueError, match="CRC"):
        decode_log(header[:-1] + bytes([header[-1] ^ 1]) + first)
    with pytest.raises(ValueError, match="not a journal log"):
        decode_log(b"SQLite format 3\x00" + b"\x00" * 100)


def test_the_log_file_is_written_ahead_started_anew_whole_and_recycled(tmp_path: Path) -> None:
    log = RedoLog(tmp_path / "j.sqlite.log", reserve=1024)
    records = chain(0, 40)
    log.create(Header("t1", 0, -1, GENESIS))
    assert log.path.stat().st_size == 1024, "written ahead: an append syncs no new size"
    log.append(records[:2])
    log.append(records[2:30])  # past what was written ahead: a megabyte more
    assert log.read().records == records[:30]
    assert log.path.stat().st_size == 1024 + (1 << 20)
    log.create(Header("t1", 1, 29, records[29].hash))  # the spare renamed over the old
    spare = tmp_path / "j.sqlite.log.spare"
    assert spare.stat().st_size == 1024 + (1 << 20), "the old log is the next spare"
    assert not (tmp_path / "j.sqlite.log.old").exists()
    assert log.read().records == [], "a fresh log, whatever the spare held"
    log.append(records[30:32])
    log.create(Header("t1", 2, 31, records[31].hash))  # recycles the first file
    log.append(records[32:])
    log.close()
    again = log.read()
    assert (again.header.generation, again.header.base_seq) == (2, 31)
    assert again.records == records[32:], "the frames the recycled file held are not read"


# -- the checkpoint thread ------------------------------------------------------------------


def wal_salt(path: Path) -> bytes:
    """The WAL header's salts: they change when the WAL starts over."""
    with open(f"{path}-wal", "rb") as wal:
        return wal.read(32)[16:24]


async def test_checkpoints_when_asked_and_the_tail_lets_the_wal_start_over(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    conn = connect_db(path)
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("CREATE TABLE t (x BLOB)")
    lock = threading.Lock()

    def commit() -> None:
        conn.execute("INSERT INTO t VALUES (?)", (b"x" * 3000,))

    checkpointer = Checkpointer(path, quiet_s=0.0)
    checkpointer.idle_bytes, checkpointer.busy_bytes = 10_000, 100_000
    try:
        commit()
        checkpointer.committed(9_000, queue_empty=True)  # under a "megabyte"
        checkpointer.committed(2_000, queue_empty=False)  # over it, but busy: under "eight"
        asked = [checkpointer.asked]
        checkpointer.committed(0, queue_empty=True)  # over it and nothing queued: asked
        assert [*asked, checkpointer.asked] == [False, True]
        checkpointer.start()
        await until(lambda: checkpointer.checkpoints == 1)
        commit()  # committed after the checkpoint: the tail
        salt = wal_salt(path)
        commit()
        assert wal_salt(path) == salt, "the WAL starts over only once the tail is copied too"
        checkpointer.copy_tail(conn, lock)
        commit()
        assert wal_salt(path) != salt, "the commit after the tail's copy starts the WAL over"
        salt = wal_salt(path)
        checkpointer.copy_tail(conn, lock)  # once per checkpoint: not due again
        commit()
        assert wal_salt(path) == salt
        checkpointer.quiet()  # nothing since it asked: nothing to ask for
        checkpointer.committed(100_000, queue_empty=False)  # busy, but eight "megabytes"
        await until(lambda: checkpointer.checkpoints == 2)
        checkpointer.committed(1, queue_empty=False)
        checkpointer.quiet()
        await until(lambda: checkpointer.checkpoints == 3)
    finally:
        checkpointer.stop()
        conn.close()


# -- the writer thread ----------------------------------------------------------------------


class SlowLog(RedoLog):
    """The real log file, whose appends wait until ``release`` (a slow ``fdatasync``)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.entered = threading.Event()
        self.release = threading.Event()
        self.release.set()

    def append(self, batch: Sequence[Record]) -> None:
        self.entered.set()
        assert self.release.wait(10)
        super().append(batch)


class Parts:
    """A new journal's writer thread with its real log and checkpointer."""

    def __init__(self, path: Path, *, every_s: float = 60.0, quiet_s: float = 30.0) -> None:
        self.log = SlowLog(RedoLog.beside(path))
        opened = open_checked(path, "t1", self.log)
        self.conn = opened.conn
        self.progress = attached()
        self.checkpointer = Checkpointer(path, quiet_s=quiet_s)
        self.kept = threading.Event()
        self.committer = Committer(
            path, batch=2000, every_s=every_s, progress=self.progress, log=self.log,
            checkpointer=self.checkpointer, housekeeping=self.kept.set,
        )  # fmt: skip
        self.committer.reset(opened.acked, opened.last_seq, opened.last_hash)

    def start(self) -> None:
        self.checkpointer.start()
        self.committer.start(self.conn)

    def close(self) -> None:
        self.log.release.set()
        self.committer.stop()
        self.checkpointer.stop()
        self.conn.close()
        self.log.close()


async def test_what_queued_up_is_one_commit_and_one_log_frame(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    parts = Parts(path)
    records = chain(0, 50)
    for record in records:
        parts.committer.queue.put(record)
    parts.start()
    try:
        await parts.progress.wait_durable(49)
    finally:
        parts.close()
    assert parts.committer.commits == 1
    assert RedoLog(RedoLog.beside(path)).read().last == (49, records[-1].hash)
    summary, problems = verify_file(path)
    assert problems == [] and summary["last_seq"] == 49
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert dict(conn.execute("SELECT key, seq FROM latest")) == {"k0": 48, "k1": 49, "k2": 47}


async def _writer_stops(parts: Parts, match: str, *, within: float) -> None:
    """Started with what is queued, the writer fails with ``match``, the daemon is told and
    nothing became durable."""
    parts.start()
    try:
        assert parts.progress.failed is not None
        with pytest.raises(JournalError, match=match):
            await asyncio.wait_for(parts.progress.failed, within)
        assert parts.progress.durable_seq == -1
    finally:
        parts.close()


async def test_a_batch_sqlite_refuses_after_its_log_sync_is_rolled_forward(
    tmp_path: Path,
) -> None:
    """The log goes first: a batch synced to it is durable (its devices acknowledged, the
    broker may have it) even when SQLite then refuses it (a full disk: the log's blocks were
    written ahead, SQLite's were not). The writer stops, the daemon is told, SQLite has none of
    the batch, and the next opening puts all of it back."""
    path = tmp_path / "j.sqlite"
    parts = Parts(path)
    with contextlib.closing(sqlite3.connect(path)) as conn:  # SQLite refusing, as when full
        conn.execute("CREATE TRIGGER full BEFORE INSERT ON records WHEN NEW.seq = 5 "
                     "BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END")  # fmt: skip
        conn.commit()
    records = chain(0, 8)
    for record in records:
        parts.committer.queue.put(record)
    parts.start()
    try:
        assert parts.progress.failed is not None
        with pytest.raises(JournalError, match="disk is full"):
            await asyncio.wait_for(parts.progress.failed, 10)
        assert parts.progress.durable_seq == 7
    finally:
        parts.close()
    assert RedoLog(RedoLog.beside(path)).read().last == (7, records[-1].hash)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT count(*) FROM records").fetchone()[0] == 0
        conn.execute("DROP TRIGGER full")  # room again
        conn.commit()
    opened = open_checked(path, "t1", RedoLog(RedoLog.beside(path)))
    opened.conn.close()
    summary, problems = verify_file(path)
    assert problems == [] and summary["last_seq"] == 7 and summary["records"] == 8


async def test_the_idle_writer_writes_acked_and_keeps_house(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    parts = Parts(path, every_s=0.0, quiet_s=0.0)
    parts.start()
    try:
        for record in chain(0, 10):
            parts.committer.queue.put(record)
        await parts.progress.wait_durable(9)
        parts.committer.acked = 6  # the broker's PUBACKs, on the loop
        reader = connect_db(path, readonly=True)
        try:
            await until(lambda: read_meta(reader)["acked"] == "6")
        finally:
            reader.close()
        assert await asyncio.to_thread(parts.kept.wait, 10), "housekeeping ran on the writer"
        # a few KiB committed, then quiet (here at once): the WAL goes into the main file
        await until(lambda: parts.checkpointer.checkpoints >= 1)
    finally:
        parts.close()


async def test_nothing_is_acknowledged_sent_or_stored_before_the_log_sync(
    tmp_path: Path,
) -> None:
    """The batch's log frame is written, not yet synced: neither the devices' ACKs nor the
    publisher (both wait for ``durable_seq``) may have it, and SQLite does not hold it (so a
    power cut never leaves SQLite ahead of the log); once synced, all three do."""
    path = tmp_path / "j.sqlite"
    parts = Parts(path)
    parts.log.release.clear()
    parts.start()
    records = chain(0, 5)
    reader = connect_db(path, readonly=True)
    try:
        for record in records:
            parts.committer.queue.put(record)
        assert await asyncio.to_thread(parts.log.entered.wait, 10)
        await asyncio.sleep(0.05)
        assert parts.progress.durable_seq == -1
        assert RedoLog(parts.log.path).read().last[0] == -1
        assert reader.execute("SELECT count(*) FROM records").fetchone()[0] == 0
        parts.log.release.set()
        await parts.progress.wait_durable(4)
        assert parts.progress.durable_seq == 4
        assert RedoLog(parts.log.path).read().last == (4, records[-1].hash)
        await until(lambda: reader.execute("SELECT count(*) FROM records").fetchone()[0] == 5)
    finally:
        reader.close()
        parts.close()


async def test_a_log_that_cannot_be_written_stops_the_daemon(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    parts = Parts(path)
    parts.log.path.unlink()  # the writer opens it at its first append: gone
    parts.committer.queue.put(chain(0, 1)[0])
    await _writer_stops(parts, "No such file", within=5)


async def test_the_log_starts_anew_only_after_a_checkpoint_put_it_all_in_the_main_file(
    tmp_path: Path,
) -> None:
    """Past its bound, the log starts anew after a checkpoint on the writer's connection copied
    the whole WAL (SQLite synced the main file): what it held is then in the main file, which
    alone (the -wal lost) reaches the new log's base."""
    path = tmp_path / "j.sqlite"
    parts = Parts(path, quiet_s=0.0)
    parts.committer.log_bytes = 2_000
    parts.start()
    records = chain(0, 40)
    try:
        for record in records[:30]:
            parts.committer.queue.put(record)
        await parts.progress.wait_durable(29)
        assert parts.committer.log_restarts == 0, "never before a checkpoint"
        first = parts.log.read().header
        assert first.base_seq == -1
        # quiet: the checkpoint thread, then the writer's tail copy, then anew
        await until(lambda: parts.committer.log_restarts == 1)
        header = parts.log.read().header
        assert (header.base_seq, header.base_hash) == (29, records[29].hash)
        assert header.generation == first.generation + 1
        for record in records[30:]:
            parts.committer.queue.put(record)
        await parts.progress.wait_durable(39)
        assert [r.seq for r in parts.log.read().records] == list(range(30, 40))
        main_only = tmp_path / "main-only.sqlite"
        main_only.write_bytes(path.read_bytes())  # the main file alone: its -wal lost
        with contextlib.closing(sqlite3.connect(main_only)) as conn:
            assert conn.execute("SELECT max(seq) FROM records").fetchone()[0] >= 29
    finally:
        parts.close()


# -- retention ------------------------------------------------------------------------------


@given(
    gaps=st.lists(st.sampled_from([0.0, 0.5, 1.0, 30.0]), min_size=0, max_size=40),
    first=st.integers(0, 5),
    cutoff=st.floats(990.0, 1700.0),
    through=st.integers(-1, 50),
)
def test_the_retention_cut_is_the_scan_found_by_binary_search(
    gaps: list[float], first: int, cutoff: float, through: int
) -> None:
    """Record times never go back along the seqs; the binary search finds what a scan would."""
    conn = sqlite3.connect(":memory:")
    conn.executescript(SCHEMA)
    stamps = [1000.0 + sum(gaps[: i + 1]) for i in range(len(gaps))]
    rows = [(first + i, ts, "t", 0, b"", b"", b"") for i, ts in enumerate(stamps)]
    conn.executemany("INSERT INTO records VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    scan = max((seq for seq, ts, *_ in rows if seq <= through and ts < cutoff), default=-1)
    assert last_before(conn, cutoff, through) == scan


async def test_retention_deletes_only_the_acknowledged_and_anchors_the_chain(
    tmp_path: Path,
) -> None:
    path = tmp_path / "j.sqlite"
    parts = Parts(path)
    parts.start()
    records = chain(0, 100, ts=time.time() - 3 * 86400)  # three days old
    for record in records:
        parts.committer.queue.put(record)
    await parts.progress.wait_durable(99)
    parts.committer.acked = 59
    parts.close()
    conn = connect_db(path)
    try:
        parts.committer.write_acked(conn)
        retention = Retention(path, retain_days=1, max_mb=None)
        assert retention.prune(conn, RunClock()) == 60
        assert retention.prune(conn, RunClock()) == 0
        meta = read_meta(conn)
    finally:
        conn.close()
    assert (meta["anchor_seq"], meta["anchor_hash"]) == ("59", records[59].hash.hex())
    assert float(meta["clock_floor"]) == records[59].ts, "a later run's clock starts after it"
    summary, problems = verify_file(path)
    assert problems == [] and (summary["first_seq"], summary["last_seq"]) == (60, 99)
    kept_young = Retention(path, retain_days=4, max_mb=None)
    with contextlib.closing(connect_db(path)) as conn:
        assert kept_young.prune(conn, RunClock()) == 0, "younger than retain_days: kept"


# -- reads for the publisher ----------------------------------------------------------------


async def test_reads_come_from_memory_while_it_has_them_then_from_disk(tmp_path: Path) -> None:
    path = tmp_path / "j.sqlite"
    parts = Parts(path)
    parts.start()
    records = chain(0, 20)
    reads = Reads(path, 5, lambda seq: None)  # no writer: SQLite holds what it holds
    for record in records:
        parts.committer.queue.put(record)
        reads.add(record)
    await parts.progress.wait_durable(19)
    parts.close()
    try:
        assert reads.cached(14, 10, durable=19) is None, "memory keeps the newest five"
        assert [r.seq for r in reads.cached(15, 3, durable=19) or []] == [15, 16, 17]
        assert reads.cached(15, 10, durable=16) == records[15:17], "none past what is durable"
        assert reads.cached(17, 10, durable=16) == []
        reads.acked(17)
        assert reads.cached(17, 10, durable=19) is None, "acknowledged: memory lets it go"
        assert await reads.read(3, 4, durable=19) == [
            Record(r.seq, r.ts, r.topic, r.retain, r.payload, r.prev_hash, r.hash)
            for r in records[3:7]  # from disk (``key`` is not on disk)
        ]
        assert [r.seq for r in await reads.read(18, 10, durable=19)] == [18, 19]
    finally:
        reads.close()
