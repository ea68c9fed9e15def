"""A ruling's lifecycle (rules/rulings.py) through the table's pure state machine and the
command registry: no broker, no daemon, no clock."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest

from tableside.daemon.config import Config
from tableside.rules import Game, TableFacts
from tableside.rules.commands import COMMANDS, Refused, ResolveRuling, Role, admit
from tableside.rules.model import Action
from tableside.rules.rulings import (
    HALTING,
    MAX_UNRESOLVED,
    RESOLVED_KEPT,
    TRANSITIONS,
    RulingRecord,
    RulingState,
    due,
    halting,
)
from tableside.rules.table import Phase, TableState, step
from tableside.wire.payloads import RulingStatePayload, TablePayload

from .events import table_event

T0 = 1_764_400_000.0
FACTS = TableFacts(Game.CARIBBEAN_STUD)
MISCOUNT = (Action.REMOVE_DECK,)
JAM = (Action.RESHUFFLE,)


def record(id_: int, actions: tuple[Action, ...] = MISCOUNT, at: float = T0) -> RulingRecord:
    return RulingRecord(id_, f"rule-{id_}", "58 Pa. Code § 555.5(b)", actions, at)


class Table:
    def __init__(self) -> None:
        self.state = TableState()

    def __call__(self, kind: str, at: float = T0, **data: Any) -> TableState:
        self.state, seen = step(FACTS, self.state, table_event(kind, at, data))
        assert seen == [], "the lifecycle gives no observations of its own"
        return self.state

    def ruling(self, id_: int) -> RulingRecord:
        return next(r for r in self.state.rulings if r.id == id_)


def test_open_acknowledged_resolved() -> None:
    table = Table()
    table("rulings_opened", rulings=[record(21)])
    assert table.ruling(21).state is RulingState.OPEN and table.ruling(21).halts
    table("acknowledge_ruling", T0 + 30, ruling=21, by="ann")
    acked = table.ruling(21)
    assert (acked.state, acked.acknowledged_by, acked.acknowledged_at) == (
        RulingState.ACKNOWLEDGED, "ann", T0 + 30)  # fmt: skip
    assert acked.halts, "acknowledging lifts no halt"
    table("resolve_ruling", T0 + 90, ruling=21, action="remove_deck", note="deck out", by="bob")
    done = table.ruling(21)
    assert (done.state, done.resolved_by, done.action, done.note, done.resolved_at) == (
        RulingState.RESOLVED, "bob", Action.REMOVE_DECK, "deck out", T0 + 90)  # fmt: skip
    assert not done.halts and halting(table.state.rulings) == []


@pytest.mark.parametrize(
    ("setup", "kind", "data", "refusal"),
    [
        ((), "acknowledge_ruling", {"ruling": 99, "by": "ann"},
         "acknowledge_ruling: no ruling 99 at this table (unresolved: 21)"),
        ((), "resolve_ruling", {"ruling": 21, "action": "remove_deck", "by": "ann"},
         "ruling 21 (58 Pa. Code § 555.5(b)) is open: a floorperson acknowledges it "
         "(acknowledge_ruling) before resolving it"),
        (("ack",), "acknowledge_ruling", {"ruling": 21, "by": "bob"},
         "ruling 21 (58 Pa. Code § 555.5(b)) is already acknowledged, by ann"),
        (("ack",), "resolve_ruling", {"ruling": 21, "action": "reshuffle", "by": "ann"},
         "resolve_ruling: ruling 21 (58 Pa. Code § 555.5(b)) requires remove_deck; "
         "'reshuffle' is none of them"),
        (("ack", "resolve"), "resolve_ruling", {"ruling": 21, "action": "remove_deck", "by": "b"},
         "ruling 21 (58 Pa. Code § 555.5(b)) is already resolved, by ann (remove_deck)"),
        (("ack", "resolve"), "acknowledge_ruling", {"ruling": 21, "by": "bob"},
         "is already resolved"),
    ],
)  # fmt: skip
def test_refusals_say_why_and_change_nothing(
    setup: tuple[str, ...], kind: str, data: dict[str, Any], refusal: str
) -> None:
    table = Table()
    table("rulings_opened", rulings=[record(21)])
    if "ack" in setup:
        table("acknowledge_ruling", ruling=21, by="ann")
    if "resolve" in setup:
        table("resolve_ruling", ruling=21, action="remove_deck", by="ann")
    before = table.state
    with pytest.raises(Refused) as refused:
        table(kind, **data)
    assert refusal in str(refused.value)
    assert table.state == before


def test_every_transition_is_a_row() -> None:
    """Only these moves exist; resolved and lapsed are final."""
    assert {(s.value, w) for s, w in TRANSITIONS} == {
        ("open", "escalate"), ("open", "acknowledge"), ("escalated", "acknowledge"),
        ("acknowledged", "resolve"), ("open", "lapse"), ("escalated", "lapse"),
        ("acknowledged", "lapse"),
    }  # fmt: skip
    assert not [k for k in TRANSITIONS if k[0] in (RulingState.RESOLVED, RulingState.LAPSED)]


def test_unacknowledged_rulings_escalate_after_the_configured_time() -> None:
    table = Table()
    table("rulings_opened", rulings=[record(21, at=T0), record(22, JAM, at=T0 + 50)])
    table("acknowledge_ruling", T0 + 10, ruling=21, by="ann")
    assert due(table.state.rulings, 120) == T0 + 170, "only the unacknowledged one waits"
    table("escalate_rulings", T0 + 169.999, after_s=120)
    assert table.ruling(22).state is RulingState.OPEN, "not a moment early"
    table("escalate_rulings", T0 + 170, after_s=120)
    escalated = table.ruling(22)
    assert escalated.state is RulingState.ESCALATED and escalated.escalated_at == T0 + 170
    assert table.ruling(21).state is RulingState.ACKNOWLEDGED, "an acknowledged one never"
    assert due(table.state.rulings, 120) is None
    table("acknowledge_ruling", T0 + 200, ruling=22, by="cy")
    acked = table.ruling(22)
    assert acked.state is RulingState.ACKNOWLEDGED and acked.escalated_at == T0 + 170, (
        "escalated, then acknowledged: both are kept"
    )


def test_halt_dealing_and_remove_deck_halt_until_resolved() -> None:
    assert frozenset({Action.HALT_DEALING, Action.REMOVE_DECK}) == HALTING
    table = Table()
    table(
        "rulings_opened",
        rulings=[record(1, JAM), record(2, (Action.HALT_DEALING, Action.ALERT)), record(3)],
    )
    assert [r.id for r in halting(table.state.rulings)] == [2, 3]
    table("acknowledge_ruling", ruling=2, by="ann")
    table("resolve_ruling", ruling=2, action="alert", by="ann")
    assert [r.id for r in halting(table.state.rulings)] == [3]


def test_the_rulings_come_back_from_the_published_table_state() -> None:
    """What a restart (or journal recover) reads back: the retained table message's state."""
    table = Table()
    table("rulings_opened", rulings=[record(5), record(6, JAM), record(7)])
    table("acknowledge_ruling", T0 + 1, ruling=5, by="ann")
    table("resolve_ruling", T0 + 2, ruling=5, action="remove_deck", note="a\nb", by="ann")
    table("escalate_rulings", T0 + 500, after_s=120)
    payload = TablePayload(table="t", ts="x", seq=1, game=Game.CARIBBEAN_STUD, phase=Phase.OPEN,
                           round=0, rounds_since_stub_count=0, deck_age_h=None,
                           state=table.state.to_dict(), cause="c")  # fmt: skip
    back = TableState.from_dict(TablePayload.model_validate_json(payload.model_dump_json()).state)
    assert back == table.state
    assert back.rulings[0].action is Action.REMOVE_DECK
    assert back.rulings[1].state is RulingState.ESCALATED


def test_resolved_ones_are_kept_a_while_then_left_to_the_journal() -> None:
    table = Table()
    n = RESOLVED_KEPT + 5
    table("rulings_opened", rulings=[record(i, JAM) for i in range(1, n + 1)])
    for i in range(1, n + 1):
        table("acknowledge_ruling", ruling=i, by="ann")
        table("resolve_ruling", ruling=i, action="reshuffle", by="ann")
    assert [r.id for r in table.state.rulings] == list(range(6, n + 1))
    with pytest.raises(Refused, match=r"no ruling 1 at this table .*in the journal"):
        table("acknowledge_ruling", ruling=1, by="ann")


def test_an_unattended_table_keeps_a_bounded_state_and_never_lapses_a_halt() -> None:
    table = Table()
    table("rulings_opened", rulings=[record(1)] + [record(i, JAM) for i in range(2, 300)])
    unresolved = [r for r in table.state.rulings if r.unresolved]
    assert len(unresolved) == MAX_UNRESOLVED
    assert unresolved[0].id == 1 and unresolved[0].halts, "the halting one stays"
    lapsed = [r for r in table.state.rulings if r.state is RulingState.LAPSED]
    assert len(lapsed) == RESOLVED_KEPT and lapsed[-1].id == 2 + 299 - 1 - MAX_UNRESOLVED
    with pytest.raises(Refused, match="lapsed"):
        table("acknowledge_ruling", ruling=lapsed[-1].id, by="ann")


# -- the registry ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["acknowledge_ruling", "resolve_ruling"])
def test_only_a_floorperson_acknowledges_or_resolves(name: str) -> None:
    assert COMMANDS[name].roles == frozenset({Role.FLOORPERSON})
    assert COMMANDS[name].target == "table" and COMMANDS[name].phases is None
    args = dict(COMMANDS[name].example)
    for role in ("dealer", "technician"):
        with pytest.raises(Refused, match=f"a {role} may not give '{name}' "
                                          r"\(it needs: floorperson\)"):  # fmt: skip
            admit(name, role, args, Phase.OPEN)
    admit(name, "floorperson", args, Phase.CLOSED)


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        ({"ruling": 1, "action": "remove_deck", "by": "ann", "note": "x" * 501},
         "note: String should have at most 500 characters"),
        ({"ruling": 1, "action": "remove_deck", "by": "ann", "note": "bell\x07"},
         "note: Value error, U+0007 (a control character) at character 5"),
        # an audit trail reads as typed: no note read backwards, no word hidden
        ({"ruling": 1, "action": "remove_deck", "by": "ann", "note": "paid \u202edias ton"},
         "note: Value error, U+202E (RIGHT-TO-LEFT OVERRIDE) at character 6: it would hide or "
         "reorder what was typed"),
        ({"ruling": 1, "action": "remove_deck", "by": "ann", "note": "not\u200b paid"},
         "note: Value error, U+200B (ZERO WIDTH SPACE) at character 4"),
        ({"ruling": 1, "action": "remove_deck", "by": "ann", "note": "a\u2067b\u2069"},
         "note: Value error, U+2067 (RIGHT-TO-LEFT ISOLATE)"),
        ({"ruling": 1, "action": "remove_deck", "by": "an\u00adn"},
         "by: Value error, U+00AD (SOFT HYPHEN)"),
        ({"ruling": 1, "action": "remove_deck", "by": " ann"},
         "by: Value error, a name of printable characters, without spaces around it"),
        ({"ruling": 1, "action": "remove_deck", "by": "x" * 65},
         "by: String should have at most 64 characters"),
        ({"ruling": "1", "action": "remove_deck", "by": "ann"},
         "ruling: Input should be a valid integer"),
        ({"ruling": 1, "action": "dance", "by": "ann"}, "action: Input should be 'remove_deck'"),
        ({"ruling": 1, "action": "remove_deck"}, "by: Field required"),
    ],
)  # fmt: skip
def test_resolve_arguments_are_checked_strictly(args: dict[str, Any], complaint: str) -> None:
    with pytest.raises(Refused, match=re.escape(complaint)):
        admit("resolve_ruling", "floorperson", args, Phase.OPEN)


def test_a_note_may_have_lines() -> None:
    _, args = admit("resolve_ruling", "floorperson",
                    {"ruling": 1, "action": "remove_deck", "by": "Ann O'Neil",
                     "note": "deck 4411 out\nnew deck in"}, Phase.OPEN)  # fmt: skip
    assert isinstance(args, ResolveRuling) and args.note == "deck 4411 out\nnew deck in"


# -- [rulings] in the config -------------------------------------------------------------------


def _config(**rulings: Any) -> dict[str, Any]:
    shuffler = {"driver": "tableside.shuffler", "url": "socket://h:1"}
    return {"table": {"id": "t1", "game": "caribbean_stud"}, "rulings": rulings,
            "devices": {"shuffler": shuffler}}  # fmt: skip


def test_escalate_after_defaults_to_two_minutes_and_is_strict() -> None:
    assert Config.model_validate(_config()).rulings.escalate_after_s == 120
    assert Config.model_validate(_config(escalate_after_s=5)).rulings.escalate_after_s == 5
    for bad in ({"escalate_after_s": 0}, {"escalate_after_s": "120"},
                {"escalate_after_s": 90_000}, {"escalate_after": 5}):  # fmt: skip
        with pytest.raises(ValueError, match="rulings"):
            Config.model_validate(_config(**bad))


def test_a_ruling_record_is_plain_data() -> None:
    r = record(3)
    assert RulingRecord.from_dict(r.to_dict()) == r
    assert dataclasses.replace(r, state=RulingState.RESOLVED).halts is False


def test_the_monitor_prints_a_lifecycle_line() -> None:
    from tableside.daemon.monitor import format_message

    base = {"table": "cs-01", "ts": "2026-11-29T14:43:13.123Z", "ruling": 21,
            "rule_id": "pa-555.5b", "clause": "58 Pa. Code § 555.5(b)",
            "actions": ["remove_deck"]}  # fmt: skip
    line = format_message("tableside/cs-01/ruling_state", RulingStatePayload.model_validate({
        **base, "seq": 27, "state": "resolved", "by": "ann", "action": "remove_deck",
        "note": "deck out", "halts": False, "open_s": 81.4}))  # fmt: skip
    assert line.endswith("#    27 RULING  #21 RESOLVED by ann: remove_deck — deck out "
                         "(58 Pa. Code § 555.5(b), 81.4 s after it)")  # fmt: skip
    escalated = format_message("tableside/cs-01/ruling_state", RulingStatePayload.model_validate({
        **base, "seq": 22, "state": "escalated", "halts": True, "open_s": 120.0}))  # fmt: skip
    assert "RULING  #21 ESCALATED (58 Pa. Code § 555.5(b), 120.0 s after it; dealing halted)" in (
        escalated
    )
