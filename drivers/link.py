"""The asyncio link layer: frames over a byte stream, with ACK/NAK and retransmission.

Used unchanged by the drivers (host side) and the simulators (device side). Stop-and-wait:
one unacknowledged frame per direction; every data frame is answered by ACK or NAK within
``ack_timeout``; a frame is sent at most ``1 + retries`` times. Byte layout and timing rules:
docs/protocols/shuffler.md.
"""

from __future__ import annotations

import asyncio
import contextlib
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

__all__ = ["ArqPolicy", "FramedLink", "LineNoise", "LinkStats", "Notice", "ProtocolError"]

log = structlog.get_logger("tableside.link")


@dataclass(frozen=True, slots=True)
class ArqPolicy:
    """Timing of acknowledgement and retransmission (defaults: docs/protocols/shuffler.md)."""

    ack_timeout: float = 0.25
    retries: int = 3
    # A partial frame older than this is abandoned and the decoder hunts for the next start byte.
    frame_timeout: float = 0.5


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

Notice = Message | ProtocolError | LineNoise


@dataclass(slots=True)
class LinkStats:
    frames_in: int = 0
    frames_out: int = 0
    retransmits: int = 0
    duplicates: int = 0
    naks_sent: int = 0
    naks_received: int = 0
    protocol_errors: int = 0


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
        # forget it. Meanwhile nothing more is read; the peer sends one frame at a time anyway.
        self._settle = settle
        self._acks_due: list[int] = []

    async def run(self) -> NoReturn:
        """Read until the link breaks, then raise LinkLost. Never raises on bad bytes."""
        try:
            while True:
                timeout = self.policy.frame_timeout if self.decoder.buffered else None
                try:
                    async with asyncio.timeout(timeout):
                        data = await self._reader.read(4096)
                except TimeoutError:
                    self.decoder.resync()
                    self._drain_decoder()
                    await self._acknowledge_settled()
                    continue
                if not data:
                    raise LinkLost(f"{self.name}: end of stream")
                self.decoder.feed(data)
                self._drain_decoder()
                await self._acknowledge_settled()
        except (ConnectionError, OSError) as exc:
            raise LinkLost(f"{self.name}: {exc}") from exc
        finally:
            self._fail_pending(LinkLost(f"{self.name}: link closed"))

    def _drain_decoder(self) -> None:
        while not isinstance(item := self.decoder.next_event(), NeedData):
            if isinstance(item, CorruptFrame):
                self._send_control(NAK, item.seq, NakReason.CRC)
                continue
            self.last_rx = time.monotonic()
            self.stats.frames_in += 1
            if item.type in (ACK, NAK):
                self._resolve(item)
            else:
                self._deliver(item)
        self._report_noise()

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

    async def _acknowledge_settled(self) -> None:
        if not self._acks_due:
            return
        assert self._settle is not None
        await self._settle()
        due, self._acks_due = self._acks_due, []
        for seq in due:
            self._send_control(ACK, seq)

    def _send_control(self, kind: int, seq: int, reason: NakReason | None = None) -> None:
        if kind == NAK:
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
