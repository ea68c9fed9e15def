"""Events of the automated dealing shoe."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tableside.drivers.cards import Card
from tableside.drivers.events import DeviceEvent, FaultReport, StatusReport
from tableside.drivers.shoe.plan import Plan, Target
from tableside.drivers.shoe.protocol import ShoeFaultCode, ShoeState

__all__ = [
    "CardDrawn",
    "CardFaceUp",
    "CardsLoaded",
    "DealCompleted",
    "DealStarted",
    "FirstCardBurned",
    "ShoeFault",
    "ShoeStatus",
    "StackDispensed",
    "StubRemoved",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ShoeStatus(DeviceEvent, StatusReport):
    kind: ClassVar[str] = "status"
    state: ShoeState
    fault: ShoeFaultCode | None
    cards_loaded: int
    cards_remaining: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CardsLoaded(DeviceEvent):
    kind: ClassVar[str] = "cards_loaded"
    count: int | None  # None: the shoe did not count


@dataclass(frozen=True, slots=True, kw_only=True)
class DealStarted(DeviceEvent):
    kind: ClassVar[str] = "deal_started"
    round: int
    plan: Plan  # JSON: [{"target": "seat1", "size": 5}, …]


@dataclass(frozen=True, slots=True, kw_only=True)
class StackDispensed(DeviceEvent):
    kind: ClassVar[str] = "stack_dispensed"
    card_fields: ClassVar[frozenset[str]] = frozenset({"cards"})
    round: int
    index: int
    target: Target
    count: int
    expected: int | None  # the plan's size for this stack, when known
    cards: tuple[Card, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class CardFaceUp(DeviceEvent):
    kind: ClassVar[str] = "card_face_up"
    card_fields: ClassVar[frozenset[str]] = frozenset({"card"})
    round: int
    index: int
    total: int  # face-up cards so far in this round (555.14(b): one vs more than one)
    card: Card | None = None  # None: the shoe could not read it


@dataclass(frozen=True, slots=True, kw_only=True)
class CardDrawn(DeviceEvent):
    """Baccarat: a card drawn from a shoe that reads cards (its identity stays on the table)."""

    kind: ClassVar[str] = "card_drawn"
    card_fields: ClassVar[frozenset[str]] = frozenset({"card"})
    round: int
    index: int
    card: Card


@dataclass(frozen=True, slots=True, kw_only=True)
class FirstCardBurned(DeviceEvent):
    """Baccarat: a new shoe's first card, shown, and how many more cards the shoe burned."""

    kind: ClassVar[str] = "first_card_burned"
    card_fields: ClassVar[frozenset[str]] = frozenset({"card"})
    card: Card
    burned: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ShoeFault(DeviceEvent, FaultReport):
    kind: ClassVar[str] = "fault"
    round: int
    fault: ShoeFaultCode
    index: int
    detail: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StubRemoved(DeviceEvent):
    kind: ClassVar[str] = "stub_removed"
    round: int
    count: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class DealCompleted(DeviceEvent):
    kind: ClassVar[str] = "deal_complete"
    round: int
    stacks: int
    cards: int
    expected_stacks: int | None
    expected_cards: int | None
