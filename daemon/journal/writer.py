"""The live journal (``Journal``): records numbered and chained on the event loop, committed by
its writer thread in groups, the mark written by its own thread, checkpoints by a third;
retention; reads for the publisher (docs/journal.md)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import json
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import structlog

from tableside.daemon.clock import LabClock, RunClock
from tableside.daemon.journal.file import (
    GENESIS,
    JournalCorrupt,
    JournalError,
    Record,
    connect_db,
    read_meta,
    record_hash,
    seq_range,
)
from tableside.daemon.journal.mark import Mark, create_journal, mark_problems, read_mark
from tableside.daemon.journal.verify import verify_chain

log = structlog.get_logger("tableside.journal")


def _last_before(conn: sqlite3.Connection, cutoff: float, through: int) -> int:
    """The last seq at or below ``through`` whose time is before ``cutoff``, -1 if none.

    Record times never go back along the seqs (the run's clock starts after the newest time
    the journal holds: docs/journal.md, Time), so a binary search by seq finds it in some
    twenty lookups. A scan of ``ts`` took 30-44 ms for 200,000 records, on the writer thread
    every minute, and grows with the journal."""
    lo, hi = seq_range(conn)
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
        self._last_hash = GENESIS
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
            conn = connect_db(self.path)
            if new:
                self._initialise(conn)
            summary, problems = verify_chain(conn, self.table)
            if not problems:
                problems = mark_problems(self.path, conn, summary, read_mark(self.path),
                                          live=True)  # fmt: skip
            if not problems and read_meta(conn).get("mark") is None:
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
        recovered_after = read_meta(conn).get("recovered_after")
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
        create_journal(conn, self.path, self.table, start - 1, GENESIS)

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
            target=self._checkpoint_loop, args=(connect_db(self.path),), name="journal-checkpoint",
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
        acked = int(read_meta(conn)["acked"])
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
                lo, hi = seq_range(conn)
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
            self._reader = connect_db(self.path, readonly=True)
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


def _drain(q: queue.SimpleQueue[Record | None], limit: int) -> Iterator[Record | None]:
    for _ in range(limit):
        try:
            yield q.get_nowait()
        except queue.Empty:
            return
