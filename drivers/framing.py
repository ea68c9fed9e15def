"""Sans-IO framing shared by every tableside serial protocol (no asyncio here).

Wire layout of one frame (all multi-byte integers big-endian)::

    +------+-----+-----+------+-----------------+--------+
    | 0xA5 | LEN | SEQ | TYPE | PAYLOAD (LEN B) | CRC-16 |
    +------+-----+-----+------+-----------------+--------+
      1 B    1 B   1 B   1 B      0..250 B         2 B

CRC-16/CCITT-FALSE covers LEN, SEQ, TYPE and PAYLOAD. A frame is 6..256 bytes.
The decoder hunts for the start byte through garbage; after a bad length or a bad CRC it drops
only the start byte it trusted and hunts again from the next byte, so a real frame hidden inside
a false one is still found. See docs/protocols/shuffler.md.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from tableside.drivers.crc import crc16_ccitt

__all__ = [
    "ACK",
    "HEADER_SIZE",
    "MAX_FRAME_SIZE",
    "MAX_PAYLOAD",
    "NAK",
    "NEED_DATA",
    "START",
    "CorruptFrame",
    "DecoderStats",
    "Frame",
    "FrameDecoder",
    "NakReason",
    "NeedData",
]

START = 0xA5
MAX_PAYLOAD = 250
HEADER_SIZE = 4  # START, LEN, SEQ, TYPE
TRAILER_SIZE = 2  # CRC-16
MAX_FRAME_SIZE = HEADER_SIZE + MAX_PAYLOAD + TRAILER_SIZE

# Link-control frame types, common to every protocol. Their SEQ is the sequence number of the
# frame they answer; they are never acknowledged themselves.
ACK = 0x06
NAK = 0x15


class NakReason(enum.IntEnum):
    """Payload byte of a NAK frame."""

    CRC = 0x01  # frame arrived damaged: send it again
    MALFORMED = 0x02  # frame was intact but its payload does not decode: do not resend
    UNKNOWN_TYPE = 0x03  # intact, but the receiver has no such message type: do not resend
    BUSY = 0x04  # receiver cannot act on it now (e.g. shuffle already running): do not resend


@dataclass(frozen=True, slots=True)
class Frame:
    """One intact frame."""

    seq: int
    type: int
    payload: bytes = b""

    def __post_init__(self) -> None:
        if not 0 <= self.seq <= 0xFF:
            raise ValueError(f"seq {self.seq} out of range 0..255")
        if not 0 <= self.type <= 0xFF:
            raise ValueError(f"type {self.type} out of range 0..255")
        if len(self.payload) > MAX_PAYLOAD:
            raise ValueError(f"payload of {len(self.payload)} bytes exceeds {MAX_PAYLOAD}")

    def to_bytes(self) -> bytes:
        body = bytes((len(self.payload), self.seq, self.type)) + self.payload
        crc = crc16_ccitt(body)
        return bytes((START,)) + body + crc.to_bytes(2, "big")

    @classmethod
    def from_bytes(cls, data: bytes) -> Frame:
        """Decode exactly one whole frame; raise ValueError on anything else."""
        decoder = FrameDecoder()
        decoder.feed(data)
        item = decoder.next_event()
        if not isinstance(item, Frame) or decoder.buffered:
            raise ValueError(f"not exactly one intact frame: {data.hex(' ')}")
        return item


@dataclass(frozen=True, slots=True)
class CorruptFrame:
    """A frame that had a start byte and a plausible header but a bad CRC.

    ``seq`` is what the header said; it cannot be trusted, but it is what the sender will
    most likely retransmit, so a NAK carries it.
    """

    seq: int
    type: int
    raw: bytes


class NeedData:
    """The decoder needs more bytes before it can say anything."""

    _instance: NeedData | None = None

    def __new__(cls) -> NeedData:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA = NeedData()


def append_capped(buf: bytearray, data: bytes | bytearray | memoryview, limit: int) -> int:
    """Append ``data``; if the buffer then holds more than ``limit`` bytes, drop the oldest.
    Returns how many were dropped (a decoder fed faster than it is read never grows)."""
    buf += data
    excess = len(buf) - limit
    if excess <= 0:
        return 0
    del buf[:excess]
    return excess


@dataclass(slots=True)
class DecoderStats:
    frames: int = 0
    crc_errors: int = 0
    discarded_bytes: int = 0
    resyncs: int = 0


@dataclass(slots=True)
class FrameDecoder:
    """Bytes in, frames out. Never raises on input; garbage is counted and skipped."""

    max_buffer: int = 4 * MAX_FRAME_SIZE
    stats: DecoderStats = field(default_factory=DecoderStats)
    _buf: bytearray = field(default_factory=bytearray)

    @property
    def buffered(self) -> int:
        """Bytes held that are not yet a frame (a partial frame or unread input)."""
        return len(self._buf)

    @property
    def room(self) -> int:
        """Bytes that may be fed before the oldest are dropped."""
        return max(1, self.max_buffer - len(self._buf))

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        self.stats.discarded_bytes += append_capped(self._buf, data, self.max_buffer)

    def resync(self) -> None:
        """Give up on a partial frame (the link calls this when it sat too long)."""
        if self._buf:
            self._drop(1)
            self.stats.resyncs += 1

    def _drop(self, n: int) -> None:
        del self._buf[:n]
        self.stats.discarded_bytes += n

    def next_event(self) -> Frame | CorruptFrame | NeedData:
        buf = self._buf
        while True:
            start = buf.find(START)
            if start < 0:
                if buf:
                    self._drop(len(buf))
                return NEED_DATA
            if start:
                self._drop(start)
            if len(buf) < HEADER_SIZE:
                return NEED_DATA
            length = buf[1]
            if length > MAX_PAYLOAD:
                self._drop(1)  # not a real start byte
                continue
            total = HEADER_SIZE + length + TRAILER_SIZE
            if len(buf) < total:
                return NEED_DATA
            raw = bytes(buf[:total])
            if crc16_ccitt(raw[1:-2]) != int.from_bytes(raw[-2:], "big"):
                self.stats.crc_errors += 1
                self._drop(1)  # hunt again from the next byte: a real frame may hide inside
                return CorruptFrame(seq=raw[2], type=raw[3], raw=raw)
            del buf[:total]
            self.stats.frames += 1
            return Frame(seq=raw[2], type=raw[3], payload=raw[4:-2])
