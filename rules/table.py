"""The table and its round, as a pure state machine: ``step(facts, state, event)`` returns the
next state and what the rule rows must judge. No I/O and no clock: time comes in with each
event, so a journal replayed gives the same table back.

Phases, in order (the chapters' dealing procedures, 555.8-555.11 and their like):
``closed`` → ``open`` (cards inspected, 555.4) → ``betting`` → ``no_more_bets`` → ``dealing``
→ ``decisions`` → ``settlement`` → ``complete`` → ``betting`` again.

What the state machine knows and the rows judge at the start of each round (``table.round``):
whether the cards were shuffled since the last round (555.5(a)), which deck of two is dealt
(555.3(b)(4)), how old the cards are and how they are dealt (555.3(c)), whether a shuffler is on
the table when cards are dealt by hand (555.9(a)(1)), rounds since the last stub count when no
counting shuffler is used (555.10(d)), dealing halted for a broken card reader (551.16(m)), and
the card reader's inspection for the gaming day (551.2(e)).

The table also keeps every ruling it gave with its lifecycle (open, escalated, acknowledged,
resolved: rules/rulings.py), so a restart or ``journal recover`` gives them back with the rest.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from tableside.drivers.card_reader.events import HoleCardChecked, ReaderStatus
from tableside.drivers.cctalk.events import EventsLost, WagerAccepted
from tableside.drivers.events import DeviceEvent
from tableside.drivers.progressive.events import ButtonPressed, LightsChanged
from tableside.drivers.shoe.events import (
    CardDrawn,
    CardsLoaded,
    DealCompleted,
    DealStarted,
    FirstCardBurned,
    StackDispensed,
)
from tableside.drivers.shuffler.events import ShuffleCompleted
from tableside.rules.hands import (
    FiveCard,
    baccarat_point,
    baccarat_value,
    banker_draws,
    five_card,
    player_draws,
)
from tableside.rules.model import Game, Observation, TableFacts
from tableside.rules.patterns import plan_misfit
from tableside.rules.paytables import MINIMUMS
from tableside.rules.progressive import PAYING_HANDS, payout
from tableside.rules.rulings import RulingRecord, acknowledge, escalate, open_rulings, resolve

__all__ = [
    "DealingMethod",
    "Phase",
    "ShufflingMethod",
    "TableEvent",
    "TableState",
    "step",
]


class Phase(enum.StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    BETTING = "betting"
    NO_MORE_BETS = "no_more_bets"
    DEALING = "dealing"
    DECISIONS = "decisions"
    SETTLEMENT = "settlement"
    COMPLETE = "complete"


class DealingMethod(enum.StrEnum):
    AUTOMATED_SHOE = "automated_shoe"
    MANUAL_SHOE = "manual_shoe"
    HAND = "hand"


class ShufflingMethod(enum.StrEnum):
    DEVICE = "device"
    MANUAL = "manual"


@dataclass(frozen=True, slots=True)
class Claim:
    """A progressive payout hand this round, and the steps of 555.12(b) recorded for it."""

    seat: int
    hand: str  # a FiveCard name, e.g. "royal_flush"
    lit: bool = False  # (2) the light on the seat's acceptor device is illuminated
    validated: bool = False  # (3) a floorperson validated it
    paid_cents: int | None = None

    def missing(self) -> list[str]:
        out = []
        if not self.lit:
            out.append(f"the light at seat {self.seat} is not lit")
        if not self.validated:
            out.append(f"no floorperson has validated seat {self.seat}")
        return out


@dataclass(frozen=True, slots=True)
class TableState:
    """Everything the table must remember between events; published retained, journaled,
    and taken back from the journal after a restart."""

    phase: Phase = Phase.CLOSED
    #: rounds begun since the table was first opened
    round: int = 0
    shuffled_since_last_round: bool = False
    rounds_since_stub_count: int = 0
    #: Unix time the cards now in play were put in play (opened, or new cards)
    cards_in_play_since: float | None = None
    dealing: DealingMethod = DealingMethod.AUTOMATED_SHOE
    shuffling: ShufflingMethod = ShufflingMethod.DEVICE
    #: device classes on the table (configured ones at start; removed / installed by command)
    devices: frozenset[str] = frozenset()
    #: two decks: the deck the shuffler last delivered, and the one dealt last round
    deck_ready: str | None = None
    deck_last_dealt: str | None = None
    #: dealing is halted until this device is repaired or replaced (551.16(m))
    halted_by: str | None = None
    #: the gaming day (the casino's, TableFacts.gaming_day) of the card reader's last
    #: floorperson inspection (551.2(e))
    reader_inspected_on: str | None = None
    #: the progressive meter, in millicents (rules/progressive.py); None: no progressive
    meter_millicents: int | None = None
    #: this round's progressive payout hands
    claims: tuple[Claim, ...] = ()
    #: wagers the acceptors accepted since betting opened (555.8(b): the chips must match)
    wagers_accepted: int = 0
    #: acceptor events since betting opened that could not be read (more than an acceptor's
    #: buffer held), and acceptor resets that lost an unknown number: its wagers are
    #: unaccounted for, and the chips are reconciled by hand (555.8(b))
    events_unaccounted: int = 0
    resets_unaccounted: int = 0
    #: Spanish 21, this round: the dealer's up card, whether the hole card went through the
    #: reader, cards found face up, tens found; and whether the reader lets a player learn the
    #: hole card (551.16(l)), as it reports or as configured
    up_card: str | None = None
    hole_card_checked: bool = False
    face_up_found: int = 0
    tens_found: int = 0
    reader_reveals: bool | None = None
    #: baccarat: the round in which the cover card came out (543.10(e)); None: not yet
    cover_card_round: int | None = None
    #: baccarat, from a shoe that reads cards: the coup being drawn (its number, the ranks so
    #: far, whether it has been judged). Never published: card values stay on the table.
    coup_round: int | None = None
    coup: tuple[int, ...] = ()
    coup_judged: int = 0  # how many of its cards the last judgement saw
    #: baccarat: a new shoe whose first-card burn (543.5(g), 545.5(f)) is still to come, and
    #: the coups dealt from the shoe in play
    burn_due: bool = False
    coups_in_shoe: int = 0
    #: the rulings given at this table, each with its lifecycle (rules/rulings.py): the
    #: unresolved ones, then the last few resolved; those that halt dealing stop a deal
    rulings: tuple[RulingRecord, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        # shallow (dataclasses.asdict deep-copies every field, the rulings too: 50x slower)
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        del out["coup"]  # card values stay on the table
        out["devices"] = sorted(self.devices)
        out["claims"] = [dataclasses.asdict(c) for c in self.claims]
        out["rulings"] = [r.to_dict() for r in self.rulings]
        return out

    @property
    def meter_cents(self) -> int | None:
        return None if self.meter_millicents is None else self.meter_millicents // 1000

    def claim(self, seat: int) -> Claim | None:
        return next((c for c in self.claims if c.seat == seat), None)

    def with_claim(self, claim: Claim) -> TableState:
        others = tuple(c for c in self.claims if c.seat != claim.seat)
        claims = tuple(sorted((*others, claim), key=lambda c: -c.seat))
        return dataclasses.replace(self, claims=claims)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TableState:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["devices"] = frozenset(values.get("devices", ()))
        values["phase"] = Phase(values.get("phase", Phase.CLOSED))
        values["dealing"] = DealingMethod(values.get("dealing", DealingMethod.AUTOMATED_SHOE))
        values["shuffling"] = ShufflingMethod(values.get("shuffling", ShufflingMethod.DEVICE))
        values["claims"] = tuple(Claim(**c) for c in values.get("claims", ()))
        values["rulings"] = tuple(RulingRecord.from_dict(r) for r in values.get("rulings", ()))
        return cls(**values)

    def deck_age_h(self, at: float) -> float | None:
        if self.cards_in_play_since is None:
            return None
        return round((at - self.cards_in_play_since) / 3600, 3)


@dataclass(frozen=True, slots=True)
class TableEvent:
    """Something that moves the table: a person's request (``open_table``…) or the daemon's
    own word (``rulings_opened``…) by name with its arguments in ``data``; or a device's event,
    ``device``, typed as its driver reported it (``kind`` then names it
    ``<device class>.<kind>``, for the published state's ``cause``). ``at`` is Unix time."""

    kind: str
    at: float
    data: Mapping[str, Any] = field(default_factory=dict)
    device: DeviceEvent | None = None

    @classmethod
    def of(cls, device_class: str, event: DeviceEvent, at: float) -> TableEvent:
        """A device's event, as the table takes it."""
        return cls(f"{device_class}.{event.kind}", at, device=event)


#: records what the rows must judge: ``observe("round", shuffled=False, …)``
Observe = Callable[..., None]

_SHOES = (DealingMethod.AUTOMATED_SHOE, DealingMethod.MANUAL_SHOE)
_RANKS = ("A", "2", "3", "4", "5", "6", "7", "8", "9", "10", "J", "Q", "K")
#: 551.8(e): an up card that sends the hole card through the reader
_READER_GATE = ("A", "K", "Q", "J")

#: cards each hand should get, by game (555.10(b), 557.10(b) with the dealer's sixth card,
#: 559.12(b) with two community cards after the discard)
_BACCARAT = frozenset({Game.BACCARAT, Game.MIDIBACCARAT})

_EXPECTED: dict[str, dict[str, int]] = {
    "caribbean_stud": {"seat": 5, "dealer": 5},
    "four_card_poker": {"seat": 5, "dealer": 6},
    "let_it_ride": {"seat": 3, "community": 2},
}


def step(
    facts: TableFacts, state: TableState, event: TableEvent
) -> tuple[TableState, list[Observation]]:
    """The next state, and ``table.*`` observations for the rule rows. Raises ValueError for an
    event the table cannot take (bad arguments), with the reason."""
    kind, at, data = event.kind, event.at, event.data
    seen: list[Observation] = []
    new = state

    def observe(what: str, **fields: Any) -> None:
        seen.append(Observation(f"table.{what}", "table", {"round": new.round, **fields}))

    # A device's event, typed as its driver reported it (drivers/*/events.py).
    match event.device:
        case None:
            pass  # a person's request or the daemon's own word: below, by name
        case ButtonPressed(button="no_more_bets" | "bets_open" as button):
            return step(facts, state, TableEvent(button, at))
        case DealStarted(plan=plan):
            new = _round_begins(state)
            observe("round", **_round_facts(facts, state, at))
            misfit = plan_misfit(facts.game, plan)
            if misfit is not None:
                observe("deal_plan", reason=misfit)
        case DealCompleted():
            new = dataclasses.replace(state, phase=Phase.DECISIONS)
        case ShuffleCompleted(deck=deck):
            new = _shuffled(state, deck, observe)
        case CardsLoaded() if facts.game in _BACCARAT:
            # a baccarat shoe says so when a new shoe starts: its burn comes first
            new = dataclasses.replace(state, burn_due=True, coups_in_shoe=0)
        case WagerAccepted():
            new = dataclasses.replace(state, wagers_accepted=state.wagers_accepted + 1)
            if facts.progressive is not None:
                added = _meter(facts, state) + facts.progressive.contribution_millicents()
                new = dataclasses.replace(new, meter_millicents=added)
        case EventsLost(lost=None):  # a reset: how many is unknown
            new = dataclasses.replace(state, resets_unaccounted=state.resets_unaccounted + 1)
        case EventsLost(lost=int(lost)):
            new = dataclasses.replace(state, events_unaccounted=state.events_unaccounted + lost)
        case LightsChanged(lit=lit):
            claims = tuple(dataclasses.replace(c, lit=c.seat in lit) for c in state.claims)
            new = dataclasses.replace(state, claims=claims)
        case ReaderStatus(reveals_hole_card=reveals):
            new = dataclasses.replace(state, reader_reveals=reveals)
        case HoleCardChecked():
            new = dataclasses.replace(state, hole_card_checked=True)
            observe("hole_card_checked", up_card=state.up_card,
                    gate=state.up_card in _READER_GATE if state.up_card else None,
                    reveals=state.reader_reveals)  # fmt: skip
        case FirstCardBurned(card=first, burned=burned):
            # the shoe's own report: the first card's value against the cards it burned
            value = _baccarat_burn("first_card", {"rank": first[:-1]})
            new = dataclasses.replace(state, burn_due=False)
            observe("shoe_burn", burn=value, burned=burned)
        case CardDrawn(round=coup_round):
            if coup_round != state.coup_round:
                state = _coup_begins(state, observe)
            new = _card_drawn(state, event.device, observe)
        case StackDispensed():
            new = _read_hand(facts, state, event.device)
    if event.device is not None:
        return new, seen

    match kind:
        case "open_table":
            since = state.cards_in_play_since or at
            new = dataclasses.replace(state, phase=Phase.OPEN, cards_in_play_since=since)
        case "close_table":
            new = dataclasses.replace(state, phase=Phase.CLOSED)
        case "bets_open":
            new = dataclasses.replace(state, phase=Phase.BETTING, wagers_accepted=0,
                                      events_unaccounted=0, resets_unaccounted=0)  # fmt: skip
        case "no_more_bets":
            new = dataclasses.replace(state, phase=Phase.NO_MORE_BETS)
        case "start_round":
            new = _round_begins(state)
            observe("round", **_round_facts(facts, state, at))
        case "deal_done":
            new = dataclasses.replace(state, phase=Phase.DECISIONS)
        case "reveal":
            new = dataclasses.replace(state, phase=Phase.SETTLEMENT)
        case "round_settled":
            new = dataclasses.replace(state, phase=Phase.COMPLETE)
        case "shuffled" if "shuffler" in state.devices:
            # A hand shuffle reported while the shuffler is on the table: another method
            # before the device was removed (555.14(g) and its like: the game's rows say
            # whether it is a ruling), the same as a declared manual shuffle; not the round's
            # shuffle the rules ask for.
            observe("other_method", method="manual_shuffle", device_class="shuffler")
        case "shuffled":
            new = _shuffled(state, data.get("deck"), observe)
        case "stub_count":
            count, misdealt = data.get("count"), data.get("misdealt", False)
            if not _is_int(count) or not isinstance(misdealt, bool):
                raise ValueError("stub_count: args count (an integer) and misdealt (true/false)")
            full = count in facts.full_deck_counts
            new = dataclasses.replace(state, rounds_since_stub_count=0)
            observe("stub_count", count=count, full=full, misdealt=misdealt,
                    dealing=state.dealing.value)  # fmt: skip
        case "declare_method":
            dealing, shuffling = data.get("dealing"), data.get("shuffling")
            try:
                dealt = DealingMethod(dealing) if dealing is not None else state.dealing
                shuffled = ShufflingMethod(shuffling) if shuffling is not None else state.shuffling
            except ValueError as exc:
                raise ValueError(f"declare_method: {exc}") from None
            new = dataclasses.replace(state, dealing=dealt, shuffling=shuffled)
            # 555.14(g): another method while the device is still on the table
            if shuffled is ShufflingMethod.MANUAL and "shuffler" in state.devices:
                observe("other_method", method="manual_shuffle", device_class="shuffler")
            if dealt is not DealingMethod.AUTOMATED_SHOE and "shoe" in state.devices:
                observe("other_method", method=dealt.value, device_class="shoe")
        case "device_removed" | "device_installed":
            device = data.get("device_class")
            if not isinstance(device, str) or not device:
                raise ValueError(f"{kind}: args device_class, e.g. shuffler")
            if kind == "device_removed":
                new = dataclasses.replace(state, devices=state.devices - {device})
            else:
                halt = None if state.halted_by == device else state.halted_by
                new = dataclasses.replace(state, devices=state.devices | {device}, halted_by=halt)
        case "halt":
            new = dataclasses.replace(state, halted_by=str(data.get("device_class")))
        case "new_cards":
            new = dataclasses.replace(state, cards_in_play_since=at, deck_ready=None,
                                      deck_last_dealt=None, cover_card_round=None,
                                      burn_due=facts.game in _BACCARAT,
                                      coups_in_shoe=0)  # fmt: skip
        case "reader_inspected":
            new = dataclasses.replace(state, reader_inspected_on=facts.gaming_day.of(at))
        case "chips_collected":
            chips = data.get("count")
            if not _is_int(chips) or chips < 0:
                raise ValueError("chips_collected: args count, the gaming chips collected")
            observe("chips_collected", count=chips, accepted=state.wagers_accepted,
                    events_unaccounted=state.events_unaccounted,
                    resets_unaccounted=state.resets_unaccounted,
                    game=facts.game.value)  # fmt: skip
        case "card_exposed":
            card = data.get("card")
            if card not in ("hole", "dealer"):
                raise ValueError("card_exposed: args card, hole or dealer")
            observe("card_exposed", card=card, phase=state.phase.value)
        case "misdeal":
            target, count = data.get("target"), data.get("count")
            expected = data.get(
                "expected",
                _EXPECTED.get(facts.game.value, {}).get(
                    "seat" if isinstance(target, str) and target.startswith("seat") else str(target)
                ),
            )
            if not isinstance(target, str) or not _is_int(count) or expected is None:
                raise ValueError(
                    "misdeal: args target (seat1..seat7, dealer, community) and "
                    "count (the cards it got); expected when the game has no rule"
                )
            observe("misdeal", target=target, count=count, expected=expected)  # fmt: skip
        case "up_card":
            rank = str(data.get("rank", "")).upper()
            if rank not in _RANKS:
                raise ValueError(f"up_card: args rank, one of {', '.join(_RANKS)}")
            if rank == "10" and facts.game is Game.SPANISH_21:
                # No tens are in play (551.3(a)): a 10 is not the dealer's card but a card
                # found in the shoe, torn up (551.16(b)); the up card is still to come.
                found = state.tens_found + 1
                new = dataclasses.replace(state, tens_found=found)
                observe("ten_found", found=found, up_card=True)
            else:
                new = dataclasses.replace(state, up_card=rank)
        case "more_cards" | "insurance_placed" | "insurance_collected" | "match_the_dealer_settled":
            observe(kind, up_card=state.up_card,
                    gate=state.up_card in _READER_GATE if state.up_card else None,
                    hole_card_checked=state.hole_card_checked)  # fmt: skip
        case "card_face_up" | "ten_found":
            field_name = "face_up_found" if kind == "card_face_up" else "tens_found"
            found = getattr(state, field_name) + 1
            new = dataclasses.replace(state, **{field_name: found})
            observe(kind, found=found)
        case "too_few_cards":
            observe(kind)
        case "first_card" if state.coups_in_shoe:
            raise ValueError(
                f"first_card: {state.coups_in_shoe} coups were dealt from this shoe; the first "
                "card is burned before a new shoe's first coup (543.5(g), 545.5(f))"
            )
        case "first_card" | "card_face_up_in_shoe":
            value = _baccarat_burn(kind, data)
            if kind == "first_card":
                new = dataclasses.replace(state, burn_due=False)
            observe(kind, burn=value)
        case "cover_card":
            new = dataclasses.replace(state, cover_card_round=state.round)
            observe(kind)
        case "drawn_in_error":
            disclosed = data.get("disclosed")
            if not isinstance(disclosed, bool):
                raise ValueError("drawn_in_error: args disclosed (true/false)")
            observe(kind, disclosed=disclosed, burn=1 if disclosed else 0)
        case "coup":
            new = _coup_begins(state, observe)
            observe(kind, **_coup(data))
        case "progressive_hand" | "validate_payout" | "pay_progressive":
            new = _progressive(facts, state, kind, data, observe)
        case "pay_bonus":
            observe("bonus_paid", **_bonus(facts, data))
        # -- rulings: given (by the daemon, as it publishes them), acknowledged, resolved,
        # escalated (rules/rulings.py)
        case "rulings_opened":
            new = dataclasses.replace(
                state, rulings=open_rulings(state.rulings, tuple(data["rulings"]), at)
            )
        case "acknowledge_ruling":
            new = dataclasses.replace(state, rulings=acknowledge(state.rulings, data, at))
        case "resolve_ruling":
            new = dataclasses.replace(state, rulings=resolve(state.rulings, data, at))
        case "escalate_rulings":
            new = dataclasses.replace(
                state, rulings=escalate(state.rulings, float(data["after_s"]), at)
            )
        case _:
            return state, []
    return new, seen


def _round_begins(state: TableState) -> TableState:
    """A round starts (the dealer's ``start_round`` or the shoe's ``deal_started``)."""
    return dataclasses.replace(
        state,
        phase=Phase.DEALING,
        round=state.round + 1,
        shuffled_since_last_round=False,
        rounds_since_stub_count=state.rounds_since_stub_count + 1,
        deck_last_dealt=state.deck_ready or state.deck_last_dealt,
        claims=(),
        up_card=None,
        hole_card_checked=False,
        face_up_found=0,
        tens_found=0,
    )


def _round_facts(facts: TableFacts, state: TableState, at: float) -> dict[str, Any]:
    """What the ``table.round`` rows judge as a round starts, from the table before it."""
    two_decks = state.deck_ready is not None and state.deck_last_dealt is not None
    return {
        "shuffled": state.shuffled_since_last_round,
        "deck_age_h": state.deck_age_h(at),
        "dealing": state.dealing.value,
        "by_hand": state.dealing is DealingMethod.HAND,
        "from_shoe": state.dealing in _SHOES,
        "shuffler_on_table": "shuffler" in state.devices,
        "counting_shuffler": facts.shuffler_counts and "shuffler" in state.devices,
        "stub_count_overdue": state.rounds_since_stub_count >= 5,
        "same_deck": two_decks and state.deck_ready == state.deck_last_dealt,
        "halted_by": state.halted_by,
        "reader_inspected_today": state.reader_inspected_on == facts.gaming_day.of(at),
        "game": facts.game.value,
        "past_last_hand": state.cover_card_round is not None
        and state.round + 1 > state.cover_card_round + 1,
    }


def _shuffled(state: TableState, deck: object, observe: Observe) -> TableState:
    """The cards were shuffled (the shuffler's ``shuffle_complete``, or the dealer's word):
    with two decks, the one shuffled now must not be the one in play this round."""
    ready = deck if deck in ("A", "B") else state.deck_ready
    in_play = state.phase in (Phase.DEALING, Phase.DECISIONS, Phase.SETTLEMENT)
    if deck in ("A", "B") and in_play and deck == state.deck_last_dealt:
        observe("deck_in_both", deck=deck)
    return dataclasses.replace(
        state, shuffled_since_last_round=True, deck_ready=ready if ready is None else str(ready)
    )


def _bonus(facts: TableFacts, data: Mapping[str, Any]) -> dict[str, Any]:
    """Let It Ride Bonus (559.8(c)): a winning hand is paid the amount of the pay table,
    559.14(d) or the casino's higher one; three of a kind or better wins."""
    if facts.game.value != "let_it_ride":
        raise ValueError("pay_bonus: the Let It Ride Bonus is Let It Ride's (559.8)")
    seat = _seat("pay_bonus", data)
    table = facts.bonus_pays or MINIMUMS["let_it_ride_bonus"]
    hand = str(data.get("hand"))
    if hand not in table:
        raise ValueError(f"pay_bonus: hand must be one of {', '.join(table)} (559.14(d)); "
                         "a lesser hand loses the wager")  # fmt: skip
    return {"seat": seat, "hand": hand, "dollars": table[hand]}


def _read_hand(facts: TableFacts, state: TableState, stack: StackDispensed) -> TableState:
    """A shoe that reads cards shows a player's five-card hand: a progressive payout hand is
    recorded at once (555.12(b)(1), "verify that the hand is a winning hand"), ranked as 555.6
    ranks it. The cards stay on the table; only the hand's name is kept."""
    target, cards = stack.target, stack.cards
    if facts.progressive is None or not target.startswith("seat") or len(cards) != 5:
        return state
    try:
        hand = five_card([_card(c) for c in cards])[0]
        seat = int(target.removeprefix("seat"))
    except ValueError:
        return state  # not cards this table can read: the dealer records the hand instead
    if FiveCard(hand) not in PAYING_HANDS or state.claim(seat) is not None:
        return state
    return state.with_claim(Claim(seat, FiveCard(hand).name.lower()))


def _card(name: str) -> tuple[int, int]:
    """``"AS"``, ``"10H"`` → (rank, suit), as drivers/cards.py names them."""
    rank, suit = str(name)[:-1], str(name)[-1:]
    if rank not in _RANKS or suit not in "CDHS" or not suit:
        raise ValueError(f"no card {name!r}")
    return _RANKS.index(rank) + 1, "CDHS".index(suit)


def _meter(facts: TableFacts, state: TableState) -> int:
    """The meter in millicents: as kept, or the initial amount before the first wager."""
    if state.meter_millicents is not None:
        return state.meter_millicents
    return 0 if facts.progressive is None else facts.progressive.initial_cents * 1000


def _is_int(value: object) -> TypeGuard[int]:
    """An integer, and not a bool (which Python counts as one: ``count = true`` is no count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _seat(kind: str, data: Mapping[str, Any]) -> int:
    seat = data.get("seat")
    if not _is_int(seat) or not 1 <= seat <= 7:
        raise ValueError(f"{kind}: args seat, a betting position 1-7")
    return seat


def _progressive(
    facts: TableFacts, state: TableState, kind: str, data: Mapping[str, Any], observe: Observe
) -> TableState:
    """555.12(b): before a progressive hand is paid, (1) it wins, (2) the seat's light is lit,
    (3) a floorperson validated it; 555.13(f): paid at the meter as it stands at its turn, and
    royal flushes share the meter."""
    table = facts.progressive
    if table is None:
        raise ValueError(f"{kind}: this table has no progressive pay table ([progressive])")
    seat = _seat(kind, data)
    claim = state.claim(seat)
    if kind == "progressive_hand":
        names = [h.name.lower() for h in PAYING_HANDS]
        hand = data.get("hand")
        if hand not in names:
            raise ValueError(f"progressive_hand: hand must be one of {', '.join(names)}")
        if claim is not None and claim.paid_cents is not None:
            raise ValueError(f"progressive_hand: seat {seat} has been paid this round")
        return state.with_claim(Claim(seat, str(hand)))
    if claim is None:
        raise ValueError(f"{kind}: no progressive hand recorded at seat {seat} this round")
    if claim.paid_cents is not None:
        raise ValueError(f"{kind}: seat {seat} has been paid this round")
    if kind == "validate_payout":
        return state.with_claim(dataclasses.replace(claim, validated=True))
    # pay_progressive: every step, and in turn (from the dealer's right: the highest seat first)
    missing = claim.missing()
    if missing:
        raise ValueError(f"pay_progressive: not paid: {'; '.join(missing)}")
    before = [c.seat for c in state.claims if c.seat > seat and c.paid_cents is None]
    if before:
        raise ValueError(f"pay_progressive: seat {before[-1]} is paid first (from the dealer's "
                         "right)")  # fmt: skip
    meter = _meter(facts, state)
    hand = FiveCard[claim.hand.upper()]
    if hand is FiveCard.ROYAL_FLUSH:
        royals = [c for c in state.claims if c.hand == "royal_flush"]
        waiting = [m for c in royals for m in c.missing()]
        if waiting:
            raise ValueError("pay_progressive: the royal flushes share the meter and are paid "
                             f"together: {'; '.join(waiting)}")  # fmt: skip
        share, after = payout(table, hand, meter, royal_flushes=len(royals))
        new = state
        for royal in royals:
            new = new.with_claim(dataclasses.replace(royal, paid_cents=share))
            observe("progressive_paid", seat=royal.seat, hand=royal.hand, cents=share,
                    meter_cents_before=meter // 1000, shared_by=len(royals))  # fmt: skip
        return dataclasses.replace(new, meter_millicents=after)
    amount, after = payout(table, hand, meter)
    observe("progressive_paid", seat=seat, hand=claim.hand, cents=amount,
            meter_cents_before=meter // 1000, shared_by=1)  # fmt: skip
    paid = state.with_claim(dataclasses.replace(claim, paid_cents=amount))
    return dataclasses.replace(paid, meter_millicents=after)


def _coup_begins(state: TableState, observe: Observe) -> TableState:
    """A coup is dealt from the shoe (by the dealer's word or a shoe that reads cards): a new
    shoe's first coup without its burn is a ruling, given once."""
    if state.burn_due:
        observe("no_burn")
    return dataclasses.replace(state, burn_due=False, coups_in_shoe=state.coups_in_shoe + 1)


def _card_drawn(state: TableState, drawn: CardDrawn, observe: Observe) -> TableState:
    """A baccarat shoe that reads cards reports each card drawn: the table deals them to the
    Player's and Banker's Hands in order (543.9(c), 543.10) and judges the coup against the
    drawing rules as soon as it is complete, has a card too many, or (when the next coup
    starts) stayed short."""
    try:
        rank = _card(drawn.card)[0]
    except ValueError:
        return state  # an unreadable card: the dealer reports the coup instead
    coup_round = drawn.round
    if coup_round != state.coup_round:
        if state.coup_judged == 0 and len(state.coup) >= 4:  # it stayed short
            observe("coup", **_coup(_split(state.coup)))
        state = dataclasses.replace(state, coup_round=coup_round, coup=(), coup_judged=0,
                                    round=state.round + 1, phase=Phase.DEALING)  # fmt: skip
    new = dataclasses.replace(state, coup=(*state.coup, rank))
    if len(new.coup) < 4:
        return new
    due = _due(new.coup)
    # complete: judged once; a card after that is one too many: judged again, with it
    if due is not None and len(new.coup) >= due and len(new.coup) > new.coup_judged:
        observe("coup", **_coup(_split(new.coup)))
        return dataclasses.replace(new, coup_judged=len(new.coup))
    return new


def _due(ranks: tuple[int, ...]) -> int | None:
    """How many cards this coup should have by the drawing rules (None: not known yet)."""
    p, b = baccarat_point(ranks[0:3:2]), baccarat_point(ranks[1:4:2])
    if not player_draws(p, b):
        return 5 if banker_draws(p, b, None) else 4
    if len(ranks) < 5:
        return None
    return 6 if banker_draws(p, b, baccarat_value(ranks[4])) else 5


def _split(ranks: tuple[int, ...]) -> dict[str, list[str]]:
    """The coup's cards to the hands, in dealing order: P B P B, then the Player's third when
    it was due (or when nobody's was: 543.14(b)'s case), then the Banker's."""
    names = [_RANKS[r - 1] for r in ranks]
    player, banker = [names[0], names[2]], [names[1], names[3]]
    p, b = baccarat_point(ranks[0:3:2]), baccarat_point(ranks[1:4:2])
    rest = names[4:]
    if rest:
        to_banker_first = not player_draws(p, b) and banker_draws(p, b, None)
        (banker if to_banker_first else player).append(rest.pop(0))
    # what is left: the Player's third if it has none (a card no rule allowed, 543.14(b)),
    # then the Banker's
    for hand in (player, banker):
        if rest and len(hand) < 3:
            hand.append(rest.pop(0))
    return {"player": player, "banker": banker, "extra": rest}


def _baccarat_burn(kind: str, data: Mapping[str, Any]) -> int:
    """How many cards more are burned. The first card of a shoe (543.5(g), 545.5(f)) counts a
    10, jack, queen or king as ten; a card found face up (543.14(d), 545.15(d)) burns "the value
    of the card", and 543.6(a)(2) gives those a value of zero. An ace is one either way."""
    rank = str(data.get("rank", "")).upper()
    if rank not in _RANKS:
        raise ValueError(f"{kind}: args rank, one of {', '.join(_RANKS)}")
    if kind == "first_card":
        return 1 if rank == "A" else 10 if rank in ("10", "J", "Q", "K") else int(rank)
    return baccarat_value(_RANKS.index(rank) + 1)


def _coup(data: Mapping[str, Any]) -> dict[str, Any]:
    """A coup as dealt (from a shoe that reads cards, or the dealer) against 543.11 and its
    Table 1: who drew, and who should have."""

    def ranks(side: str) -> list[int]:
        cards = data.get(side)
        if not isinstance(cards, list) or not 2 <= len(cards) <= 3:
            raise ValueError(f'coup: args {side}, its two or three cards, e.g. ["K", "7"]')
        out = []
        for card in cards:
            text = str(card).upper()
            if text not in _RANKS:
                raise ValueError(f"coup: {card!r} is no card rank ({', '.join(_RANKS)})")
            out.append(_RANKS.index(text) + 1)
        return out

    player, banker = ranks("player"), ranks("banker")
    p, b = baccarat_point(player[:2]), baccarat_point(banker[:2])
    natural = p >= 8 or b >= 8
    player_should = player_draws(p, b)
    extra = data.get("extra") or []
    extra_cards = len(extra) if isinstance(extra, list) else 0
    banker_drew = len(banker) == 3
    # 543.14(b), 545.15(b): a third card the Player's Hand was not allowed is the Banker's
    # third when the Banker must draw (judged as if the Player stood), else the first card of
    # the next hand. The Banker is then judged with that card where the clause puts it, never
    # with it as the Player's third.
    in_error = not natural and len(player) == 3 and not player_should
    if in_error:
        banker_should = banker_draws(p, b, None)
        goes = "banker" if banker_should else "next_hand"
        if goes == "banker":
            extra_cards += banker_drew  # the Banker's own third card is one card too many
            banker_drew = True
    else:
        third = baccarat_value(player[2]) if len(player) == 3 else None
        banker_should, goes = banker_draws(p, b, third), None
    return {
        "extra_cards": extra_cards,
        "natural": natural,
        "player_drew": len(player) == 3,
        "player_should_draw": player_should,
        "player_third_goes_to": goes,
        "banker_drew": banker_drew,
        "banker_should_draw": banker_should,
        "player_points": baccarat_point(player[:2] if in_error else player),
        "banker_points": baccarat_point(banker),
    }
