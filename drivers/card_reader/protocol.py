"""The tableside card-reader protocol, version 1 (sans-IO, no asyncio).

The Spanish 21 hole-card reader (58 Pa. Code § 551.2(e), § 551.8(e), § 551.16(l)(m)): it says
whether the dealer's hole card makes a Blackjack without exposing the card. The same message
set runs over USB bulk endpoints and over a serial line. Byte by byte:
docs/protocols/card-reader.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, ClassVar

from tableside.drivers.common import (
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
    "HoleCardChecked",
    "Identity",
    "QueryIdentity",
    "QueryStatus",
    "ReaderFault",
    "ReaderFaultCode",
    "ReaderState",
    "ReaderStatus",
    "RunSelfTest",
    "SelfTestResult",
]


class ReaderState(WireEnum):
    READY = "ready", 0
    READING = "reading", 1
    FAULT = "fault", 2
    SELF_TEST = "self_test", 3


class ReaderFaultCode(WireEnum):
    MALFUNCTION = "malfunction", 1  # 551.16(m): no more dealing until repaired or replaced
    TAMPER = "tamper", 2
    DOOR_OPEN = "door_open", 3


@dataclass(frozen=True, slots=True)
class ReaderStatus(Struct):
    """``state`` u8, ``fault`` u8 (0 none), ``flags`` u8 (bit 0: this model could let a player
    learn the hole card, 551.16(l)(1)), ``checks`` u32 (hole cards checked since power-on)."""

    TYPE: ClassVar[int] = 0x21
    state: ReaderState
    fault: ReaderFaultCode | None
    reveals_hole_card: Annotated[bool, Bit(0)]
    checks: U32


@dataclass(frozen=True, slots=True)
class SelfTestResult(Struct):
    """``passed`` u8 (0/1), ``code`` u16 (vendor's, 0 when passed), ``detail`` str."""

    TYPE: ClassVar[int] = 0x22
    passed: bool
    code: U16 = 0
    detail: str = ""


@dataclass(frozen=True, slots=True)
class HoleCardChecked(Struct):
    """A hole card went through the reader: ``check_id`` u32, ``blackjack`` u8 (0/1).
    The card itself is never sent."""

    TYPE: ClassVar[int] = 0x23
    check_id: U32
    blackjack: bool


@dataclass(frozen=True, slots=True)
class ReaderFault(Struct):
    """``code`` u8, ``detail`` str."""

    TYPE: ClassVar[int] = 0x24
    code: ReaderFaultCode
    detail: str = ""


@dataclass(frozen=True, slots=True)
class RunSelfTest(Empty):
    """Host → device: run the self-test; the answer is SelfTestResult. NAK BUSY while reading."""

    TYPE: ClassVar[int] = 0x40


PROTOCOL = MessageSet(
    "card_reader",
    Identity,
    ReaderStatus,
    SelfTestResult,
    HoleCardChecked,
    ReaderFault,
    Heartbeat,
    RunSelfTest,
    QueryStatus,
    QueryIdentity,
)
