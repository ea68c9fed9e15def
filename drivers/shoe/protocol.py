"""The tableside dealing-shoe protocol, version 1: message set (sans-IO, no asyncio).

Byte-by-byte description: docs/protocols/shoe.md. Framing: tableside.drivers.framing. Common
messages (Identity, Heartbeat, QueryStatus, QueryIdentity): tableside.drivers.common.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, ClassVar

from tableside.drivers.common import (
    CardCode,
    CardOrZero,
    Cards,
    Heartbeat,
    Identity,
    QueryIdentity,
    QueryStatus,
    WireEnum,
)
from tableside.drivers.layout import U8, U16, U32, Field, Struct
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
class ShoeStatus(Struct):
    """``state`` u8, ``fault`` u8 (0 none), ``cards_loaded`` u16, ``cards_remaining`` u16."""

    TYPE: ClassVar[int] = 0x21
    state: ShoeState
    fault: ShoeFaultCode | None
    cards_loaded: U16
    cards_remaining: U16


@dataclass(frozen=True, slots=True)
class CardsLoaded(Struct):
    """Cards were put in the shoe (from the shuffler). ``count`` u16 (0xFFFF: not counted)."""

    TYPE: ClassVar[int] = 0x22
    count: U16


class _TargetByte(Field):
    """A stack target (drivers/shoe/plan.py), its byte."""

    __slots__ = ()

    def write(self, w: PayloadWriter, value: Target, what: str) -> None:
        w.u8(value.code)

    def read(self, r: PayloadReader, what: str) -> Target:
        return _target(r.u8(), what)


class _PlanList(Field):
    """A deal plan, the variable part written by hand: ``u8 n`` (at most 32), n x (``target``
    u8, ``size`` u8)."""

    __slots__ = ()

    def write(self, w: PayloadWriter, value: Plan, what: str) -> None:
        if len(value) > 32:
            raise ValueError(f"{len(value)} stacks exceed 32")
        w.u8(len(value))
        for stack in value:
            w.u8(stack.target.code).u8(stack.size)

    def read(self, r: PayloadReader, what: str) -> Plan:
        n = r.u8()
        if n > 32:
            raise MalformedPayload(f"{what}: {n} stacks exceed 32")
        return tuple(Stack(_target(r.u8(), what), r.u8()) for _ in range(n))


StackTarget = Annotated[Target, _TargetByte()]
DealPlan = Annotated[Plan, _PlanList()]


@dataclass(frozen=True, slots=True)
class _RoundPlan(Struct):
    """``round`` u32, then the plan: ``u8 n``, n x (``target, size``)."""

    round: U32
    stacks: DealPlan


@dataclass(frozen=True, slots=True)
class DealStarted(_RoundPlan):
    """The shoe began a round, following this plan."""

    TYPE: ClassVar[int] = 0x23


@dataclass(frozen=True, slots=True)
class StackDispensed(Struct):
    """One stack left the shoe: ``round`` u32, ``index`` u8 (in the plan), ``target`` u8,
    ``count`` u8 (cards in it), ``cards`` (their identities when the shoe reads cards)."""

    TYPE: ClassVar[int] = 0x24
    round: U32
    index: U8
    target: StackTarget
    count: U8
    cards: Cards = ()


@dataclass(frozen=True, slots=True)
class FaceUpCard(Struct):
    """A card was found face up: ``round`` u32, ``index`` u8 (stack), ``total`` u8 (face-up
    cards so far this round), ``card`` u8 (0 when the shoe cannot read it)."""

    TYPE: ClassVar[int] = 0x26
    round: U32
    index: U8
    total: U8
    card: CardOrZero = 0


@dataclass(frozen=True, slots=True)
class CardDrawn(Struct):
    """Baccarat: the dealer drew a card from a shoe that reads cards: ``round`` u32 (the coup),
    ``index`` u8 (0 the first card of the coup), ``card`` u8. The host assigns cards to the
    Player's and Banker's Hands in dealing order and checks the drawing rules."""

    TYPE: ClassVar[int] = 0x2A
    round: U32
    index: U8
    card: CardCode


@dataclass(frozen=True, slots=True)
class FirstCardBurned(Struct):
    """Baccarat: a new shoe's burn (543.5(g), 545.5(f)), before its first coup: ``card`` u8
    (the first card, shown), ``burned`` u8 (how many more cards went to the discard bucket
    unseen; the first card's value, a 10 or court card counting ten)."""

    TYPE: ClassVar[int] = 0x2B
    card: CardCode
    burned: U8


@dataclass(frozen=True, slots=True)
class ShoeFault(Struct):
    """``round`` u32 (0 between rounds), ``code`` u8, ``index`` u8 (stack), ``detail`` str."""

    TYPE: ClassVar[int] = 0x27
    round: U32
    code: ShoeFaultCode
    index: U8
    detail: str = ""


@dataclass(frozen=True, slots=True)
class StubRemoved(Struct):
    """The dealer took the stub out: ``round`` u32, ``count`` u16 (0xFFFF: not counted)."""

    TYPE: ClassVar[int] = 0x28
    round: U32
    count: U16


@dataclass(frozen=True, slots=True)
class DealComplete(Struct):
    """``round`` u32, ``stacks`` u8 dispensed, ``cards`` u16 dispensed."""

    TYPE: ClassVar[int] = 0x29
    round: U32
    stacks: U8
    cards: U16


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
