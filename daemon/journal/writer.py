"""The live journal (``Journal``): a facade over its parts (docs/journal.md): records numbered
and chained on the event loop (chain.py), committed in groups by the writer thread (commit.py)
with one sync per batch, to its redo log (redo.py), checkpointed by another (checkpoint.py);
retention (retention.py), the progress told to the loop (progress.py) and the reads for the
publisher (reads.py)."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from tableside.daemon.clock import LabClock, RunClock
from tableside.daemon.journal.chain import Chain
from tableside.daemon.journal.checkpoint import Checkpointer
from tableside.daemon.journal.commit import Committer
from tableside.daemon.journal.file import JournalError, Record
from tableside.daemon.journal.opening import open_checked
from tableside.daemon.journal.progress import Progress
from tableside.daemon.journal.reads import Reads
from tableside.daemon.journal.redo import RedoLog
from tableside.daemon.journal.retention import Retention

#: a journal with no sync for this long is quiet: a device waiting on its record has it
#: synced at once (``Journal.durable``), not at the end of the loop's turn. Under load, syncs
#: come closer together than this, and a turn's appends share one.
QUIET_S = 0.001


class Journal:
    """The table's journal; ``open()`` checks it, ``start()`` begins its threads."""

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
        log_bytes: int = 4 << 20,
        acked_every_s: float = 5.0,
        quiet_checkpoint_s: float = 30.0,
        store_every_s: float = 1.0,
        slow_sync_s: float = 0.05,
        quick_again_s: float = 10.0,
        test_clock: LabClock | None = None,
    ) -> None:
        self.path = path
        self.table = table
        self.test_clock = test_clock
        #: the redo log: the one sync per batch, and the mark (its last record)
        self.log = RedoLog(RedoLog.beside(path), reserve=log_bytes + (1 << 20))
        self._conn: sqlite3.Connection | None = None
        self._chain = Chain()
        self._progress = Progress()
        self._checkpointer = Checkpointer(path, quiet_s=quiet_checkpoint_s)
        self._retention = Retention(path, retain_days, max_mb)
        self._committer = Committer(
            path, batch=batch, every_s=prune_every_s, progress=self._progress, log=self.log,
            checkpointer=self._checkpointer, transaction=self._commit_locked,
            housekeeping=self._housekeeping, log_bytes=log_bytes, acked_every_s=acked_every_s,
            store_every_s=store_every_s, slow_sync_s=slow_sync_s,
            quick_again_s=quick_again_s,
        )  # fmt: skip
        self._reads = Reads(path, cache, self._committer.wait_stored)
        self.recovered_acked = -1
        #: the highest seq that may have reached a broker, this run or before (the publisher
        #: raises it as it sends); a clean close keeps it as ``meta.sent``, and after a crash
        #: it is the last seq journaled (whatever was not acknowledged may have gone)
        self.sent = -1
        #: the run's time (record times, retention, the table's clock): set by open()
        self.clock = RunClock()
        #: ``tableside journal recover`` made this journal and nothing has been written since:
        #: the table it restates may be older than the table was (docs/journal.md)
        self.fresh_from_recovery = False
        #: records appended inside ``atomic``, held back from the writer until it ends
        self._held: list[Record] | None = None
        #: the records appended since the loop last logged, while it logs them itself (it logs
        #: them all, with one sync, once this turn of the loop is done: ``_log_appended``)
        self._appended: list[Record] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- opening and closing ---------------------------------------------------------------

    def open(self) -> None:
        """Create or check the journal. A journal that fails its checks raises JournalCorrupt
        with the way to recover; it is never silently replaced."""
        opened = open_checked(self.path, self.table, self.log)
        self._conn = opened.conn
        self._chain.reset(opened.last_seq, opened.last_hash, opened.newest_ts)
        self._progress.reset(opened.last_seq)
        self._committer.reset(opened.acked, opened.last_seq, opened.last_hash)
        self.recovered_acked = opened.acked
        # after a crash, everything journaled may have gone: it is all "sent"
        self.sent = opened.last_seq if opened.sent is None else max(opened.sent, opened.acked)
        self.clock = RunClock(not_before=opened.newest_ts, test=self.test_clock)
        self.fresh_from_recovery = opened.fresh_from_recovery

    def start(self) -> None:
        """Start the threads; call from the event loop that appends."""
        if self._conn is None:
            self.open()
        assert self._conn is not None
        self._loop = asyncio.get_running_loop()
        self._progress.attach(self._loop)
        # SQLite would checkpoint inside the commit that crosses 1000 pages, and the device's
        # ACK would wait for it: the checkpoint thread does it instead (docs/journal.md)
        self._conn.execute("PRAGMA wal_autocheckpoint=0")
        self._checkpointer.start()
        self._committer.start(self._conn)

    def close(self) -> None:
        """Commit and log what is queued, record the acknowledged and sent marks, stop the
        threads."""
        self._log_appended(tell=False)
        self._committer.stop()
        self._checkpointer.stop()
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._committer.write_acked(self._conn)
                self._conn.execute("INSERT OR REPLACE INTO meta VALUES ('sent', ?)",
                                   (str(self.sent),))  # fmt: skip
            self._conn.close()
            self._conn = None
        self._reads.close()
        self.log.close()

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
        if not self._committer.running:
            raise JournalError("journal not started")
        failed = self._progress.failed
        if failed is not None and failed.done():
            # the writer stopped on a failure: nothing appended now could become durable
            raise JournalError(f"journal {self.path} failed") from failed.exception()
        record = self._chain.next(topic, payload, retain=retain, key=key, ts=ts, clock=self.clock)
        if self._held is not None:
            self._held.append(record)
        else:
            self._queue(record)
        return record

    @contextlib.contextmanager
    def atomic(self) -> Iterator[None]:
        """The records appended inside go to the writer together when it ends, or none does: an
        exception inside takes their seqs and chain back (on the event loop, with nothing
        between the appends: a table command and all it makes, daemon/runtime.py). Inside
        another ``atomic``, the outer one decides."""
        if self._held is not None:
            yield
            return
        mark = self._chain.mark()
        held: list[Record] = []
        self._held = held
        try:
            yield
        except BaseException:
            self._chain.rewind(mark)
            raise
        else:
            for record in held:
                self._queue(record)
        finally:
            self._held = None

    def _queue(self, record: Record) -> None:
        self._reads.add(record)
        if not self._appended and not self._committer.logs_here():
            self._committer.give(record)
            return
        self._appended.append(record)
        if len(self._appended) == 1:
            assert self._loop is not None
            self._loop.call_soon(self._log_appended)

    def _log_appended(self, tell: bool = True) -> None:
        """What this turn of the loop appended, into the log with one sync (no hop to the
        writer thread and back): durable, so the devices waiting are acknowledged and the
        publisher sends. A failure (disk full, I/O error) stops the daemon, as the writer
        thread's does."""
        batch, self._appended = self._appended, []
        failed = self._progress.failed
        if not batch or (failed is not None and failed.done()):
            return
        try:
            self._committer.log_here(batch)
        except Exception as exc:  # disk full, I/O error: loud, and the daemon stops
            self._committer.fail(exc)
            return
        if tell:
            self._progress.tell_here(batch[-1].seq)

    @property
    def next_seq(self) -> int:
        """The seq the next record gets."""
        return self._chain.next_seq

    @property
    def head(self) -> tuple[int, bytes]:
        """The newest record's seq and hash (numbered; committed once ``wait_durable`` says so).
        What a signed checkpoint covers (wire/proof.py)."""
        return self._chain.head

    def mark_acked(self, seq: int) -> None:
        """The broker acknowledged everything up to ``seq``."""
        if seq > self._committer.acked:
            self._committer.acked = seq
            self._reads.acked(seq)

    def durable(self, seq: int) -> asyncio.Future[None]:
        """A future done once the record ``seq`` is durable (``wait_durable``): what a
        device's ACK waits on, with no task made for it. To a quiet journal (no sync for
        ``QUIET_S``) the loop logs what it appended at once, and the future is done on return:
        one device's frame is acknowledged in the turn that read it. Under load, the turn's
        appends wait for its end, to share one sync."""
        if self._appended and time.monotonic() - self._committer.synced_at >= QUIET_S:
            self._log_appended()
        return self._progress.durable(seq)

    async def wait_durable(self, seq: int) -> None:
        """Until the record ``seq`` is committed and in the log: it survives a crash and a
        power cut, a device's frame may be acknowledged and the record sent (the ACKs waiting
        are told first)."""
        await self._progress.wait_durable(seq)

    async def wait_stored(self, seq: int) -> None:
        """Until SQLite holds the records up to ``seq`` (behind the log by up to
        ``store_every_s``): for a reader of SQLite itself (``latest``, the tools)."""
        await asyncio.to_thread(self._committer.wait_stored, seq)

    def read_cached(self, seq: int, limit: int) -> list[Record] | None:
        """Durable records from ``seq`` on, at most ``limit``, when memory has them all (None:
        they are to be read from disk, ``read_from``)."""
        return self._reads.cached(seq, limit, self.durable_seq)

    async def read_from(self, seq: int, limit: int) -> list[Record]:
        """Durable records from ``seq`` on, at most ``limit``; from memory when it has them."""
        return await self._reads.read(seq, limit, self.durable_seq)

    def latest(self) -> dict[str, bytes]:
        """The newest payload per key, as of the last start (for restoring the table)."""
        conn = self._conn
        if conn is None:
            raise JournalError("journal not open")
        with self._committer.db_lock:  # the writer thread shares the connection
            return {k: bytes(p) for k, p in conn.execute("SELECT key, payload FROM latest")}

    def prune(self) -> int:
        """Delete acknowledged records older than ``retain_days`` or beyond ``max_mb``; never
        one the broker has not acknowledged. Returns how many went."""
        conn = self._conn
        if conn is None:
            return 0
        with self._committer.db_lock:
            # retention goes by ``meta.acked`` (what a restart would resend from): the newest
            self._committer.write_acked(conn, only_if_moved=True)
            return self._retention.prune(conn, self.clock)

    # -- the parts' state, as the journal's ------------------------------------------------

    @property
    def durable_seq(self) -> int:
        """Committed and in the log, so in the mark: what a device's ACK and the publisher
        wait for."""
        return self._progress.durable_seq

    @property
    def acked(self) -> int:
        """The highest seq the broker acknowledged."""
        return self._committer.acked

    @property
    def failed(self) -> asyncio.Future[None] | None:
        """Raises the JournalError that stopped a thread (set by ``start``)."""
        return self._progress.failed

    @property
    def on_durable(self) -> Callable[[], None] | None:
        """Called on the loop when records become durable (the publisher's drain wakes up)."""
        return self._progress.on_durable

    @on_durable.setter
    def on_durable(self, hook: Callable[[], None] | None) -> None:
        self._progress.on_durable = hook

    @property
    def retain_days(self) -> float | None:
        """Records older are deleted once acknowledged (``max_mb``: ``_retention.max_mb``)."""
        return self._retention.retain_days

    @retain_days.setter
    def retain_days(self, days: float | None) -> None:
        self._retention.retain_days = days

    @property
    def syncs_on_loop(self) -> bool:
        """The event loop logs what it appends itself (its syncs are quick), rather than the
        writer thread (docs/journal.md, "Where the log is synced")."""
        return self._committer.logs_here()

    @property
    def commits(self) -> int:
        """Batches taken into the log (one sync each)."""
        return self._committer.commits

    @property
    def stores(self) -> int:
        """SQLite transactions that took them (behind the log, up to a second's at a time)."""
        return self._committer.stores

    @property
    def checkpoints(self) -> int:
        return self._checkpointer.checkpoints

    @property
    def log_restarts(self) -> int:
        """Times the redo log started anew since ``start`` (after a full checkpoint)."""
        return self._committer.log_restarts

    # -- called by the writer thread -------------------------------------------------------

    def _commit_locked(
        self, conn: sqlite3.Connection, batch: list[Record], latest: dict[str, Record]
    ) -> None:
        """The writer's transaction, under this name so that bench/commit.py can time it by
        wrapping it (as in earlier commits' journals); bound when the journal is made."""
        self._committer.write_batch(conn, batch, latest)

    def _housekeeping(self) -> None:
        """Every ``prune_every_s``: a stepped wall clock said, retention."""
        self._retention.say_wall_offset(self.clock)
        self.prune()
