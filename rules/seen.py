"""What the table itself sees, for the rows to judge (``table.<kind>`` observations): one typed
record a shape, as a device's event is one (drivers/*/events.py). rules/table.py and
rules/commands.py make them (``Turn.observe``); the rows name their fields through the class
(``When(RoundStarts.shuffled, "==", False)``), which the type checker checks; a ruling given on
one cites ``data()``. ``kinds`` names the observation kinds a shape carries (``table.<kind>``):
``SEEN_BY_KIND`` is the catalogue the rows' triggers are checked against."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from tableside.drivers.named import Named
from tableside.drivers.shoe.plan import Target
from tableside.rules.hands import FiveCard
from tableside.rules.vocabulary import DealingMethod, Game, Phase, ShufflingMethod

__all__ = [
    "SEEN_BY_KIND",
    "BonusPaid",
    "Burn",
    "CardExposed",
    "ChipsCollected",
    "Coup",
    "DealPlanRefused",
    "DealtWhileHalted",
    "DeckInBoth",
    "DeviceInstalled",
    "DrawnInError",
    "FaceUpFound",
    "Gated",
    "HoleCardChecked",
    "InsurancePaid",
    "InsurancePlaced",
    "Misdeal",
    "Noted",
    "OtherMethod",
    "ProgressivePaid",
    "ReaderMalfunction",
    "RoundStarts",
    "ShoeBurn",
    "StubCount",
    "TableSeen",
    "TenFound",
    "WagersUnaccounted",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class TableSeen:
    """Something the table saw: stamped with the round the event leaves the table in."""

    kinds: ClassVar[tuple[str, ...]] = ()
    round: int = 0

    def data(self) -> dict[str, object]:
        """Its fields as a ruling cites them in JSON (``round`` first; a stack target, a hand
        by name)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {k: v.spelt() if isinstance(v, Named) else v for k, v in out.items()}


@dataclass(frozen=True, slots=True, kw_only=True)
class Noted(TableSeen):
    """A person's word the rows judge by itself (no fields of its own)."""

    kinds: ClassVar[tuple[str, ...]] = (
        "reader_inspected", "cover_card", "too_few_cards", "no_burn",
    )  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class Gated(TableSeen):
    """Spanish 21: a step judged against the up card, the reader and the round so far (551.8(e),
    551.10, 551.7)."""

    kinds: ClassVar[tuple[str, ...]] = (
        "more_cards", "insurance_collected", "match_the_dealer_settled",
    )  # fmt: skip
    up_card: str | None
    #: whether the up card sends the hole card through the reader; None: no up card yet
    gate: bool | None
    hole_card_checked: bool
    #: what the reader said of the hole card: a Blackjack or not (None: it has not said)
    blackjack: bool | None = None
    #: the dealer has dealt additional cards this round (``more_cards``)
    more_cards_dealt: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class InsurancePlaced(Gated):
    """Spanish 21: an Insurance Wager (551.10(a), (b)): with its amount and the player's
    initial wager when the dealer gave them, whether it is more than half of it (rounded up to
    the next chip, 551.10(b)); None: not given."""

    kinds: ClassVar[tuple[str, ...]] = ("insurance_placed",)
    over_half: bool | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class InsurancePaid(Gated):
    """Spanish 21: winning Insurance Wagers paid (551.10(a), (c)): whether at 2 to 1, when the
    dealer gave the wager and the payout (None: not given)."""

    kinds: ClassVar[tuple[str, ...]] = ("insurance_paid",)
    two_to_one: bool | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ReaderMalfunction(TableSeen):
    """Spanish 21: the card reader says it is not in working order other than by its fault
    event (its status says it malfunctions, or its self-test failed), while dealing is not
    halted for it already."""

    kinds: ClassVar[tuple[str, ...]] = ("reader_malfunction",)
    #: what said so: the reader's ``status`` or its ``self_test``
    how: str
    detail: str


@dataclass(frozen=True, slots=True, kw_only=True)
class HoleCardChecked(TableSeen):
    kinds: ClassVar[tuple[str, ...]] = ("hole_card_checked",)
    up_card: str | None
    gate: bool | None
    #: what the reader showed (None: it did not say)
    reveals: bool | None


@dataclass(frozen=True, slots=True, kw_only=True)
class RoundStarts(TableSeen):
    """A round starts: the table before it, as the ``table.round`` rows judge it."""

    kinds: ClassVar[tuple[str, ...]] = ("round",)
    shuffled: bool
    deck_age_h: float | None
    dealing: DealingMethod
    by_hand: bool
    from_shoe: bool
    shuffler_on_table: bool
    counting_shuffler: bool
    stub_count_overdue: bool
    same_deck: bool
    reader_inspected_today: bool
    game: Game
    past_last_hand: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class DealtWhileHalted(TableSeen):
    """Cards are dealt while dealing is halted: by a person's dealing command a floorperson
    overrode, or by a device that deals by itself (a shoe's round, a reading shoe's coup)."""

    kinds: ClassVar[tuple[str, ...]] = ("dealt_while_halted",)
    #: what dealt: the command (``start_round``, ``more_cards`` …) or the device's event
    how: str
    #: it starts a round (the ``table.round`` rows judge the round by themselves)
    round_start: bool
    #: the device whose halt is on (551.16(m): ``card_reader``), None: none
    halted_by: str | None
    #: the rule ids of the rulings that halt dealing now
    halting: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class OtherMethod(TableSeen):
    """Cards shuffled or dealt another way while a device is on the table."""

    kinds: ClassVar[tuple[str, ...]] = ("other_method",)
    #: how they were dealt, or shuffled (the device's own way is never reported)
    method: DealingMethod | ShufflingMethod
    device_class: str

    def data(self) -> dict[str, object]:
        """A shuffling method is spelt with ``_shuffle`` after it (``manual_shuffle``), beside
        the dealing methods' own names in the one field."""
        out = TableSeen.data(self)
        if isinstance(self.method, ShufflingMethod):
            out["method"] = f"{self.method.value}_shuffle"
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class StubCount(TableSeen):
    kinds: ClassVar[tuple[str, ...]] = ("stub_count",)
    count: int
    misdealt: bool
    full: bool
    dealing: DealingMethod


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceInstalled(TableSeen):
    kinds: ClassVar[tuple[str, ...]] = ("device_installed",)
    device_class: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ProgressivePaid(TableSeen):
    kinds: ClassVar[tuple[str, ...]] = ("progressive_paid",)
    seat: int
    hand: FiveCard
    cents: int
    meter_cents_before: int
    shared_by: int


@dataclass(frozen=True, slots=True, kw_only=True)
class BonusPaid(TableSeen):
    kinds: ClassVar[tuple[str, ...]] = ("bonus_paid",)
    seat: int
    hand: str
    dollars: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ChipsCollected(TableSeen):
    kinds: ClassVar[tuple[str, ...]] = ("chips_collected",)
    count: int
    accepted: int
    events_unaccounted: int
    resets_unaccounted: int
    game: Game
    #: how the round's cards are dealt: each dealing section asks for the count in its words
    dealing: DealingMethod


@dataclass(frozen=True, slots=True, kw_only=True)
class WagersUnaccounted(TableSeen):
    """A seat's acceptor took events that cannot be read (more than its buffer held, or a
    reset): its wagers are unaccounted for, judged by how the round is dealt."""

    kinds: ClassVar[tuple[str, ...]] = ("events_lost",)
    seat: int
    #: events lost; None: a reset, how many unknown
    lost: int | None
    dealing: DealingMethod


@dataclass(frozen=True, slots=True, kw_only=True)
class CardExposed(TableSeen):
    kinds: ClassVar[tuple[str, ...]] = ("card_exposed",)
    card: str
    phase: Phase


@dataclass(frozen=True, slots=True, kw_only=True)
class Misdeal(TableSeen):
    kinds: ClassVar[tuple[str, ...]] = ("misdeal",)
    target: Target
    count: int
    expected: int | None


@dataclass(frozen=True, slots=True, kw_only=True)
class FaceUpFound(TableSeen):
    """Spanish 21: a card found face up in the shoe this round (the count so far)."""

    kinds: ClassVar[tuple[str, ...]] = ("card_face_up",)
    found: int


@dataclass(frozen=True, slots=True, kw_only=True)
class TenFound(TableSeen):
    """Spanish 21: a ten found in the shoe this round (the count so far; no tens are in play)."""

    kinds: ClassVar[tuple[str, ...]] = ("ten_found",)
    found: int
    #: the dealer gave it as the up card
    up_card: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Burn(TableSeen):
    """Baccarat: cards to burn, by the rank of the first card or one found face up."""

    kinds: ClassVar[tuple[str, ...]] = ("first_card", "card_face_up_in_shoe")
    burn: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ShoeBurn(TableSeen):
    """Baccarat, from a shoe that reads cards: what it should have burned, and what it did."""

    kinds: ClassVar[tuple[str, ...]] = ("shoe_burn",)
    burn: int
    burned: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DrawnInError(TableSeen):
    kinds: ClassVar[tuple[str, ...]] = ("drawn_in_error",)
    disclosed: bool
    burn: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DealPlanRefused(TableSeen):
    """A shoe's deal plan that does not fit the game's dealing procedure."""

    kinds: ClassVar[tuple[str, ...]] = ("deal_plan",)
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class DeckInBoth(TableSeen):
    """Two decks: the one shuffled now is the one in play this round."""

    kinds: ClassVar[tuple[str, ...]] = ("deck_in_both",)
    deck: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Coup(TableSeen):
    """Baccarat: a coup as dealt, against 543.11 and its Table 1: who drew, and who should."""

    kinds: ClassVar[tuple[str, ...]] = ("coup",)
    extra_cards: int
    natural: bool
    player_drew: bool
    player_should_draw: bool
    #: a third card the Player's Hand was not allowed: "banker" or "next_hand" (543.14(b))
    player_third_goes_to: str | None
    banker_drew: bool
    banker_should_draw: bool
    player_points: int
    banker_points: int


_SHAPES: tuple[type[TableSeen], ...] = (
    Noted, Gated, HoleCardChecked, RoundStarts, DealtWhileHalted, OtherMethod, StubCount,
    DeviceInstalled, ProgressivePaid, BonusPaid, ChipsCollected, CardExposed, Misdeal,
    FaceUpFound, TenFound, Burn, ShoeBurn, DrawnInError, DealPlanRefused, DeckInBoth, Coup,
    WagersUnaccounted, ReaderMalfunction, InsurancePlaced, InsurancePaid,
)  # fmt: skip

#: ``<kind>`` (of ``table.<kind>``) → the shape the table sees it in
SEEN_BY_KIND: Mapping[str, type[TableSeen]] = {
    kind: shape for shape in _SHAPES for kind in shape.kinds
}
