"""Every path to a fact reaches the same ruling: what the dealer says, what a shoe that reads
cards deals, what a card reader reports. A fact a row judges must not depend on who told the
table (the cover card's last hand from a reading shoe's coups, a card face up reported by the
dealer or found by a shoe, a ten read by a shoe, a card reader that says it is broken in its
status or its self-test)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tableside.rules import Game
from tableside.rules.model import Action

from .conftest import Mosquitto
from .hil import SimulatedTable, ask, event, ruling, simulated_table, simulator, until
from .test_card_reader import reader
from .test_shoe import shoe
from .test_table import Table

PAST_LAST_HAND = "545.10(e).past-last-hand"


def _rule_ids(table: SimulatedTable) -> list[str]:
    return [m.payload["rule_id"] for m in table.subscriber.matching(ruling())]


def _device(table: Table, kind: str, **data: Any) -> list[str]:
    """A device's event as the daemon takes it: its own rows, then what the table saw."""
    from tableside.rules import Observation, evaluate

    from .events import device_event

    own = evaluate(table.facts, Observation(kind, "dev", device_event(kind, **data)))
    table.rulings += [(r.rule.citation, r.rule.actions) for r in own]
    return [r.rule.citation.removeprefix("58 Pa. Code § ") for r in own] + table(kind, **data)


# -- pure: each path, one table ---------------------------------------------------------------


def test_the_cover_card_judges_the_coups_a_reading_shoe_deals() -> None:
    table = Table(Game.BACCARAT, devices=("shoe",))
    table("open_table")
    found: list[list[str]] = []
    cards = iter(["9S", "2H", "KD", "5C"] * 5)  # each coup a natural: four cards
    for n in range(1, 6):
        drawn = [table("shoe.card_drawn", round=n, index=i, card=next(cards)) for i in range(4)]
        found.append([c for cs in drawn for c in cs])
        if n == 1:
            assert table("cover_card") == ["545.10(e)"]
    assert [f.count("545.10(e)") for f in found] == [0, 0, 1, 1, 1]
    assert table.state.round == 5


def test_the_cover_card_judges_the_coups_the_dealer_reports() -> None:
    table = Table(Game.BACCARAT, devices=())
    table("open_table")
    coup = {"player": ["9", "K"], "banker": ["2", "5"]}
    assert table("coup", **coup) == []
    assert table("cover_card") == ["545.10(e)"]
    assert table("coup", **coup) == [], "the last hand"
    assert table("coup", **coup) == ["545.10(e)"]
    table("start_round")  # a round the dealer begins has its coup: one round, not two
    assert table("coup", **coup) == []
    assert table.state.round == 4


@pytest.mark.parametrize("game", [Game.CARIBBEAN_STUD, Game.FOUR_CARD_POKER,
                                  Game.LET_IT_RIDE, Game.SPANISH_21])  # fmt: skip
def test_a_card_face_up_from_the_dealer_or_the_shoe(game: Game) -> None:
    clause = {Game.CARIBBEAN_STUD: "555.14(b)", Game.FOUR_CARD_POKER: "557.13(a)",
              Game.LET_IT_RIDE: "559.15(a)", Game.SPANISH_21: "551.16(a)"}[game]  # fmt: skip
    by_dealer = Table(game)
    by_dealer("open_table")
    by_dealer("start_round")
    assert by_dealer("card_face_up") == [clause]
    assert by_dealer.last_actions() == (Action.DISCARD_CARD,)
    assert by_dealer("card_face_up") == [clause]
    assert Action.VOID_ALL_HANDS in by_dealer.last_actions()
    by_shoe = Table(game)
    by_shoe("open_table")
    by_shoe("start_round")
    assert _device(by_shoe, "shoe.card_face_up", round=1, index=0, total=1) == [clause]
    assert by_shoe.last_actions() == (Action.DISCARD_CARD,)
    assert by_shoe("card_face_up") == [clause], "the dealer's, after the shoe's: the second"
    assert Action.VOID_ALL_HANDS in by_shoe.last_actions()


def test_spanish_21_tens_a_shoe_reads() -> None:
    table = Table(Game.SPANISH_21, devices=("shoe",))
    table("open_table")
    table("reader_inspected")
    table("start_round")
    stack = table("shoe.stack_dispensed", round=1, index=0, target="seat1", count=3,
                  cards=("10H", "4C", "10S"))  # fmt: skip
    assert stack == ["551.16(b)", "551.16(b)"]
    assert table.last_actions() == (Action.VOID_ALL_HANDS, Action.RETURN_WAGERS,
                                    Action.REMOVE_DECK)  # fmt: skip
    other = Table(Game.CARIBBEAN_STUD)
    assert other("shoe.stack_dispensed", round=1, index=0, target="seat1", count=5,
                 cards=("10H", "4C", "10S", "2D", "3D")) == []  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "data"),
    [("card_reader.status", {"state": "fault", "fault": "malfunction"}),
     ("card_reader.self_test", {"passed": False, "detail": "optical sensor out of range"})],
)  # fmt: skip
def test_a_reader_that_says_it_is_broken_another_way(kind: str, data: dict[str, Any]) -> None:
    table = Table(Game.SPANISH_21, devices=("shuffler", "card_reader"))
    table("open_table")
    table("reader_inspected")
    assert table(kind, **data) == ["551.16(m)"]
    assert table.last_actions() == (Action.HALT_DEALING, Action.ALERT)
    assert table.state.halted_by == "card_reader"
    assert table(kind, **data) == [], "once: dealing is halted for it already"
    assert table("card_reader.self_test", passed=True) == []
    assert table.state.halted_by is None, "repaired"


# -- through the daemon and the simulators -----------------------------------------------------


async def test_a_reading_shoe_deals_past_the_last_hand(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    """545.10(e): the cover card comes out in coup 1, dealt by a shoe that reads cards; coup 2
    is the last hand; coups 3 to 5, dealt by the shoe all the same, are each a ruling with
    their round (they went unjudged: only the dealer's start_round was)."""
    port = mosquitto.port
    baccarat_shoe = shoe(interval=None, baccarat=True, stack_time=0.001)
    async with simulated_table(
        mosquitto.url, tmp_path, simulator(interval=None), others={"shoe": baccarat_shoe},
        game=Game.BACCARAT,
    ) as table:  # fmt: skip
        runtime = table.daemon.runtime
        await table.daemon.publisher.connected.wait()
        await until(lambda: runtime.devices["shoe"].connection.value == "connected")
        assert (await ask(table, port, "floorperson", "open_table", "o"))["ok"]
        baccarat_shoe.requests.put_nowait(("cycle", None))
        await until(lambda: runtime.state.round == 1)
        cover = await ask(table, port, "dealer", "cover_card", "c")
        assert cover["ok"], cover
        for _ in range(4):
            baccarat_shoe.requests.put_nowait(("cycle", None))
        past = await table.subscriber.wait_for(
            lambda m: m.kind == "ruling" and m.payload["rule_id"] == PAST_LAST_HAND, count=3
        )
        assert [m.payload["round"] for m in past] == [3, 4, 5]
        assert all(m.payload["clause"] == "58 Pa. Code § 545.10(e)" for m in past)
        assert runtime.state.round == 5


async def test_the_dealers_coups_past_the_last_hand(mosquitto: Mosquitto, tmp_path: Path) -> None:
    """The same fact by the dealer's commands: coups reported one after another, without a
    start_round each, are hands of their own; the one after the last hand is a ruling."""
    port = mosquitto.port
    async with simulated_table(
        mosquitto.url, tmp_path, simulator(interval=None), game=Game.BACCARAT
    ) as table:
        await table.daemon.publisher.connected.wait()
        coup: dict[str, Any] = {"player": ["9", "K"], "banker": ["2", "5"]}
        steps: list[tuple[str, str, dict[str, Any]]] = [
            ("floorperson", "open_table", {}), ("dealer", "coup", coup),
            ("dealer", "cover_card", {}), ("dealer", "coup", coup), ("dealer", "coup", coup),
        ]  # fmt: skip
        for n, (role, command, args) in enumerate(steps):
            done = await ask(table, port, role, command, f"{command}{n}", **args)
            assert done["ok"], done
        (past,) = await table.subscriber.wait_for(
            lambda m: m.kind == "ruling" and m.payload["rule_id"] == PAST_LAST_HAND
        )
        assert past.payload["round"] == 3


async def test_a_card_face_up_the_dealer_reports_at_a_poker_table(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    """Let It Ride dealt by hand: the dealer finds a card face up in the deck (559.15(a): "in
    the shoe or the deck"): discarded; a second in the same deal voids the round. An automated
    shoe's report of the same gave these rulings; the dealer's gave none."""
    port = mosquitto.port
    async with simulated_table(
        mosquitto.url, tmp_path, simulator(interval=None), game=Game.LET_IT_RIDE
    ) as table:
        await table.daemon.publisher.connected.wait()
        for role, command, args in (("floorperson", "open_table", {}),
                                    ("floorperson", "declare_method", {"dealing": "hand"}),
                                    ("dealer", "start_round", {}),
                                    ("dealer", "card_face_up", {}),
                                    ("dealer", "card_face_up", {})):  # fmt: skip
            done = await ask(table, port, role, command, f"{command}{len(args)}{role}", **args)
            assert done["ok"], done
        given = await table.subscriber.wait_for(ruling("58 Pa. Code § 559.15(a)"), count=2)
        assert [m.payload["actions"] for m in given] == [
            ["discard_card"],
            ["void_all_hands", "return_wagers", "reshuffle"],
        ]


async def test_spanish_21_a_shoe_finds_a_card_face_up_and_reads_its_tens(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    """A shoe at a Spanish 21 table (a technician's test deal of a whole 52-card deck, read
    card by card): the card it finds face up is 551.16(a)'s, as the dealer's word is; the tens
    it reads are 551.16(b)'s, the first torn up, the next ones voiding the round."""
    port = mosquitto.port
    s21_shoe = shoe("faceup@1", interval=None)
    async with simulated_table(
        mosquitto.url, tmp_path, simulator(interval=None), others={"shoe": s21_shoe},
        game=Game.SPANISH_21, publish_cards=True,
    ) as table:  # fmt: skip
        await table.daemon.publisher.connected.wait()
        for role, command in (("floorperson", "open_table"), ("floorperson", "reader_inspected")):
            assert (await ask(table, port, role, command, command))["ok"]
        dealt = await ask(table, port, "technician", "deal", "d", device="shoe", round=1,
                          stacks=[{"target": "seat1", "size": 51}])  # fmt: skip
        assert dealt["ok"], dealt
        (stack,) = await table.subscriber.wait_for(event("stack_dispensed"))
        (face_up,) = table.subscriber.matching(event("card_face_up"))
        cards = [*stack.payload["data"]["cards"], face_up.payload["data"]["card"]]
        tens = sum(card.startswith("10") for card in cards)
        assert tens == 4, "the whole deck"
        (discard,) = await table.subscriber.wait_for(ruling("58 Pa. Code § 551.16(a)"))
        assert discard.payload["rule_id"] == "551.16(a).face-up-one-shoe"
        found = await table.subscriber.wait_for(ruling("58 Pa. Code § 551.16(b)"), count=tens)
        assert [m.payload["rule_id"] for m in found] == (
            ["551.16(b).ten-one"] + ["551.16(b).ten-more"] * (tens - 1)
        )


async def test_a_card_reader_whose_self_test_fails_halts_dealing(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    """551.16(m) by the reader's other word: its self-test fails (no fault event). Dealing is
    halted as for a malfunction, until it is repaired (a self-test that passes)."""
    port = mosquitto.port
    card_reader = reader("selftest_fail@1", interval=None)
    async with simulated_table(
        mosquitto.url, tmp_path, simulator(interval=None), others={"card_reader": card_reader},
        game=Game.SPANISH_21,
    ) as table:  # fmt: skip
        runtime = table.daemon.runtime
        await table.daemon.publisher.connected.wait()
        await until(lambda: runtime.devices["card_reader"].connection.value == "connected")
        for role, command in (("floorperson", "open_table"), ("floorperson", "reader_inspected")):
            assert (await ask(table, port, role, command, command))["ok"]
        card_reader.requests.put_nowait(("cycle", None))  # arms the failing self-test
        await table.subscriber.wait_for(event("hole_card_checked"))
        tested = await ask(table, port, "technician", "self_test", "t1", device="card_reader")
        assert tested["ok"], tested
        (halt,) = await table.subscriber.wait_for(ruling("58 Pa. Code § 551.16(m)"))
        assert halt.payload["rule_id"] == "551.16(m).reader-not-working"
        assert halt.payload["actions"] == ["halt_dealing", "alert"]
        refused = await ask(table, port, "dealer", "start_round", "s1")
        assert "start_round: dealing is halted" in refused["error"]
        assert (await ask(table, port, "technician", "self_test", "t2", device="card_reader"))["ok"]
        await until(lambda: runtime.state.halted_by is None)
        assert (await ask(table, port, "dealer", "start_round", "s2"))["ok"]
        assert _rule_ids(table).count("551.16(m).reader-not-working") == 1


@pytest.mark.parametrize(("reveals", "clause"), [(True, "551.16(l)(1)"), (False, "551.16(l)(2)")])
def test_the_up_card_given_after_the_reader_checked(reveals: bool, clause: str) -> None:
    """551.16(l): the reader checked the hole card before the dealer gave the up card; a 7 up
    is judged when it comes, as it would have been first."""
    table = Table(Game.SPANISH_21, devices=("shuffler", "card_reader"))
    table("open_table")
    table("reader_inspected")
    table("card_reader.status", state="ready", reveals_hole_card=reveals)
    table("start_round")
    assert table("card_reader.hole_card_checked", check_id=1, blackjack=False) == []
    assert table("up_card", rank="7") == [clause]
    assert table("up_card", rank="K") == [], "a correction judges nothing again"


def test_the_up_card_given_after_more_cards() -> None:
    """551.8(e): more cards were dealt, then the dealer gives an ace as the up card: the hole
    card had not gone through the reader."""
    table = Table(Game.SPANISH_21, devices=("shuffler", "card_reader"))
    table("open_table")
    table("reader_inspected")
    table("start_round")
    assert table("more_cards") == []
    assert table("up_card", rank="A") == ["551.8(e)"]


@pytest.mark.parametrize(("misdealt", "actions"), [
    (False, (Action.VOID_ALL_HANDS, Action.RETURN_WAGERS, Action.REMOVE_DECK)),
    (True, (Action.VOID_ALL_HANDS, Action.RETURN_WAGERS)),
])  # fmt: skip
def test_an_automated_shoes_stub_count(misdealt: bool, actions: tuple[Action, ...]) -> None:
    """555.10(f): the shoe's own count of the stub, with the cards it dealt, is not the whole
    deck: judged as the dealer's stub count is, misdealt or not by the round's stacks."""
    table = Table(Game.CARIBBEAN_STUD)
    table("open_table")
    table("shuffler.shuffle_complete")
    table("shoe.deal_started")
    table("shoe.stack_dispensed", round=1, index=0, target="seat1", count=4 if misdealt else 5)
    table("shoe.stack_dispensed", round=1, index=1, target="dealer", count=5)
    table("shoe.deal_complete", round=1, stacks=2, cards=9 if misdealt else 10)
    stub = 42 if misdealt else 41
    assert table("shoe.stub_removed", round=1, count=stub) == ["555.10(f)"]
    assert table.last_actions() == actions
    full = Table(Game.CARIBBEAN_STUD)
    full("open_table")
    full("shoe.deal_started")
    full("shoe.deal_complete", round=1, stacks=2, cards=10)
    assert full("shoe.stub_removed", round=1, count=42) == []
    assert full.state.rounds_since_stub_count == 1, "the dealer still counts"


async def test_an_automated_shoes_stub_count_that_is_not_the_whole_deck(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    """A shoe loaded with 51 cards deals a round and counts its stub: the deck is short, and
    the ruling is 555.10(f)'s, as the dealer's stub count of 51 would be (it was none: only the
    dealer's count was judged)."""
    port = mosquitto.port
    short_shoe = shoe(interval=None, deck_size=51)
    async with simulated_table(
        mosquitto.url, tmp_path, simulator(interval=None), others={"shoe": short_shoe}
    ) as table:  # fmt: skip
        await table.daemon.publisher.connected.wait()
        assert (await ask(table, port, "floorperson", "open_table", "o"))["ok"]
        assert (await ask(table, port, "dealer", "start_shuffle", "s", device="shuffler"))["ok"]
        await table.subscriber.wait_for(event("shuffle_complete"))
        dealt = await ask(table, port, "dealer", "deal_round", "d", device="shoe",
                          positions=[1, 2])  # fmt: skip
        assert dealt["ok"], dealt
        (wrong,) = await table.subscriber.wait_for(ruling("58 Pa. Code § 555.10(f)"))
        assert wrong.payload["rule_id"] == "555.10(f).stub-wrong"
        assert wrong.payload["event"]["data"]["count"] == 51
        assert wrong.payload["round"] == 1
