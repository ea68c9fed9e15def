"""How far the log is synced, as the event loop sees it: ``durable_seq`` (a batch is in the redo
log at its one ``fdatasync``: a device's ACK and the publisher's send both wait for it, the ACKs
first), and a failure. The loop tells it itself when it synced (``tell_here``); the writer
thread, when it did (while the storage is slow), with one wake-up of the loop for whatever it
told before the loop looked (docs/journal.md, "How a message goes out", "Where the log is
synced")."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
from collections.abc import Callable
from typing import TypeVar

from tableside.daemon.journal.file import JournalError

T = TypeVar("T")


class Progress:
    """The loop's view of the writer's progress; ``tell`` and ``fail`` from any thread, the rest
    on the loop."""

    def __init__(self) -> None:
        #: committed and in the log (survives a power cut): what a device's ACK and the
        #: publisher wait for
        self.durable_seq = -1
        #: called on the loop when records become durable (the publisher's drain wakes up),
        #: after the ACKs waiting for them
        self.on_durable: Callable[[], None] | None = None
        #: set with the JournalError that stopped a thread
        self.failed: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: the newest seq told, and whether the loop has been told to look: a wake-up already
        #: on its way carries what is told after it too
        self._told = -1
        self._looking = False
        self._lock = threading.Lock()
        #: (seq, order, future) for each ``durable`` not yet done, the lowest seq first
        self._waiting: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def reset(self, seq: int) -> None:
        """At opening: everything up to ``seq`` is durable."""
        self.durable_seq = self._told = seq

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop to tell (the one that appends), and a fresh ``failed``."""
        self._loop = loop
        self._looking = False
        self._waiting.clear()  # a loop before this one's waiters wait no more
        self.failed = loop.create_future()

    def tell(self, seq: int) -> None:
        """(any thread) Everything up to ``seq`` is durable: what was told before the loop
        looked costs one wake-up (the loop reads what was told when it runs)."""
        with self._lock:
            self._told = seq
            if self._looking:
                return
            self._looking = True
        if not self._call(self._on_progress, None):
            with self._lock:
                self._looking = False  # no loop to tell (never after it was told)

    def tell_here(self, seq: int) -> None:
        """(the loop) Everything up to ``seq`` is durable: the loop logged it itself."""
        with self._lock:
            self._told = max(self._told, seq)
        self._on_progress(None)

    def fail(self, exc: JournalError) -> None:
        """(any thread) A thread has stopped: ``failed`` raises ``exc``, the daemon stops."""
        self._call(self._set_failed, exc)

    def durable(self, seq: int) -> asyncio.Future[None]:
        """(the loop) A future done once everything up to ``seq`` is durable: what a device's
        ACK waits on (a future, not a task: none is made per frame)."""
        done = asyncio.get_running_loop().create_future()
        if self.durable_seq >= seq:
            done.set_result(None)
        else:
            heapq.heappush(self._waiting, (seq, next(self._order), done))
        return done

    async def wait_durable(self, seq: int) -> None:
        if self.durable_seq < seq:
            await self.durable(seq)

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
            told = self._told
        if told > self.durable_seq:
            self.durable_seq = told
            waiting = self._waiting  # the devices' ACKs (woken here) first, then the broker
            while waiting and waiting[0][0] <= told:
                done = heapq.heappop(waiting)[2]
                if not done.done():  # not cancelled (a link that closed meanwhile)
                    done.set_result(None)
            asyncio.get_running_loop().call_soon(self._tell_durable)

    def _tell_durable(self) -> None:
        # the hook as it is when this runs: a drain that ended meanwhile has handed it back
        if self.on_durable is not None:
            self.on_durable()

    def _set_failed(self, exc: JournalError) -> None:
        if self.failed is not None and not self.failed.done():
            self.failed.set_exception(exc)
