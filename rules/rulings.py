"""A ruling's lifecycle, as a pure state machine: open → acknowledged (by a named floorperson)
→ resolved (with the action that was done, from the ruling's own, and a note); unacknowledged
past the table's ``[rulings] escalate_after_s``, open → escalated. No I/O and no clock: the
time comes in with each call, as it does for rules/table.py, whose ``TableState.rulings`` holds
these records (published retained on the ``table`` topic, taken back from the journal after a
restart or ``journal recover``).

Every transition is one row of ``TRANSITIONS``; anything else is refused with the reason.

A ruling's id is the ``seq`` of the ruling message that gave it (unique per table, never
reused, across restarts too).

A ruling that requires ``halt_dealing`` or ``remove_deck`` *halts dealing* until it is
resolved: 551.16(m) "may not continue dealing … until the card reader device is repaired or
replaced"; 555.5(b) and its like "the deck shall be removed from the table": no card of that
deck may be dealt, and the table cannot see a deck leave, so the floorperson's resolution is
the record that it did. A halting row whose clause names its own end (``Rule.until``: 551.16(m)
"until the card reader device is repaired or replaced", 551.2(e) the gaming day's inspection)
stops halting when the table sees that end (``end_halts``); the ruling itself stays open for a
floorperson to acknowledge and resolve.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tableside.errors import Refused
from tableside.rules.model import Action, Observation, TableFacts, Until
from tableside.rules.rows import RULES

__all__ = [
    "HALTING",
    "MAX_NOTE_CHARS",
    "MAX_UNRESOLVED",
    "RESOLVED_KEPT",
    "TRANSITIONS",
    "RulingMove",
    "RulingRecord",
    "RulingState",
    "acknowledge",
    "due",
    "end_halt",
    "end_halts",
    "escalate",
    "halt_ends",
    "halting",
    "open_rulings",
    "resolve",
]


class RulingState(enum.StrEnum):
    OPEN = "open"
    #: open past ``escalate_after_s`` with nobody's acknowledgement
    ESCALATED = "escalated"
    ACKNOWLEDGED = "acknowledged"
    RESOLVED = "resolved"
    #: left unresolved while ``MAX_UNRESOLVED`` newer ones came: no longer tracked by the
    #: table (its journal still has it); never a halting ruling
    LAPSED = "lapsed"

    @property
    def unresolved(self) -> bool:
        """It still waits for a floorperson (open, escalated, acknowledged)."""
        return self not in (RulingState.RESOLVED, RulingState.LAPSED)


class RulingMove(enum.StrEnum):
    """What happens to a ruling: a person's (acknowledge, resolve) or the table's own."""

    ESCALATE = "escalate"
    ACKNOWLEDGE = "acknowledge"
    RESOLVE = "resolve"
    LAPSE = "lapse"


#: (state, what happens) → the next state; every other pair is refused
TRANSITIONS: dict[tuple[RulingState, RulingMove], RulingState] = {
    (RulingState.OPEN, RulingMove.ESCALATE): RulingState.ESCALATED,
    (RulingState.OPEN, RulingMove.ACKNOWLEDGE): RulingState.ACKNOWLEDGED,
    (RulingState.ESCALATED, RulingMove.ACKNOWLEDGE): RulingState.ACKNOWLEDGED,
    (RulingState.ACKNOWLEDGED, RulingMove.RESOLVE): RulingState.RESOLVED,
    (RulingState.OPEN, RulingMove.LAPSE): RulingState.LAPSED,
    (RulingState.ESCALATED, RulingMove.LAPSE): RulingState.LAPSED,
    (RulingState.ACKNOWLEDGED, RulingMove.LAPSE): RulingState.LAPSED,
}

#: a ruling with one of these halts dealing until it is resolved (the module's docstring)
HALTING = frozenset({Action.HALT_DEALING, Action.REMOVE_DECK})
#: resolved (and lapsed) rulings the table still remembers, newest last, so a late second
#: resolution is refused as "already resolved" and a page can show what was done
RESOLVED_KEPT = 16
#: unresolved rulings the table tracks; beyond it the oldest non-halting one lapses (a table
#: nobody attends must not grow its retained state without bound)
MAX_UNRESOLVED = 100
MAX_NOTE_CHARS = 500


@dataclass(frozen=True, slots=True)
class RulingRecord:
    """One ruling as the table tracks it. Times are the table's clock (Unix seconds)."""

    id: int
    rule_id: str
    clause: str
    actions: tuple[Action, ...]
    opened_at: float
    state: RulingState = RulingState.OPEN
    escalated_at: float | None = None
    acknowledged_by: str | None = None
    acknowledged_at: float | None = None
    resolved_by: str | None = None
    resolved_at: float | None = None
    #: what was done: one of ``actions``
    action: Action | None = None
    note: str | None = None
    #: when the end its clause names was seen (``Rule.until``): it no longer halts dealing
    halt_ended_at: float | None = None

    @property
    def halts(self) -> bool:
        """It halts dealing now: a halting action, not resolved, and its clause's own end not
        yet seen."""
        return (
            self.state.unresolved
            and self.halt_ended_at is None
            and any(a in HALTING for a in self.actions)
        )

    @property
    def unresolved(self) -> bool:
        return self.state.unresolved

    def to_dict(self) -> dict[str, object]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["actions"] = list(self.actions)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RulingRecord:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["actions"] = tuple(Action(a) for a in values.get("actions", ()))
        values["state"] = RulingState(values.get("state", RulingState.OPEN))
        if values.get("action") is not None:
            values["action"] = Action(values["action"])
        return cls(**values)


Rulings = tuple[RulingRecord, ...]


def _moved(record: RulingRecord, what: RulingMove) -> RulingState:
    """The next state, or ``Refused`` saying why a person cannot ``what`` (acknowledge,
    resolve) this ruling now; RuntimeError for a move of the table's own (a lapse) that the
    ruling's state does not allow (a fault of the table, never a person's)."""
    nxt = TRANSITIONS.get((record.state, what))
    if nxt is not None:
        return nxt
    name = f"ruling {record.id} ({record.clause})"
    if record.state is RulingState.RESOLVED:
        raise Refused(f"{name} is already resolved, by {record.resolved_by} "
                      f"({record.action})")  # fmt: skip
    if record.state is RulingState.LAPSED:
        raise Refused(f"{name} lapsed: the table no longer tracks it (its journal has it)")
    if what is RulingMove.ACKNOWLEDGE:
        raise Refused(f"{name} is already acknowledged, by {record.acknowledged_by}")
    if what is RulingMove.RESOLVE:
        raise Refused(f"{name} is {record.state.value}: a floorperson acknowledges it "
                      "(acknowledge_ruling) before resolving it")  # fmt: skip
    raise RuntimeError(f"{name} is {record.state.value}: it cannot {what.value}")


def _find(rulings: Rulings, ruling: object, command: str) -> RulingRecord:
    found = next((r for r in rulings if r.id == ruling), None)
    if found is None:
        tracked = ", ".join(str(r.id) for r in rulings if r.unresolved) or "none"
        raise Refused(
            f"{command}: no ruling {ruling!r} at this table (unresolved: {tracked}); a ruling's "
            "id is the seq of its ruling message, and one resolved long ago is in the journal"
        )
    return found


def _replace(rulings: Rulings, record: RulingRecord) -> Rulings:
    """``rulings`` with ``record`` in its place; the resolved beyond ``RESOLVED_KEPT`` go."""
    out = tuple(record if r.id == record.id else r for r in rulings)
    done = [r.id for r in out if not r.unresolved]
    gone = set(done[: max(0, len(done) - RESOLVED_KEPT)])
    return tuple(r for r in out if r.id not in gone)


def open_rulings(rulings: Rulings, new: tuple[RulingRecord, ...], at: float) -> Rulings:
    """The rulings just given join the table's; past ``MAX_UNRESOLVED`` the oldest unresolved
    one that does not halt dealing lapses."""
    out = (*rulings, *new)
    while sum(r.unresolved for r in out) > MAX_UNRESOLVED:
        oldest = next((r for r in out if r.unresolved and not r.halts), None)
        if oldest is None:
            break  # every one halts dealing: none may lapse
        _moved(oldest, RulingMove.LAPSE)
        out = _replace(out, dataclasses.replace(oldest, state=RulingState.LAPSED, resolved_at=at))
    return out


def acknowledge(rulings: Rulings, ruling: int, by: str, at: float) -> Rulings:
    """``acknowledge_ruling``: a named floorperson has seen it."""
    record = _find(rulings, ruling, "acknowledge_ruling")
    state = _moved(record, RulingMove.ACKNOWLEDGE)
    return _replace(rulings, dataclasses.replace(record, state=state, acknowledged_by=by,
                                                 acknowledged_at=at))  # fmt: skip


def resolve(
    rulings: Rulings, ruling: int, action: Action, by: str, note: str, at: float
) -> Rulings:
    """``resolve_ruling``: what was done (one of the ruling's actions) and a note."""
    record = _find(rulings, ruling, "resolve_ruling")
    if action not in record.actions:
        allowed = ", ".join(a.value for a in record.actions)
        raise Refused(f"resolve_ruling: ruling {record.id} ({record.clause}) requires "
                      f"{allowed}; {action.value!r} is none of them")  # fmt: skip
    state = _moved(record, RulingMove.RESOLVE)
    return _replace(rulings, dataclasses.replace(record, state=state, resolved_by=by,
                                                 resolved_at=at, action=action,
                                                 note=note))  # fmt: skip


def due(rulings: Rulings, after_s: float) -> float | None:
    """When the next open ruling escalates (table time), or None: none is waiting."""
    waiting = [r.opened_at + after_s for r in rulings if r.state is RulingState.OPEN]
    return min(waiting, default=None)


def escalate(rulings: Rulings, after_s: float, at: float) -> Rulings:
    """Every ruling open for ``after_s`` or longer with nobody's acknowledgement escalates."""
    out = rulings
    for r in rulings:
        if r.state is RulingState.OPEN and r.opened_at + after_s <= at:  # as due() has it
            state = _moved(r, RulingMove.ESCALATE)
            out = _replace(out, dataclasses.replace(r, state=state, escalated_at=at))
    return out


def halting(rulings: Rulings) -> list[RulingRecord]:
    """The rulings that halt dealing now, oldest first."""
    return [r for r in rulings if r.halts]


#: rule id → the ends its clause names for its halt
_UNTIL: Mapping[str, tuple[Until, ...]] = {r.id: r.until for r in RULES if r.until}


def end_halts(rulings: Rulings, facts: TableFacts, seen: Observation, at: float) -> Rulings:
    """Every ruling that halts dealing and whose clause's own end ``seen`` is stops halting
    (it stays unresolved: a floorperson still acknowledges and resolves it)."""
    out = rulings
    for r in rulings:
        if r.halts and any(u.met(facts, seen) for u in _UNTIL.get(r.rule_id, ())):
            out = _replace(out, dataclasses.replace(r, halt_ended_at=at))
    return out


def end_halt(rulings: Rulings, rule_id: str, at: float) -> Rulings:
    """Every ruling of ``rule_id`` that halts dealing stops halting: the end its rule names was
    seen outside the rows (a software check that passed, daemon/software.py); each stays
    unresolved for a floorperson."""
    out = rulings
    for r in rulings:
        if r.halts and r.rule_id == rule_id:
            out = _replace(out, dataclasses.replace(r, halt_ended_at=at))
    return out


def halt_ends(facts: TableFacts, device_class: str, seen: Observation) -> bool:
    """Whether ``seen`` ends the halt that ``device_class``'s halting rows put on dealing
    (the table's ``halted_by``): the same ends as those rows' rulings."""
    return any(
        u.met(facts, seen)
        for r in RULES
        if r.trigger.startswith(f"{device_class}.") and Action.HALT_DEALING in r.actions
        for u in r.until
    )
