"""The redo log's one ``fdatasync`` per batch (from there the devices may be acknowledged and the
publisher may send it): the event loop's own at the end of its turn (``log_here``), or, while
the storage is slow, the writer thread's for whatever the loop queued for it. The writer thread
puts what the log took in into SQLite behind it, in larger batches: one
transaction (no fsync) for what the log took in up to ``store_every_s`` (a second), so a table
making a record at a time pays SQLite's pages and its transaction once for many records, not
once each. Idle, it writes ``meta.acked`` (at most every ``acked_every_s``) and tells the
checkpointer (a long enough quiet is a checkpoint); after a checkpoint that put everything into
SQLite's main file it starts the log anew when it has grown; every ``every_s`` it runs the
journal's housekeeping (retention). docs/journal.md, "Why group commit", "One sync per batch",
"Where the log is synced", "What the commit path holds" and "What a record costs the
storage"."""

from __future__ import annotations

import contextlib
import enum
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import structlog

from tableside.daemon.journal.checkpoint import Checkpointer
from tableside.daemon.journal.file import JournalError, Record
from tableside.daemon.journal.progress import Progress
from tableside.daemon.journal.redo import Header, RedoLog

log = structlog.get_logger("tableside.journal")

#: the transaction: (connection, batch, the batch's newest record per ``latest`` key)
Transaction = Callable[[sqlite3.Connection, list[Record], dict[str, Record]], None]


class Signal(enum.Enum):
    """On the writer's queue beside the records it is to log."""

    STOP = "once all before is committed"
    WAKE = "the loop handed over records"


class Committer:
    """The writer thread, and the acknowledged mark it writes (``acked``, set on the loop)."""

    def __init__(
        self,
        path: Path,
        *,
        batch: int,
        every_s: float,
        progress: Progress,
        log: RedoLog,
        checkpointer: Checkpointer,
        housekeeping: Callable[[], None],
        log_bytes: int = 4 << 20,
        acked_every_s: float = 5.0,
        store_every_s: float = 1.0,
        transaction: Transaction | None = None,
        slow_sync_s: float = 0.05,
        quick_again_s: float = 10.0,
    ) -> None:
        self.path = path
        #: the event loop logs what it appends itself (``log_here``), with no hop to this
        #: thread and back, while its syncs are quick; a sync slower than ``slow_sync_s``
        #: hands the logging to this thread (the loop no longer waits on the storage) until
        #: every sync has been quick for ``quick_again_s`` (docs/journal.md, "Where the log
        #: is synced")
        self.slow_sync_s = slow_sync_s
        self.quick_again_s = quick_again_s
        self._on_loop = True
        #: since when every sync was quick, and when the last one ended (monotonic)
        self._quick_since = -float("inf")
        self.synced_at = -float("inf")
        #: records for this thread to log (while the loop does not), or a signal
        self.queue: queue.SimpleQueue[Record | Signal] = queue.SimpleQueue()
        #: the newest seq put on ``queue``
        self._queued = -1
        #: logged by the loop, not yet taken by this thread, and when the first was
        self._handed: list[Record] = []
        self._handed_since = 0.0
        #: the log's appends (the loop's or this thread's) and its new start never overlap;
        #: it also guards ``_handed``
        self._log_lock = threading.Lock()
        #: the writer thread and a prune() called from outside never share a transaction
        self.db_lock = threading.Lock()
        #: the highest seq the broker acknowledged (the loop sets it)
        self.acked = -1
        #: batches taken into the log (one sync each)
        self.commits = 0
        #: SQLite transactions that took them (``store_every_s`` apart while records come)
        self.stores = 0
        #: logged, not yet in SQLite: stored once the oldest is ``store_every_s`` old, there are
        #: ``batch`` of them, a checkpoint's tail copy is due, or the journal closes
        self._pending: list[Record] = []
        self._pending_since = 0.0
        self.store_every_s = store_every_s
        #: the newest seq SQLite holds (committed after the log: a read of SQLite waits for it)
        self._stored = _Stored()
        self._acked_written = -1
        #: ``meta.acked`` is written at most this often (docs/journal.md, "What a record costs
        #: the storage"): in a batch's transaction, or on its own when idle
        self.acked_every_s = acked_every_s
        self._acked_at = -float("inf")
        self._batch = batch
        self._every_s = every_s
        self._progress = progress
        self.log = log
        #: the log starts anew once it is past this and a checkpoint put all it holds into
        #: SQLite's main file
        self.log_bytes = log_bytes
        #: times the log started anew (by this thread)
        self.log_restarts = 0
        self._logged: tuple[int, bytes] = (-1, b"")
        #: the newest record SQLite holds (after a checkpoint, in its main file)
        self._stored_head: tuple[int, bytes] = (-1, b"")
        self._checkpointer = checkpointer
        #: ``write_batch`` unless the journal passes it in wrapped (bench/commit.py times it)
        self._transaction = transaction or self.write_batch
        self._housekeeping = housekeeping
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None

    def reset(self, acked: int, last_seq: int, last_hash: bytes) -> None:
        """At opening: ``meta.acked`` as the journal holds it, and its last record."""
        self.acked = self._acked_written = acked
        self._logged = self._stored_head = (last_seq, last_hash)
        self._stored.reset(last_seq)

    def start(self, conn: sqlite3.Connection) -> None:
        self._thread = threading.Thread(target=self._run, args=(conn,), name="journal-writer",
                                        daemon=True)  # fmt: skip
        self._thread.start()

    def stop(self) -> None:
        """Once what is queued (or handed over) is committed."""
        if self._thread is not None:
            self.queue.put(Signal.STOP)
            self._thread.join()
            self._thread = None

    def logs_here(self) -> bool:
        """(the loop) Whether the loop logs what it appends now: it does while its syncs are
        quick, and again once this thread has logged all it was given and every sync has been
        quick for ``quick_again_s``."""
        if not self._on_loop and self._logged[0] >= self._queued:
            self._on_loop = time.monotonic() - self._quick_since >= self.quick_again_s
            if self._on_loop:
                log.info("journal_sync_on_loop", path=str(self.path))
        return self._on_loop

    def give(self, record: Record) -> None:
        """(the loop) A record for this thread to log."""
        self._queued = record.seq
        self.queue.put(record)

    def log_here(self, batch: list[Record]) -> None:
        """(the loop) One batch into the log with its one sync, handed to this thread for
        SQLite: durable when this returns. A slow sync hands the logging to this thread."""
        with self._log_lock:
            took = self._append(batch)
            first = not self._handed
            if first:
                self._handed_since = time.monotonic()
            self._handed.extend(batch)
        if first and self.store_every_s < 0.5:  # due before the thread would wake by itself
            self.queue.put(Signal.WAKE)
        if took > self.slow_sync_s:
            self._on_loop = False
            log.warning("journal_sync_slow", path=str(self.path), seconds=round(took, 3),
                        records=len(batch), then="the writer thread syncs")  # fmt: skip

    def _append(self, batch: list[Record]) -> float:
        """(holding the log lock) The batch into the log; returns the seconds it took."""
        started = time.monotonic()
        self.log.append(batch)
        self.commits += 1
        self._logged = (batch[-1].seq, batch[-1].hash)
        ended = self.synced_at = time.monotonic()
        if ended - started > self.slow_sync_s:
            self._quick_since = ended
        return ended - started

    def write_batch(
        self, conn: sqlite3.Connection, batch: list[Record], latest: dict[str, Record]
    ) -> None:
        """The records, their ``latest`` rows and ``meta.acked``, in one transaction."""
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
            if self._acked_due():
                self.write_acked(conn)
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise

    def write_acked(self, conn: sqlite3.Connection, *, only_if_moved: bool = False) -> None:
        """``meta.acked``, with no fsync (as every commit now): the next checkpoint makes it
        durable, and until then a crash or a power cut only sends the records since again,
        marked ``redelivered`` (it is written lazily anyway; the log does not carry it)."""
        acked = self.acked
        if only_if_moved and acked == self._acked_written:
            return
        conn.execute("UPDATE meta SET value = ? WHERE key = 'acked'", (str(acked),))
        self._acked_written = acked
        self._acked_at = time.monotonic()

    def _acked_due(self) -> bool:
        """``acked`` moved and was last written ``acked_every_s`` ago: written in every commit,
        its page would be one more page of WAL per batch (a third of a record's)."""
        return (self.acked != self._acked_written
                and time.monotonic() - self._acked_at >= self.acked_every_s)  # fmt: skip

    def _run(self, conn: sqlite3.Connection) -> None:
        last_tick = time.monotonic()
        stopping = False
        while not stopping:
            (handed, since), batch, stopping = self._take()
            try:
                if handed:  # the loop logged these before anything queued
                    self._pend(handed, since)
                if batch:
                    self._log(batch)
                    self._pend(batch)
                if self._pending and (stopping or self._checkpointer.tail_due
                                      or len(self._pending) >= self._batch
                                      or self._store_wait() == 0):  # fmt: skip
                    self._store(conn)
                # the log may start anew only once SQLite holds all it holds
                if self._checkpointer.copy_tail(conn, self.db_lock) and not self._pending:
                    self._restart_log()
                if not (batch or handed):
                    self._idle(conn)
                if time.monotonic() - last_tick > self._every_s:
                    last_tick = time.monotonic()
                    self._housekeeping()
            except Exception as exc:  # disk full, I/O error: loud, and the daemon stops
                self.fail(exc)
                return

    def fail(self, exc: Exception) -> None:
        """(either side) Writing the journal failed: said loudly, and the daemon stops."""
        log.critical("journal_write_failed", path=str(self.path), error=str(exc))
        self._progress.fail(JournalError(f"journal {self.path}: {exc}"))

    def _take(self) -> tuple[tuple[list[Record], float], list[Record], bool]:
        """What the loop logged and handed over (and when the first was), what has queued up
        for this thread to log
        (waiting up to half a second, or until a store is due, for the first), and whether the
        journal is closing (everything queued or handed before that is taken)."""
        items: list[Record | Signal] = []
        wait = 0.5 if not self._pending else min(0.5, self._store_wait())
        with contextlib.suppress(queue.Empty):
            items.append(self.queue.get(timeout=wait))
        items.extend(_drain(self.queue, self._batch))
        with self._log_lock:
            handed, self._handed = (self._handed, self._handed_since), []
        batch = [item for item in items if not isinstance(item, Signal)]
        return handed, batch, Signal.STOP in items

    def wait_stored(self, seq: int) -> None:
        """(any thread but this one) Until SQLite holds the records up to ``seq`` (durable ones
        are at most a transaction behind), or the writer stopped."""
        self._stored.wait(seq, lambda: self._thread is None or not self._thread.is_alive())

    def _log(self, batch: list[Record]) -> None:
        # The log first: its one sync makes the batch durable (a power cut from here loses
        # none of it: the next opening rolls forward into SQLite what SQLite lacks), so the
        # devices are acknowledged and the publisher sends, and SQLite takes the batch later
        # with others (docs/journal.md, "One sync per batch"). A batch SQLite then refuses (a
        # full disk: the log's blocks were written ahead, SQLite's were not) stops the daemon
        # with the batch safe in the log, for the next opening to put back or refuse loudly.
        with self._log_lock:
            self._append(batch)
        self._progress.tell(batch[-1].seq)

    def _pend(self, batch: list[Record], since: float | None = None) -> None:
        """Logged (``since``: when, if not now), for SQLite's next transaction."""
        if not self._pending:
            self._pending_since = time.monotonic() if since is None else since
        self._pending.extend(batch)

    def _store_wait(self) -> float:
        """Seconds until what the log holds and SQLite does not is due in SQLite."""
        return max(0.0, self._pending_since + self.store_every_s - time.monotonic())

    def _store(self, conn: sqlite3.Connection) -> None:
        batch, self._pending = self._pending, []
        latest = {r.key: r for r in batch if r.key is not None}
        with self.db_lock:
            self._transaction(conn, batch, latest)
        self._stored_head = (batch[-1].seq, batch[-1].hash)
        self._stored.tell(batch[-1].seq)
        self.stores += 1
        # about what the WAL grew by: the records, their hashes, ``latest``, page headers
        grew = sum(len(r.payload) + 150 for r in batch) + 4096 * (1 + len(latest))
        self._checkpointer.committed(grew, queue_empty=self.queue.empty() and not self._handed)

    def _restart_log(self) -> None:
        """A checkpoint on this thread's connection, after its last commit, put everything that
        SQLite held into its main file and synced it, so the log may start anew after the last
        record stored (once it has grown past ``log_bytes``), holding again what the loop
        logged since and SQLite does not hold yet (the loop waits meanwhile)."""
        with self._log_lock:
            header = self.log.header
            if header is None or self.log.size < self.log_bytes:
                return
            seq, digest = self._stored_head
            self.log.create(Header(header.table, header.generation + 1, seq, digest))
            if self._handed:
                self.log.append(self._handed)
        self.log_restarts += 1
        log.info("journal_log_restarted", path=str(self.log.path), after_seq=seq)

    def _idle(self, conn: sqlite3.Connection) -> None:
        if self._acked_due():
            with self.db_lock:
                self.write_acked(conn)
            self._checkpointer.wrote_while_quiet(4096)
        self._checkpointer.quiet()  # long enough quiet: the WAL goes into the main file


class _Stored:
    """The newest seq SQLite holds, told by the writer and waited for by readers of SQLite."""

    def __init__(self) -> None:
        self._seq = -1
        self._changed = threading.Condition()

    def reset(self, seq: int) -> None:
        with self._changed:
            self._seq = seq

    def tell(self, seq: int) -> None:
        with self._changed:
            self._seq = seq
            self._changed.notify_all()

    def wait(self, seq: int, stopped: Callable[[], bool]) -> None:
        with self._changed:
            while self._seq < seq and not stopped():
                self._changed.wait(timeout=0.1)


def _drain(q: queue.SimpleQueue[Record | Signal], limit: int) -> Iterator[Record | Signal]:
    for _ in range(limit):
        try:
            yield q.get_nowait()
        except queue.Empty:
            return
