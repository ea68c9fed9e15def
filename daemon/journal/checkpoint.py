"""The checkpoint thread: SQLite's WAL copied into the main file off the commit path (SQLite's
automatic checkpoint, inside the commit that crosses 1000 pages, is off). docs/journal.md,
"What the commit path holds"."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import structlog

from tableside.daemon.journal.file import connect_db

log = structlog.get_logger("tableside.journal")


class Checkpointer:
    """PASSIVE checkpoints on a connection of their own, asked for by the writer thread: after a
    megabyte when it finds nothing queued, after eight whatever, after ``quiet_s`` (30 s) with
    nothing committed. The writer then copies the tail committed meanwhile (``copy_tail``), so
    that its next commit finds the WAL all copied and starts it over: the WAL is reused, not
    grown.

    Not sooner when quiet: a checkpoint rewrites in the main file every page the commits since
    the last one touched (a record's page holds several records, ``latest`` and ``meta`` are
    the same pages each time), syncs the WAL and the main file, and the first commit after it
    syncs the WAL's new header too (SQLite does, starting the WAL over). After each record of a
    table making one a second that came to ~40 KB at the device per record; a megabyte of WAL
    between them, ~1 KB (docs/benchmarks.md, "Bytes written"). The WAL's frames are written once
    whatever; what it holds not yet checkpointed, the redo log holds too (synced)."""

    def __init__(self, path: Path, *, quiet_s: float = 30.0) -> None:
        self.path = path
        self.idle_bytes = 1 << 20
        self.busy_bytes = 8 << 20
        #: with nothing committed for this long, what the WAL holds goes into the main file
        self.quiet_s = quiet_s
        self._last_commit = time.monotonic()
        #: checkpoints run (by this thread)
        self.checkpoints = 0
        self._due = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        #: this thread copied what it found; the writer copies the tail committed since
        self._tail_due = False
        self._wal_bytes = 0  # about how much the writer committed since it asked for one

    def start(self) -> None:
        self._stop = False
        self._thread = threading.Thread(target=self._run, args=(connect_db(self.path),),
                                        name="journal-checkpoint", daemon=True)  # fmt: skip
        self._thread.start()

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop = True
        self._due.set()
        self._thread.join()
        self._thread = None

    @property
    def tail_due(self) -> bool:
        """A checkpoint copied all it found: the writer's ``copy_tail`` is next."""
        return self._tail_due

    @property
    def asked(self) -> bool:
        """A checkpoint has been asked for and has not begun."""
        return self._due.is_set()

    # -- called by the writer thread -------------------------------------------------------

    def copy_tail(self, conn: sqlite3.Connection, db_lock: threading.Lock) -> bool:
        """After a checkpoint caught up: the few pages committed during it, on the writer's own
        connection, so that its next commit starts the WAL over. True when it copied all the
        WAL holds: SQLite has then synced the main file (it does after a completed checkpoint,
        with ``synchronous=NORMAL`` too), so every commit made on ``conn`` is durable there."""
        if not self._tail_due:
            return False
        self._tail_due = False
        with db_lock:
            busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        return not busy and copied >= frames

    def committed(self, wal_grew: int, *, queue_empty: bool) -> None:
        """A commit grew the WAL by about ``wal_grew`` bytes: idle (nothing queued) with a
        megabyte in it, or busy with eight, it is copied meanwhile."""
        self._wal_bytes += wal_grew
        self._last_commit = time.monotonic()
        if self._wal_bytes >= self.busy_bytes or (self._wal_bytes >= self.idle_bytes
                                                  and queue_empty):  # fmt: skip
            self._request()

    def wrote_while_quiet(self, wal_grew: int) -> None:
        """Something small committed while quiet (``meta.acked``): copied with the rest at the
        next checkpoint, which it does not put off."""
        self._wal_bytes += wal_grew

    def quiet(self) -> None:
        """Nothing to commit (the writer waited half a second): after ``quiet_s`` with nothing
        committed, what the WAL holds goes into the main file."""
        if self._wal_bytes and time.monotonic() - self._last_commit >= self.quiet_s:
            self._request()

    def _request(self) -> None:
        self._wal_bytes = 0
        self._due.set()

    # -- the checkpoint thread -------------------------------------------------------------

    def _run(self, conn: sqlite3.Connection) -> None:
        """A PASSIVE checkpoint never takes the write lock: commits go on meanwhile."""
        try:
            conn.execute("PRAGMA wal_autocheckpoint=0")
            while True:
                self._due.wait()
                self._due.clear()
                if self._stop:
                    return
                self._checkpoint(conn)
        finally:
            conn.close()

    def _checkpoint(self, conn: sqlite3.Connection) -> None:
        try:
            # Again while the writer committed meanwhile (each pass has less to copy): the WAL
            # starts over only at a commit that finds it all copied, and it is reused, not
            # grown (an fsync of a file that grows costs more).
            _busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()[0]
            self.checkpoints += 1
            if copied >= frames:
                self._tail_due = True
        except sqlite3.Error as exc:  # not a loss: the pages stay in the WAL
            log.warning("journal_checkpoint_failed", path=str(self.path), error=str(exc))
