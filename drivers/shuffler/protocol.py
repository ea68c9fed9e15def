"""The tableside shuffler protocol, version 1: message set (sans-IO, no asyncio).

Byte-by-byte description: docs/protocols/shuffler.md. Framing: tableside.drivers.framing.
Type bytes: 0x20 to 0x3F device → host, 0x40 to 0x5F host → device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, ClassVar

from tableside.drivers.common import (
    Cards,
    Empty,
    Heartbeat,
    Identity,
    QueryIdentity,
    QueryStatus,
    WireEnum,
)
from tableside.drivers.layout import U16, U32, Bit, Struct
from tableside.drivers.messages import MessageSet

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
class Status(Struct):
    """Device → host, on change and on QueryStatus.

    ``state`` u8 (ShufflerState), ``fault`` u8 (FaultCode, 0 = none), ``shuffles`` u32
    (shuffles completed since power-on).
    """

    TYPE: ClassVar[int] = 0x21
    state: ShufflerState
    fault: FaultCode | None
    shuffles: U32


@dataclass(frozen=True, slots=True)
class ShuffleStarted(Struct):
    """Device → host. ``shuffle_id`` u32, increasing per shuffle."""

    TYPE: ClassVar[int] = 0x22
    shuffle_id: U32


@dataclass(frozen=True, slots=True)
class ShuffleComplete(Struct):
    """Device → host, when a shuffle cycle finished.

    ``shuffle_id`` u32, ``card_count`` u16 (cards counted; meaningful when ``counted``),
    ``flags`` u8 (bit 0 counted, bit 1 identifies cards), ``deck`` u8 (Deck),
    ``back_colour`` str, ``missing`` and ``extra`` byte lists of card codes (only when the device
    identifies cards; at most 255 each).
    """

    TYPE: ClassVar[int] = 0x23
    shuffle_id: U32
    card_count: U16
    counted: Annotated[bool, Bit(0)] = True
    identifies_cards: Annotated[bool, Bit(1)] = False
    deck: Deck = Deck.SINGLE
    back_colour: str = ""
    missing: Cards = ()
    extra: Cards = ()


@dataclass(frozen=True, slots=True)
class ShuffleOrder(Struct):
    """Device → host, after ShuffleComplete, only when card recognition is enabled.

    ``shuffle_id`` u32, ``deck`` u8 (Deck), ``output`` order (the order the shuffle made, top
    card first), ``input`` order (the order the cards were fed, empty when the device does not
    read them going in): ``cards`` lists, so both fit one frame (at most 243 cards in all: one
    deck fed and shuffled, or two decks shuffled; a device sends one message per deck).
    """

    TYPE: ClassVar[int] = 0x26
    WIRE_ORDER: ClassVar[tuple[str, ...]] = ("shuffle_id", "deck", "output", "input")
    shuffle_id: U32
    output: Cards
    input: Cards = ()
    deck: Deck = Deck.SINGLE


@dataclass(frozen=True, slots=True)
class Fault(Struct):
    """Device → host. ``shuffle_id`` u32 (0 when not shuffling), ``code`` u8 (FaultCode),
    ``detail`` str."""

    TYPE: ClassVar[int] = 0x24
    shuffle_id: U32
    code: FaultCode
    detail: str = ""


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
