"""The table and its round, as a pure state machine: ``step(facts, state, event)`` returns the
next state and what the rule rows must judge. No I/O and no clock: time comes in with each
event, so a journal replayed gives the same table back.

Phases, in order (the chapters' dealing procedures, 555.8-555.11 and their like):
``closed`` → ``open`` (cards inspected, 555.4) → ``betting`` → ``no_more_bets`` → ``dealing``
→ ``decisions`` → ``settlement`` → ``complete`` → ``betting`` again: every move in one table,
rules/commands.py ``TRANSITIONS``, keyed by what makes it: the declared command, or the device
event's type (``EVENT_TRANSITIONS`` here, where the events are dispatched).

What moves the table is a ``TableEvent``: a device's event (``DeviceReport``, dispatched by its
type to its handler here), a person's command (``Said``: its handler is declared with it in
rules/commands.py and takes its arguments as they were parsed), or one of the daemon's own
words (``RulingsOpened``, ``Halt``, ``EscalateRulings``), which no person can give.

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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from tableside.drivers.card_reader.events import HoleCardChecked, ReaderStatus, SelfTestResult
from tableside.drivers.cards import Card
from tableside.drivers.cctalk.events import EventsLost, WagerAccepted
from tableside.drivers.events import DeviceEvent
from tableside.drivers.progressive.events import Button, ButtonPressed, LightsChanged
from tableside.drivers.shoe.events import (
    CardDrawn,
    CardFaceUp,
    CardsLoaded,
    DealCompleted,
    DealStarted,
    FirstCardBurned,
    StackDispensed,
    StubRemoved,
)
from tableside.drivers.shoe.plan import Target
from tableside.drivers.shuffler.events import ShuffleCompleted
from tableside.rules.baccarat import burn, stayed_short, to_judge
from tableside.rules.hands import FiveCard, five_card
from tableside.rules.model import Observation, TableFacts
from tableside.rules.patterns import plan_misfit, stack_size
from tableside.rules.progressive import PAYING_HANDS
from tableside.rules.rulings import (
    RulingRecord,
    end_halt,
    end_halts,
    escalate,
    halt_ends,
    open_rulings,
)
from tableside.rules.seen import (
    DealPlanRefused,
    DealtWhileHalted,
    DeckInBoth,
    Noted,
    ReaderMalfunction,
    RoundStarts,
    ShoeBurn,
    StubCount,
    TableSeen,
    TenFound,
    WagersUnaccounted,
)
from tableside.rules.seen import HoleCardChecked as HoleCardSeen
from tableside.rules.vocabulary import DealingMethod, Game, Phase, ShufflingMethod

__all__ = [
    "BUTTONS",
    "EVENT_TRANSITIONS",
    "Claim",
    "DealingMethod",
    "DeviceReport",
    "EscalateRulings",
    "Halt",
    "HaltEnded",
    "Phase",
    "RulingsOpened",
    "Said",
    "ShufflingMethod",
    "TableEvent",
    "TableState",
    "Turn",
    "dealt",
    "halting_rules",
    "leads_to",
    "new_cards",
    "reader_malfunction",
    "stays_in",
    "step",
    "ten_found",
]


@dataclass(frozen=True, slots=True)
class Claim:
    """A progressive payout hand this round, and the steps of 555.12(b) recorded for it."""

    seat: int
    hand: FiveCard
    lit: bool = False  # (2) the light on the seat's acceptor device is illuminated
    validated: bool = False  # (3) a floorperson validated it
    paid_cents: int | None = None

    def to_dict(self) -> dict[str, object]:
        """As the table's state is journaled and published: the hand by its name."""
        return {"seat": self.seat, "hand": self.hand.spelt(), "lit": self.lit,
                "validated": self.validated, "paid_cents": self.paid_cents}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Claim:
        return cls(**{**data, "hand": FiveCard.named(data["hand"])})

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
    #: Spanish 21, this round: what the reader said of the hole card (a Blackjack or not;
    #: None: it has not said), and whether the dealer dealt additional cards (``more_cards``)
    blackjack: bool | None = None
    more_cards_dealt: bool = False
    #: an automated shoe's round: the cards it dealt (its deal_complete; None: not yet) and
    #: whether a stack had another count than the game's (a misdeal), for its stub count
    shoe_dealt: int | None = None
    shoe_misdealt: bool = False
    #: baccarat: the round in which the cover card came out (543.10(e)); None: not yet
    cover_card_round: int | None = None
    #: baccarat, from a shoe that reads cards: the coup being drawn (its number, the ranks so
    #: far, whether it has been judged). Never published: card values stay on the table.
    coup_round: int | None = None
    coup: tuple[int, ...] = ()
    coup_judged: int = 0  # how many of its cards the last judgement saw
    #: baccarat: the round the last coup was dealt in (the dealer's or a reading shoe's): the
    #: next coup is a round of its own
    coup_dealt_in: int | None = None
    #: baccarat: a new shoe whose first-card burn (543.5(g), 545.5(f)) is still to come, and
    #: the coups dealt from the shoe in play
    burn_due: bool = False
    coups_in_shoe: int = 0
    #: the rulings given at this table, each with its lifecycle (rules/rulings.py): the
    #: unresolved ones, then the last few resolved; those that halt dealing stop a deal
    rulings: tuple[RulingRecord, ...] = ()

    def to_dict(self) -> dict[str, object]:
        # shallow (dataclasses.asdict deep-copies every field, the rulings too: 50x slower)
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        del out["coup"]  # card values stay on the table
        out["devices"] = sorted(self.devices)
        out["claims"] = [c.to_dict() for c in self.claims]
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
        values["claims"] = tuple(Claim.from_dict(c) for c in values.get("claims", ()))
        values["rulings"] = tuple(RulingRecord.from_dict(r) for r in values.get("rulings", ()))
        return cls(**values)

    def deck_age_h(self, at: float) -> float | None:
        if self.cards_in_play_since is None:
            return None
        return round((at - self.cards_in_play_since) / 3600, 3)


@dataclass(frozen=True, slots=True)
class DeviceReport:
    """A device's event, typed as its driver reported it; ``kind`` names it
    ``<device class>.<kind>`` (the published state's ``cause``). ``at`` is Unix time."""

    kind: str
    at: float
    event: DeviceEvent

    @classmethod
    def of(cls, device_class: str, event: DeviceEvent, at: float) -> DeviceReport:
        """A device's event, as the table takes it."""
        return cls(f"{device_class}.{event.kind}", at, event)


@dataclass(frozen=True, slots=True)
class Said:
    """A person's command to the table (rules/commands.py ``Command.said``): its handler,
    bound to the arguments as they were parsed."""

    kind: str
    at: float
    handler: Callable[[Turn], TableState] = field(compare=False)
    #: its command's row of rules/commands.py ``TRANSITIONS`` (None: no row, the phase stays)
    moves: Mapping[Phase, Phase] | None = None


# -- the daemon's own words: not people's commands, and never given by one ------------------


@dataclass(frozen=True, slots=True)
class RulingsOpened:
    """The daemon published these rulings: they join the table's, each open."""

    rulings: tuple[RulingRecord, ...]
    at: float
    kind: ClassVar[str] = "rulings_opened"


@dataclass(frozen=True, slots=True)
class Halt:
    """A device's ruling halts dealing until that device is repaired or replaced."""

    device_class: str
    at: float
    kind: ClassVar[str] = "halt"


@dataclass(frozen=True, slots=True)
class EscalateRulings:
    """Rulings nobody acknowledged within ``after_s`` escalate."""

    after_s: float
    at: float
    kind: ClassVar[str] = "escalate_rulings"


@dataclass(frozen=True, slots=True)
class HaltEnded:
    """The end a halting alert names was seen by the daemon, not by the rows (a software check
    that passed: daemon/software.py): its rulings stop halting dealing."""

    rule_id: str
    at: float
    kind: ClassVar[str] = "halt_ended"


#: everything that moves the table
TableEvent = DeviceReport | Said | RulingsOpened | Halt | EscalateRulings | HaltEnded
_TABLE_EVENTS = (DeviceReport, Said, RulingsOpened, Halt, EscalateRulings, HaltEnded)


#: a ``table.<kind>`` with no fields of its own
_NOTED = Noted()


@dataclass(slots=True)
class Turn:
    """One event being taken: the table as it was, and what the rows must judge of it
    (``observe("round", RoundStarts(shuffled=False, …))``, rules/seen.py; stamped with the
    round the event leaves the table in, unless ``round`` is given)."""

    facts: TableFacts
    state: TableState
    kind: str
    at: float
    notes: list[tuple[str, int | None, TableSeen]] = field(default_factory=list)

    def observe(self, what: str, seen: TableSeen = _NOTED, *, round: int | None = None) -> None:
        if what not in seen.kinds:
            raise TypeError(f"table.{what} is not seen as {type(seen).__name__} (rules/seen.py)")
        self.notes.append((what, round, seen))


def leads_to(target: Phase, phases: Iterable[Phase]) -> dict[Phase, Phase]:
    """A row of a transition table: taken in ``phases``, it leads to ``target``."""
    return dict.fromkeys(phases, target)


def stays_in(phases: Iterable[Phase]) -> dict[Phase, Phase]:
    """A row of a transition table: taken in ``phases``, it leaves the phase as it is."""
    return {p: p for p in phases}


#: what a device's event does to the table's phase, h11's way, keyed by its type: {a phase:
#: the phase it leads to}. A device's event is never refused (the device says what happened):
#: in a phase not in its row it leaves the phase as it is. A person's command has its row in
#: rules/commands.py ``TRANSITIONS`` (the one table of every move), keyed by the declared
#: command, and brings it here with it (``Said.moves``).
EVENT_TRANSITIONS: Mapping[type[DeviceEvent], Mapping[Phase, Phase]] = {
    DealStarted: leads_to(Phase.DEALING, Phase),
    DealCompleted: leads_to(Phase.DECISIONS, Phase),
}

#: the control device's buttons: the phase each leads to, whatever the phase (the device says
#: it was pressed), as a person's ``no_more_bets`` and ``bets_open`` do in theirs
BUTTONS: Mapping[Button, Phase] = {
    Button.NO_MORE_BETS: Phase.NO_MORE_BETS,
    Button.BETS_OPEN: Phase.BETTING,
}


def step(
    facts: TableFacts, state: TableState, event: TableEvent
) -> tuple[TableState, list[Observation]]:
    """The next state, and ``table.*`` observations for the rule rows. Raises ``Refused`` for a
    command the table does not take (what its handler checks), with the reason; anything else
    it raises is a fault of the table's own (TypeError for what is not a ``TableEvent``)."""
    if not isinstance(event, _TABLE_EVENTS):
        raise TypeError(f"the table takes a TableEvent, not {event!r}")
    turn = Turn(facts, state, event.kind, event.at)
    match event:
        case DeviceReport(event=reported):
            new = _reported(turn, reported)
        case Said(moves=moves):
            new = _lead(moves, state.phase, event.handler(turn))
        case RulingsOpened(rulings=given):
            new = dataclasses.replace(state, rulings=open_rulings(state.rulings, given, event.at))
        case Halt(device_class=device):
            new = dataclasses.replace(state, halted_by=device)
        case EscalateRulings(after_s=after):
            new = dataclasses.replace(state, rulings=escalate(state.rulings, after, event.at))
        case HaltEnded(rule_id=rule_id):
            new = dataclasses.replace(state, rulings=end_halt(state.rulings, rule_id, event.at))
    seen = [Observation(f"table.{what}", "table",
                        dataclasses.replace(noted, round=new.round if round_ is None else round_))
            for what, round_, noted in turn.notes]  # fmt: skip
    return _halts_end(facts, new, event, seen), seen


def _lead(row: Mapping[Phase, Phase] | None, phase: Phase, state: TableState) -> TableState:
    """``state`` in the phase its transition ``row`` leads to from ``phase`` (None: no row)."""
    target = (row or {}).get(phase)
    if target is None or target is state.phase:
        return state
    return dataclasses.replace(state, phase=target)


# -- a device's event, dispatched by its type -------------------------------------------------

_DeviceHandler = Callable[[Turn, DeviceEvent], TableState]
_ON: dict[type[DeviceEvent], _DeviceHandler] = {}
E = TypeVar("E", bound=DeviceEvent)


def _on(
    kind: type[E],
) -> Callable[[Callable[[Turn, E], TableState]], Callable[[Turn, E], TableState]]:
    """Declares the table's handler for one type of device event."""

    def declare(handler: Callable[[Turn, E], TableState]) -> Callable[[Turn, E], TableState]:
        def run(turn: Turn, event: DeviceEvent) -> TableState:
            assert isinstance(event, kind)  # _reported looked it up by this type
            return handler(turn, event)

        _ON[kind] = run
        return handler

    return declare


def _reported(turn: Turn, event: DeviceEvent) -> TableState:
    """A device's event moves the table by its type's handler; an event of a type the table
    has none for (a status, a heartbeat …) leaves it as it is."""
    handler = _ON.get(type(event))
    if handler is None:
        return turn.state
    return _lead(EVENT_TRANSITIONS.get(type(event)), turn.state.phase, handler(turn, event))


@_on(ButtonPressed)
def _button(turn: Turn, event: ButtonPressed) -> TableState:
    """The control device's buttons: what a person's ``no_more_bets`` and ``bets_open`` do,
    whatever the phase (the device says it was pressed)."""
    phase = BUTTONS.get(event.button)
    if phase is None:  # a button the table does not know leaves it as it is
        return turn.state
    state = open_betting(turn.state) if event.button == Button.BETS_OPEN else turn.state
    return dataclasses.replace(state, phase=phase)


@_on(DealStarted)
def _deal_started(turn: Turn, event: DealStarted) -> TableState:
    new = round_begins(turn)
    misfit = plan_misfit(turn.facts.game, event.plan)
    if misfit is not None:
        turn.observe("deal_plan", DealPlanRefused(reason=misfit))
    return new


@_on(DealCompleted)
def _deal_completed(turn: Turn, event: DealCompleted) -> TableState:
    return dataclasses.replace(turn.state, shoe_dealt=event.cards)  # the phase: EVENT_TRANSITIONS


@_on(StubRemoved)
def _stub_removed(turn: Turn, event: StubRemoved) -> TableState:
    """An automated shoe that counts its stub says how many cards are left after its round:
    with the cards it dealt and those found face up, that is a stub count (555.10(f),
    557.10(f), 559.12(f)), and one that is not the whole deck is judged as the dealer's is
    (misdealt or not, by the round's stacks). The dealer still counts at least every five
    rounds (555.10(d): "by counting the cards face down on the layout")."""
    state = turn.state
    if event.count is None or state.shoe_dealt is None:
        return state
    total = state.shoe_dealt + state.face_up_found + event.count
    full = total in turn.facts.full_deck_counts
    if not full:
        turn.observe("stub_count", StubCount(
            count=total, misdealt=state.shoe_misdealt, full=full,
            dealing=DealingMethod.AUTOMATED_SHOE))  # fmt: skip
    return dataclasses.replace(state, shoe_dealt=None)


@_on(ShuffleCompleted)
def _shuffle_completed(turn: Turn, event: ShuffleCompleted) -> TableState:
    return shuffled(turn, event.deck)


@_on(CardsLoaded)
def _cards_loaded(turn: Turn, event: CardsLoaded) -> TableState:
    if turn.facts.game not in BACCARAT:
        return turn.state
    # a baccarat shoe says so when a new shoe starts: new cards, as the dealer's new_cards
    return new_cards(turn, turn.state)


@_on(WagerAccepted)
def _wager_accepted(turn: Turn, event: WagerAccepted) -> TableState:
    state, facts = turn.state, turn.facts
    new = dataclasses.replace(state, wagers_accepted=state.wagers_accepted + 1)
    if facts.progressive is not None:
        added = meter(facts, state) + facts.progressive.contribution_millicents()
        new = dataclasses.replace(new, meter_millicents=added)
    return new


@_on(EventsLost)
def _events_lost(turn: Turn, event: EventsLost) -> TableState:
    state = turn.state
    turn.observe("events_lost", WagersUnaccounted(seat=event.seat, lost=event.lost,
                                                  dealing=state.dealing))  # fmt: skip
    if event.lost is None:  # a reset: how many is unknown
        return dataclasses.replace(state, resets_unaccounted=state.resets_unaccounted + 1)
    return dataclasses.replace(state, events_unaccounted=state.events_unaccounted + event.lost)


@_on(LightsChanged)
def _lights_changed(turn: Turn, event: LightsChanged) -> TableState:
    claims = tuple(dataclasses.replace(c, lit=c.seat in event.lit) for c in turn.state.claims)
    return dataclasses.replace(turn.state, claims=claims)


@_on(ReaderStatus)
def _reader_status(turn: Turn, event: ReaderStatus) -> TableState:
    state = dataclasses.replace(turn.state, reader_reveals=event.reveals_hole_card)
    if event.fault == "malfunction":  # it comes up broken, or says so only in its status
        return reader_malfunction(turn, state, "status", str(event.state))
    return state


@_on(SelfTestResult)
def _self_test(turn: Turn, event: SelfTestResult) -> TableState:
    if event.passed:
        return turn.state  # a repair, if it was broken: the halt's end (rules/table_rows.py)
    return reader_malfunction(turn, turn.state, "self_test", event.detail)


def reader_malfunction(turn: Turn, state: TableState, how: str, detail: str) -> TableState:
    """Spanish 21: the card reader is not in working order, said by its status or a failed
    self-test rather than its fault event (whose row halts dealing by itself): the same
    551.16(m), judged once; dealing is halted for the reader until it is repaired or
    replaced."""
    if turn.facts.game is not Game.SPANISH_21 or state.halted_by == "card_reader":
        return state
    turn.observe("reader_malfunction", ReaderMalfunction(how=how, detail=detail))
    return dataclasses.replace(state, halted_by="card_reader")


@_on(HoleCardChecked)
def _hole_card_checked(turn: Turn, event: HoleCardChecked) -> TableState:
    state = turn.state
    turn.observe("hole_card_checked", HoleCardSeen(up_card=state.up_card, gate=gate(state),
                                                   reveals=state.reader_reveals))  # fmt: skip
    return dataclasses.replace(state, hole_card_checked=True, blackjack=event.blackjack)


@_on(FirstCardBurned)
def _first_card_burned(turn: Turn, event: FirstCardBurned) -> TableState:
    # the shoe's own report: the first card's value against the cards it burned
    turn.observe("shoe_burn", ShoeBurn(burn=burn(event.card.rank, first=True), burned=event.burned))
    return dataclasses.replace(turn.state, burn_due=False)


@_on(CardDrawn)
def _card_drawn_event(turn: Turn, event: CardDrawn) -> TableState:
    return _card_drawn(turn, turn.state, event)


@_on(StackDispensed)
def _stack_dispensed(turn: Turn, event: StackDispensed) -> TableState:
    state = _read_hand(turn.facts, turn.state, event)
    wanted = stack_size(turn.facts.game, event.target)
    if wanted is not None and event.count != wanted:
        state = dataclasses.replace(state, shoe_misdealt=True)
    for card in event.cards:  # a shoe that reads cards, at a table with no tens in play
        state = ten_found(turn, state, card=card)
    return state


@_on(CardFaceUp)
def _card_face_up(turn: Turn, event: CardFaceUp) -> TableState:
    """A shoe found a card face up: its count this round is the table's too, so a card the
    dealer reports face up after it is the second (555.14(b), 551.16(a)); a ten read face up
    at a Spanish 21 table is a ten found as well (551.16(b))."""
    found = max(turn.state.face_up_found, event.total)
    state = dataclasses.replace(turn.state, face_up_found=found)
    if event.card is None:  # a card the shoe could not read: no ten found by it
        return state
    return ten_found(turn, state, card=event.card)


def ten_found(
    turn: Turn, state: TableState, *, card: Card | None = None, up_card: bool = False
) -> TableState:
    """Spanish 21: a ten found in the shoe this round (no tens are in play, 551.3(a)) — the
    dealer's ``ten_found``, a 10 given as the up card, or a card a shoe read — counted, and
    judged. With ``card``, only when that card is a ten."""
    if turn.facts.game is not Game.SPANISH_21:
        return state
    if card is not None and card.rank != "10":
        return state
    found = state.tens_found + 1
    turn.observe("ten_found", TenFound(found=found, up_card=up_card))
    return dataclasses.replace(state, tens_found=found)


# -- a halt ends when its clause's own condition is met ---------------------------------------


def _halts_end(
    facts: TableFacts, state: TableState, event: TableEvent, seen: list[Observation]
) -> TableState:
    """What the table just saw (a device's event, its own observations) may be the end a
    halting clause names for itself (``Rule.until``: 551.16(m) "until the card reader device is
    repaired or replaced", 551.2(e) the gaming day's inspection): those rulings stop halting
    dealing (they stay unresolved, for a floorperson to acknowledge and resolve), and so does a
    device's halt (``halted_by``)."""
    if not any(r.halts for r in state.rulings) and state.halted_by is None:
        return state
    observed = list(seen)
    if isinstance(event, DeviceReport):
        observed.append(Observation(event.kind, "", event.event))
    rulings, halted_by = state.rulings, state.halted_by
    for observation in observed:
        rulings = end_halts(rulings, facts, observation, event.at)
        if halted_by is not None and halt_ends(facts, halted_by, observation):
            halted_by = None
    if rulings == state.rulings and halted_by == state.halted_by:
        return state
    return dataclasses.replace(state, rulings=rulings, halted_by=halted_by)


# -- what commands and devices share ----------------------------------------------------------

_SHOES = (DealingMethod.AUTOMATED_SHOE, DealingMethod.MANUAL_SHOE)
#: 551.8(e): an up card that sends the hole card through the reader
_READER_GATE = ("A", "K", "Q", "J")

#: cards each hand should get, by game (555.10(b), 557.10(b) with the dealer's sixth card,
#: 559.12(b) with two community cards after the discard)
BACCARAT = frozenset({Game.BACCARAT, Game.MIDIBACCARAT})

_HAND_CARDS: dict[Game, tuple[int, dict[Target, int]]] = {
    Game.CARIBBEAN_STUD: (5, {Target.DEALER: 5}),
    Game.FOUR_CARD_POKER: (5, {Target.DEALER: 6}),
    Game.LET_IT_RIDE: (3, {Target.COMMUNITY: 2}),
}


def hand_cards(game: Game, target: Target) -> int | None:
    """The cards the hand at ``target`` should get in ``game``; None: the game has no rule."""
    seat, others = _HAND_CARDS.get(game, (None, {}))
    return seat if target.seat is not None else others.get(target)


def gate(state: TableState) -> bool | None:
    """Whether the up card sends the hole card through the reader (551.8(e)); None: no up
    card yet."""
    return state.up_card in _READER_GATE if state.up_card else None


def open_betting(state: TableState) -> TableState:
    """Betting opens (the control device's button, or a person's word): what the acceptors
    count is counted again (555.8(b))."""
    return dataclasses.replace(state, wagers_accepted=0, events_unaccounted=0,
                               resets_unaccounted=0)  # fmt: skip


def round_begins(turn: Turn, state: TableState | None = None) -> TableState:
    """A round starts, however it comes: the dealer's ``start_round``, the shoe's
    ``deal_started``, a baccarat coup (the dealer's ``coup``, a reading shoe's first card of
    one: ``coup_begins``). The rows judge it (``table.round``) from the table before it
    (``state``, the turn's unless given), and, while dealing is halted, that it was dealt all
    the same (``dealt``)."""
    state = turn.state if state is None else state
    turn.observe("round", _round_facts(turn.facts, state, turn.at))
    dealt(turn, state, round_start=True)
    return _round_begins(state)


def halting_rules(state: TableState) -> tuple[str, ...]:
    """The rule ids of the rulings that halt dealing now (rules/rulings.py), each once."""
    return tuple(dict.fromkeys(r.rule_id for r in state.rulings if r.halts))


def dealt(turn: Turn, state: TableState | None = None, *, round_start: bool = False) -> None:
    """Cards are dealt: a person's dealing command (rules/commands.py ``deals``) or a device
    that deals by itself. While dealing is halted (a device's halt, 551.16(m); a ruling that
    halts it) the rows judge that it was (``table.dealt_while_halted``), whichever way the
    cards came: a person's command only with a floorperson's override (daemon/routing.py
    refuses it otherwise), a device's deal always (the device says it happened)."""
    state = turn.state if state is None else state
    rules = halting_rules(state)
    if state.halted_by is None and not rules:
        return
    turn.observe("dealt_while_halted", DealtWhileHalted(
        how=turn.kind, round_start=round_start, halted_by=state.halted_by,
        halting=rules))  # fmt: skip


def _round_begins(state: TableState) -> TableState:
    return dataclasses.replace(
        state,
        round=state.round + 1,
        shuffled_since_last_round=False,
        rounds_since_stub_count=state.rounds_since_stub_count + 1,
        deck_last_dealt=state.deck_ready or state.deck_last_dealt,
        claims=(),
        up_card=None,
        hole_card_checked=False,
        face_up_found=0,
        tens_found=0,
        blackjack=None,
        more_cards_dealt=False,
        shoe_dealt=None,
        shoe_misdealt=False,
    )


def _round_facts(facts: TableFacts, state: TableState, at: float) -> RoundStarts:
    """What the ``table.round`` rows judge as a round starts, from the table before it."""
    two_decks = state.deck_ready is not None and state.deck_last_dealt is not None
    return RoundStarts(
        shuffled=state.shuffled_since_last_round,
        deck_age_h=state.deck_age_h(at),
        dealing=state.dealing,
        by_hand=state.dealing is DealingMethod.HAND,
        from_shoe=state.dealing in _SHOES,
        shuffler_on_table="shuffler" in state.devices,
        counting_shuffler=facts.shuffler_counts and "shuffler" in state.devices,
        stub_count_overdue=state.rounds_since_stub_count >= 5,
        same_deck=two_decks and state.deck_ready == state.deck_last_dealt,
        reader_inspected_today=state.reader_inspected_on == facts.gaming_day.of(at),
        game=facts.game,
        past_last_hand=state.cover_card_round is not None
        and state.round + 1 > state.cover_card_round + 1,
    )


def shuffled(turn: Turn, deck: str | None) -> TableState:
    """The cards were shuffled (the shuffler's ``shuffle_complete``, or the dealer's word):
    with two decks, the one shuffled now must not be the one in play this round."""
    state = turn.state
    two = deck in ("A", "B")
    in_play = state.phase in (Phase.DEALING, Phase.DECISIONS, Phase.SETTLEMENT)
    if deck is not None and two and in_play and deck == state.deck_last_dealt:
        turn.observe("deck_in_both", DeckInBoth(deck=deck))
    ready = deck if two else state.deck_ready
    if state.shuffled_since_last_round and ready == state.deck_ready:
        return state  # shuffled again before the next round: nothing moved
    return dataclasses.replace(state, shuffled_since_last_round=True, deck_ready=ready)


def _read_hand(facts: TableFacts, state: TableState, stack: StackDispensed) -> TableState:
    """A shoe that reads cards shows a player's five-card hand: a progressive payout hand is
    recorded at once (555.12(b)(1), "verify that the hand is a winning hand"), ranked as 555.6
    ranks it. The cards stay on the table; only the hand's name is kept."""
    seat, cards = stack.target.seat, stack.cards
    if facts.progressive is None or seat is None or len(cards) != 5:
        return state
    hand = FiveCard(five_card([(c.number, c.suit) for c in cards])[0])
    if hand not in PAYING_HANDS or state.claim(seat) is not None:
        return state
    return state.with_claim(Claim(seat, hand))


def meter(facts: TableFacts, state: TableState) -> int:
    """The meter in millicents: as kept, or the initial amount before the first wager."""
    if state.meter_millicents is not None:
        return state.meter_millicents
    return 0 if facts.progressive is None else facts.progressive.initial_cents * 1000


def coup_begins(turn: Turn, state: TableState) -> TableState:
    """A coup is dealt from the shoe (the dealer's ``coup``, or a shoe that reads cards
    drawing its first card): a hand of its own, so a round of its own. It is the round the
    dealer's ``start_round`` began for it when no coup was dealt in that one yet; otherwise a
    round begins with it (``round_begins``: the cover card's last hand, 543.10(e), and a halt
    judged the same whichever way the coup came). A new shoe's first coup without its burn is
    a ruling, given once."""
    if state.burn_due:
        turn.observe("no_burn", round=state.round)
    started = state.phase is Phase.DEALING and state.round > 0
    if not started or state.coup_dealt_in == state.round:
        state = round_begins(turn, state)
    else:  # the round the dealer began: its cards are dealt now, under a halt or not
        dealt(turn, state)
    return dataclasses.replace(state, burn_due=False, coups_in_shoe=state.coups_in_shoe + 1,
                               coup_dealt_in=state.round)  # fmt: skip


def new_cards(turn: Turn, state: TableState) -> TableState:
    """New decks in play (the dealer's ``new_cards``, or a baccarat shoe that says a new shoe
    is loaded): deck age starts again (555.3(c)), two decks start over, and baccarat's cover
    card is behind (543.10(e)) and a new shoe's burn is due (543.5(g))."""
    return dataclasses.replace(state, cards_in_play_since=turn.at, deck_ready=None,
                               deck_last_dealt=None, cover_card_round=None,
                               burn_due=turn.facts.game in BACCARAT,
                               coups_in_shoe=0)  # fmt: skip


def _card_drawn(turn: Turn, state: TableState, drawn: CardDrawn) -> TableState:
    """A baccarat shoe that reads cards reports each card drawn: the table deals them to the
    Player's and Banker's Hands in order (543.9(c), 543.10) and judges the coup against the
    drawing rules as soon as it is complete, has a card too many, or (when the next coup
    starts) stayed short."""
    if drawn.round != state.coup_round:
        short = stayed_short(state.coup, state.coup_judged)
        if short is not None:
            turn.observe("coup", short, round=state.round)
        state = coup_begins(turn, state)
        state = dataclasses.replace(state, coup_round=drawn.round, coup=(), coup_judged=0,
                                    phase=Phase.DEALING)  # fmt: skip
    new = dataclasses.replace(state, coup=(*state.coup, drawn.card.number))
    judged = to_judge(new.coup, new.coup_judged)
    if judged is None:
        return new
    turn.observe("coup", judged)
    return dataclasses.replace(new, coup_judged=len(new.coup))
