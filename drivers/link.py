"""The asyncio link layer: frames over a byte stream, with ACK/NAK and retransmission.

Used unchanged by the drivers (host side) and the simulators (device side). Stop-and-wait:
one unacknowledged frame per direction; every data frame is answered by ACK or NAK within
``ack_timeout``; a frame is sent at most ``1 + retries`` times. Byte layout and timing rules:
docs/protocols/shuffler.md.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import NoReturn

import structlog

from tableside.drivers.errors import DeviceRejected, LinkLost, LinkTimeout
from tableside.drivers.framing import (
    ACK,
    NAK,
    CorruptFrame,
    Frame,
    FrameDecoder,
    NakReason,
    NeedData,
)
from tableside.drivers.messages import Message, MessageSet, UnknownMessageType
from tableside.drivers.wire import MalformedPayload

__all__ = [
    "ArqPolicy",
    "Flooding",
    "FrameBudget",
    "FramedLink",
    "LineNoise",
    "LinkStats",
    "Notice",
    "ProtocolError",
]

log = structlog.get_logger("tableside.link")


@dataclass(frozen=True, slots=True)
class ArqPolicy:
    """Timing of acknowledgement and retransmission (defaults: docs/protocols/shuffler.md)."""

    ack_timeout: float = 0.25
    retries: int = 3
    # A partial frame older than this is abandoned and the decoder hunts for the next start byte.
    frame_timeout: float = 0.5


@dataclass(frozen=True, slots=True)
class FrameBudget:
    """How many data frames a second the host takes from one device (a token bucket).

    A device over its budget is slowed, and nothing it sent is lost: its data frames wait (in
    order, up to HELD_FRAMES) until the budget allows them, and are acknowledged only once taken,
    so a stop-and-wait device waits for its ACK. Frames of a device that does not wait for its
    ACKs, beyond those held, are left unacknowledged for it to send again. The device is read
    all the while, so its ACKs to the host still count. One device flooding the host thus
    cannot fill the journal and the publisher's queue ahead of every other device's events
    (docs/drivers.md, "Flooding")."""

    per_s: float = 100.0
    #: frames taken at once before the rate applies: a device's bursts (a deal) pass unslowed
    burst: int = 100

    def __post_init__(self) -> None:
        if self.per_s <= 0 or self.burst < 1:
            raise ValueError(f"a frame budget needs per_s > 0 and burst >= 1, not {self}")


class _Bucket:
    """Tokens for ``FrameBudget``: one per data frame, refilled at ``per_s``, at most ``burst``."""

    def __init__(self, budget: FrameBudget) -> None:
        self.budget = budget
        self.tokens = float(budget.burst)
        self._at = time.monotonic()

    def refill(self) -> None:
        now = time.monotonic()
        self.tokens = min(self.budget.burst, self.tokens + (now - self._at) * self.budget.per_s)
        self._at = now

    def wait(self) -> float:
        """Seconds until a token is there (0: take it now)."""
        self.refill()
        return 0.0 if self.tokens >= 1 else (1 - self.tokens) / self.budget.per_s

    @property
    def full(self) -> bool:
        self.refill()
        return self.tokens >= self.budget.burst


#: the ACK of each seq, as it goes on the line (one per data frame: made once)
_ACKS = tuple(Frame(seq=seq, type=ACK).to_bytes() for seq in range(256))

#: data frames read ahead of the budget and kept in order; a device that waits for its ACKs
#: never has more than one, plus that one sent again
HELD_FRAMES = 8


@dataclass(frozen=True, slots=True)
class Flooding:
    """The device sends more than its ``FrameBudget``. Reported when that begins (``active``:
    its frames are taken at ``per_s`` from then on) and when it ends (no frame waiting and the
    burst full again, or the link closed), with what the flood cost: ``held`` frames waited
    for the budget, and ``unacknowledged`` frames beyond HELD_FRAMES were left for the device
    to send again."""

    active: bool
    per_s: float
    held: int = 0
    unacknowledged: int = 0


@dataclass(frozen=True, slots=True)
class ProtocolError:
    """An intact frame that is no valid message; it was NAKed and is reported, not delivered."""

    seq: int
    type: int
    reason: NakReason
    detail: str


@dataclass(frozen=True, slots=True)
class LineNoise:
    """Garbage or damaged frames were seen on the line (totals for this link).

    Reported at most once per ``NOISE_REPORT_INTERVAL``; the first noise is reported at once.
    """

    crc_errors: int
    discarded_bytes: int


NOISE_REPORT_INTERVAL = 1.0

Notice = Message | ProtocolError | LineNoise | Flooding


@dataclass(slots=True)
class LinkStats:
    frames_in: int = 0
    frames_out: int = 0
    retransmits: int = 0
    duplicates: int = 0
    naks_sent: int = 0
    naks_received: int = 0
    protocol_errors: int = 0
    #: data frames that waited for the device's FrameBudget
    throttled: int = 0
    #: data frames left unacknowledged in a flood (the device sends them again)
    unacknowledged: int = 0


class FramedLink:
    """Frames and messages of one protocol over one open (reader, writer) pair."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        protocol: MessageSet,
        on_message: Callable[[Notice], NakReason | None],
        *,
        name: str,
        policy: ArqPolicy = ArqPolicy(),
        settle: Callable[[], Awaitable[None]] | None = None,
        budget: FrameBudget | None = None,
    ) -> None:
        self.name = name
        self.policy = policy
        self.protocol = protocol
        self.decoder = FrameDecoder()
        self.stats = LinkStats()
        self.last_rx = time.monotonic()
        self._reader = reader
        self._writer = writer
        self._on_message = on_message
        self._send_lock = asyncio.Lock()
        self._next_seq = 0
        self._pending: tuple[int, asyncio.Future[NakReason | None]] | None = None
        self._last_delivered: Frame | None = None
        self._closed = False
        self._noise_reported = (0, 0)
        self._noise_at = -NOISE_REPORT_INTERVAL
        # With ``settle``, the ACK of a delivered frame waits until it returns: the receiver
        # has made what the frame reported durable (the daemon's journal), so the peer may
        # forget it. Meanwhile the line is still read: the peer's answers to our own frames
        # (ACK, NAK) are taken at once, so a slow journal never makes a command we sent look
        # unacknowledged when the device took it; its data frames wait until the settle is
        # done (the peer sends one at a time anyway, and sends it again until it has its ACK).
        self._settle = settle
        #: the read ``run`` awaits, while it does (``_wake`` cuts it short)
        self._reading: asyncio.Timeout | None = None
        self._acks_due: list[int] = []
        self._settling: asyncio.Future[None] | None = None
        self._settling_acks: list[int] = []
        self._after_settle: collections.deque[Frame] = collections.deque()
        self._bucket = _Bucket(budget) if budget is not None else None
        # Data frames read but not yet taken, waiting for the budget (at most HELD_FRAMES).
        self._held: collections.deque[Frame] = collections.deque()
        self._flood: Flooding | None = None  # the flood going on: counts so far
        self._last_byte = time.monotonic()

    async def run(self) -> NoReturn:
        """Read until the link breaks, then raise LinkLost. Never raises on bad bytes.

        The read is awaited here, in this task (no task per read): it ends when bytes come, at
        the next deadline (a partial frame abandoned, a held frame's turn), or when a settle's
        end leaves this task work (``_wake``: the frames read meanwhile, or its failure)."""
        try:
            while True:
                data: bytes | None = None
                # No more than the decoder holds: a device writing faster than it is read
                # waits on the line, it does not lose bytes to the decoder's cap. A read cut
                # short loses nothing: the bytes stay in the reader for the next.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._next_wakeup()) as self._reading:
                        data = await self._reader.read(self.decoder.room)
                self._reading = None
                now = time.monotonic()
                if data == b"":
                    raise LinkLost(f"{self.name}: end of stream")
                if data:
                    self._last_byte = now
                    self.decoder.feed(data)
                elif self.decoder.buffered and now - self._last_byte >= self.policy.frame_timeout:
                    self.decoder.resync()
                self._drain_decoder()
                self._advance()
        except (ConnectionError, OSError) as exc:
            raise LinkLost(f"{self.name}: {exc}") from exc
        finally:
            self._fail_pending(LinkLost(f"{self.name}: link closed"))
            if self._flood is not None:  # frames still held stay unacknowledged: sent again
                self._end_flood()
            self._reading = None
            await self._stop(self._settling)
            self._settling = None

    def _wake(self) -> None:
        """Cut the read under way short: this task has work (the settle ended)."""
        if self._reading is not None and not self._reading.expired():
            self._reading.reschedule(-1.0)

    @staticmethod
    async def _stop(settling: asyncio.Future[None] | None) -> None:
        """Cancel the settle the loop left under way and wait for it (nothing outlives its
        link)."""
        if settling is None:
            return
        if not settling.done():
            settling.cancel()
            await asyncio.wait([settling])
        if not settling.cancelled():
            settling.exception()  # seen: a settle that failed as the link broke is not news

    def _next_wakeup(self) -> float | None:
        """Seconds until a partial frame is abandoned or a held frame may be taken (not while a
        settle is under way: its end wakes the loop, ``_wake``)."""
        waits = []
        if self.decoder.buffered:
            waits.append(self.policy.frame_timeout - (time.monotonic() - self._last_byte))
        if self._held and self._bucket is not None and self._settling is None:
            waits.append(self._bucket.wait())
        return max(0.0, min(waits)) if waits else None

    def _drain_decoder(self) -> None:
        """Every whole frame read so far: answers (ACK/NAK) at once, data frames to be taken
        (after the settle under way, if one is)."""
        while not isinstance(item := self.decoder.next_event(), NeedData):
            if isinstance(item, CorruptFrame):
                self._send_control(NAK, item.seq, NakReason.CRC)
                continue
            self.last_rx = time.monotonic()
            self.stats.frames_in += 1
            if item.type in (ACK, NAK):
                self._resolve(item)
            elif self._settling is not None:
                if len(self._after_settle) < HELD_FRAMES:  # else: left for the peer to resend
                    self._after_settle.append(item)
            else:
                self._take(item)
        self._report_noise()

    def _take(self, frame: Frame) -> None:
        if self._bucket is None:
            self._deliver(frame)
        else:
            self._hold(frame)

    def _hold(self, frame: Frame) -> None:
        """Queue a data frame for the budget; past HELD_FRAMES it is left unacknowledged."""
        bucket = self._bucket
        assert bucket is not None
        # the end of a flood: nothing waiting (held, or read while a settle was under way: a
        # slow journal is not a device that stopped) and the burst full again
        if self._flood is not None and not self._held and not self._after_settle and bucket.full:
            self._end_flood()
        if self._held and frame == self._held[-1]:
            self.stats.duplicates += 1  # sent again while it waits: one ACK will do for both
            return
        if len(self._held) >= HELD_FRAMES:
            # A device that does not wait for its ACKs (stop-and-wait: docs/protocols/
            # shuffler.md) has its excess frames left unacknowledged, for it to send again:
            # neither delivered nor ACKed, and counted. Reading goes on, so the device's ACKs
            # to the host still count.
            assert self._flood is not None  # the queue only fills in a flood
            self._flood = dataclasses.replace(
                self._flood, unacknowledged=self._flood.unacknowledged + 1
            )
            self.stats.unacknowledged += 1
            return
        self._held.append(frame)
        bucket.refill()
        if bucket.tokens >= len(self._held):
            return  # within the budget: taken at once, or once the settle under way is done
        self.stats.throttled += 1
        if self._flood is None:
            self._flood = Flooding(active=True, per_s=bucket.budget.per_s, held=1)
            log.warning("flooding", link=self.name, per_s=bucket.budget.per_s,
                        burst=bucket.budget.burst)  # fmt: skip
            self._on_message(self._flood)
        else:
            self._flood = dataclasses.replace(self._flood, held=self._flood.held + 1)

    def _take_held(self) -> None:
        """Deliver held frames as far as the budget allows (none while a settle is under way:
        their ACKs would wait for the next)."""
        bucket = self._bucket
        if bucket is None or self._settling is not None:
            return
        while self._held and bucket.wait() == 0:
            bucket.tokens -= 1
            self._deliver(self._held.popleft())

    def _end_flood(self) -> None:
        """The device stayed under its budget until the burst was full again: say so."""
        assert self._flood is not None
        ended, self._flood = dataclasses.replace(self._flood, active=False), None
        log.info("flooding_ended", link=self.name, held=ended.held,
                 unacknowledged=ended.unacknowledged)  # fmt: skip
        self._on_message(ended)

    def _report_noise(self) -> None:
        stats = self.decoder.stats
        totals = (stats.crc_errors, stats.discarded_bytes)
        now = time.monotonic()
        if totals == self._noise_reported or now - self._noise_at < NOISE_REPORT_INTERVAL:
            return
        self._noise_reported, self._noise_at = totals, now
        log.warning("line_noise", link=self.name, crc_errors=totals[0], discarded_bytes=totals[1])
        self._on_message(LineNoise(*totals))

    def _resolve(self, frame: Frame) -> None:
        if self._pending is None or self._pending[0] != frame.seq:
            return  # a late answer to a frame already settled
        future = self._pending[1]
        if future.done():
            return
        if frame.type == ACK:
            future.set_result(None)
            return
        self.stats.naks_received += 1
        try:
            future.set_result(NakReason(frame.payload[0]) if frame.payload else NakReason.CRC)
        except ValueError:
            future.set_result(NakReason.MALFORMED)

    def _deliver(self, frame: Frame) -> None:
        if frame == self._last_delivered:
            # Our ACK was lost and the peer sent the same frame again: acknowledge, don't repeat.
            self.stats.duplicates += 1
            self._send_control(ACK, frame.seq)
            return
        try:
            message = self.protocol.decode(frame)
        except (UnknownMessageType, MalformedPayload) as exc:
            reason = (
                NakReason.UNKNOWN_TYPE
                if isinstance(exc, UnknownMessageType)
                else NakReason.MALFORMED
            )
            self.stats.protocol_errors += 1
            self._send_control(NAK, frame.seq, reason)
            log.warning("protocol_error", link=self.name, seq=frame.seq, detail=str(exc))
            self._on_message(ProtocolError(frame.seq, frame.type, reason, str(exc)))
            return
        # The receiver may refuse an intact message (e.g. BUSY); then it is not "delivered".
        verdict = self._on_message(message)
        if verdict is not None:
            self._send_control(NAK, frame.seq, verdict)
            return
        self._last_delivered = frame
        if self._settle is None:
            self._send_control(ACK, frame.seq)
        else:
            self._acks_due.append(frame.seq)

    def _advance(self) -> None:
        """Take the frames that may be taken now, and settle them. A settle done at once (a
        quiet journal syncs there and then) is acknowledged at once, and what waited behind it
        taken in turn."""
        while True:
            self._settled()
            self._take_held()
            self._start_settle()
            if self._settling is None or not self._settling.done():
                return

    def _start_settle(self) -> None:
        """Frames were delivered and wait for their ACKs: make them durable first (``settle``),
        while the line is still read."""
        if self._acks_due and self._settling is None:
            assert self._settle is not None
            self._settling = settling = asyncio.ensure_future(self._settle())
            self._settling_acks, self._acks_due = self._acks_due, []
            if settling.done():
                self._acknowledge_settled(settling)
            else:
                # the ACKs go as soon as the settle is done, ahead of anything else it wakes
                # (the publisher's sends): the device's next frame waits for them
                settling.add_done_callback(self._acknowledge_settled)

    def _acknowledge_settled(self, settling: asyncio.Future[None]) -> None:
        """The settle under way is done: ACK its frames, unless it failed (the link ends:
        ``run`` raises it) or was cancelled (the link is closing). Frames read meanwhile, or
        held, are ``run``'s to take; with none, the link is ready for the next at once."""
        if settling is not self._settling or settling.cancelled():
            return
        if settling.exception() is None:
            for seq in self._settling_acks:
                self._send_control(ACK, seq)
            self._settling_acks = []
            if not (self._after_settle or self._held):
                self._settling = None
                return
        self._wake()

    def _settled(self) -> None:
        """The settle under way is done: its frames are ACKed, and the data frames that came
        meanwhile are taken (a copy of one just ACKed is ACKed again, not delivered twice)."""
        settling = self._settling
        if settling is None or not settling.done():
            return
        settling.result()  # a settle that failed ends the link, as it did
        self._acknowledge_settled(settling)  # if its callback has not yet run
        self._settling = None
        while self._after_settle and self._settling is None:
            self._take(self._after_settle.popleft())
            self._start_settle()

    def _send_control(self, kind: int, seq: int, reason: NakReason | None = None) -> None:
        if kind == ACK:
            self._write(_ACKS[seq])
            return
        self.stats.naks_sent += 1
        payload = b"" if reason is None else bytes((reason,))
        self._write(Frame(seq=seq, type=kind, payload=payload).to_bytes())

    def _write(self, data: bytes) -> None:
        if not self._closed and not self._writer.is_closing():
            self._writer.write(data)
            self.stats.frames_out += 1

    def _fail_pending(self, exc: Exception) -> None:
        if self._pending is not None and not self._pending[1].done():
            self._pending[1].set_exception(exc)
            self._pending[1].exception()  # mark retrieved: the sender may be gone already

    async def send(self, message: Message) -> None:
        """Send and wait for the ACK; raise LinkTimeout, LinkLost or DeviceRejected."""
        async with self._send_lock:
            seq = self._next_seq
            self._next_seq = (seq + 1) & 0xFF
            data = self.protocol.encode(message, seq).to_bytes()
            loop = asyncio.get_running_loop()
            for attempt in range(1 + self.policy.retries):
                if self._closed:
                    raise LinkLost(f"{self.name}: link closed")
                future: asyncio.Future[NakReason | None] = loop.create_future()
                self._pending = (seq, future)
                if attempt:
                    self.stats.retransmits += 1
                self._write(data)
                try:
                    await self._writer.drain()
                except (ConnectionError, OSError) as exc:
                    raise LinkLost(f"{self.name}: {exc}") from exc
                try:
                    async with asyncio.timeout(self.policy.ack_timeout):
                        reason = await future
                except TimeoutError:
                    continue
                finally:
                    self._pending = None
                if reason is None:
                    return
                if reason != NakReason.CRC:
                    raise DeviceRejected(
                        f"{self.name}: {type(message).__name__} refused: {reason.name}"
                    )
            raise LinkTimeout(
                f"{self.name}: {type(message).__name__} seq {seq} not acknowledged after "
                f"{1 + self.policy.retries} tries"
            )

    def write_raw(self, data: bytes) -> None:
        """Put bytes on the line as they are (simulators use it to inject noise)."""
        self._write(data)

    async def drain(self) -> None:
        """Wait until the line takes more (after ``write_raw``)."""
        try:
            await self._writer.drain()
        except (ConnectionError, OSError) as exc:
            raise LinkLost(f"{self.name}: {exc}") from exc

    def close(self) -> None:
        self._closed = True
        self._fail_pending(LinkLost(f"{self.name}: link closed"))
        self._writer.close()

    async def aclose(self, grace: float = 2.0) -> None:
        """Close and wait until the transport has let go of the device."""
        self.close()
        with contextlib.suppress(Exception):  # the link is already broken; nothing to report
            async with asyncio.timeout(grace):
                await self._writer.wait_closed()
