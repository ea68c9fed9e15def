"""ccTalk framing and the headers tableside uses (sans-IO, no asyncio).

ccTalk is the public serial protocol for coin and token acceptors (its generic specification
is public domain). One multi-drop bus, a master (the host, address 1) and slaves (the seat
acceptors, one address each). Every message::

    +------+-----+--------+--------+-----------+----------+
    | DEST | LEN | SOURCE | HEADER | DATA xLEN | CHECKSUM |
    +------+-----+--------+--------+-----------+----------+

Simple checksum: all bytes of the message sum to 0 modulo 256. A reply has HEADER 0 (ACK) and
carries the answer as DATA; HEADER 5 is NAK. There is no start byte: a frame starts after
silence (the inter-byte gap is at most 50 ms), so the decoder assumes its buffer starts at a
frame boundary, and after a bad checksum drops one byte and tries again. Address 0 is a
broadcast: every slave acts, none replies.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tableside.drivers.framing import append_capped

__all__ = [
    "BROADCAST",
    "HOST",
    "BadChecksum",
    "CcTalkDecoder",
    "CcTalkFrame",
    "Header",
    "checksum",
    "decode_credit_buffer",
]

HOST = 1
BROADCAST = 0
MAX_DATA = 252


class Header:
    """The ccTalk headers tableside sends (numbers from the generic specification)."""

    ACK = 0
    NAK = 5
    BUSY = 6
    SIMPLE_POLL = 254
    REQUEST_POLLING_PRIORITY = 249
    REQUEST_MANUFACTURER_ID = 246
    REQUEST_EQUIPMENT_CATEGORY = 245
    REQUEST_PRODUCT_CODE = 244
    REQUEST_SERIAL_NUMBER = 242
    REQUEST_SOFTWARE_REVISION = 241
    MODIFY_INHIBIT_STATUS = 231
    READ_BUFFERED_CREDIT = 229
    MODIFY_MASTER_INHIBIT = 228
    REQUEST_MASTER_INHIBIT = 227
    CALCULATE_ROM_CHECKSUM = 197
    RESET_DEVICE = 1


def checksum(body: bytes) -> int:
    return (-sum(body)) & 0xFF


@dataclass(frozen=True, slots=True)
class CcTalkFrame:
    dest: int
    source: int
    header: int
    data: bytes = b""

    def __post_init__(self) -> None:
        for name in ("dest", "source", "header"):
            if not 0 <= getattr(self, name) <= 255:
                raise ValueError(f"{name} {getattr(self, name)} out of range 0..255")
        if len(self.data) > MAX_DATA:
            raise ValueError(f"ccTalk data of {len(self.data)} bytes exceeds {MAX_DATA}")

    def to_bytes(self) -> bytes:
        body = bytes((self.dest, len(self.data), self.source, self.header)) + self.data
        return body + bytes((checksum(body),))


@dataclass(frozen=True, slots=True)
class BadChecksum:
    """A frame-shaped run of bytes whose checksum is wrong (one byte was dropped)."""

    raw: bytes


class NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA = NeedData()


@dataclass(slots=True)
class CcTalkDecoder:
    """Bytes in, frames out; never raises on input."""

    max_buffer: int = 1024
    bad_checksums: int = 0
    discarded_bytes: int = 0
    _buf: bytearray = field(default_factory=bytearray)

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        self.discarded_bytes += append_capped(self._buf, data, self.max_buffer)

    def reset(self) -> None:
        """Silence on the line ends any partial frame (the bus's inter-byte timeout)."""
        self.discarded_bytes += len(self._buf)
        self._buf.clear()

    def next_event(self) -> CcTalkFrame | BadChecksum | NeedData:
        buf = self._buf
        if len(buf) < 5:
            return NEED_DATA
        if buf[1] > MAX_DATA:  # no ccTalk message is that long: not a frame start
            self.discarded_bytes += 1
            del buf[:1]
            return BadChecksum(bytes(buf[:1]))
        total = 5 + buf[1]
        if len(buf) < total:
            return NEED_DATA
        raw = bytes(buf[:total])
        if sum(raw) & 0xFF:
            self.bad_checksums += 1
            self.discarded_bytes += 1
            del buf[:1]
            return BadChecksum(raw)
        del buf[:total]
        return CcTalkFrame(dest=raw[0], source=raw[2], header=raw[3], data=raw[4:-1])


def decode_credit_buffer(data: bytes) -> tuple[int, list[tuple[int, int]]]:
    """Reply to header 229: (event counter, [(result A, result B)] newest first, 5 pairs)."""
    if len(data) != 11:
        raise ValueError(f"buffered credit reply must be 11 bytes, got {len(data)}")
    return data[0], [(data[1 + 2 * i], data[2 + 2 * i]) for i in range(5)]
