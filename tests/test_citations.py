"""A ruling cites the clause whose words fit how the cards are dealt: each dealing section of
a chapter has its own (a manual shoe, the hand, an automated shoe), and Let It Ride dealt from
the hand is 643a.9, the text in force, with the 2010 clause it replaced named beside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tableside.rules import Game

from .conftest import Mosquitto
from .hil import SimulatedTable, ask, ruling, simulated_table, simulator

REGULATIONS = Path(__file__).parents[2] / "shared" / "regulations"


def _words_643a(label: str) -> str:
    """643a.9's words as the regulations hold them (the test that checks every row's words
    checks these rows too: tests/test_rules.py)."""
    from .test_rules import _clause_text

    return _clause_text(f"58 Pa. Code § 643a.9{label}")


async def _open(table: SimulatedTable, port: int, dealing: str) -> None:
    await table.daemon.publisher.connected.wait()
    assert (await ask(table, port, "floorperson", "open_table", "open"))["ok"]
    declared = await ask(table, port, "floorperson", "declare_method", "how", dealing=dealing)
    assert declared["ok"], declared


async def _chips(table: SimulatedTable, port: int) -> dict[str, Any]:
    """A round's bonus wager chips collected: two, where the system accepted none."""
    steps: list[tuple[str, dict[str, Any]]] = [
        ("bets_open", {}), ("no_more_bets", {}), ("chips_collected", {"count": 2})]  # fmt: skip
    for command, args in steps:
        done = await ask(table, port, "dealer", command, command, **args)
        assert done["ok"], done
    return done


@pytest.mark.skipif(not REGULATIONS.is_dir(), reason="../shared/regulations is not there")
@pytest.mark.parametrize(
    ("dealing", "clause", "replaced"),
    [("hand", "643a.9(a)(3)(i)", "559.11(a)(3)"), ("manual_shoe", "559.10(b)", None),
     ("automated_shoe", "559.12(a)(2)", None)],
)  # fmt: skip
async def test_let_it_ride_chips_cite_the_dealing_methods_clause(
    mosquitto: Mosquitto, tmp_path: Path, dealing: str, clause: str, replaced: str | None
) -> None:
    """Let It Ride: the bonus wager chips collected differ from the wagers accepted. Dealt from
    the hand the ruling cites 643a.9(a)(3)(i), in its words, naming 559.11(a)(3); from a manual
    shoe 559.10(b); only from an automated shoe 559.12(a)(2), whose words begin "If the cards
    are dealt from an automated dealing shoe"."""
    port = mosquitto.port
    async with simulated_table(
        mosquitto.url, tmp_path, simulator(interval=None), game=Game.LET_IT_RIDE
    ) as table:
        await _open(table, port, dealing)
        await _chips(table, port)
        (given,) = await table.subscriber.wait_for(ruling())
        assert given.payload["clause"] == f"58 Pa. Code § {clause}"
        assert given.payload["rule_id"] == f"{clause}.chips-match-wagers"
        if replaced:
            assert given.payload["words"] == _words_643a("(a)(3)(i)")
            assert f"it replaced § {replaced}" in given.payload["summary"]
        else:
            assert "643a" not in given.payload["summary"]


@pytest.mark.parametrize(("dealing", "clause"), [("manual_shoe", "555.8(b)"), ("hand", None),
                                                 ("automated_shoe", None)])  # fmt: skip
async def test_caribbean_stud_counts_chips_where_its_manual_shoe_clause_asks(
    mosquitto: Mosquitto, tmp_path: Path, dealing: str, clause: str | None
) -> None:
    """555.8(b) is the manual shoe's: dealt from the hand (555.9(a)(3)) or an automated shoe
    (555.10(a)(2)) Caribbean Stud asks for the lock-out, not a count, and a count that differs
    is journaled with the table but cites no clause whose words do not fit."""
    port = mosquitto.port
    async with simulated_table(mosquitto.url, tmp_path, simulator(interval=None)) as table:
        await _open(table, port, dealing)
        counted = await _chips(table, port)
        if clause is None:
            rulings = [m for m in table.subscriber.matching(ruling())
                       if m.payload["seq"] < counted["seq"]]  # fmt: skip
            assert rulings == []
            return
        (given,) = await table.subscriber.wait_for(ruling())
        assert given.payload["clause"] == f"58 Pa. Code § {clause}"


@pytest.mark.skipif(not REGULATIONS.is_dir(), reason="../shared/regulations is not there")
async def test_let_it_ride_dealt_from_the_hand_cites_643a_9(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    """A Let It Ride table dealt from the hand, its shuffler taken away: the round cites
    643a.9(a)(1) (an automated shuffler shall be used); six rounds without a stub count cite
    643a.9(d) ("at least once every 5 rounds"); a wrong stub count, 643a.9(f), misdealt or not.
    Never the superseded 559.11, which each ruling names as the clause 643a.9 replaced."""
    port = mosquitto.port
    async with simulated_table(
        mosquitto.url, tmp_path, simulator(interval=None), game=Game.LET_IT_RIDE,
        counts_cards=False,
    ) as table:  # fmt: skip
        sub = table.subscriber
        await _open(table, port, "hand")
        gone = await ask(table, port, "technician", "device_removed", "gone",
                         device_class="shuffler")  # fmt: skip
        assert gone["ok"], gone
        for n in range(1, 7):
            for command in ("shuffled", "start_round", "deal_done"):
                done = await ask(table, port, "dealer", command, f"{command}{n}")
                assert done["ok"], done
        for count, misdealt in ((51, True), (51, False)):
            done = await ask(table, port, "dealer", "stub_count", f"stub{misdealt}", count=count,
                             misdealt=misdealt)  # fmt: skip
            assert done["ok"], done
        given = [m.payload for m in await sub.wait_for(ruling(), count=9)]
        clauses = [g["clause"].removeprefix("58 Pa. Code § ") for g in given]
        assert clauses == ["643a.9(a)(1)"] * 6 + ["643a.9(d)", "643a.9(f)", "643a.9(f)"]
        assert not [g for g in given if "559.11" in g["clause"]]
        (due,) = [g for g in given if g["clause"].endswith("643a.9(d)")]
        assert due["words"] == _words_643a("(d)") and "every 5 rounds" in due["words"]
        assert "it replaced § 559.11(d)" in due["summary"]
        wrong = [g for g in given if g["clause"].endswith("643a.9(f)")]
        assert [g["actions"] for g in wrong] == [
            ["void_all_hands", "return_wagers"],
            ["void_all_hands", "return_wagers", "remove_deck"],
        ]
        assert wrong[0]["words"] == _words_643a("(f)")
        first = given[0]
        assert first["words"] == _words_643a("(a)(1)")
        assert "it replaced § 559.11(a)(1)" in first["summary"]


def test_tableside_rules_lists_643a_9s_rows(tmp_path: Path) -> None:
    """``tableside rules`` lists 643a.9's rows, each beside the 559.11 clause it replaced."""
    from tableside.cli import main

    out = tmp_path / "rules.md"
    assert main(["rules", str(out)]) == 0
    rows = [line for line in out.read_text(encoding="utf-8").splitlines()
            if line.startswith("| 643a.9")]  # fmt: skip
    listed = {line.split(" | ")[1].split("`")[1] for line in rows}
    assert listed >= {
        "643a.9(a)(1).hand-needs-shuffler", "643a.9(d).stub-count-due",
        "643a.9(f).stub-misdealt", "643a.9(f).stub-wrong",
        "643a.9(a)(3)(i).chips-match-wagers", "643a.9(a)(3)(i).wagers-unaccounted",
    }  # fmt: skip
    assert all("(replaced 559.11(" in line.split(" | ")[0] for line in rows)
    assert not [line for line in out.read_text(encoding="utf-8").splitlines()
                if line.startswith("| 559.11(")]  # fmt: skip
