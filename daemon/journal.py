"""The durable journal: every message the table sends is written here before it is sent.

One SQLite file per table, ``<state_dir>/<table>/journal.sqlite``, in WAL mode with
``synchronous=FULL``: a committed record survives a crash of the daemon and a loss of power.

Appending never blocks the event loop. The loop numbers a record (its ``seq``), chains its hash
to the previous record and hands it to a dedicated writer thread, which commits whatever has
queued up in one transaction (group commit: one fsync for a burst of events, not one each —
docs/journal.md has the measured rates that decided this). A device's frame is acknowledged
once its record is committed (``committed_seq``, ``wait_committed``); the publisher sends only
records that are also in the mark file (``durable_seq``), so the broker never has a message the
journal could forget, and ``seq`` continues from the journal after any restart without a gap.
Nothing else runs in the commit's path: checkpoints are a thread of their own (SQLite's
automatic one is off), the mark is written after the devices are told (docs/journal.md, "What
the commit path holds").

Tamper evidence: each record's hash covers the previous record's hash, its seq, time, topic,
retain flag and payload. ``verify()`` recomputes the chain and finds an edited, inserted or
removed record. Retention deletes only records the broker has acknowledged; the hash of the last
deleted record is kept as the anchor the remaining chain starts from.

Derived, not chained: ``latest`` keeps the newest payload per key (each retained topic, each
device's last event of each kind) so a restarted daemon restores the table without reading the
whole journal, and ``meta.acked`` is the highest seq the broker acknowledged (written lazily:
after a crash the records since the last write are sent again, marked ``redelivered``).

Lost records are found: the mark file beside the journal (``journal.sqlite.mark``, outside
SQLite) holds the last committed seq and its hash, written and synced after each commit and
before the publisher may send it. A journal that ends before its mark (its ``-wal`` file deleted
or not copied along, or an older copy put back) is refused, so no seq is used twice.

Time: record times and retention come from the run's clock (daemon/clock.py), never straight
from the wall clock, so a stepped wall clock neither deletes more nor makes time go back.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import itertools
import json
import os
import queue
import sqlite3
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from tableside.daemon.clock import LabClock, RunClock

__all__ = [
    "FORMAT",
    "Journal",
    "JournalCorrupt",
    "JournalError",
    "Mark",
    "Problem",
    "Record",
    "Recovered",
    "backup",
    "export_records",
    "record_hash",
    "recover",
    "verify_file",
]

log = structlog.get_logger("tableside.journal")

FORMAT = "1"
_GENESIS = b"\x00" * 32

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    seq INTEGER PRIMARY KEY,
    ts REAL NOT NULL,
    topic TEXT NOT NULL,
    retain INTEGER NOT NULL,
    payload BLOB NOT NULL,
    prev_hash BLOB NOT NULL,
    hash BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS latest (
    key TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    payload BLOB NOT NULL
);
"""


class JournalError(RuntimeError):
    """The journal cannot be written (disk full, I/O error): nothing more can be sent."""


class JournalCorrupt(JournalError):
    """The journal on disk fails its checks; the daemon will not start on it."""


def record_hash(
    prev: bytes, seq: int, ts: float, topic: str, retain: bool, payload: bytes
) -> bytes:
    topic_bytes = topic.encode()
    head = struct.pack(">qd?I", seq, ts, retain, len(topic_bytes))
    return hashlib.sha256(prev + head + topic_bytes + payload).digest()


@dataclass(frozen=True, slots=True)
class Record:
    seq: int
    ts: float
    topic: str
    retain: bool
    payload: bytes
    prev_hash: bytes
    hash: bytes
    #: where ``latest`` keeps it (not part of the hash: ``latest`` is derived)
    key: str | None = None


@dataclass(frozen=True, slots=True)
class Problem:
    seq: int
    what: str

    def __str__(self) -> str:
        return f"seq {self.seq}: {self.what}"


class Mark:
    """The last committed seq and its hash, kept outside the SQLite file so that records lost
    from it can be told (``<journal>.mark``).

    Two 64-byte slots, written in turn and each with its CRC-32: a write torn by a power cut
    spoils at most the slot being written, and the other still holds the previous mark. At most
    one ``fdatasync`` per group commit, on the journal's mark thread."""

    _SLOT = struct.Struct(">4sq32sI")  # magic, seq, hash, CRC-32 of what precedes it
    _MAGIC = b"TSJM"
    _SIZE = 64

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._slot = 0

    @staticmethod
    def beside(journal: Path) -> Path:
        return journal.with_name(journal.name + ".mark")

    @classmethod
    def _pack(cls, seq: int, digest: bytes) -> bytes:
        body = cls._SLOT.pack(cls._MAGIC, seq, digest, 0)[:-4]
        return (body + struct.pack(">I", zlib.crc32(body))).ljust(cls._SIZE, b"\x00")

    def read(self) -> tuple[int, bytes]:
        """The newest good slot: (seq, hash). FileNotFoundError when there is no mark file,
        ValueError when neither slot is readable."""
        raw = self.path.read_bytes()
        found: list[tuple[int, bytes, int]] = []
        for slot in (0, 1):
            chunk = raw[slot * self._SIZE : slot * self._SIZE + self._SLOT.size]
            if len(chunk) < self._SLOT.size:
                continue
            magic, seq, digest, crc = self._SLOT.unpack(chunk)
            if magic == self._MAGIC and zlib.crc32(chunk[:-4]) == crc:
                found.append((seq, digest, slot))
        if not found:
            raise ValueError(f"{self.path}: no readable mark ({len(raw)} bytes)")
        seq, digest, slot = max(found)
        self._slot = 1 - slot  # the next write goes over the older slot
        return seq, digest

    def create(self, seq: int, digest: bytes) -> None:
        """A new mark file, in full or not at all (written aside, synced, renamed)."""
        self.close()
        aside = self.path.with_name(self.path.name + ".new")
        fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o640)
        try:
            os.write(fd, self._pack(seq, digest) * 2)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(aside, self.path)
        _sync_dir(self.path.parent)
        self._slot = 0

    def write(self, seq: int, digest: bytes) -> None:
        """Record ``seq`` as committed; durable when this returns."""
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR)
        os.pwrite(self._fd, self._pack(seq, digest), self._slot * self._SIZE)
        os.fdatasync(self._fd)
        self._slot = 1 - self._slot

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _sync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_mark(path: Path) -> tuple[int, bytes] | OSError | ValueError:
    """The mark beside a journal, or why it cannot be read. Read *before* the journal is: a
    live journal's writer may have committed more since, never less."""
    try:
        return Mark(Mark.beside(path)).read()
    except (OSError, ValueError) as exc:
        return exc


def _mark_problems(
    path: Path,
    conn: sqlite3.Connection,
    summary: dict[str, Any],
    found: tuple[int, bytes] | OSError | ValueError,
    *,
    live: bool,
) -> list[Problem]:
    """Does the journal reach its mark (``found``), with the same hash there? A mark file beside
    it is always checked; a missing one is a problem for a journal that keeps a mark, and for a
    backup copy about to be used as the live journal (``live``). A journal from before the mark
    existed has none and is adopted by ``Journal.open``."""
    meta = _meta(conn)
    mark = Mark(Mark.beside(path))
    if isinstance(found, FileNotFoundError):
        kept = meta.get("mark")
        if kept == "1":
            return [Problem(-1, f"its mark file {mark.path} is missing: whether committed "
                                "records were lost cannot be told")]  # fmt: skip
        if kept == "copy" and live:
            return [Problem(-1, "it is a backup copy (`tableside journal backup`) with no mark "
                                "file: the table may have numbered records after it")]  # fmt: skip
        return []
    if isinstance(found, (OSError, ValueError)):
        return [Problem(-1, f"its mark file is unreadable: {found}")]
    seq, digest = found
    last, anchor_seq = summary["last_seq"], int(meta["anchor_seq"])
    if seq > last:
        return [Problem(last + 1, f"lost: records {last + 1}..{seq} were committed (its mark "
                        f"file says so) but the journal ends at {last}: its -wal file was "
                        "deleted or not copied along, or an older copy was put back")]  # fmt: skip
    if seq == anchor_seq:
        there: bytes | None = bytes.fromhex(meta["anchor_hash"])
    elif seq > anchor_seq:
        row = conn.execute("SELECT hash FROM records WHERE seq = ?", (seq,)).fetchone()
        there = bytes(row[0]) if row is not None else None
    else:
        return []  # retention has deleted past the mark: nothing to compare
    if there != digest:
        return [Problem(seq, "not the journal its mark file saw: this record has another hash "
                        "(a journal from elsewhere put in its place?)")]  # fmt: skip
    return []


def _seq_range(conn: sqlite3.Connection) -> tuple[int | None, int | None]:
    """The lowest and highest seq: two lookups (min and max in one query scan the table)."""
    lo = conn.execute("SELECT min(seq) FROM records").fetchone()[0]
    hi = conn.execute("SELECT max(seq) FROM records").fetchone()[0]
    return lo, hi


def _last_before(conn: sqlite3.Connection, cutoff: float, through: int) -> int:
    """The last seq at or below ``through`` whose time is before ``cutoff``, -1 if none.

    Record times never go back along the seqs (the run's clock starts after the newest time
    the journal holds: docs/journal.md, Time), so a binary search by seq finds it in some
    twenty lookups. A scan of ``ts`` took 30-44 ms for 200,000 records, on the writer thread
    every minute, and grows with the journal."""
    lo, hi = _seq_range(conn)
    if lo is None or hi is None:
        return -1
    hi = min(hi, through)
    found = -1
    while lo <= hi:
        mid = (lo + hi) // 2
        row = conn.execute("SELECT ts FROM records WHERE seq >= ? ORDER BY seq LIMIT 1",
                           (mid,)).fetchone()  # fmt: skip
        if row is None or row[0] >= cutoff:
            hi = mid - 1
        else:
            found, lo = mid, mid + 1
    return found


def _connect(path: Path, *, readonly: bool = False) -> sqlite3.Connection:
    if readonly:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    else:
        conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA busy_timeout=5000")
    return conn


def _meta(conn: sqlite3.Connection) -> dict[str, str]:
    return dict(conn.execute("SELECT key, value FROM meta").fetchall())


def verify_file(path: Path, *, table: str | None = None) -> tuple[dict[str, Any], list[Problem]]:
    """Check a journal: SQLite's own integrity check, then the whole hash chain.

    Returns a summary (first/last seq, records, acked) and the problems found, first first."""
    if not path.is_file():
        raise FileNotFoundError(f"no journal at {path}")
    found = _read_mark(path)
    conn = _connect(path, readonly=True)
    try:
        summary, problems = _verify(conn, table)
        if not problems:
            problems = _mark_problems(path, conn, summary, found, live=False)
        return summary, problems
    except sqlite3.DatabaseError as exc:
        return {"path": str(path)}, [Problem(-1, f"not a readable journal: {exc}")]
    finally:
        conn.close()


def _verify(conn: sqlite3.Connection, table: str | None) -> tuple[dict[str, Any], list[Problem]]:
    problems: list[Problem] = []
    check = [row[0] for row in conn.execute("PRAGMA quick_check").fetchall()]
    if check != ["ok"]:
        problems.append(Problem(-1, "sqlite: " + "; ".join(check[:5])))
        return {}, problems
    meta = _meta(conn)
    if meta.get("format") != FORMAT:
        problems.append(Problem(-1, f"unknown journal format {meta.get('format')!r}"))
        return meta, problems
    if table is not None and meta.get("table") != table:
        problems.append(Problem(-1, f"journal of table {meta.get('table')!r}, not {table!r}"))
    expected_seq = int(meta["anchor_seq"]) + 1
    prev = bytes.fromhex(meta["anchor_hash"])
    count = 0
    last = expected_seq - 1
    newest_ts = float(meta.get("clock_floor", "0"))
    for seq, ts, topic, retain, payload, prev_hash, digest in conn.execute(
        "SELECT seq, ts, topic, retain, payload, prev_hash, hash FROM records ORDER BY seq"
    ):
        count += 1
        if seq != expected_seq:
            what = "missing" if seq > expected_seq else "unexpected"
            problems.append(Problem(expected_seq, f"{what}: next record is seq {seq}"))
        if bytes(prev_hash) != prev:
            problems.append(Problem(seq, "chain broken: previous hash does not match"))
        computed = record_hash(bytes(prev_hash), seq, ts, topic, bool(retain), bytes(payload))
        if computed != bytes(digest):
            problems.append(Problem(seq, "edited: content does not match its hash"))
        prev, expected_seq, last = bytes(digest), seq + 1, seq
        newest_ts = max(newest_ts, ts)
        if len(problems) >= 100:
            break
    summary = {
        "table": meta.get("table"),
        "first_seq": int(meta["anchor_seq"]) + 1,
        "last_seq": last,
        "records": count,
        "acked": int(meta.get("acked", "-1")),
        "last_hash": prev.hex(),
        "newest_ts": newest_ts,
    }
    return summary, problems


class Journal:
    """The table's journal; ``open()`` checks it, ``start()`` begins the writer thread."""

    def __init__(
        self,
        path: Path,
        table: str,
        *,
        retain_days: float | None = None,
        max_mb: float | None = None,
        cache: int = 10_000,
        batch: int = 2_000,
        prune_every_s: float = 60.0,
        test_clock: LabClock | None = None,
    ) -> None:
        self.prune_every_s = prune_every_s
        self.test_clock = test_clock
        self.path = path
        self.table = table
        self.retain_days = retain_days
        self.max_mb = max_mb
        self._cache_limit = cache
        self._batch = batch
        self._conn: sqlite3.Connection | None = None
        self._reader: sqlite3.Connection | None = None
        self._read_lock = asyncio.Lock()
        self._queue: queue.SimpleQueue[Record | None] = queue.SimpleQueue()
        # the writer thread and a prune() called from outside never share a transaction
        self._db_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        # checkpoints run on their own thread and connection, never in a commit
        self._checkpoint_thread: threading.Thread | None = None
        self._checkpoint_due = threading.Event()
        self._checkpoint_stop = False
        # the mark is written and synced on its own thread, while the writer commits the next
        # batch: a device's next frame never waits for the mark of the one before
        self._mark_thread: threading.Thread | None = None
        self._mark_due = threading.Condition()
        self._mark_next: tuple[int, bytes] | None = None
        self._mark_stop = False
        #: the checkpoint thread copied what it found; the writer copies the tail committed
        #: since (a few pages), so that its next commit starts the WAL over
        self._tail_due = False
        self._wal_bytes = 0  # about how much the writer committed since it asked for one
        self.checkpoint_idle_bytes = 1 << 20
        self.checkpoint_busy_bytes = 8 << 20
        self.checkpoints = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cache: collections.deque[Record] = collections.deque()
        self._durable_changed = asyncio.Event()
        self._committed_changed = asyncio.Event()
        self.failed: asyncio.Future[None] | None = None
        self.next_seq = 0
        #: committed by SQLite (survives a power cut): what a device's ACK waits for
        self.committed_seq = -1
        #: committed *and* in the mark file: what the publisher may send
        self.durable_seq = -1
        self.acked = -1
        self._acked_written = -1
        self._last_hash = _GENESIS
        self._last_ts = 0.0
        #: the writer's progress (committed, durable) for the loop, and whether the loop has
        #: been told to look: one wake-up of the loop covers whatever the writer did meanwhile
        self._progress = (-1, -1)
        self._looking = False
        self._progress_lock = threading.Lock()  # two threads tell: the writer and the mark's
        #: called on the loop when records become durable (the publisher's drain wakes up)
        self.on_durable: Callable[[], None] | None = None
        self.recovered_acked = -1
        self.commits = 0
        self.pruned = 0
        self.mark = Mark(Mark.beside(path))
        #: the run's time (record times, retention, the table's clock): set by open()
        self.clock = RunClock()
        #: ``tableside journal recover`` made this journal and nothing has been written since:
        #: the table it restates may be older than the table was (docs/journal.md)
        self.fresh_from_recovery = False
        self._wall_offset_said = 0.0

    # -- opening ---------------------------------------------------------------------------

    def open(self) -> None:
        """Create or check the journal. A journal that fails its checks raises JournalCorrupt
        with the way to recover; it is never silently replaced."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.path.exists() or self.path.stat().st_size == 0
        if new and self.mark.path.exists():
            # The journal went, its mark stayed: starting empty would number from 0 again.
            raise self._corrupt(f"the journal is missing but its mark file {self.mark.path} "
                                "says records were committed", lost=True)  # fmt: skip
        try:
            conn = _connect(self.path)
            if new:
                self._initialise(conn)
            summary, problems = _verify(conn, self.table)
            if not problems:
                problems = _mark_problems(self.path, conn, summary, _read_mark(self.path),
                                          live=True)  # fmt: skip
            if not problems and _meta(conn).get("mark") is None:
                self._adopt(conn, summary)
        except sqlite3.DatabaseError as exc:
            raise self._corrupt(f"not a readable journal ({exc})") from exc
        if problems:
            conn.close()
            listed = "; ".join(str(p) for p in problems[:3])
            lost = any(p.what.startswith(("lost", "its mark", "it is a backup")) for p in problems)
            raise self._corrupt(f"{len(problems)} problem(s): {listed}", lost=lost)
        self._conn = conn
        self.next_seq = summary["last_seq"] + 1
        self.durable_seq = self.committed_seq = summary["last_seq"]
        self.acked = self._acked_written = self.recovered_acked = summary["acked"]
        self._last_hash = bytes.fromhex(summary["last_hash"])
        self._last_ts = summary["newest_ts"]
        self._progress = (self.committed_seq, self.durable_seq)
        self.clock = RunClock(not_before=summary["newest_ts"], test=self.test_clock)
        recovered_after = _meta(conn).get("recovered_after")
        self.fresh_from_recovery = recovered_after == str(summary["last_seq"])
        log.info("journal_opened", path=str(self.path), next_seq=self.next_seq,
                 unsent=self.durable_seq - self.acked, records=summary["records"])  # fmt: skip

    def _initialise(self, conn: sqlite3.Connection) -> None:
        # A table that numbered its messages before the journal existed (seq.json) carries on
        # after the last number it may have used, so no subscriber sees a number twice.
        start = 0
        legacy = self.path.parent / "seq.json"
        with contextlib.suppress(FileNotFoundError, ValueError, KeyError, TypeError):
            state = json.loads(legacy.read_text(encoding="utf-8"))
            start = int(state["last"] if state.get("clean") else state["reserved"]) + 1
        _create(conn, self.path, self.table, start - 1, _GENESIS)

    def _adopt(self, conn: sqlite3.Connection, summary: dict[str, Any]) -> None:
        """A journal from before the mark file: it gets one, from what it holds now."""
        self.mark.create(summary["last_seq"], bytes.fromhex(summary["last_hash"]))
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('mark', '1')")
        conn.execute("PRAGMA wal_checkpoint(FULL)")
        log.info("journal_mark_created", path=str(self.mark.path), seq=summary["last_seq"])

    def _corrupt(self, detail: str, *, lost: bool = False) -> JournalCorrupt:
        wal = (
            f"If the journal's -wal file ({self.path.name}-wal) or the journal itself still "
            "exists somewhere (a copy taken before, or left behind by a move), put it back "
            "beside the journal and start again. Otherwise: "
            if lost
            else ""
        )
        return JournalCorrupt(
            f"journal {self.path} fails its checks: {detail}. The daemon will not start on it, "
            "since sequence numbers and unsent messages would be lost. To recover: stop the "
            f"daemon, run `tableside journal verify {self.path}` to see where it breaks, keep "
            f"a copy for the auditors. {wal}`tableside journal recover {self.path}` sets it "
            "aside and starts a new journal that carries on after the highest seq it or its "
            "mark file holds, restating the table as it was."
        )

    # -- the writer thread -----------------------------------------------------------------

    def start(self) -> None:
        """Start the writer thread; call from the event loop that appends."""
        if self._conn is None:
            self.open()
        self._loop = asyncio.get_running_loop()
        self._looking = False
        self.failed = self._loop.create_future()
        assert self._conn is not None
        # SQLite would checkpoint inside the commit that crosses 1000 pages, and the device's
        # ACK would wait for it: the checkpoint thread does it instead (docs/journal.md)
        self._conn.execute("PRAGMA wal_autocheckpoint=0")
        self._checkpoint_stop = False
        self._checkpoint_thread = threading.Thread(
            target=self._checkpoint_loop, args=(_connect(self.path),), name="journal-checkpoint",
            daemon=True,
        )  # fmt: skip
        self._thread = threading.Thread(target=self._write_loop, name="journal-writer", daemon=True)
        self._mark_stop = False
        self._mark_thread = threading.Thread(target=self._mark_loop, name="journal-mark",
                                             daemon=True)  # fmt: skip
        self._checkpoint_thread.start()
        self._mark_thread.start()
        self._thread.start()

    def close(self) -> None:
        """Commit what is queued, record the acknowledged mark, stop the thread."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
        if self._mark_thread is not None:  # after the writer: its last commit's mark first
            with self._mark_due:
                self._mark_stop = True
                self._mark_due.notify()
            self._mark_thread.join()
            self._mark_thread = None
        if self._checkpoint_thread is not None:
            self._checkpoint_stop = True
            self._checkpoint_due.set()
            self._checkpoint_thread.join()
            self._checkpoint_thread = None
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._write_acked(self._conn)
            self._conn.close()
            self._conn = None
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        self.mark.close()

    def _write_loop(self) -> None:
        conn = self._conn
        assert conn is not None
        last_prune = time.monotonic()
        stopping = False
        while not stopping:
            items: list[Record | None] = []
            with contextlib.suppress(queue.Empty):
                items.append(self._queue.get(timeout=0.5))
            items.extend(_drain(self._queue, self._batch))
            batch = [item for item in items if item is not None]
            stopping = len(batch) < len(items)
            try:
                if self._tail_due:
                    self._tail_due = False
                    with self._db_lock:
                        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                if batch:
                    self._commit(conn, batch)
                    # Idle (nothing queued) with a megabyte in the WAL, or busy with eight:
                    # the checkpoint thread copies it into the main file meanwhile.
                    if self._wal_bytes >= self.checkpoint_busy_bytes or (
                        self._wal_bytes >= self.checkpoint_idle_bytes and self._queue.empty()
                    ):
                        self._request_checkpoint()
                else:
                    if self.acked != self._acked_written:
                        with self._db_lock:
                            self._write_acked(conn, sync=False)
                    if self._wal_bytes:  # half a second quiet: the WAL goes into the main file
                        self._request_checkpoint()
                if time.monotonic() - last_prune > self.prune_every_s:
                    last_prune = time.monotonic()
                    self._say_wall_offset()
                    self.prune()
            except Exception as exc:  # disk full, I/O error: loud, and the daemon stops
                log.critical("journal_write_failed", path=str(self.path), error=str(exc))
                self._tell_loop(self._fail, JournalError(f"journal {self.path}: {exc}"))
                return

    def _commit(self, conn: sqlite3.Connection, batch: list[Record]) -> None:
        latest = {r.key: r for r in batch if r.key is not None}
        with self._db_lock:
            self._commit_locked(conn, batch, latest)
        self.commits += 1
        last = batch[-1]
        # about what the WAL grew by: the records, their hashes, ``latest``, page headers
        self._wal_bytes += sum(len(r.payload) + 150 for r in batch) + 4096 * (1 + len(latest))
        # Committed: the devices may be acknowledged now, while the mark thread writes and
        # syncs the mark; only then may the publisher send (a seq the broker has seen is always
        # in the mark). A device's next frame arrives meanwhile, and its commit runs beside the
        # mark's sync; the mark thread then writes the newest commit only.
        self._tell(committed=last.seq)
        with self._mark_due:
            self._mark_next = (last.seq, last.hash)
            self._mark_due.notify()

    def _mark_loop(self) -> None:
        """(the mark thread) Each commit's seq and hash into the mark file, synced; then the
        records up to it are durable. Commits made while it synced are marked at once, by the
        newest. Only a seq already committed is ever marked."""
        while True:
            with self._mark_due:
                while self._mark_next is None and not self._mark_stop:
                    self._mark_due.wait()
                job, self._mark_next = self._mark_next, None
            if job is None:  # stopping, and every commit is marked
                return
            try:
                self.mark.write(*job)
            except Exception as exc:  # disk full, I/O error: loud, and the daemon stops
                log.critical("journal_write_failed", path=str(self.mark.path), error=str(exc))
                self._tell_loop(self._fail, JournalError(f"journal mark {self.mark.path}: {exc}"))
                return
            self._tell(durable=job[0])

    def _request_checkpoint(self) -> None:
        self._wal_bytes = 0
        self._checkpoint_due.set()

    def _checkpoint_loop(self, conn: sqlite3.Connection) -> None:
        """PASSIVE checkpoints on a connection of their own: they copy committed pages from the
        WAL into the main file while the writer goes on committing (they never take the write
        lock), and the WAL starts over at the first commit after one that caught up."""
        try:
            conn.execute("PRAGMA wal_autocheckpoint=0")
            while True:
                self._checkpoint_due.wait()
                self._checkpoint_due.clear()
                if self._checkpoint_stop:
                    return
                try:
                    # Again while the writer committed meanwhile (each pass has less to copy):
                    # the WAL starts over only at a commit that finds it all copied, and it is
                    # reused, not grown (an fsync of a file that grows costs more).
                    _busy, frames, copied = conn.execute(
                        "PRAGMA wal_checkpoint(PASSIVE)"
                    ).fetchall()[0]
                    self.checkpoints += 1
                    if copied >= frames:
                        self._tail_due = True
                except sqlite3.Error as exc:  # not a loss: the pages stay in the WAL
                    log.warning("journal_checkpoint_failed", path=str(self.path), error=str(exc))
        finally:
            conn.close()

    def _commit_locked(
        self, conn: sqlite3.Connection, batch: list[Record], latest: dict[str, Record]
    ) -> None:
        conn.execute("BEGIN")
        try:
            conn.executemany(
                "INSERT INTO records VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(r.seq, r.ts, r.topic, r.retain, r.payload, r.prev_hash, r.hash) for r in batch],
            )
            conn.executemany(
                "INSERT OR REPLACE INTO latest VALUES (?, ?, ?)",
                [(k, r.seq, r.payload) for k, r in latest.items()],
            )
            if self.acked != self._acked_written:
                acked = self.acked
                conn.execute("UPDATE meta SET value = ? WHERE key = 'acked'", (str(acked),))
                self._acked_written = acked
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise

    def _write_acked(self, conn: sqlite3.Connection, *, sync: bool = True) -> None:
        """``meta.acked`` on its own. Without ``sync`` it costs no fsync (the writer, idle, does
        this): the next commit's fsync makes it durable, and until then a crash only sends the
        records since again, marked ``redelivered`` (it is written lazily anyway)."""
        acked = self.acked
        if not sync:
            conn.execute("PRAGMA synchronous=NORMAL")
        try:
            conn.execute("UPDATE meta SET value = ? WHERE key = 'acked'", (str(acked),))
        finally:
            if not sync:
                conn.execute("PRAGMA synchronous=FULL")
        self._acked_written = acked

    def _say_wall_offset(self) -> None:
        """A stepped wall clock changes nothing here (daemon/clock.py), but it is said."""
        if self.test_clock is not None:
            return  # a lab's clock runs away from the wall clock on purpose
        offset = self.clock.wall_offset()
        if abs(offset - self._wall_offset_said) > 60:
            self._wall_offset_said = offset
            log.warning("wall_clock_stepped", path=str(self.path), offset_s=round(offset, 1))

    def prune(self) -> int:
        """Delete acknowledged records older than ``retain_days`` or beyond ``max_mb``; never
        one the broker has not acknowledged. Returns how many went."""
        conn = self._conn
        if conn is None:
            return 0
        with self._db_lock:
            return self._prune_locked(conn)

    def _prune_locked(self, conn: sqlite3.Connection) -> int:
        acked = int(_meta(conn)["acked"])
        limit_seq = -1
        if self.retain_days is not None:
            # the run's clock: a wall clock stepped forward must not make records older
            cutoff = self.clock.now() - self.retain_days * 86400
            limit_seq = max(limit_seq, _last_before(conn, cutoff, acked))
        if self.max_mb is not None:
            page_size = conn.execute("PRAGMA page_size").fetchone()[0]
            pages, free = (conn.execute(f"PRAGMA {p}").fetchone()[0]
                           for p in ("page_count", "freelist_count"))  # fmt: skip
            used = (pages - free) * page_size
            budget = self.max_mb * 1_000_000 * 0.9
            if used > budget:
                lo, hi = _seq_range(conn)
                if lo is not None and hi is not None:
                    count = hi - lo + 1  # seqs have no gaps (verify says so)
                    excess = int(count * (1 - budget / used)) + 1
                    limit_seq = max(limit_seq, min(lo + excess - 1, acked))
                    if lo + excess - 1 > acked:
                        log.error("journal_over_size_with_unsent", path=str(self.path),
                                  used_mb=round(used / 1e6, 1), unsent=hi - acked)  # fmt: skip
        if limit_seq < 0:
            return 0
        row = conn.execute(
            "SELECT hash, (SELECT max(ts) FROM records WHERE seq <= ?) FROM records WHERE seq = ?",
            (limit_seq, limit_seq),
        ).fetchone()
        if row is None:
            return 0
        conn.execute("BEGIN")
        deleted = conn.execute("DELETE FROM records WHERE seq <= ?", (limit_seq,)).rowcount
        conn.execute("UPDATE meta SET value = ? WHERE key = 'anchor_seq'", (str(limit_seq),))
        conn.execute("UPDATE meta SET value = ? WHERE key = 'anchor_hash'", (bytes(row[0]).hex(),))
        # the newest time deleted: the clock of a later run never starts before it
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('clock_floor', ?)", (repr(row[1]),))
        conn.execute("COMMIT")
        self.pruned += deleted
        log.info("journal_pruned", records=deleted, through_seq=limit_seq)
        return deleted

    def _tell_loop(self, callback: Any, arg: object) -> bool:
        loop = self._loop
        if loop is None:
            return False
        try:
            loop.call_soon_threadsafe(callback, arg)
        except RuntimeError:  # the loop has already closed
            return False
        return True

    def _tell(self, *, committed: int | None = None, durable: int | None = None) -> None:
        """(writer or mark thread) Progress for the loop. A wake-up already on its way carries
        it too: the loop reads ``_progress`` when it runs, so a commit and its mark written
        before the loop looked cost one wake-up, not two."""
        with self._progress_lock:
            was_committed, was_durable = self._progress
            self._progress = (was_committed if committed is None else committed,
                              was_durable if durable is None else durable)  # fmt: skip
            if self._looking:
                return
            self._looking = True
        if not self._tell_loop(self._on_progress, None):
            with self._progress_lock:
                self._looking = False  # no loop to tell (never after it was told)

    def _on_progress(self, _: None) -> None:
        with self._progress_lock:
            self._looking = False  # first: progress told after this wakes the loop again
            committed, durable = self._progress
        acks_due = committed > self.committed_seq
        if acks_due:
            self.committed_seq = committed
            self._committed_changed.set()
        if durable > self.durable_seq:
            self.durable_seq = durable
            self._durable_changed.set()
            if acks_due:  # the devices' ACKs (woken above) first, then the broker
                asyncio.get_running_loop().call_soon(self._tell_durable)
            else:
                self._tell_durable()

    def _tell_durable(self) -> None:
        # the hook as it is when this runs: a drain that ended meanwhile has handed it back
        if self.on_durable is not None:
            self.on_durable()

    def _fail(self, exc: JournalError) -> None:
        if self.failed is not None and not self.failed.done():
            self.failed.set_exception(exc)

    # -- what the daemon calls (event loop) ------------------------------------------------

    def append(
        self,
        topic: str,
        payload: Callable[[int], bytes],
        *,
        retain: bool = False,
        key: str | None = None,
        ts: float | None = None,
    ) -> Record:
        """Number the next record, make its payload with that number (``payload(seq)``: the
        seq is inside it), chain it and queue it for the writer; returns it. The journal is the
        one place that numbers: nothing is carried in and checked back. ``ts``: the run's clock
        as read for the event that made it (read here when not given)."""
        if self._thread is None:
            raise JournalError("journal not started")
        seq = self.next_seq
        data = payload(seq)
        if ts is None or ts < self._last_ts:  # never back along the seqs (an older reading)
            ts = self.clock.now() if ts is None else self._last_ts
        self._last_ts = ts
        prev = self._last_hash
        digest = record_hash(prev, seq, ts, topic, retain, data)
        key = key or (topic if retain else None)
        record = Record(seq, ts, topic, retain, data, prev, digest, key)
        self._last_hash = digest
        self.next_seq = seq + 1
        self._cache.append(record)
        if len(self._cache) > self._cache_limit:
            self._cache.popleft()  # still on disk; read back from there when needed
        self._queue.put(record)
        return record

    @property
    def head(self) -> tuple[int, bytes]:
        """The newest record's seq and hash (numbered; committed once ``wait_durable`` says so).
        What a signed checkpoint covers (daemon/proof.py)."""
        return self.next_seq - 1, self._last_hash

    def mark_acked(self, seq: int) -> None:
        """The broker acknowledged everything up to ``seq``."""
        if seq > self.acked:
            self.acked = seq
            while self._cache and self._cache[0].seq <= seq:
                self._cache.popleft()

    async def wait_durable(self, seq: int) -> None:
        """Until the record ``seq`` has been committed and is in the mark (may be sent)."""
        while self.durable_seq < seq:
            self._durable_changed.clear()
            await self._durable_changed.wait()

    async def wait_committed(self, seq: int) -> None:
        """Until the record ``seq`` has been committed: it survives a crash and a power cut.
        A device's frame is acknowledged after this (the mark is not waited for)."""
        while self.committed_seq < seq:
            self._committed_changed.clear()
            await self._committed_changed.wait()

    def read_cached(self, seq: int, limit: int) -> list[Record] | None:
        """Durable records from ``seq`` on, at most ``limit``, when memory has them all (None:
        they are to be read from disk, ``read_from``)."""
        end = min(self.durable_seq, seq + limit - 1)
        if end < seq:
            return []
        if self._cache and self._cache[0].seq <= seq:
            start = seq - self._cache[0].seq
            return list(itertools.islice(self._cache, start, start + end - seq + 1))
        return None

    async def read_from(self, seq: int, limit: int) -> list[Record]:
        """Durable records from ``seq`` on, at most ``limit``; from memory when it has them."""
        cached = self.read_cached(seq, limit)
        if cached is not None:
            return cached
        end = min(self.durable_seq, seq + limit - 1)
        async with self._read_lock:
            return await asyncio.to_thread(self._read_disk, seq, end)

    def _read_disk(self, first: int, last: int) -> list[Record]:
        if self._reader is None:
            self._reader = _connect(self.path, readonly=True)
        rows = self._reader.execute(
            "SELECT seq, ts, topic, retain, payload, prev_hash, hash FROM records "
            "WHERE seq BETWEEN ? AND ? ORDER BY seq",
            (first, last),
        ).fetchall()
        return [Record(s, t, tp, bool(r), bytes(p), bytes(ph), bytes(h))
                for s, t, tp, r, p, ph, h in rows]  # fmt: skip

    def latest(self) -> dict[str, bytes]:
        """The newest payload per key, as of the last start (for restoring the table)."""
        conn = self._conn
        if conn is None:
            raise JournalError("journal not open")
        return {k: bytes(p) for k, p in conn.execute("SELECT key, payload FROM latest")}


# -- export and recovery (the CLI's `tableside journal …`) ----------------------------------


def export_records(
    path: Path, first: int | None = None, last: int | None = None
) -> Iterator[dict[str, Any]]:
    """Every record as a JSON-able dict (payload decoded when it is JSON), in seq order."""
    conn = _connect(path, readonly=True)
    try:
        rows = conn.execute(
            "SELECT seq, ts, topic, retain, payload, prev_hash, hash FROM records "
            "WHERE seq >= ? AND seq <= ? ORDER BY seq",
            (first if first is not None else -1, last if last is not None else 2**62),
        )
        for seq, ts, topic, retain, payload, prev_hash, digest in rows:
            raw = bytes(payload)
            try:
                body: object = json.loads(raw)
            except ValueError:
                body = {"raw_hex": raw.hex()}
            yield {
                "seq": seq,
                "journal_ts": ts,
                "topic": topic,
                "retain": bool(retain),
                "payload": body,
                "prev_hash": bytes(prev_hash).hex(),
                "hash": bytes(digest).hex(),
            }
    finally:
        conn.close()


def _create(
    conn: sqlite3.Connection,
    path: Path,
    table: str,
    anchor_seq: int,
    anchor_hash: bytes,
    latest: Sequence[tuple[str, int, bytes]] = (),
    **extra: str,
) -> None:
    """A new journal whose numbering starts after ``anchor_seq``, with its mark file."""
    meta = {
        "format": FORMAT,
        "table": table,
        "anchor_seq": str(anchor_seq),
        "anchor_hash": anchor_hash.hex(),
        "acked": str(anchor_seq),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "mark": "1",
        **extra,
    }
    Mark(Mark.beside(path)).create(anchor_seq, anchor_hash)
    conn.executescript(_SCHEMA)
    conn.execute("BEGIN")
    conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", meta.items())
    conn.executemany("INSERT OR REPLACE INTO latest VALUES (?, ?, ?)", latest)
    conn.execute("COMMIT")
    # in the main file at once: a journal whose -wal is lost still says it keeps a mark
    conn.execute("PRAGMA wal_checkpoint(FULL)")


@dataclass(frozen=True, slots=True)
class Recovered:
    """What ``recover`` did."""

    #: where the old journal went (None: there was none, only its mark)
    aside: Path | None
    #: the new journal's numbering carries on after this seq
    after_seq: int
    #: the table's state carried over (retained topics, device events): how many
    restated: int


def recover(path: Path, table: str, *, after_seq: int | None = None) -> Recovered:
    """Set a journal that fails its checks aside (nothing is deleted) and start a new one whose
    numbering carries on after the highest seq the old one holds, acknowledged or its mark file
    says was committed, anchored to the newest record whose hash still checks. The new journal
    keeps the old one's ``latest`` (the table, each device, each retained topic), so the daemon
    restates the table as it was, not a new table."""
    highest, anchor, newest_ts = -1, _GENESIS, 0.0
    latest: list[tuple[str, int, bytes]] = []
    keeps_mark = False
    if path.exists():
        with contextlib.suppress(sqlite3.Error):
            conn = _connect(path, readonly=True)
            try:
                row = conn.execute("SELECT max(seq), max(ts) FROM records").fetchone()
                highest = row[0] if row and row[0] is not None else -1
                newest_ts = row[1] if row and row[1] is not None else 0.0
                with contextlib.suppress(sqlite3.Error, KeyError, ValueError):
                    meta = _meta(conn)
                    keeps_mark = meta.get("mark") == "1"
                    highest = max(highest, int(meta["acked"]), int(meta["anchor_seq"]))
                for seq, ts, topic, retain, payload, prev, digest in conn.execute(
                    "SELECT seq, ts, topic, retain, payload, prev_hash, hash FROM records "
                    "ORDER BY seq DESC LIMIT 100"
                ):
                    if record_hash(bytes(prev), seq, ts, topic, bool(retain), bytes(payload)) == (
                        bytes(digest)
                    ):
                        anchor = bytes(digest)
                        break
                with contextlib.suppress(sqlite3.Error):
                    latest = [(k, s, bytes(p)) for k, s, p in
                              conn.execute("SELECT key, seq, payload FROM latest")]  # fmt: skip
            finally:
                conn.close()
    mark = Mark(Mark.beside(path))
    try:
        highest = max(highest, mark.read()[0])
    except (OSError, ValueError) as exc:
        if after_seq is None and (keeps_mark or not path.exists()):
            raise JournalError(
                f"{path}: its mark file cannot be read ({exc}), so how far its numbering went "
                "cannot be told; give the last seq the table used (--after-seq, from a "
                "subscriber's record) so no number is used twice"
            ) from exc
    if after_seq is not None:
        highest = max(highest, after_seq)
    elif highest < 0:
        raise JournalError(
            f"{path}: cannot read how far its numbering went; give the last seq the table used "
            "(--after-seq, from a subscriber's record) so no number is used twice"
        )
    aside: Path | None = None
    if path.exists():
        aside = path.with_name(
            f"{path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
        )
        for suffix in ("", "-wal", "-shm"):
            part = Path(str(path) + suffix)
            if part.exists():
                os.replace(part, Path(str(aside) + suffix))
    conn = _connect(path)
    try:
        _create(conn, path, table, highest, anchor, latest, previous=str(aside or "(none)"),
                recovered_after=str(highest), clock_floor=repr(float(newest_ts)))  # fmt: skip
    finally:
        conn.close()
    return Recovered(aside, highest, len(latest))


def backup(path: Path, dest: Path) -> dict[str, Any]:
    """A consistent copy of a journal, live or not, by SQLite's backup API (a plain file copy
    of a live journal can miss its -wal file). The copy is checked; returns its summary. The
    mark file is not copied: it belongs to the live journal (docs/journal.md)."""
    if dest.exists():
        raise JournalError(f"{dest} exists: a backup never overwrites a file")
    source = _connect(path, readonly=True)
    try:
        target = sqlite3.connect(dest)
        try:
            source.backup(target)
            # a copy: put back as the live journal without its mark, it is refused (it may be
            # older than what the table numbered since)
            target.execute("UPDATE meta SET value = 'copy' WHERE key = 'mark'")
            target.commit()
        finally:
            target.close()
    finally:
        source.close()
    conn = _connect(dest, readonly=True)
    try:
        summary, problems = _verify(conn, None)
    finally:
        conn.close()
    if problems:
        raise JournalError(f"the copy {dest} fails its checks: {problems[0]}")
    return summary


def _drain(q: queue.SimpleQueue[Record | None], limit: int) -> Iterator[Record | None]:
    for _ in range(limit):
        try:
            yield q.get_nowait()
        except queue.Empty:
            return
