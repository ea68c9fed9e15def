"""Spanish 21's Insurance Wager, 551.10 whole, and its neighbours 551.7(d) and 551.8(e): the
players' right on an ace up only (a); placed before the hole card goes into the reader and at
most half the initial wager, to the next chip (b); won on the reader's Blackjack and paid 2 to 1
(a, c); lost, and collected, right after the reader says no Blackjack and before any additional
card (d). Match-The-Dealer is settled after the up card, before any additional card and before
the reader (551.7(d))."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tableside.errors import Refused
from tableside.rules import Game

from .conftest import Mosquitto
from .hil import SimulatedTable, ask, event, ruling, simulated_table, simulator, until
from .test_card_reader import reader
from .test_table import Table


def _round(up_card: str | None = "A") -> Table:
    table = Table(Game.SPANISH_21, devices=("shuffler", "card_reader"))
    table("open_table")
    table("reader_inspected")
    table("start_round")
    if up_card is not None:
        table("up_card", rank=up_card)
    return table


# -- pure --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("up_card", "found"),
    [("A", []), ("K", ["551.10(a)"]), ("7", ["551.10(a)"]), (None, ["551.10(a)"])],
)
def test_551_10_a_insurance_on_an_ace_only(up_card: str | None, found: list[str]) -> None:
    assert _round(up_card)("insurance_placed") == found


@pytest.mark.parametrize(("amount", "wager", "over"), [(5, 10, False), (3, 5, False),
                                                       (6, 10, True), (4, 5, True)])  # fmt: skip
def test_551_10_b_not_more_than_half_to_the_next_chip(amount: int, wager: int, over: bool) -> None:
    found = _round()("insurance_placed", amount=amount, wager=wager)
    assert found == (["551.10(b)"] if over else [])


def test_551_10_b_amount_and_wager_go_together() -> None:
    with pytest.raises(Refused, match="amount and wager go together"):
        _round()("insurance_placed", amount=5)


def test_551_10_d_collected_right_after_no_blackjack_and_before_more_cards() -> None:
    table = _round()
    table("insurance_placed")
    table("card_reader.hole_card_checked", check_id=1, blackjack=False)
    assert table("insurance_collected") == []
    late = _round()
    late("insurance_placed")
    late("card_reader.hole_card_checked", check_id=1, blackjack=False)
    late("more_cards")
    assert late("insurance_collected") == ["551.10(d)"]
    early = _round()
    early("insurance_placed")
    assert early("insurance_collected") == ["551.10(d)"], "before the reader said anything"


def test_551_10_a_c_insurance_wins_on_the_readers_blackjack_at_2_to_1() -> None:
    table = _round()
    table("insurance_placed")
    table("card_reader.hole_card_checked", check_id=1, blackjack=True)
    assert table("insurance_paid", wager=5, paid=10) == []
    assert table("insurance_paid", wager=5, paid=5) == ["551.10(c)"]
    assert table("insurance_collected") == ["551.10(d)"], "a winning wager is not collected"
    none = _round()
    none("insurance_placed")
    none("card_reader.hole_card_checked", check_id=1, blackjack=False)
    assert none("insurance_paid", wager=5, paid=10) == ["551.10(a)"]


def test_551_7_d_match_the_dealer_after_the_up_card_before_more_cards() -> None:
    assert _round(None)("match_the_dealer_settled") == ["551.7(d)"]
    assert _round("7")("match_the_dealer_settled") == []
    table = _round("7")
    table("more_cards")
    assert table("match_the_dealer_settled") == ["551.7(d)"]


def test_a_new_round_forgets_the_last_ones_reader_and_cards() -> None:
    table = _round()
    table("card_reader.hole_card_checked", check_id=1, blackjack=True)
    table("more_cards")
    table("deal_done")
    table("start_round")
    assert (table.state.blackjack, table.state.more_cards_dealt) == (None, False)


# -- through the daemon, the card reader simulated ------------------------------------------


async def _spanish_21_round(table: SimulatedTable, port: int, up_card: str) -> None:
    runtime = table.daemon.runtime
    await table.daemon.publisher.connected.wait()
    await until(lambda: runtime.devices["card_reader"].connection.value == "connected")
    steps: list[tuple[str, str, dict[str, Any]]] = [
        ("floorperson", "open_table", {}), ("floorperson", "reader_inspected", {}),
        ("dealer", "start_round", {}), ("dealer", "up_card", {"rank": up_card}),
    ]  # fmt: skip
    for role, command, args in steps:
        done = await ask(table, port, role, command, command, **args)
        assert done["ok"], done


async def _said(table: SimulatedTable, port: int, command: str, rid: str, **args: Any) -> None:
    done = await ask(table, port, "dealer", command, rid, **args)
    assert done["ok"], done


async def test_insurance_on_a_king_is_a_ruling(mosquitto: Mosquitto, tmp_path: Path) -> None:
    """551.10(a): an Insurance Wager on a king up was taken without a word; it is a ruling."""
    port = mosquitto.port
    async with simulated_table(
        mosquitto.url, tmp_path, simulator(interval=None),
        others={"card_reader": reader(interval=None)}, game=Game.SPANISH_21,
    ) as table:  # fmt: skip
        await _spanish_21_round(table, port, "K")
        await _said(table, port, "insurance_placed", "ins")
        (given,) = await table.subscriber.wait_for(ruling("58 Pa. Code § 551.10(a)"))
        assert given.payload["rule_id"] == "551.10(a).insurance-without-an-ace"
        assert given.payload["event"]["data"]["up_card"] == "K"


async def test_losing_insurance_collected_after_more_cards_is_a_ruling(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    """551.10(d): an ace up, insurance placed, the reader says no Blackjack; the dealer deals
    more cards and only then collects the losing insurance: a ruling (it was taken)."""
    port = mosquitto.port
    card_reader = reader(interval=None)
    async with simulated_table(
        mosquitto.url, tmp_path, simulator(interval=None), others={"card_reader": card_reader},
        game=Game.SPANISH_21,
    ) as table:  # fmt: skip
        await _spanish_21_round(table, port, "A")
        await _said(table, port, "insurance_placed", "ins", amount=5, wager=10)
        card_reader.requests.put_nowait(("cycle", None))  # the hole card goes into the reader
        (checked,) = await table.subscriber.wait_for(event("hole_card_checked"))
        assert checked.payload["data"]["blackjack"] is False
        await until(lambda: table.daemon.runtime.state.blackjack is False)
        await _said(table, port, "more_cards", "more")
        await _said(table, port, "insurance_collected", "collect")
        (given,) = await table.subscriber.wait_for(ruling("58 Pa. Code § 551.10(d)"))
        assert given.payload["rule_id"] == "551.10(d).insurance-collected-after-more-cards"
        assert [m.payload["rule_id"] for m in table.subscriber.matching(ruling())] == [
            "551.10(d).insurance-collected-after-more-cards"
        ], "nothing else: the ace, the amount, the order up to the reader were right"


async def test_insurance_won_on_the_readers_blackjack(mosquitto: Mosquitto, tmp_path: Path) -> None:
    """551.10(a), (c), (d): the reader says Blackjack under the ace: the insurance won, paid 2 to
    1; paid at even money it is a ruling, and so is collecting it."""
    port = mosquitto.port
    card_reader = reader("blackjack@1", interval=None)
    async with simulated_table(
        mosquitto.url, tmp_path, simulator(interval=None), others={"card_reader": card_reader},
        game=Game.SPANISH_21,
    ) as table:  # fmt: skip
        await _spanish_21_round(table, port, "A")
        await _said(table, port, "insurance_placed", "ins", amount=5, wager=10)
        card_reader.requests.put_nowait(("cycle", None))
        await until(lambda: table.daemon.runtime.state.blackjack is True)
        await _said(table, port, "insurance_paid", "paid", wager=5, paid=10)
        await _said(table, port, "insurance_paid", "short", wager=5, paid=5)
        await _said(table, port, "insurance_collected", "collect")
        found = await table.subscriber.wait_for(ruling(), count=2)
        assert [m.payload["rule_id"] for m in found] == [
            "551.10(c).insurance-odds",
            "551.10(d).insurance-collected-on-blackjack",
        ]


async def test_match_the_dealer_after_more_cards_is_a_ruling(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    """551.7(d): Match-The-Dealer is settled before any additional card is dealt."""
    port = mosquitto.port
    async with simulated_table(
        mosquitto.url, tmp_path, simulator(interval=None),
        others={"card_reader": reader(interval=None)}, game=Game.SPANISH_21,
    ) as table:  # fmt: skip
        await _spanish_21_round(table, port, "7")
        await _said(table, port, "more_cards", "more")
        await _said(table, port, "match_the_dealer_settled", "mtd")
        (given,) = await table.subscriber.wait_for(ruling("58 Pa. Code § 551.7(d)"))
        assert given.payload["rule_id"] == "551.7(d).match-the-dealer-after-more-cards"
