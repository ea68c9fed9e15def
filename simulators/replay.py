"""``tableside simulate replay FILE``: the device side of a capture, played back byte-exact.

Every link of the capture gets its own pty or socket; the daemon connects to them as to the
devices. All links share one clock, the capture's, so what one device said before another in
the recording it says before it again. What counts as a match (docs/replay.md):

* **tableside framing** (the device speaks unasked). The host's bytes are split into frames.
  A device record is played once every host frame recorded before it has come, and when the
  clock reaches its recorded time. The host's frames between two device records may come in
  any order, and a frame may come early by one group (the host is quicker than it was). A
  frame the recording does not have there is a divergence; so is a recorded frame that has not
  come after ``patience`` seconds. The host's last data frame sent again is a retransmission,
  allowed. While a link waits for the host, the clock stops, so every gap of the recording is
  kept.
* **ccTalk** (a polled bus: the host asks, an acceptor answers). Each request of the host gets
  the reply the recording has to the same request bytes, the latest one recorded at or before
  the clock's time (the device's state as of now; the first one if the host asks sooner than
  the recording ever did), at the recorded delay after the request. A request the recording
  never has is a divergence, and is not answered.
* **raw**: the host's bytes must come in the recorded order, byte for byte.

A divergence is reported at once (log and ``divergences``); replay then stops unless
``keep_going``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import structlog

from tableside.drivers.cctalk.protocol import CcTalkDecoder, CcTalkFrame
from tableside.drivers.cctalk.protocol import NeedData as CcNeedData
from tableside.drivers.framing import ACK, NAK, Frame, FrameDecoder, NeedData
from tableside.errors import WireError
from tableside.simulators.capture import Capture, Framing, Record, Session, What
from tableside.simulators.listen import Connection, serve_pty, serve_socket

__all__ = ["Divergence", "Replay", "ReplayStopped"]

log = structlog.get_logger("tableside.replay")


@dataclass(frozen=True, slots=True)
class Divergence:
    """The host did not do what the recording says it did."""

    link: str
    #: the capture's clock when it was seen
    at_ms: float
    what: str

    def __str__(self) -> str:
        return f"{self.link} at {self.at_ms:.1f} ms: {self.what}"


class ReplayStopped(WireError):
    """Raised inside a link's player when the replay stopped at a divergence."""


# -- splitting the host's bytes into the units compared --------------------------------------


class _Splitter:
    """Host bytes in, units (frames, or single bytes for raw) out. A damaged frame from the
    host is no unit: the recording's undamaged one is then missed, and that is reported."""

    def __init__(self, framing: Framing) -> None:
        self.framing = framing
        self._framed = FrameDecoder()
        self._cctalk = CcTalkDecoder()

    def feed(self, data: bytes) -> list[bytes]:
        out: list[bytes] = []
        if self.framing is Framing.RAW:
            out = [bytes((b,)) for b in data]
        elif self.framing is Framing.TABLESIDE:
            self._framed.feed(data)
            while not isinstance(item := self._framed.next_event(), NeedData):
                if isinstance(item, Frame):
                    out.append(item.to_bytes())
        else:
            self._cctalk.feed(data)
            while not isinstance(event := self._cctalk.next_event(), CcNeedData):
                if isinstance(event, CcTalkFrame):
                    out.append(event.to_bytes())
        return out


def _show(unit: bytes) -> str:
    return unit.hex(" ")


# -- the shared clock ------------------------------------------------------------------------


class _Clock:
    """The capture's time, running at ``speed``; it stops at the time of any record a link is
    waiting on the host for."""

    def __init__(self, speed: float) -> None:
        self.speed = speed
        self._anchor_ms = 0.0
        self._anchor_wall = time.monotonic()
        self._blocks: dict[str, float] = {}
        self.changed = asyncio.Event()

    def now_ms(self) -> float:
        free = self._anchor_ms + (time.monotonic() - self._anchor_wall) * 1000 * self.speed
        return min(free, *self._blocks.values()) if self._blocks else free

    def _reanchor(self) -> None:
        self._anchor_ms, self._anchor_wall = self.now_ms(), time.monotonic()
        self.changed.set()
        self.changed = asyncio.Event()

    def block(self, link: str, at_ms: float) -> None:
        """Stop at ``at_ms`` (or where the clock is, if past it) until ``unblock(link)``."""
        at_ms = max(at_ms, self.now_ms())
        if self._blocks.get(link) != at_ms:
            self._reanchor()
            self._blocks[link] = at_ms

    def unblock(self, link: str) -> None:
        if link in self._blocks:
            self._reanchor()
            del self._blocks[link]

    def advance_to(self, t_ms: float) -> None:
        """The host did sooner what was recorded at ``t_ms``: the clock goes there at once
        (as far as no other link's wait stops it)."""
        target = min(t_ms, *self._blocks.values()) if self._blocks else t_ms
        if target > self.now_ms():
            self._anchor_ms, self._anchor_wall = target, time.monotonic()
            self.changed.set()
            self.changed = asyncio.Event()

    async def reach(self, t_ms: float) -> None:
        while (ahead := t_ms - self.now_ms()) > 0:
            changed = self.changed
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(ahead / 1000 / self.speed):
                    await changed.wait()


# -- the replay ------------------------------------------------------------------------------


@dataclass
class Replay:
    """Plays a capture's device side; ``handler(link)`` serves one link's host connection."""

    capture: Capture
    #: 2.0 plays twice as fast as recorded
    speed: float = 1.0
    #: seconds to wait for a recorded host frame before calling it a divergence
    patience: float = 5.0
    keep_going: bool = False
    divergences: list[Divergence] = field(default_factory=list)
    #: host frames sent again byte for byte (tableside framing: a retransmission, allowed)
    retransmissions: int = 0

    def __post_init__(self) -> None:
        if self.speed <= 0:
            raise ValueError(f"speed must be above 0, got {self.speed}")
        if not self.capture.records:
            raise ValueError("the capture has no records")
        self.clock = _Clock(self.speed)
        self._sessions = {name: self.capture.sessions(name) for name in self.capture.links}
        self._next = dict.fromkeys(self.capture.links, 0)
        #: set when every link played its last session, or replay stopped at a divergence
        self.done = asyncio.Event()
        self.stopped = False
        for name, sessions in self._sessions.items():
            if sessions:
                self.clock.block(name, sessions[0].opened_ms)
        self._check_done()

    def _check_done(self) -> None:
        if all(self._next[n] >= len(s) for n, s in self._sessions.items()):
            self.done.set()

    def diverged(self, link: str, what: str) -> None:
        divergence = Divergence(link, self.clock.now_ms(), what)
        self.divergences.append(divergence)
        log.error("replay_divergence", link=link, at_ms=round(divergence.at_ms, 1), what=what)
        if not self.keep_going:
            self.stopped = True
            self.done.set()
            raise ReplayStopped(str(divergence))

    def handler(self, link: str, *, wait_for_host: bool = False) -> Connection:
        """Serves ``link``'s sessions in order, one per call. ``wait_for_host``: a session
        begins at the host's first byte (a pty, which has no connection) instead of at once."""
        if link not in self.capture.links:
            raise ValueError(f"no link {link!r} in the capture (have: {', '.join(self._sessions)})")
        return functools.partial(self._serve, link, wait_for_host)

    async def _serve(
        self,
        link: str,
        wait_for_host: bool,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        first = b""
        if wait_for_host:
            first = await reader.read(4096)
            if not first:
                return
        index = self._next[link]
        sessions = self._sessions[link]
        if self.stopped or index >= len(sessions):
            await _hold(reader)  # nothing more to say: a silent device, until the host leaves
            return
        session = sessions[index]
        self.clock.unblock(link)
        self.clock.advance_to(session.opened_ms)
        framing = self.capture.links[link].framing
        player = (_Polled if framing is Framing.CCTALK else _Timeline)(self, session, writer)
        try:
            try:
                await player.play(reader, first)
            except ReplayStopped:
                pass  # reported in diverged()
            finally:
                self._next[link] = index + 1
                if index + 1 < len(sessions):
                    self.clock.block(link, sessions[index + 1].opened_ms)
                self._check_done()
            if session.closed_by == "dev" or self.stopped:
                return  # the device ended the session, or the replay stopped: the line closes
            await player.after()
        finally:
            await player.aclose()

    async def serve(
        self, listen: Mapping[str, str], ready: Callable[[str, str], None] | None = None
    ) -> None:
        """Serve each link on ``listen[link]`` ("pty" or socket://host:port) until cancelled;
        ``ready(link, where)`` as each one listens."""
        async with asyncio.TaskGroup() as tg:
            for link, where in listen.items():
                on_ready = functools.partial(ready, link) if ready else None
                if where == "pty":
                    tg.create_task(self._serve_pty(link, on_ready), name=f"replay {link}")
                else:
                    tg.create_task(
                        serve_socket(where, self.handler(link), on_ready), name=f"replay {link}"
                    )

    async def _serve_pty(self, link: str, ready: Callable[[str], None] | None) -> None:
        await serve_pty(self.handler(link, wait_for_host=True), ready)


async def _hold(reader: asyncio.StreamReader) -> None:
    """Say nothing until the host closes the line (bytes it sends are dropped)."""
    with contextlib.suppress(ConnectionError, OSError):
        while await reader.read(4096):
            pass


class _Timeline:
    """A link whose device speaks unasked: device records in recorded order and time, each
    after the host's frames recorded before it."""

    def __init__(self, replay: Replay, session: Session, writer: asyncio.StreamWriter) -> None:
        self.replay = replay
        self.link = session.link
        self.session = session
        self.writer = writer
        self.framing = replay.capture.links[session.link].framing
        self.ordered = self.framing is Framing.RAW
        # Steps: the host units recorded before each device record (the last step: after the
        # last one), with their recorded times.
        self.steps: list[tuple[list[tuple[float, bytes]], Record | None]] = []
        splitter = _Splitter(self.framing)
        pending: list[tuple[float, bytes]] = []
        for record in session.records:
            if record.what is What.HOST:
                pending += [(record.t_ms, u) for u in splitter.feed(record.data)]
            else:
                self.steps.append((pending, record))
                pending = []
        self.steps.append((pending, None))
        self.step = 0
        self.missing: list[tuple[float, bytes]] = list(self.steps[0][0])
        self.early: collections.Counter[bytes] = collections.Counter()
        #: the host's last data frame (not ACK or NAK), the one it may retransmit
        self.last_data = b""
        self.arrived = asyncio.Event()
        self.host_closed = False
        self._reader: asyncio.StreamReader | None = None

    async def after(self) -> None:
        """The recording is played: a silent device until the host leaves."""
        if self._reader is not None and not self.host_closed:
            await _hold(self._reader)

    async def aclose(self) -> None:
        """Nothing left running (play() ends its own reader)."""

    def _lookahead(self) -> list[bytes]:
        """The next group of host units after this step (the host may be that far ahead)."""
        for units, _ in self.steps[self.step + 1 :]:
            if units:
                return [u for _, u in units]
        return []

    def _matched(self, unit: bytes) -> None:
        if self.framing is Framing.TABLESIDE and unit[3] not in (ACK, NAK):
            self.last_data = unit

    def _on_unit(self, unit: bytes) -> None:
        if self.ordered:
            expected = self.missing[0][1] if self.missing else None
            if unit == expected:
                del self.missing[0]
                return
        else:
            for i, (_, want) in enumerate(self.missing):
                if want == unit:
                    del self.missing[i]
                    self._matched(unit)
                    return
            ahead = collections.Counter(self._lookahead())
            if ahead[unit] > self.early[unit]:
                self.early[unit] += 1
                self._matched(unit)
                return
            if unit == self.last_data:
                # The same bytes again: the host retransmits a frame whose answer it has not
                # had yet (the link rules allow it). The recorded answer comes in its time.
                self.replay.retransmissions += 1
                return
        shown = self.missing[:1] if self.ordered else self.missing[:4]
        expected_text = ", ".join(_show(u) for _, u in shown) or "nothing"
        self.replay.diverged(
            self.link, f"the host sent {_show(unit)}; the recording expects {expected_text}"
        )

    async def _read_host(self, reader: asyncio.StreamReader, first: bytes) -> None:
        splitter = _Splitter(self.framing)
        data = first
        try:
            while True:
                for unit in splitter.feed(data):
                    self._on_unit(unit)
                self.arrived.set()
                data = await reader.read(4096)
                if not data:
                    break
        except (ConnectionError, OSError, ReplayStopped):
            pass  # the host left, or what it sent stopped the replay (reported)
        self.host_closed = True
        self.arrived.set()

    def _enter(self, step: int) -> None:
        self.step = step
        self.missing = []
        for t_ms, unit in self.steps[step][0]:
            if self.early[unit]:
                self.early[unit] -= 1
            else:
                self.missing.append((t_ms, unit))

    async def _wait_for_host(self) -> None:
        """Until every host unit of this step came; the clock stops at the first missing."""
        deadline = time.monotonic() + self.replay.patience
        try:
            while self.missing:
                if self.replay.stopped:
                    raise ReplayStopped
                self.replay.clock.block(self.link, self.missing[0][0])
                if self.host_closed:
                    self.replay.diverged(
                        self.link, f"the host closed the line; the recording expects "
                        f"{_show(self.missing[0][1])}"
                    )  # fmt: skip
                    self.missing.clear()
                    return
                self.arrived.clear()
                try:
                    async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                        await self.arrived.wait()
                except TimeoutError:
                    t_ms, unit = self.missing[0]
                    self.replay.diverged(
                        self.link, f"waited {self.replay.patience} s for the host's "
                        f"{_show(unit)} (recorded at {t_ms:.1f} ms)"
                    )  # fmt: skip
                    del self.missing[0]  # keep going: do without it
                    deadline = time.monotonic() + self.replay.patience
        finally:
            self.replay.clock.unblock(self.link)

    async def play(self, reader: asyncio.StreamReader, first: bytes) -> None:
        self._reader = reader
        host = asyncio.create_task(self._read_host(reader, first), name=f"replay {self.link} host")
        try:
            for step, (_, record) in enumerate(self.steps):
                self._enter(step)
                await self._wait_for_host()
                if self.replay.stopped:
                    raise ReplayStopped
                if record is None:
                    break
                await self.replay.clock.reach(record.t_ms)
                if self.replay.stopped:
                    raise ReplayStopped
                self.writer.write(record.data)
                await self.writer.drain()
        finally:
            host.cancel()
            await asyncio.wait({host})
            if not host.cancelled() and (exc := host.exception()) is not None:
                raise exc


@dataclass(frozen=True, slots=True)
class _Exchange:
    request_ms: float
    #: the device's bytes after the request: (ms after it, bytes)
    replies: tuple[tuple[float, bytes], ...]


#: the ccTalk requests a host sends on its own timer (simple poll 254, read buffered credits 229)
_POLLS = frozenset({254, 229})


class _Polled:
    """A polled bus: each host request gets the recorded reply to the same request."""

    def __init__(self, replay: Replay, session: Session, writer: asyncio.StreamWriter) -> None:
        self.replay = replay
        self.link = session.link
        self.writer = writer
        self.by_request: dict[bytes, list[_Exchange]] = {}
        self._answering: asyncio.Task[None] | None = None
        self.used: dict[bytes, int] = {}
        splitter = _Splitter(Framing.CCTALK)
        current: tuple[bytes, float, list[tuple[float, bytes]]] | None = None
        exchanges: list[tuple[bytes, float, list[tuple[float, bytes]]]] = []
        self.last_ms = session.records[-1].t_ms if session.records else session.opened_ms
        for record in session.records:
            if record.what is What.HOST:
                for unit in splitter.feed(record.data):
                    current = (unit, record.t_ms, [])
                    exchanges.append(current)
            elif current is not None:
                current[2].append((record.t_ms - current[1], record.data))
            # Device bytes before the first request are not played: on a polled bus nothing
            # speaks unasked, so they can only be what a previous host left on the line.
        for unit, t_ms, replies in exchanges:
            self.by_request.setdefault(unit, []).append(_Exchange(t_ms, tuple(replies)))

    def _choose(self, request: bytes) -> _Exchange | None:
        """A poll (the host's timer asks) gets the latest reply recorded as of the replay's
        clock; any other request (a read-back, a command: the host asks because something
        happened) gets the next recorded reply to it, in the recorded order."""
        options = self.by_request.get(request)
        if not options:
            return None
        used = self.used.get(request, -1)
        if len(request) > 3 and request[3] in _POLLS:
            now = self.replay.clock.now_ms()
            latest = max((i for i, x in enumerate(options) if x.request_ms <= now), default=0)
            index = max(latest, used, 0)
        else:
            index = min(used + 1, len(options) - 1)
        self.used[request] = index
        return options[index]

    async def play(self, reader: asyncio.StreamReader, first: bytes) -> None:
        """Answer until the clock passes the session's last record."""
        self._answering = asyncio.create_task(
            self._answer(reader, first), name=f"replay {self.link} answers"
        )
        reached = asyncio.create_task(self.replay.clock.reach(self.last_ms))
        try:
            await asyncio.wait({self._answering, reached}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            reached.cancel()
            await asyncio.wait({reached})
        if self._answering.done():
            self._answering.result()  # ReplayStopped, or a bug: raised here

    async def after(self) -> None:
        """The recording is played: the device goes on answering as it last did."""
        if self._answering is not None:
            with contextlib.suppress(ReplayStopped):
                await self._answering

    async def aclose(self) -> None:
        """Stop answering (the session is over, or the replay is being stopped)."""
        if self._answering is not None and not self._answering.done():
            self._answering.cancel()
            await asyncio.wait({self._answering})

    async def _answer(self, reader: asyncio.StreamReader, first: bytes) -> None:
        splitter = _Splitter(Framing.CCTALK)
        data = first
        while True:
            for request in splitter.feed(data):
                exchange = self._choose(request)
                if exchange is None:
                    self.replay.diverged(
                        self.link, f"the host asked {_show(request)}, which the recording "
                        "never asks; not answered"
                    )  # fmt: skip
                    continue
                began = time.monotonic()
                for after_ms, reply in exchange.replies:
                    delay = after_ms / 1000 / self.replay.speed - (time.monotonic() - began)
                    if delay > 0:
                        await asyncio.sleep(delay)
                    self.writer.write(reply)
                await self.writer.drain()
            try:
                data = await reader.read(4096)
            except (ConnectionError, OSError):
                return
            if not data:
                return
