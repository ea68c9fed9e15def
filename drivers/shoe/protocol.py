"""The tableside dealing-shoe protocol, version 1: message set (sans-IO, no asyncio).

Byte-by-byte description: docs/protocols/shoe.md. Framing: tableside.drivers.framing. Common
messages (Identity, Heartbeat, QueryStatus, QueryIdentity): tableside.drivers.common.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Self

from tableside.drivers.common import (
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
from tableside.drivers.shoe.plan import Plan, Stack, Target
from tableside.drivers.wire import MalformedPayload, PayloadReader, PayloadWriter

__all__ = [
    "PROTOCOL",
    "CardsLoaded",
    "DealComplete",
    "DealRound",
    "DealStarted",
    "FaceUpCard",
    "FirstCardBurned",
    "Identity",
    "QueryIdentity",
    "QueryStatus",
    "ShoeFault",
    "ShoeFaultCode",
    "ShoeState",
    "ShoeStatus",
    "Stack",
    "StackDispensed",
    "StubRemoved",
    "Target",
]


def _target(code: int, what: str) -> Target:
    """The stack target a byte names (drivers/shoe/plan.py); MalformedPayload for none."""
    try:
        return Target.of(code)
    except ValueError:
        raise MalformedPayload(f"{what}: 0x{code:02x} is no stack target") from None


class ShoeState(WireEnum):
    IDLE = "idle", 0
    DEALING = "dealing", 1
    FAULT = "fault", 2
    EMPTY = "empty", 3


class ShoeFaultCode(WireEnum):
    """555.14(f): jams, stops dealing, or fails to deal all cards during a round."""

    JAM = "jam", 1
    STOPPED = "stopped", 2
    SHORT_DEAL = "short_deal", 3  # the shoe could not deal every card the round needs
    DOOR_OPEN = "door_open", 4


@dataclass(frozen=True, slots=True)
class ShoeStatus:
    """``state`` u8, ``fault`` u8 (0 none), ``cards_loaded`` u16, ``cards_remaining`` u16."""

    TYPE: ClassVar[int] = 0x21
    state: ShoeState
    fault: ShoeFaultCode | None
    cards_loaded: int
    cards_remaining: int

    def to_payload(self) -> bytes:
        w = PayloadWriter().u8(self.state).u8(optional_code(self.fault))
        return w.u16(self.cards_loaded).u16(self.cards_remaining).getvalue()

    @classmethod
    def from_payload(cls, payload: bytes) -> Self:
        r = PayloadReader(payload, "ShoeStatus")
        state = decode_enum(ShoeState, r.u8(), "ShoeStatus.state")
        fault = decode_optional_enum(ShoeFaultCode, r.u8(), "ShoeStatus.fault")
        msg = cls(state, fault, r.u16(), r.u16())
        r.end()
        return msg


@dataclass(frozen=True, slots=True)
class CardsLoaded:
    """Cards were put in the shoe (from the shuffler). ``count`` u16 (0xFFFF: not counted)."""

    TYPE: ClassVar[int] = 0x22
    count: int

    def to_payload(self) -> bytes:
        return PayloadWriter().u16(self.count).getvalue()

    @classmethod
    def from_payload(cls, payload: bytes) -> Self:
        r = PayloadReader(payload, "CardsLoaded")
        msg = cls(r.u16())
        r.end()
        return msg


def _write_plan(w: PayloadWriter, stacks: Plan) -> PayloadWriter:
    if len(stacks) > 32:
        raise ValueError(f"{len(stacks)} stacks exceed 32")
    w.u8(len(stacks))
    for stack in stacks:
        w.u8(stack.target.code).u8(stack.size)
    return w


def _read_plan(r: PayloadReader, what: str) -> Plan:
    n = r.u8()
    if n > 32:
        raise MalformedPayload(f"{what}: {n} stacks exceed 32")
    return tuple(Stack(_target(r.u8(), what), r.u8()) for _ in range(n))


@dataclass(frozen=True, slots=True)
class _RoundPlan:
    """``round`` u32, then the plan: ``u8 n``, n x (``target, size``)."""

    TYPE: ClassVar[int] = 0
    round: int
    stacks: Plan

    def to_payload(self) -> bytes:
        return _write_plan(PayloadWriter().u32(self.round), self.stacks).getvalue()

    @classmethod
    def from_payload(cls, payload: bytes) -> Self:
        r = PayloadReader(payload, cls.__name__)
        msg = cls(r.u32(), _read_plan(r, cls.__name__))
        r.end()
        msg._check()
        return msg

    def _check(self) -> None:
        """What a message of this type must also satisfy (raise MalformedPayload)."""


@dataclass(frozen=True, slots=True)
class DealStarted(_RoundPlan):
    """The shoe began a round, following this plan."""

    TYPE: ClassVar[int] = 0x23


@dataclass(frozen=True, slots=True)
class StackDispensed:
    """One stack left the shoe: ``round`` u32, ``index`` u8 (in the plan), ``target`` u8,
    ``count`` u8 (cards in it), ``cards`` (their identities when the shoe reads cards)."""

    TYPE: ClassVar[int] = 0x24
    round: int
    index: int
    target: Target
    count: int
    cards: tuple[int, ...] = ()

    def to_payload(self) -> bytes:
        w = PayloadWriter().u32(self.round).u8(self.index).u8(self.target.code).u8(self.count)
        return w.byte_list(self.cards).getvalue()

    @classmethod
    def from_payload(cls, payload: bytes) -> Self:
        r = PayloadReader(payload, "StackDispensed")
        rnd, index = r.u32(), r.u8()
        target = _target(r.u8(), "StackDispensed.target")
        count = r.u8()
        cards = check_cards(r.byte_list(), "StackDispensed.cards")
        r.end()
        return cls(rnd, index, target, count, cards)


@dataclass(frozen=True, slots=True)
class FaceUpCard:
    """A card was found face up: ``round`` u32, ``index`` u8 (stack), ``total`` u8 (face-up
    cards so far this round), ``card`` u8 (0 when the shoe cannot read it)."""

    TYPE: ClassVar[int] = 0x26
    round: int
    index: int
    total: int
    card: int = 0

    def to_payload(self) -> bytes:
        w = PayloadWriter().u32(self.round).u8(self.index).u8(self.total)
        return w.u8(self.card).getvalue()

    @classmethod
    def from_payload(cls, payload: bytes) -> Self:
        r = PayloadReader(payload, "FaceUpCard")
        msg = cls(r.u32(), r.u8(), r.u8(), r.u8())
        r.end()
        if msg.card:
            check_cards((msg.card,), "FaceUpCard.card")
        return msg


@dataclass(frozen=True, slots=True)
class CardDrawn:
    """Baccarat: the dealer drew a card from a shoe that reads cards: ``round`` u32 (the coup),
    ``index`` u8 (0 the first card of the coup), ``card`` u8. The host assigns cards to the
    Player's and Banker's Hands in dealing order and checks the drawing rules."""

    TYPE: ClassVar[int] = 0x2A
    round: int
    index: int
    card: int

    def to_payload(self) -> bytes:
        return PayloadWriter().u32(self.round).u8(self.index).u8(self.card).getvalue()

    @classmethod
    def from_payload(cls, payload: bytes) -> Self:
        r = PayloadReader(payload, "CardDrawn")
        msg = cls(r.u32(), r.u8(), r.u8())
        r.end()
        check_cards((msg.card,), "CardDrawn.card")
        return msg


@dataclass(frozen=True, slots=True)
class FirstCardBurned:
    """Baccarat: a new shoe's burn (543.5(g), 545.5(f)), before its first coup: ``card`` u8
    (the first card, shown), ``burned`` u8 (how many more cards went to the discard bucket
    unseen; the first card's value, a 10 or court card counting ten)."""

    TYPE: ClassVar[int] = 0x2B
    card: int
    burned: int

    def to_payload(self) -> bytes:
        return PayloadWriter().u8(self.card).u8(self.burned).getvalue()

    @classmethod
    def from_payload(cls, payload: bytes) -> Self:
        r = PayloadReader(payload, "FirstCardBurned")
        msg = cls(r.u8(), r.u8())
        r.end()
        check_cards((msg.card,), "FirstCardBurned.card")
        return msg


@dataclass(frozen=True, slots=True)
class ShoeFault:
    """``round`` u32 (0 between rounds), ``code`` u8, ``index`` u8 (stack), ``detail`` str."""

    TYPE: ClassVar[int] = 0x27
    round: int
    code: ShoeFaultCode
    index: int
    detail: str = ""

    def to_payload(self) -> bytes:
        w = PayloadWriter().u32(self.round).u8(self.code).u8(self.index)
        return w.string(self.detail).getvalue()

    @classmethod
    def from_payload(cls, payload: bytes) -> Self:
        r = PayloadReader(payload, "ShoeFault")
        msg = cls(r.u32(), decode_enum(ShoeFaultCode, r.u8(), "ShoeFault.code"), r.u8(), r.string())
        r.end()
        return msg


@dataclass(frozen=True, slots=True)
class StubRemoved:
    """The dealer took the stub out: ``round`` u32, ``count`` u16 (0xFFFF: not counted)."""

    TYPE: ClassVar[int] = 0x28
    round: int
    count: int

    def to_payload(self) -> bytes:
        return PayloadWriter().u32(self.round).u16(self.count).getvalue()

    @classmethod
    def from_payload(cls, payload: bytes) -> Self:
        r = PayloadReader(payload, "StubRemoved")
        msg = cls(r.u32(), r.u16())
        r.end()
        return msg


@dataclass(frozen=True, slots=True)
class DealComplete:
    """``round`` u32, ``stacks`` u8 dispensed, ``cards`` u16 dispensed."""

    TYPE: ClassVar[int] = 0x29
    round: int
    stacks: int
    cards: int

    def to_payload(self) -> bytes:
        return PayloadWriter().u32(self.round).u8(self.stacks).u16(self.cards).getvalue()

    @classmethod
    def from_payload(cls, payload: bytes) -> Self:
        r = PayloadReader(payload, "DealComplete")
        msg = cls(r.u32(), r.u8(), r.u16())
        r.end()
        return msg


@dataclass(frozen=True, slots=True)
class DealRound(_RoundPlan):
    """Host → device: deal this round with this plan.
    NAK BUSY while dealing; NAK MALFORMED for an empty plan or a stack of 0 cards."""

    TYPE: ClassVar[int] = 0x40

    def _check(self) -> None:
        if not self.stacks or any(s.size == 0 for s in self.stacks):
            raise MalformedPayload("DealRound: empty plan or a stack of 0 cards")


PROTOCOL = MessageSet(
    "shoe",
    Identity,
    ShoeStatus,
    CardsLoaded,
    DealStarted,
    StackDispensed,
    Heartbeat,
    FaceUpCard,
    ShoeFault,
    StubRemoved,
    DealComplete,
    CardDrawn,
    FirstCardBurned,
    DealRound,
    QueryStatus,
    QueryIdentity,
)
