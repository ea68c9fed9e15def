"""Messages every tableside-framed protocol shares (same type byte, same layout).

Type 0x20 Identity and 0x25 Heartbeat (device → host); 0x41 QueryStatus and 0x42 QueryIdentity
(host → device). Each protocol's own Status answers QueryStatus. See docs/protocols/.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Self

from tableside.drivers.cards import is_card_code
from tableside.drivers.layout import (
    WireEnum,
    decode_enum,
    decode_optional_enum,
    optional_code,
)
from tableside.drivers.wire import MalformedPayload, PayloadReader, PayloadWriter

__all__ = [
    "HOST_TO_DEVICE",
    "Empty",
    "Heartbeat",
    "Identity",
    "QueryIdentity",
    "QueryStatus",
    "WireEnum",
    "check_cards",
    "decode_enum",
    "decode_optional_enum",
    "optional_code",
]

#: message types from here up go host → device, below device → host, in every tableside protocol
HOST_TO_DEVICE = 0x40


def check_cards(values: tuple[int, ...], what: str) -> tuple[int, ...]:
    for code in values:
        if not is_card_code(code):
            raise MalformedPayload(f"{what}: byte 0x{code:02x} is not a card")
    return values


@dataclass(frozen=True, slots=True)
class Identity:
    """Device → host, at connect and on QueryIdentity.

    ``vendor`` str, ``model`` str, ``serial`` str, ``firmware_version`` str,
    ``firmware_sha256`` 32 raw bytes.
    """

    TYPE: ClassVar[int] = 0x20
    vendor: str
    model: str
    serial: str
    firmware_version: str
    firmware_sha256: bytes

    def to_payload(self) -> bytes:
        if len(self.firmware_sha256) != 32:
            raise ValueError("firmware_sha256 must be 32 bytes")
        w = PayloadWriter()
        for s in (self.vendor, self.model, self.serial, self.firmware_version):
            w.string(s)
        return w.raw(self.firmware_sha256).getvalue()

    @classmethod
    def from_payload(cls, payload: bytes) -> Self:
        r = PayloadReader(payload, "Identity")
        msg = cls(r.string(), r.string(), r.string(), r.string(), r.raw(32))
        r.end()
        return msg


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Device → host, every heartbeat interval (1 s by default). ``uptime_ms`` u32."""

    TYPE: ClassVar[int] = 0x25
    uptime_ms: int

    def to_payload(self) -> bytes:
        return PayloadWriter().u32(self.uptime_ms).getvalue()

    @classmethod
    def from_payload(cls, payload: bytes) -> Self:
        r = PayloadReader(payload, "Heartbeat")
        msg = cls(r.u32())
        r.end()
        return msg


@dataclass(frozen=True, slots=True)
class Empty:
    """Base of messages without payload."""

    TYPE: ClassVar[int] = 0

    def to_payload(self) -> bytes:
        return b""

    @classmethod
    def from_payload(cls, payload: bytes) -> Self:
        if payload:
            raise MalformedPayload(f"{cls.__name__}: takes no payload, got {len(payload)} bytes")
        return cls()


@dataclass(frozen=True, slots=True)
class QueryStatus(Empty):
    """Host → device: answer with Status."""

    TYPE: ClassVar[int] = 0x41


@dataclass(frozen=True, slots=True)
class QueryIdentity(Empty):
    """Host → device: answer with Identity."""

    TYPE: ClassVar[int] = 0x42
