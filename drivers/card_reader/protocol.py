"""The tableside card-reader protocol, version 1 (sans-IO, no asyncio).

The Spanish 21 hole-card reader (58 Pa. Code § 551.2(e), § 551.8(e), § 551.16(l)(m)): it says
whether the dealer's hole card makes a Blackjack without exposing the card. The same message
set runs over USB bulk endpoints and over a serial line. Byte by byte:
docs/protocols/card-reader.md.
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
    decode_enum,
    decode_optional_enum,
    optional_code,
)
from tableside.drivers.messages import MessageSet
from tableside.drivers.wire import MalformedPayload, PayloadReader, PayloadWriter

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
class ReaderStatus:
    """``state`` u8, ``fault`` u8 (0 none), ``flags`` u8 (bit 0: this model could let a player
    learn the hole card, 551.16(l)(1)), ``checks`` u32 (hole cards checked since power-on)."""

    TYPE: ClassVar[int] = 0x21
    state: ReaderState
    fault: ReaderFaultCode | None
    reveals_hole_card: bool
    checks: int

    def to_payload(self) -> bytes:
        w = (
            PayloadWriter()
            .u8(self.state)
            .u8(optional_code(self.fault))
            .u8(int(self.reveals_hole_card))
        )
        return w.u32(self.checks).getvalue()

    @classmethod
    def from_payload(cls, payload: bytes) -> Self:
        r = PayloadReader(payload, "ReaderStatus")
        state = decode_enum(ReaderState, r.u8(), "ReaderStatus.state")
        fault = decode_optional_enum(ReaderFaultCode, r.u8(), "ReaderStatus.fault")
        flags = r.u8()
        if flags & ~0x01:
            raise MalformedPayload(f"ReaderStatus: reserved flag bits set in 0x{flags:02x}")
        msg = cls(state, fault, bool(flags & 1), r.u32())
        r.end()
        return msg


@dataclass(frozen=True, slots=True)
class SelfTestResult:
    """``passed`` u8 (0/1), ``code`` u16 (vendor's, 0 when passed), ``detail`` str."""

    TYPE: ClassVar[int] = 0x22
    passed: bool
    code: int = 0
    detail: str = ""

    def to_payload(self) -> bytes:
        return PayloadWriter().u8(int(self.passed)).u16(self.code).string(self.detail).getvalue()

    @classmethod
    def from_payload(cls, payload: bytes) -> Self:
        r = PayloadReader(payload, "SelfTestResult")
        passed = r.u8()
        if passed > 1:
            raise MalformedPayload(f"SelfTestResult: passed must be 0 or 1, got {passed}")
        msg = cls(bool(passed), r.u16(), r.string())
        r.end()
        return msg


@dataclass(frozen=True, slots=True)
class HoleCardChecked:
    """A hole card went through the reader: ``check_id`` u32, ``blackjack`` u8 (0/1).
    The card itself is never sent."""

    TYPE: ClassVar[int] = 0x23
    check_id: int
    blackjack: bool

    def to_payload(self) -> bytes:
        return PayloadWriter().u32(self.check_id).u8(int(self.blackjack)).getvalue()

    @classmethod
    def from_payload(cls, payload: bytes) -> Self:
        r = PayloadReader(payload, "HoleCardChecked")
        check_id, blackjack = r.u32(), r.u8()
        if blackjack > 1:
            raise MalformedPayload(f"HoleCardChecked: blackjack must be 0 or 1, got {blackjack}")
        r.end()
        return cls(check_id, bool(blackjack))


@dataclass(frozen=True, slots=True)
class ReaderFault:
    """``code`` u8, ``detail`` str."""

    TYPE: ClassVar[int] = 0x24
    code: ReaderFaultCode
    detail: str = ""

    def to_payload(self) -> bytes:
        return PayloadWriter().u8(self.code).string(self.detail).getvalue()

    @classmethod
    def from_payload(cls, payload: bytes) -> Self:
        r = PayloadReader(payload, "ReaderFault")
        msg = cls(decode_enum(ReaderFaultCode, r.u8(), "ReaderFault.code"), r.string())
        r.end()
        return msg


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
