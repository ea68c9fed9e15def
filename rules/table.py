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
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tableside.rules.model import Observation, TableFacts

__all__ = [
    "TABLE_EVENTS",
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
    #: the gaming day (UTC date) of the card reader's last floorperson inspection (551.2(e))
    reader_inspected_on: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["devices"] = sorted(self.devices)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TableState:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["devices"] = frozenset(values.get("devices", ()))
        values["phase"] = Phase(values.get("phase", Phase.CLOSED))
        values["dealing"] = DealingMethod(values.get("dealing", DealingMethod.AUTOMATED_SHOE))
        values["shuffling"] = ShufflingMethod(values.get("shuffling", ShufflingMethod.DEVICE))
        return cls(**values)

    def deck_age_h(self, at: float) -> float | None:
        if self.cards_in_play_since is None:
            return None
        return round((at - self.cards_in_play_since) / 3600, 3)


@dataclass(frozen=True, slots=True)
class TableEvent:
    """Something that moves the table: from a device (``shoe.deal_started``…) or a person
    (``open_table``…). ``at`` is Unix time; ``data`` the event's fields."""

    kind: str
    at: float
    data: Mapping[str, Any] = field(default_factory=dict)


#: the events a person gives (docs/commands.md, device "table") and what each needs in ``args``
TABLE_EVENTS: dict[str, str] = {
    "open_table": "the cards have been inspected and the table opens (555.4)",
    "close_table": "the table closes",
    "bets_open": "betting opens for the next round (when no control device says so)",
    "no_more_bets": 'the dealer announced "no more bets" (when no control device says so)',
    "start_round": "dealing starts (when no automated shoe says so)",
    "deal_done": "every card of the round is out (when no automated shoe says so)",
    "reveal": "decisions are made; the dealer reveals",
    "round_settled": "every wager of the round is settled",
    "shuffled": "the cards were shuffled by hand (when no shuffler says so)",
    "stub_count": "args: count (cards in the deck by the stub count), misdealt (bool)",
    "declare_method": "args: dealing (automated_shoe, manual_shoe, hand) and/or shuffling "
    "(device, manual)",
    "device_removed": "args: device_class (shuffler, shoe, card_reader, …)",
    "device_installed": "args: device_class; also clears a halt the device caused",
    "new_cards": "new decks are put in play (deck age starts again)",
    "reader_inspected": "the floorperson inspected the card reader for this gaming day",
}

_SHOES = (DealingMethod.AUTOMATED_SHOE, DealingMethod.MANUAL_SHOE)


def _gaming_day(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).date().isoformat()


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

    match kind:
        case "open_table":
            since = state.cards_in_play_since or at
            new = dataclasses.replace(state, phase=Phase.OPEN, cards_in_play_since=since)
        case "close_table":
            new = dataclasses.replace(state, phase=Phase.CLOSED)
        case "bets_open":
            new = dataclasses.replace(state, phase=Phase.BETTING)
        case "no_more_bets":
            new = dataclasses.replace(state, phase=Phase.NO_MORE_BETS)
        case "start_round" | "shoe.deal_started":
            new = dataclasses.replace(
                state,
                phase=Phase.DEALING,
                round=state.round + 1,
                shuffled_since_last_round=False,
                rounds_since_stub_count=state.rounds_since_stub_count + 1,
                deck_last_dealt=state.deck_ready or state.deck_last_dealt,
            )
            two_decks = state.deck_ready is not None and state.deck_last_dealt is not None
            observe(
                "round",
                shuffled=state.shuffled_since_last_round,
                deck_age_h=state.deck_age_h(at),
                dealing=state.dealing.value,
                by_hand=state.dealing is DealingMethod.HAND,
                from_shoe=state.dealing in _SHOES,
                shuffler_on_table="shuffler" in state.devices,
                counting_shuffler=facts.shuffler_counts and "shuffler" in state.devices,
                stub_count_overdue=state.rounds_since_stub_count >= 5,
                same_deck=two_decks and state.deck_ready == state.deck_last_dealt,
                halted_by=state.halted_by,
                reader_inspected_today=state.reader_inspected_on == _gaming_day(at),
                game=facts.game.value,
            )
        case "deal_done" | "shoe.deal_complete":
            new = dataclasses.replace(state, phase=Phase.DECISIONS)
        case "reveal":
            new = dataclasses.replace(state, phase=Phase.SETTLEMENT)
        case "round_settled":
            new = dataclasses.replace(state, phase=Phase.COMPLETE)
        case "shuffled" | "shuffler.shuffle_complete":
            deck = data.get("deck")
            ready = deck if deck in ("A", "B") else state.deck_ready
            new = dataclasses.replace(state, shuffled_since_last_round=True, deck_ready=ready)
        case "stub_count":
            count, misdealt = data.get("count"), data.get("misdealt", False)
            if not isinstance(count, int) or not isinstance(misdealt, bool):
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
                                      deck_last_dealt=None)  # fmt: skip
        case "reader_inspected":
            new = dataclasses.replace(state, reader_inspected_on=_gaming_day(at))
        case _:
            return state, []
    return new, seen
