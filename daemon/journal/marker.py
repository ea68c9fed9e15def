"""The mark thread: each commit's seq and hash into the mark file (daemon/journal/mark.py),
synced, beside the writer's next commit; only then are the records up to it durable (the
publisher may send them). docs/journal.md, "Lost records are found"."""

from __future__ import annotations

import threading

import structlog

from tableside.daemon.journal.file import JournalError
from tableside.daemon.journal.mark import Mark
from tableside.daemon.journal.progress import Progress

log = structlog.get_logger("tableside.journal")


class MarkThread:
    """Writes the newest commit it was given into ``mark``; commits made while it synced are
    marked at once, by the newest. It is only ever given a seq already committed."""

    def __init__(self, mark: Mark, progress: Progress) -> None:
        self.mark = mark
        self._progress = progress
        self._due = threading.Condition()
        self._next: tuple[int, bytes] | None = None
        self._stop = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="journal-mark", daemon=True)
        self._thread.start()

    def due(self, seq: int, digest: bytes) -> None:
        """(the writer thread) ``seq`` is committed, with this hash: mark it."""
        with self._due:
            self._next = (seq, digest)
            self._due.notify()

    def stop(self) -> None:
        """Once every commit it was given is marked (call after the writer has stopped)."""
        if self._thread is None:
            return
        with self._due:
            self._stop = True
            self._due.notify()
        self._thread.join()
        self._thread = None

    def _run(self) -> None:
        while True:
            with self._due:
                while self._next is None and not self._stop:
                    self._due.wait()
                job, self._next = self._next, None
            if job is None:  # stopping, and every commit is marked
                return
            try:
                self.mark.write(*job)
            except Exception as exc:  # disk full, I/O error: loud, and the daemon stops
                log.critical("journal_write_failed", path=str(self.mark.path), error=str(exc))
                self._progress.fail(JournalError(f"journal mark {self.mark.path}: {exc}"))
                return
            self._progress.tell(durable=job[0])
