"""The rule engine's vocabulary: games, actions, observations, rules and rulings. No I/O."""

from __future__ import annotations

import dataclasses
import enum
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from tableside.drivers.catalog import event_name
from tableside.drivers.events import DeviceEvent
from tableside.drivers.shoe.plan import Target
from tableside.rules.seen import TableSeen
from tableside.rules.vocabulary import Game

if TYPE_CHECKING:
    from tableside.rules.progressive import PayTable

__all__ = [
    "Action",
    "FactRef",
    "FieldRef",
    "Game",
    "GamingDay",
    "Observation",
    "Op",
    "Rule",
    "Ruling",
    "TableFacts",
    "Until",
    "When",
]


class Action(enum.StrEnum):
    """What a ruling tells the table to do: a fixed vocabulary (documented in docs/mqtt.md)."""

    REMOVE_DECK = "remove_deck"  # the deck (or the set of decks) leaves the table
    RESHUFFLE = "reshuffle"  # the cards are shuffled again
    VOID_ALL_HANDS = "void_all_hands"  # every hand of the round is void
    VOID_HAND = "void_hand"  # one player's hand is void
    RETURN_WAGERS = "return_wagers"  # wagers of the voided hands go back to the players
    HALT_DEALING = "halt_dealing"  # no dealing until the device is repaired or replaced
    DISCARD_CARD = "discard_card"  # the card goes to the discard rack, unused
    DEAL_ADDITIONAL_CARD = "deal_additional_card"  # the dealer completes a short hand
    REMOVE_DEVICE = "remove_device"  # the device must leave the table first
    ALERT = "alert"  # a floorperson must be told now
    REPLACE_CARDS = "replace_cards"  # new decks are put in play (deck age)
    COUNT_STUB = "count_stub"  # the dealer counts the stub now
    BURN_CARD = "burn_card"  # cards go unseen into the discard rack (how many: the event's burn)
    LAST_HAND = "last_hand"  # baccarat: finish this hand, announce "last hand", one more
    NEXT_CARD = "use_as_next_card"  # an undisclosed card drawn in error is used as the next


#: the actions that change what becomes of a hand
_HAND_ACTIONS = frozenset(
    {Action.VOID_ALL_HANDS, Action.VOID_HAND, Action.RETURN_WAGERS, Action.DEAL_ADDITIONAL_CARD}
)


class FactRef(enum.StrEnum):
    """A value taken from the table's configuration when a rule is evaluated."""

    FULL_DECK_COUNTS = "full_deck_counts"
    TENS_LEFT_IN_COUNTS = "tens_left_in_counts"
    #: the stack size the game's dealing procedure gives the observation's ``target``
    STACK_SIZE = "stack_size"


_S = TypeVar("_S")


class _Reader:
    """What a row's field reader is handed once, to learn the field it reads."""

    __slots__ = ("read",)

    def __init__(self) -> None:
        self.read: list[str] = []

    def __getattr__(self, name: str) -> object:
        self.read.append(name)
        return None


def _field_read(of: type[_S], read: Callable[[_S], object]) -> str:
    """The name of the one field of ``of`` that ``read`` reads (``lambda e: e.counted``): the
    type checker checks ``read`` against ``of``; this checks it here too, as the row loads."""
    reader = _Reader()
    read(cast(_S, reader))
    names = {f.name for f in dataclasses.fields(cast(Any, of))}
    if len(reader.read) != 1 or reader.read[0] not in names:
        raise TypeError(f"a row reads one field of {of.__name__} ({', '.join(sorted(names))}), "
                        f"not {reader.read}")  # fmt: skip
    return reader.read[0]


@dataclass(frozen=True, slots=True, init=False)
class FieldRef:
    """A value taken from another field of the same observation:
    ``FieldRef(Coup, lambda c: c.banker_should_draw)``."""

    of: type
    field: str

    def __init__(self, of: type[_S], read: Callable[[_S], object]) -> None:
        object.__setattr__(self, "of", of)
        object.__setattr__(self, "field", _field_read(of, read))


@dataclass(frozen=True, slots=True)
class GamingDay:
    """The casino's gaming day: it starts at ``starts_at_hour`` o'clock in ``timezone`` (an IANA
    zone), not at midnight UTC. 551.2(e)'s inspection is "for the gaming day"."""

    timezone: str = "UTC"
    starts_at_hour: int = 0

    def __post_init__(self) -> None:
        try:
            ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"no time zone {self.timezone!r} (an IANA name, e.g. "
                             "America/New_York)") from exc  # fmt: skip
        if not 0 <= self.starts_at_hour <= 23:
            raise ValueError(f"the gaming day starts at an hour 0..23, not {self.starts_at_hour}")

    def of(self, at: float) -> str:
        """The gaming day (its calendar date, ISO) that the Unix time ``at`` belongs to."""
        local = datetime.fromtimestamp(at, ZoneInfo(self.timezone))
        return (local - timedelta(hours=self.starts_at_hour)).date().isoformat()


@dataclass(frozen=True, slots=True)
class TableFacts:
    """What the engine knows of the table from its configuration."""

    game: Game
    #: some shuffler of the table counts the cards it shuffles
    shuffler_counts: bool = True
    #: the shufflers (by device name) configured not to count (``counts_cards = false``): the
    #: rows that need a count do not apply to what they report, whatever another one does
    not_counting: frozenset[str] = frozenset()
    decks: int | None = None  # Spanish 21: 6 or 8 decks of 48 (551.3(a))
    #: the progressive pay table (555.13), when the table has a progressive system
    progressive: PayTable | None = None
    #: Let It Ride Bonus amounts in dollars (559.14(d)), as the casino's pay table has them
    bonus_pays: Mapping[str, float] | None = None
    gaming_day: GamingDay = field(default_factory=GamingDay)

    def counts(self, device: str) -> bool:
        """Whether what ``device`` reports comes from a shuffler that counts its cards."""
        return self.shuffler_counts and device not in self.not_counting

    @property
    def full_deck_counts(self) -> frozenset[int]:
        if self.game is Game.SPANISH_21:
            # 551.3(a): six or eight decks of 48 cards. A configured deck count pins it.
            return frozenset({48 * self.decks} if self.decks else {6 * 48, 8 * 48})
        return frozenset({52})  # 555.5(b), 557.5(b), 559.5(b): "whether 52 cards are present"

    @property
    def tens_left_in_counts(self) -> frozenset[int]:
        """Spanish 21: the count of six or eight whole 52-card decks, which says the tens were
        not taken out at the inspection (551.3(a), 551.4)."""
        if self.game is Game.SPANISH_21:
            return frozenset({52 * self.decks} if self.decks else {6 * 52, 8 * 52})
        return frozenset()

    def resolve(self, ref: FactRef, seen: Seen) -> Any:
        if ref is FactRef.STACK_SIZE:
            # imported here: the patterns are written in terms of this module's Game
            from tableside.rules.patterns import stack_size

            target = getattr(seen, "target", None)
            return stack_size(self.game, target) if isinstance(target, Target) else None
        return getattr(self, ref.value)


#: what the rows judge: a device's event as its driver typed it, or the table's own
Seen = DeviceEvent | TableSeen


@dataclass(frozen=True, slots=True)
class Observation:
    """Something the table saw, for the rows to judge: a device's event (``kind``
    ``<device class>.<event kind>``, ``seen`` the typed event, card identities included;
    drivers/catalog.py names its type) or the table's own (``table.<kind>``, ``seen`` one of
    rules/seen.py's shapes, made by rules/table.py)."""

    kind: str
    device: str
    seen: Seen


Op = Literal["==", "!=", "in", "not in", "has", "startswith", ">="]


@dataclass(frozen=True, slots=True, init=False)
class When:
    """One condition on a field of what was seen:
    ``When(ShuffleCompleted, lambda e: e.counted, "==", True)``.

    The field is read through its type, so the type checker checks its name; the condition
    holds only for what is of that type. ``value`` may be a FactRef (from the table's config)
    or a FieldRef (another field of the same observation).
    """

    of: type
    field: str
    op: Op
    value: object

    def __init__(self, of: type[_S], read: Callable[[_S], object], op: Op, value: object) -> None:
        object.__setattr__(self, "of", of)
        object.__setattr__(self, "field", _field_read(of, read))
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "value", value)

    def on(self, other: type[_S]) -> When:
        """The same condition on ``other``'s field of the same name (a hand the dealer reports
        judged as a shoe's stack is)."""
        value = self.value
        if isinstance(value, FieldRef):
            value = FieldRef(other, operator.attrgetter(value.field))
        return When(other, operator.attrgetter(self.field), self.op, value)

    def holds(self, facts: TableFacts, seen: Seen) -> bool:
        if not isinstance(seen, self.of):
            return False
        actual = getattr(seen, self.field)
        if isinstance(self.value, FactRef):
            expected = facts.resolve(self.value, seen)
        elif isinstance(self.value, FieldRef):
            expected = getattr(seen, self.value.field, None)
            if expected is None:
                return False  # nothing to compare with
        else:
            expected = self.value
        match self.op:
            case "==":
                return bool(actual == expected)
            case "!=":
                return bool(actual != expected)
            case "in":
                return actual in expected
            case "not in":
                return actual not in expected
            case "has":  # a tuple field that holds the value
                return isinstance(actual, tuple) and expected in actual
            case "startswith":
                return isinstance(actual, str) and actual.startswith(expected)
            case ">=":
                return actual is not None and actual >= expected
        raise ValueError(f"unknown operator {self.op!r}")


def kind_of(of: type) -> str | None:
    """The observation kind (``Observation.kind``) ``of`` is seen as, when it is seen as one
    only: ``table.<kind>`` for a table shape of one kind (rules/seen.py), ``<device class>.
    <kind>`` for a device's event one device class reports (drivers/catalog.py); None for a
    shape several kinds share (``Gated``) or a link's event every device reports."""
    if issubclass(of, TableSeen):
        return f"table.{of.kinds[0]}" if len(of.kinds) == 1 else None
    return event_name(of)


def _trigger(when: tuple[When, ...], on: str, what: str) -> str:
    """What triggers a row (or a halt's end), said once: the one kind the type its conditions
    read is seen as (``When(ShuffleCompleted, …)``: ``shuffler.shuffle_complete``), or ``on``
    where that type says none (no condition; a shape several kinds share). TypeError for a
    row that says it twice, or not at all."""
    kinds = {kind_of(w.of) for w in when}
    said = kinds.pop() if len(kinds) == 1 else None
    if on and said is not None:
        raise TypeError(f"{what}: its conditions say what triggers it ({said}): name it once, "
                        f"by them, not again as {on!r}")  # fmt: skip
    if not on and said is None:
        read = ", ".join(sorted({w.of.__name__ for w in when})) or "nothing"
        raise TypeError(f"{what}: its conditions (on {read}) say no one kind that triggers it: "
                        "name it (on=…)")  # fmt: skip
    return on or str(said)


@dataclass(frozen=True, slots=True)
class Until:
    """The end a halting clause names for itself (551.16(m): "until the card reader device is
    repaired or replaced"): an observation of ``trigger`` for which every ``when`` holds.
    ``trigger`` is the kind the conditions' type is seen as, or ``on`` where it says none
    (``Until(on="table.reader_inspected")``, no condition)."""

    when: tuple[When, ...] = ()
    #: what triggers it, only where its conditions' type says none
    on: str = ""
    trigger: str = field(init=False, default="")

    def __post_init__(self) -> None:
        object.__setattr__(self, "trigger", _trigger(self.when, self.on, "an Until"))

    def met(self, facts: TableFacts, observation: Observation) -> bool:
        return observation.kind == self.trigger and all(
            w.holds(facts, observation.seen) for w in self.when
        )


@dataclass(frozen=True, slots=True)
class Rule:
    """One row: a clause of the rules, what triggers it, and what it requires."""

    id: str
    games: frozenset[Game]
    when: tuple[When, ...]
    actions: tuple[Action, ...]
    citation: str  # "58 Pa. Code § 555.5(b)"
    words: str  # the clause's own words, verbatim
    summary: str  # the ruling in one plain sentence
    #: the rule applies only when the table's shuffler counts cards
    needs_counting_shuffler: bool = False
    #: the hands it affects: "all", "dealer", "target" (the observation's ``target`` field,
    #: e.g. seat3) or "none"; left empty, "all" when an action voids, returns or completes
    #: hands, "none" otherwise (a card discarded, a deck removed, a floorperson alerted)
    affects: str = ""
    #: a halting row whose clause names its own end: any one of these ends the halt (the
    #: ruling stays unresolved for a floorperson); none: only its resolution ends it
    until: tuple[Until, ...] = ()
    #: the clause this one replaced (``"58 Pa. Code § 559.11(d)"`` beside 643a.9(d), the text
    #: in force), named for a reader of older records; empty: none
    replaces: str = ""
    #: what triggers it, only where its conditions' type says none (no condition, or a shape
    #: several kinds share: ``on="table.more_cards"`` beside ``When(Gated, …)``)
    on: str = ""
    #: what triggers it (``Observation.kind``): the one kind the type its conditions read is
    #: seen as (``When(ShuffleCompleted, …)``: ``shuffler.shuffle_complete``), or ``on``
    trigger: str = field(init=False, default="")

    def __post_init__(self) -> None:
        object.__setattr__(self, "trigger", _trigger(self.when, self.on, self.id))
        if not self.affects:
            touches = any(a in _HAND_ACTIONS for a in self.actions)
            object.__setattr__(self, "affects", "all" if touches else "none")

    @classmethod
    def of(
        cls,
        clause: str,
        game: Game,
        name: str,
        when: tuple[When, ...],
        actions: tuple[Action, ...],
        words: str,
        summary: str,
        affects: str = "",
        *,
        on: str = "",
    ) -> Rule:
        """One game's row for a clause (``"555.14(d)"``): its id is ``<clause>.<name>``; what
        triggers it ``on``, where its conditions do not say it."""
        return cls(
            id=f"{clause}.{name}",
            games=frozenset({game}),
            on=on,
            when=when,
            actions=actions,
            citation=f"58 Pa. Code § {clause}",
            words=words,
            summary=summary,
            affects=affects,
        )

    def affected(self, observation: Observation) -> list[str]:
        """The hands it affects, by name (a ruling's ``affects``, JSON)."""
        if self.affects == "target":
            return [str(getattr(observation.seen, "target", None))]
        return [] if self.affects == "none" else [self.affects]

    def applies(self, facts: TableFacts, observation: Observation) -> bool:
        return (
            facts.game in self.games
            and observation.kind == self.trigger
            and (not self.needs_counting_shuffler or facts.counts(observation.device))
            and all(w.holds(facts, observation.seen) for w in self.when)
        )


@dataclass(frozen=True, slots=True)
class Ruling:
    """What the engine decided, and why."""

    rule: Rule
    observation: Observation
