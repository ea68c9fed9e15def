"""Events of the automated card shuffler."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tableside.drivers.cards import Card
from tableside.drivers.events import DeviceEvent, FaultReport, StatusReport
from tableside.drivers.shuffler.protocol import Deck, FaultCode, ShufflerState

__all__ = [
    "ShuffleCompleted",
    "ShuffleOrdered",
    "ShuffleStarted",
    "ShufflerFault",
    "ShufflerStatus",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ShufflerStatus(DeviceEvent, StatusReport):
    kind: ClassVar[str] = "status"
    state: ShufflerState
    fault: FaultCode | None
    shuffles: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ShuffleStarted(DeviceEvent):
    kind: ClassVar[str] = "shuffle_started"
    shuffle_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ShuffleCompleted(DeviceEvent):
    kind: ClassVar[str] = "shuffle_complete"
    card_fields: ClassVar[frozenset[str]] = frozenset({"missing_cards", "extra_cards"})
    shuffle_id: int
    card_count: int
    counted: bool
    deck: Deck
    back_colour: str
    missing_count: int
    extra_count: int
    missing_cards: tuple[Card, ...] = ()
    extra_cards: tuple[Card, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ShuffleOrdered(DeviceEvent):
    """The order a card-recognising shuffler made (and was fed): card identities, kept off the
    wire like any other (``card_fields``) unless ``publish_card_identities``."""

    kind: ClassVar[str] = "shuffle_order"
    card_fields: ClassVar[frozenset[str]] = frozenset({"output_cards", "input_cards"})
    shuffle_id: int
    deck: Deck
    output_count: int
    input_count: int
    output_cards: tuple[Card, ...] = ()
    input_cards: tuple[Card, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ShufflerFault(DeviceEvent, FaultReport):
    kind: ClassVar[str] = "fault"
    shuffle_id: int
    fault: FaultCode
    detail: str
