"""A halt stops dealing at once, the round in play included, whatever the phase and whichever
way the cards come: every dealing command is refused while a rule halts dealing (a floorperson
may override, and the rows then say the cards were dealt all the same), and a device that deals
by itself while dealing is halted is ruled on. 551.16(m) voids nothing: the round in play
stands, stopped where it is, until the reader is repaired or replaced."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tableside.rules import Game
from tableside.rules.commands import COMMANDS
from tableside.rules.model import Action

from .conftest import Mosquitto
from .hil import ask, event, ruling, simulated_table, simulator, until
from .test_card_reader import reader
from .test_shoe import shoe
from .test_table import Table

HALT_CLAUSE = "58 Pa. Code § 551.16(m)"


# -- the rows, pure -----------------------------------------------------------------------------


def test_each_halting_row_has_its_dealt_while_halted_row() -> None:
    """Every ruling that halts dealing (halt_dealing, remove_deck) is said again, with its own
    clause, of cards dealt under it; the reader's own halt is its table row (551.16(m))."""
    from tableside.rules.rows import DEALT_WHILE_HALTED

    ids = {r.id for r in DEALT_WHILE_HALTED}
    for base in ("555.5(b).shuffler-count", "551.3(a).tens-left-in", "555.8(h).stub-wrong",
                 "551.16(b).ten-more", "551.2(e).reader-inspection"):  # fmt: skip
        assert f"{base}-dealt-while-halted" in ids
    assert all(r.actions == (Action.ALERT,) for r in DEALT_WHILE_HALTED)
    assert "551.16(m).reader-malfunction-dealt-while-halted" not in ids


@pytest.mark.parametrize(
    ("command", "args"),
    [("start_round", {}), ("up_card", {"rank": "A"}), ("more_cards", {}), ("reveal", {})],
)
def test_551_16_m_every_dealing_command_of_a_halted_round_is_ruled(
    command: str, args: dict[str, Any]
) -> None:
    """The reader malfunctioned in the middle of a round: whatever deals next (a floorperson
    overrode the refusal) is 551.16(m) again, halting, and nothing is void."""
    table = Table(Game.SPANISH_21, devices=("shuffler", "card_reader"))
    table("open_table")
    table("reader_inspected")
    table("start_round")
    table("halt", device_class="card_reader")
    assert table(command, override="seen by the pit", **args) == ["551.16(m)"]
    assert table.last_actions() == (Action.HALT_DEALING, Action.ALERT)
    table("device_installed", device_class="card_reader")
    assert table(command, **args) == []


def test_what_is_not_dealing_goes_on_under_a_halt() -> None:
    table = Table(Game.SPANISH_21, devices=("shuffler", "card_reader"))
    table("open_table")
    table("reader_inspected")
    table("start_round")
    table("up_card", rank="7")
    table("halt", device_class="card_reader")
    for command in ("match_the_dealer_settled", "deal_done", "round_settled"):
        assert table(command) == [], command
    assert not COMMANDS["reveal"].deals_in(Game.CARIBBEAN_STUD), "a poker reveal deals nothing"
    assert COMMANDS["reveal"].deals_in(Game.SPANISH_21), "551.8(h): the dealer's cards"


def test_a_shoe_round_dealt_under_a_halting_ruling_cites_that_clause() -> None:
    from tableside.rules.rulings import RulingRecord

    table = Table(Game.CARIBBEAN_STUD)
    table("open_table")
    table("shuffler.shuffle_complete")
    held = RulingRecord(7, "555.5(b).shuffler-count", "58 Pa. Code § 555.5(b)",
                        (Action.REMOVE_DECK,), table.now)  # fmt: skip
    table("rulings_opened", rulings=[held])
    assert table("shoe.deal_started") == ["555.5(b)"]
    assert table.last_actions() == (Action.ALERT,)


# -- through the daemon ---------------------------------------------------------------------


async def test_a_reader_malfunction_in_the_middle_of_a_round_stops_that_round(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    """551.16(m): the reader malfunctions after the up card; the dealer's next more_cards in
    that same round is refused, naming the ruling, and so is the reveal (the dealer's cards);
    what is not dealing goes on. A floorperson's override deals once, and the ruling says so;
    once the reader passes its self-test the round goes on. No hand is void."""
    port = mosquitto.port
    card_reader = reader("malfunction@1", interval=None)
    async with simulated_table(
        mosquitto.url, tmp_path, simulator(interval=None), others={"card_reader": card_reader},
        game=Game.SPANISH_21,
    ) as table:  # fmt: skip
        sub, runtime = table.subscriber, table.daemon.runtime
        await table.daemon.publisher.connected.wait()
        await until(lambda: runtime.devices["card_reader"].connection.value == "connected")
        for role, command, args in (("floorperson", "open_table", {}),
                                    ("floorperson", "reader_inspected", {}),
                                    ("dealer", "start_round", {}),
                                    ("dealer", "up_card", {"rank": "K"})):  # fmt: skip
            done = await ask(table, port, role, command, command, **args)
            assert done["ok"], done
        card_reader.requests.put_nowait(("cycle", None))  # the reader's next check: it breaks
        (halt,) = await sub.wait_for(ruling(HALT_CLAUSE))
        rid = halt.payload["seq"]
        assert halt.payload["round"] == 1, "in the middle of round 1"
        await until(lambda: runtime.state.halted_by == "card_reader")

        more = await ask(table, port, "dealer", "more_cards", "m1")
        assert not more["ok"]
        assert more["error"].startswith(
            f"more_cards: dealing is halted — ruling {rid} is open ({HALT_CLAUSE}: "
            "halt_dealing, alert; a floorperson resolves it)"
        ), more["error"]
        reveal = await ask(table, port, "dealer", "reveal", "r1")
        assert "reveal: dealing is halted" in reveal["error"]
        by_dealer = await ask(table, port, "dealer", "more_cards", "m2", override="busy table")
        assert "only a floorperson may override" in by_dealer["error"]
        # What is not dealing is taken: the round stays where it is.
        assert (await ask(table, port, "dealer", "match_the_dealer_settled", "mtd"))["ok"]
        assert runtime.state.round == 1 and runtime.state.phase.value == "dealing"

        overridden = await ask(table, port, "floorperson", "more_cards", "m3",
                               override="player's double down already placed")  # fmt: skip
        assert overridden["ok"], overridden
        assert "player's double down already placed (overriding ruling" in overridden["override"]
        again = await sub.wait_for(ruling(HALT_CLAUSE), count=2)
        assert again[-1].payload["rule_id"] == "551.16(m).halted-reader"
        assert again[-1].payload["event"]["data"]["how"] == "more_cards"
        assert again[-1].payload["round"] == 1
        for given in sub.matching(ruling()):
            assert not {"void_all_hands", "void_hand"} & set(given.payload["actions"])

        # Repaired: its self-test passes; dealing goes on in the same round.
        assert (await ask(table, port, "technician", "self_test", "t", device="card_reader"))["ok"]
        await sub.wait_for(event("self_test"))
        await until(lambda: runtime.state.halted_by is None)
        # the second ruling (of the overridden more_cards) halts until a repair too: it ended
        assert not [r for r in runtime.state.rulings if r.halts]
        more = await ask(table, port, "dealer", "more_cards", "m4")
        assert more["ok"], more
        assert runtime.state.round == 1


async def test_every_dealing_command_is_refused_in_every_phase_while_halted(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    """A halt is checked at each command that deals, in every phase it is taken in: the round's
    start, the up card, more cards, the reveal, from open through settlement."""
    port = mosquitto.port
    card_reader = reader("malfunction@1", interval=None)
    async with simulated_table(
        mosquitto.url, tmp_path, simulator(interval=None), others={"card_reader": card_reader},
        game=Game.SPANISH_21,
    ) as table:  # fmt: skip
        runtime = table.daemon.runtime
        await table.daemon.publisher.connected.wait()
        await until(lambda: runtime.devices["card_reader"].connection.value == "connected")
        assert (await ask(table, port, "floorperson", "open_table", "o"))["ok"]
        assert (await ask(table, port, "floorperson", "reader_inspected", "i"))["ok"]
        card_reader.requests.put_nowait(("cycle", None))
        await until(lambda: runtime.state.halted_by == "card_reader")
        n = 0

        async def refused(command: str, **args: Any) -> None:
            nonlocal n
            n += 1
            got = await ask(table, port, "dealer", command, f"{command}{n}", **args)
            assert got["error"] and f"{command}: dealing is halted" in got["error"], got

        async def moved(command: str, **args: Any) -> None:
            nonlocal n
            n += 1
            got = await ask(table, port, "floorperson", command, f"{command}{n}", **args)
            assert got["ok"], got

        await refused("start_round")  # open
        await moved("start_round", override="round under way before the fault")
        for phase in ("dealing", "decisions"):
            assert runtime.state.phase.value == phase
            await refused("up_card", rank="A")
            await refused("more_cards")
            await refused("reveal")
            if phase == "dealing":
                await moved("deal_done")
        await moved("reveal", override="the pit settles by hand")
        assert runtime.state.phase.value == "settlement"
        await refused("more_cards")
        await moved("round_settled")
        await refused("start_round")  # complete
        await moved("no_more_bets")
        await refused("start_round")  # no_more_bets
        assert runtime.state.round == 1


async def test_a_shoe_that_deals_under_a_halting_ruling_is_ruled_on(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    """555.5(b): the counting shuffler found 51 cards; the deck is to leave the table and the
    dealer's deal_round is refused. The shoe deals a round all the same (its own button): the
    round is ruled on, citing 555.5(b) again, with the round it was dealt in."""
    port = mosquitto.port
    shoe_sim = shoe(interval=None)
    async with simulated_table(
        mosquitto.url, tmp_path, simulator("count=51@1", interval=None),
        others={"shoe": shoe_sim},
    ) as table:  # fmt: skip
        sub = table.subscriber
        await table.daemon.publisher.connected.wait()
        assert (await ask(table, port, "floorperson", "open_table", "o"))["ok"]
        assert (await ask(table, port, "dealer", "start_shuffle", "s", device="shuffler"))["ok"]
        (miscount,) = await sub.wait_for(ruling("58 Pa. Code § 555.5(b)"))
        refused = await ask(table, port, "dealer", "deal_round", "d", device="shoe",
                            positions=[1, 2])  # fmt: skip
        assert "deal_round: dealing is halted" in refused["error"]
        shoe_sim.requests.put_nowait(("cycle", shoe_sim.default_request()))
        found = await sub.wait_for(ruling("58 Pa. Code § 555.5(b)"), count=2)
        dealt = found[-1].payload
        assert dealt["rule_id"] == "555.5(b).shuffler-count-dealt-while-halted"
        assert dealt["round"] == 1 and dealt["actions"] == ["alert"]
        assert dealt["event"]["data"]["how"] == "shoe.deal_started"
        assert dealt["event"]["data"]["halting"] == ["555.5(b).shuffler-count"]
        assert miscount.payload["seq"] < dealt["seq"]


def test_a_reading_shoes_coup_under_a_halt_is_seen_in_the_round_the_dealer_began() -> None:
    """A coup a reading shoe deals in the round the dealer began, while dealing is halted: the
    table sees cards dealt under the halt (baccarat has no halting row of its own; the rows
    that judge it are the halting clauses')."""
    from tableside.rules.rulings import RulingRecord
    from tableside.rules.table import step

    from .events import table_event

    table = Table(Game.BACCARAT, devices=("shoe",))
    table("open_table")
    table("start_round")
    held = RulingRecord(3, "551.2(e).reader-inspection", "58 Pa. Code § 551.2(e)",
                        (Action.HALT_DEALING,), table.now)  # fmt: skip
    table("rulings_opened", rulings=[held])
    drawn = table_event("shoe.card_drawn", table.now, {"round": 1, "index": 0, "card": "9S"})
    state, seen = step(table.facts, table.state, drawn)
    assert [o.kind for o in seen] == ["table.dealt_while_halted"]
    assert seen[0].seen.data()["halting"] == ("551.2(e).reader-inspection",)
    assert state.round == 1, "the coup is the round the dealer began"
