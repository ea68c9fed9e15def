"""The tableside shuffler protocol, version 1: message set (sans-IO, no asyncio).

Byte-by-byte description: docs/protocols/shuffler.md. Framing: tableside.drivers.framing.
Type bytes: 0x20 to 0x3F device → host, 0x40 to 0x5F host → device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Self

from tableside.drivers.common import (
    Empty,
    Heartbeat,
    Identity,
    QueryIdentity,
    QueryStatus,
    WireEnum,
    check_cards,
    decode_enum,
    decode_optional_enum,
    optional_code,
)
from tableside.drivers.messages import MessageSet
from tableside.drivers.wire import MalformedPayload, PayloadReader, PayloadWriter

__all__ = [
    "PROTOCOL",
    "Deck",
    "Fault",
    "FaultCode",
    "Heartbeat",
    "Identity",
    "QueryIdentity",
    "QueryStatus",
    "ShuffleComplete",
    "ShuffleOrder",
    "ShuffleStarted",
    "ShufflerState",
    "StartShuffle",
    "Status",
]


class ShufflerState(WireEnum):
    IDLE = "idle", 0
    SHUFFLING = "shuffling", 1
    FAULT = "fault", 2
    DOOR_OPEN = "door_open", 3


class FaultCode(WireEnum):
    """Why a shuffle did not finish (555.14(e): jams, stops, fails to complete a cycle)."""

    JAM = "jam", 1
    STOPPED = "stopped", 2
    INCOMPLETE = "incomplete", 3
    DOOR_OPEN = "door_open", 4


class Deck(WireEnum):
    """Which deck of a two-deck shuffler (555.3(b): backs of different colours, alternated)."""

    SINGLE = "single", 0
    A = "A", 1
    B = "B", 2


@dataclass(frozen=True, slots=True)
class Status:
    """Device → host, on change and on QueryStatus.

    ``state`` u8 (ShufflerState), ``fault`` u8 (FaultCode, 0 = none), ``shuffles`` u32
    (shuffles completed since power-on).
    """

    TYPE: ClassVar[int] = 0x21
    state: ShufflerState
    fault: FaultCode | None
    shuffles: int

    def to_payload(self) -> bytes:
        return (
            PayloadWriter()
            .u8(self.state)
            .u8(optional_code(self.fault))
            .u32(self.shuffles)
            .getvalue()
        )

    @classmethod
    def from_payload(cls, payload: bytes) -> Self:
        r = PayloadReader(payload, "Status")
        state = decode_enum(ShufflerState, r.u8(), "Status.state")
        fault = decode_optional_enum(FaultCode, r.u8(), "Status.fault")
        msg = cls(state, fault, r.u32())
        r.end()
        return msg


@dataclass(frozen=True, slots=True)
class ShuffleStarted:
    """Device → host. ``shuffle_id`` u32, increasing per shuffle."""

    TYPE: ClassVar[int] = 0x22
    shuffle_id: int

    def to_payload(self) -> bytes:
        return PayloadWriter().u32(self.shuffle_id).getvalue()

    @classmethod
    def from_payload(cls, payload: bytes) -> Self:
        r = PayloadReader(payload, "ShuffleStarted")
        msg = cls(r.u32())
        r.end()
        return msg


@dataclass(frozen=True, slots=True)
class ShuffleComplete:
    """Device → host, when a shuffle cycle finished.

    ``shuffle_id`` u32, ``card_count`` u16 (cards counted; meaningful when ``counted``),
    ``flags`` u8 (bit 0 counted, bit 1 identifies cards), ``deck`` u8 (Deck),
    ``back_colour`` str, ``missing`` and ``extra`` byte lists of card codes (only when the device
    identifies cards; at most 255 each).
    """

    TYPE: ClassVar[int] = 0x23
    shuffle_id: int
    card_count: int
    counted: bool = True
    identifies_cards: bool = False
    deck: Deck = Deck.SINGLE
    back_colour: str = ""
    missing: tuple[int, ...] = ()
    extra: tuple[int, ...] = ()

    def to_payload(self) -> bytes:
        flags = int(self.counted) | (int(self.identifies_cards) << 1)
        return (
            PayloadWriter()
            .u32(self.shuffle_id)
            .u16(self.card_count)
            .u8(flags)
            .u8(self.deck)
            .string(self.back_colour)
            .byte_list(self.missing)
            .byte_list(self.extra)
            .getvalue()
        )

    @classmethod
    def from_payload(cls, payload: bytes) -> Self:
        r = PayloadReader(payload, "ShuffleComplete")
        shuffle_id, count, flags = r.u32(), r.u16(), r.u8()
        if flags & ~0x03:
            raise MalformedPayload(f"ShuffleComplete: reserved flag bits set in 0x{flags:02x}")
        deck = decode_enum(Deck, r.u8(), "ShuffleComplete.deck")
        colour = r.string()
        missing = check_cards(r.byte_list(), "ShuffleComplete.missing")
        extra = check_cards(r.byte_list(), "ShuffleComplete.extra")
        r.end()
        return cls(
            shuffle_id, count, bool(flags & 1), bool(flags & 2), deck, colour, missing, extra
        )


@dataclass(frozen=True, slots=True)
class ShuffleOrder:
    """Device → host, after ShuffleComplete, only when card recognition is enabled.

    ``shuffle_id`` u32, ``deck`` u8 (Deck), ``output`` order (the order the shuffle made, top
    card first), ``input`` order (the order the cards were fed, empty when the device does not
    read them going in): ``cards`` lists, so both fit one frame (at most 243 cards in all: one
    deck fed and shuffled, or two decks shuffled; a device sends one message per deck).
    """

    TYPE: ClassVar[int] = 0x26
    shuffle_id: int
    output: tuple[int, ...]
    input: tuple[int, ...] = ()
    deck: Deck = Deck.SINGLE

    def to_payload(self) -> bytes:
        return (
            PayloadWriter()
            .u32(self.shuffle_id)
            .u8(self.deck)
            .byte_list(self.output)
            .byte_list(self.input)
            .getvalue()
        )

    @classmethod
    def from_payload(cls, payload: bytes) -> Self:
        r = PayloadReader(payload, "ShuffleOrder")
        shuffle_id = r.u32()
        deck = decode_enum(Deck, r.u8(), "ShuffleOrder.deck")
        output = check_cards(r.byte_list(), "ShuffleOrder.output")
        fed = check_cards(r.byte_list(), "ShuffleOrder.input")
        r.end()
        return cls(shuffle_id, output, fed, deck)


@dataclass(frozen=True, slots=True)
class Fault:
    """Device → host. ``shuffle_id`` u32 (0 when not shuffling), ``code`` u8 (FaultCode),
    ``detail`` str."""

    TYPE: ClassVar[int] = 0x24
    shuffle_id: int
    code: FaultCode
    detail: str = ""

    def to_payload(self) -> bytes:
        return PayloadWriter().u32(self.shuffle_id).u8(self.code).string(self.detail).getvalue()

    @classmethod
    def from_payload(cls, payload: bytes) -> Self:
        r = PayloadReader(payload, "Fault")
        msg = cls(r.u32(), decode_enum(FaultCode, r.u8(), "Fault.code"), r.string())
        r.end()
        return msg


@dataclass(frozen=True, slots=True)
class StartShuffle(Empty):
    """Host → device: start a shuffle cycle now. NAK BUSY if one is running."""

    TYPE: ClassVar[int] = 0x40


PROTOCOL = MessageSet(
    "shuffler",
    Identity,
    Status,
    ShuffleStarted,
    ShuffleComplete,
    ShuffleOrder,
    Fault,
    Heartbeat,
    StartShuffle,
    QueryStatus,
    QueryIdentity,
)
