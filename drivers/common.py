"""Messages every tableside-framed protocol shares (same type byte, same layout).

Type 0x20 Identity and 0x25 Heartbeat (device → host); 0x41 QueryStatus and 0x42 QueryIdentity
(host → device). Each protocol's own Status answers QueryStatus. See docs/protocols/.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, ClassVar, Self

from tableside.drivers.cards import is_card_code
from tableside.drivers.layout import (
    U32,
    Field,
    Raw,
    Struct,
    WireEnum,
    decode_enum,
)
from tableside.drivers.wire import MalformedPayload, PayloadReader, PayloadWriter

__all__ = [
    "HOST_TO_DEVICE",
    "CardCode",
    "CardOrZero",
    "Cards",
    "Empty",
    "Heartbeat",
    "Identity",
    "QueryIdentity",
    "QueryStatus",
    "WireEnum",
    "check_cards",
    "decode_enum",
]

#: message types from here up go host → device, below device → host, in every tableside protocol
HOST_TO_DEVICE = 0x40


def check_cards(values: tuple[int, ...], what: str) -> tuple[int, ...]:
    for code in values:
        if not is_card_code(code):
            raise MalformedPayload(f"{what}: byte 0x{code:02x} is not a card")
    return values


class _CardList(Field):
    """A byte list of card codes (at most 255)."""

    __slots__ = ()

    def write(self, w: PayloadWriter, value: tuple[int, ...], what: str) -> None:
        w.byte_list(value)

    def read(self, r: PayloadReader, what: str) -> tuple[int, ...]:
        return check_cards(r.byte_list(), what)


class _CardByte(Field):
    """One card code; ``zero``: 0 is allowed, for a card the device could not read."""

    __slots__ = ("zero",)

    def __init__(self, *, zero: bool = False) -> None:
        self.zero = zero

    def write(self, w: PayloadWriter, value: int, what: str) -> None:
        w.u8(value)

    def read(self, r: PayloadReader, what: str) -> int:
        value = r.u8()
        if value or not self.zero:
            check_cards((value,), what)
        return value


Cards = Annotated[tuple[int, ...], _CardList()]
CardCode = Annotated[int, _CardByte()]
CardOrZero = Annotated[int, _CardByte(zero=True)]


@dataclass(frozen=True, slots=True)
class Identity(Struct):
    """Device → host, at connect and on QueryIdentity.

    ``vendor`` str, ``model`` str, ``serial`` str, ``firmware_version`` str,
    ``firmware_sha256`` 32 raw bytes.
    """

    TYPE: ClassVar[int] = 0x20
    vendor: str
    model: str
    serial: str
    firmware_version: str
    firmware_sha256: Annotated[bytes, Raw(32)]


@dataclass(frozen=True, slots=True)
class Heartbeat(Struct):
    """Device → host, every heartbeat interval (1 s by default). ``uptime_ms`` u32."""

    TYPE: ClassVar[int] = 0x25
    uptime_ms: U32


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
