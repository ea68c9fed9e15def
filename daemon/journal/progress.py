"""What the journal's writer thread has done, told to the event loop: ``committed_seq`` (a
device's ACK waits for it), ``durable_seq`` (the publisher's send waits for it), and a failure.
Since the redo log (one sync per batch) the two move together: a batch is committed and durable
at its log's ``fdatasync``; they stay two, so that what waits for which is said where it waits.
One wake-up of the loop covers whatever was told before it looked (docs/journal.md, "How a
message goes out")."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import TypeVar

from tableside.daemon.journal.file import JournalError

T = TypeVar("T")


class Progress:
    """The loop's view of the threads' progress; ``tell`` and ``fail`` from any thread, the rest
    on the loop."""

    def __init__(self) -> None:
        #: committed and in the log (survives a power cut): what a device's ACK waits for
        self.committed_seq = -1
        #: what the publisher may send: the same, since a batch's one sync makes it both
        self.durable_seq = -1
        #: called on the loop when records become durable (the publisher's drain wakes up)
        self.on_durable: Callable[[], None] | None = None
        #: set with the JournalError that stopped a thread
        self.failed: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: what the threads told (committed, durable), and whether the loop has been told to
        #: look: a wake-up already on its way carries what is told after it too
        self._told = (-1, -1)
        self._looking = False
        self._lock = threading.Lock()
        self._durable_changed = asyncio.Event()
        self._committed_changed = asyncio.Event()

    def reset(self, seq: int) -> None:
        """At opening: everything up to ``seq`` is committed and durable."""
        self.committed_seq = self.durable_seq = seq
        self._told = (seq, seq)

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop to tell (the one that appends), and a fresh ``failed``."""
        self._loop = loop
        self._looking = False
        self.failed = loop.create_future()

    def tell(self, *, committed: int | None = None, durable: int | None = None) -> None:
        """(any thread) Progress for the loop: what was told before the loop looked costs one
        wake-up (the loop reads what was told when it runs)."""
        with self._lock:
            was_committed, was_durable = self._told
            self._told = (was_committed if committed is None else committed,
                          was_durable if durable is None else durable)  # fmt: skip
            if self._looking:
                return
            self._looking = True
        if not self._call(self._on_progress, None):
            with self._lock:
                self._looking = False  # no loop to tell (never after it was told)

    def fail(self, exc: JournalError) -> None:
        """(any thread) A thread has stopped: ``failed`` raises ``exc``, the daemon stops."""
        self._call(self._set_failed, exc)

    async def wait_durable(self, seq: int) -> None:
        while self.durable_seq < seq:
            self._durable_changed.clear()
            await self._durable_changed.wait()

    async def wait_committed(self, seq: int) -> None:
        while self.committed_seq < seq:
            self._committed_changed.clear()
            await self._committed_changed.wait()

    def _call(self, callback: Callable[[T], object], arg: T) -> bool:
        loop = self._loop
        if loop is None:
            return False
        try:
            loop.call_soon_threadsafe(callback, arg)
        except RuntimeError:  # the loop has already closed
            return False
        return True

    def _on_progress(self, _: None) -> None:
        with self._lock:
            self._looking = False  # first: progress told after this wakes the loop again
            committed, durable = self._told
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

    def _set_failed(self, exc: JournalError) -> None:
        if self.failed is not None and not self.failed.done():
            self.failed.set_exception(exc)
