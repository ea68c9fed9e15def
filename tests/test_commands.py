"""The command registry (rules/commands.py): one declaration per command, from which the
checks, the docs and the schema come; phases and halts enforced, not only ruled."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import aiomqtt
import pytest

from tableside.cli import main
from tableside.drivers.events import DeviceEvent
from tableside.rules import TableFacts
from tableside.rules.commands import COMMANDS, TRANSITIONS, Command, NoArgs, Refused, admit
from tableside.rules.hands import FiveCard
from tableside.rules.model import Game
from tableside.rules.table import EVENT_TRANSITIONS, DealingMethod, Phase, TableState, step

from .conftest import Mosquitto
from .hil import SimulatedTable, simulated_table, simulator
from .test_shoe import shoe

ROOT = Path(__file__).parents[1]


def test_the_commands_page_is_current(tmp_path: Path) -> None:
    page = tmp_path / "commands.md"
    shutil.copy(ROOT / "docs" / "commands.md", page)
    assert main(["commands", str(page)]) == 0
    assert page.read_text(encoding="utf-8") == (ROOT / "docs" / "commands.md").read_text(
        encoding="utf-8"
    ), "run: tableside commands docs/commands.md"


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_example_is_valid_and_every_command_documented(name: str) -> None:
    command = COMMANDS[name]
    phase = Phase.OPEN if command.phases is None else next(p for p in Phase if p in command.phases)
    admitted, args = admit(name, next(iter(command.roles)), command.example, phase)
    assert admitted is command and isinstance(args, command.args)
    assert command.doc


@pytest.mark.parametrize(
    ("name", "args", "complaint"),
    [
        ("stub_count", {"count": 52, "misdealt": "yes"}, "misdealt: Input should be a valid bool"),
        ("stub_count", {"count": True}, "count: Input should be a valid integer"),
        ("stub_count", {"count": "52"}, "count: Input should be a valid integer"),
        ("stub_count", {"count": 52, "misdeal": True}, "misdeal: unknown argument"),
        ("misdeal", {"target": "seat9", "count": 4}, "target: String should match"),
        ("deal_round", {"positions": []}, "positions: List should have at least 1 item"),
        ("up_card", {"rank": "Z"}, "rank: a card's rank is A \\(or ace, 1\\)"),
        ("coup", {"player": ["K"], "banker": ["2", "3"]}, "player: List should have at least 2"),
        ("set_meter", {"cents": -1}, "cents: Input should be greater than or equal to 0"),
    ],
)  # fmt: skip
def test_wrong_arguments_are_refused_with_the_reason(
    name: str, args: dict[str, Any], complaint: str
) -> None:
    command = COMMANDS[name]
    phase = Phase.OPEN if command.phases is None else next(p for p in Phase if p in command.phases)
    with pytest.raises(Refused, match=complaint):
        admit(name, "floorperson", args, phase)


def test_a_closed_table_takes_no_reveal() -> None:
    with pytest.raises(Refused, match="'reveal' is refused while the table is closed"):
        admit("reveal", "dealer", {}, Phase.CLOSED)
    with pytest.raises(Refused, match="'deal_round' is refused while the table is betting"):
        admit("deal_round", "dealer", {"positions": [1]}, Phase.BETTING)


async def _ask(table: SimulatedTable, port: int, role: str, body: dict[str, Any]) -> dict[str, Any]:
    async with aiomqtt.Client("127.0.0.1", port) as client:
        await client.publish(f"tableside/hil-1/command/{role}", json.dumps(body), qos=1)
    found = await table.subscriber.wait_for(
        lambda m: m.kind == "command_result" and m.payload["request_id"] == body["request_id"]
    )
    return dict(found[0].payload)


async def test_every_declared_command_through_the_daemon(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    """Each declared command, with its example arguments and a role that may give it, reaches
    the running daemon and is carried out or refused for a reason of the table (its phase, a
    device this table lacks, the rules), never for being unknown, malformed or a crash."""
    async with simulated_table(
        mosquitto.url, tmp_path, simulator(interval=None), others={"shoe": shoe(interval=None)}
    ) as table:
        await table.daemon.publisher.connected.wait()
        opening = {"command": "open_table", "device": "table", "request_id": "open"}
        opened = await _ask(table, mosquitto.port, "floorperson", opening)
        assert opened["ok"], opened
        devices = {rt.device_class: name for name, rt in table.daemon.runtime.devices.items()}
        for n, command in enumerate(COMMANDS.values()):
            if command.name == "open_table":
                continue
            device = (
                "table" if command.target == "table" else devices.get(command.target, "shuffler")
            )
            role = sorted(command.roles)[0]
            body = {"command": command.name, "device": device, "args": dict(command.example),
                    "request_id": f"c{n}"}  # fmt: skip
            result = await _ask(table, mosquitto.port, role, body)
            error = result["error"] or ""
            for wrong in ("unknown command", "malformed", "internal error", "may not give",
                          "Input should", "unknown argument"):  # fmt: skip
                assert wrong not in error, (command.name, error)


async def test_a_deal_the_rules_halt_is_refused_unless_a_floorperson_overrides(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    """551.2(e): a Spanish 21 table with no card reader inspection this gaming day halts
    dealing: start_round is refused with the clause (never "ok" then a ruling); the dealer
    cannot override; a floorperson can, with a reason that the result carries. The round so
    dealt is itself a ruling that halts dealing: the override was for one deal, so the next is
    refused until the end its clause names, the day's inspection, is recorded; then dealing goes
    on while the ruling stays open for a floorperson to acknowledge and resolve."""
    from tableside.rules.model import Game

    async with simulated_table(
        mosquitto.url, tmp_path, simulator(interval=None), game=Game.SPANISH_21
    ) as table:
        await table.daemon.publisher.connected.wait()
        port = mosquitto.port

        def ask(role: str, name: str, rid: str, **args: Any) -> Any:
            body = {"command": name, "device": "table", "args": args, "request_id": rid}
            return _ask(table, port, role, body)

        assert (await ask("floorperson", "open_table", "o"))["ok"]
        refused = await ask("dealer", "start_round", "s1")
        assert not refused["ok"]
        assert refused["error"].startswith(
            "start_round: dealing is halted — 58 Pa. Code § 551.2(e)"
        )
        assert table.daemon.runtime.state.phase.value == "open", "refused: nothing moved"
        by_dealer = await ask("dealer", "start_round", "s2", override="go on")
        assert "only a floorperson may override" in by_dealer["error"]
        overridden = await ask("floorperson", "start_round", "s3", override="inspection at 10")
        assert overridden["ok"] and overridden["override"].startswith("inspection at 10")
        assert table.daemon.runtime.state.phase.value == "dealing"
        (dealt,) = await table.subscriber.wait_for(lambda m: m.kind == "ruling")
        assert dealt.payload["rule_id"] == "551.2(e).reader-inspection" and dealt.payload["halts"]
        # the override was for that deal: the round's next dealing (Spanish 21's reveal draws
        # the dealer's cards, 551.8(h)) is refused again, until a floorperson overrides it too
        held = await ask("dealer", "reveal", "r")
        assert held["error"].startswith(
            f"reveal: dealing is halted — ruling {dealt.payload['seq']} is open (58 Pa. Code § "
            "551.2(e)"
        ), held["error"]
        assert (await ask("floorperson", "reveal", "r2", override="last hand of the shift"))["ok"]
        assert (await ask("dealer", "round_settled", "rs"))["ok"]
        held = await ask("dealer", "start_round", "s4")
        assert held["error"].startswith(
            f"start_round: dealing is halted — ruling {dealt.payload['seq']} is open (58 Pa. "
            "Code § 551.2(e): halt_dealing, alert; a floorperson resolves it)"
        ), held["error"]
        inspected = await ask("floorperson", "reader_inspected", "i")
        assert inspected["ok"], inspected
        ruling = dealt.payload["seq"]
        # the retained table state says so: the ruling open, its halt ended
        (state,) = await table.subscriber.wait_for(
            lambda m: m.kind == "table" and m.payload["cause"] == "reader_inspected"
        )
        (open_,) = [r for r in state.payload["state"]["rulings"] if r["id"] == ruling]
        assert open_["state"] == "open" and open_["halt_ended_at"] is not None
        # and its ruling_state says so: still open, no longer halting (the floor's tile clears)
        (ended,) = await table.subscriber.wait_for(
            lambda m: m.kind == "ruling_state" and m.payload["ruling"] == ruling
        )
        assert ended.payload["state"] == "open" and ended.payload["halts"] is False
        assert ended.payload["by"] is None and ended.payload["open_s"] >= 0
        assert (await ask("dealer", "start_round", "s5"))["ok"], "the inspection ends the halt"
        assert (await ask("floorperson", "acknowledge_ruling", "a", ruling=ruling, by="fl"))["ok"]
        resolved = await ask("floorperson", "resolve_ruling", "rr", ruling=ruling,
                             action="halt_dealing", note="reader inspected", by="fl")  # fmt: skip
        assert resolved["ok"], resolved


# -- the contract: every table command does what its declaration says -------------------------

_T0 = 1_764_400_000.0


def _prepared(name: str) -> tuple[TableFacts, TableState]:
    """A table where ``name``'s example can be taken: the game it is for, and what it needs
    recorded before it (a hand to validate, a ruling to acknowledge …)."""
    from tableside.rules.model import Action
    from tableside.rules.progressive import PayTable
    from tableside.rules.rulings import RulingRecord, RulingState
    from tableside.rules.table import Claim

    games = {"pay_bonus": Game.LET_IT_RIDE, "first_card": Game.BACCARAT,
             "card_face_up_in_shoe": Game.BACCARAT, "coup": Game.BACCARAT,
             "cover_card": Game.BACCARAT, "up_card": Game.SPANISH_21,
             "ten_found": Game.SPANISH_21}  # fmt: skip
    game = games.get(name, Game.CARIBBEAN_STUD)
    pays = PayTable(rate_percent=72.5, initial_cents=10_000_00, reset_cents=10_000_00,
                    straight_flush="ten_percent")  # fmt: skip
    facts = TableFacts(game, progressive=pays)
    ruling = RulingRecord(21, "555.5(b).shuffler-count", "58 Pa. Code § 555.5(b)",
                          (Action.REMOVE_DECK,), _T0)  # fmt: skip
    if name == "resolve_ruling":
        ruling = dataclasses.replace(ruling, state=RulingState.ACKNOWLEDGED, acknowledged_by="a")
    claim = Claim(2, FiveCard.FLUSH, lit=True, validated=name == "pay_progressive")
    return facts, TableState(claims=(claim,), rulings=(ruling,), dealing=DealingMethod.HAND,
                             devices=frozenset({"shuffler", "shoe"}))  # fmt: skip


@pytest.mark.parametrize("name", [c.name for c in COMMANDS.values() if c.run is not None])
def test_every_table_command_changes_what_it_says(name: str) -> None:
    """Driven from the declarations, so a new command cannot escape it: taken with its example
    in every phase its row of TRANSITIONS takes it in, it leads to the phase the row says, and
    (but where it only repeats a move already made: round_settled once more) it changes the
    table or gives the rows something to judge: a command that does nothing fails here. One
    with no row is tried in every phase."""
    command = COMMANDS[name]
    row = TRANSITIONS.get(command) or {p: p for p in Phase}
    moves = any(p is not t for p, t in row.items())
    facts, prepared = _prepared(name)
    for phase, target in row.items():
        before = dataclasses.replace(prepared, phase=phase)
        args = command.parse(command.example)
        after, seen = step(facts, before, command.said(args, _T0 + 60))
        assert after.phase is target, (name, phase)
        if moves and target is phase:
            continue  # a repeat of a move already made
        assert after != before or seen, f"{name} in {phase.value}: nothing changed"


def test_transitions_are_keyed_by_what_makes_the_move() -> None:
    """Issue 29, point 4: a command's row is keyed by the declared command itself, as h11 keys
    on event classes (no name to misspell, nothing to reconcile with the registry), and goes
    to the table with it; a device's event's row by the event's type."""
    for key, row in TRANSITIONS.items():
        if isinstance(key, Command):
            assert COMMANDS[key.name] is key and key.phases == frozenset(row)
        else:
            assert issubclass(key, DeviceEvent) and EVENT_TRANSITIONS[key] is row
    no_more_bets = COMMANDS["no_more_bets"]
    assert no_more_bets.said(NoArgs(), _T0).moves is TRANSITIONS[no_more_bets]
    assert COMMANDS["shuffled"].said(NoArgs(), _T0).moves is None  # taken in any phase
    assert no_more_bets.refusal(Phase.DEALING) == (
        "'no_more_bets' is refused while the table is dealing (it is taken when the table is "
        "open, betting, complete)"
    )


def test_a_device_command_is_not_the_tables() -> None:
    with pytest.raises(Refused, match="'deal_round' is carried out by a device, not the table"):
        COMMANDS["deal_round"].said(COMMANDS["deal_round"].parse({"positions": [1]}), _T0)


def test_an_unknown_kind_is_refused() -> None:
    """Nothing that is not a declared command reaches the table, and the table's step takes
    nothing but its own events (it used to take any name and do nothing)."""
    with pytest.raises(Refused, match="unknown command 'rulings_opened'"):
        admit("rulings_opened", "floorperson", {"rulings": []}, Phase.OPEN)
    with pytest.raises(TypeError, match="the table takes a TableEvent"):
        step(TableFacts(Game.CARIBBEAN_STUD), TableState(), "open_table")  # type: ignore[arg-type]
