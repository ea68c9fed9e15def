"""Caribbean Stud's progressive payout, pure: the pay table against 555.13(d)-(e), the meter,
and the steps of 555.12(b) before a hand is paid, in turn, with royal flushes sharing
(555.13(f))."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from tableside.daemon.config import ConfigError, validate_config
from tableside.errors import Refused
from tableside.rules import Game, TableFacts
from tableside.rules.hands import FiveCard
from tableside.rules.progressive import PayTable
from tableside.rules.table import Phase, TableState, step

from .events import table_event
from .test_roles import refusal

TABLE = PayTable(rate_percent=72.5, initial_cents=10_000_00, reset_cents=10_000_00,
                 straight_flush="ten_percent")  # fmt: skip


class Table:
    def __init__(self, pay: PayTable = TABLE) -> None:
        self.facts = TableFacts(Game.CARIBBEAN_STUD, progressive=pay)
        self.state = TableState(meter_millicents=pay.initial_cents * 1000)
        self.paid: list[dict[str, Any]] = []

    def __call__(self, kind: str, **data: Any) -> None:
        self.state, seen = step(self.facts, self.state, table_event(kind, 0.0, data))
        self.paid += [o.seen.data() for o in seen if o.kind == "table.progressive_paid"]

    def meter(self) -> int | None:
        return self.state.meter_cents


def test_pay_table_minimums() -> None:
    assert TABLE.problems() == []
    low = PayTable(rate_percent=69.9, initial_cents=0, reset_cents=0, straight_flush="fixed",
                   four_of_a_kind_cents=400_00)  # fmt: skip
    assert low.problems() == [
        "rate_percent 69.9 is below the 70% of 555.13(e)",
        "four_of_a_kind pays $400.00, below the $500.00 of 555.13(d)",
    ]


def test_a_config_below_the_minimums_is_refused_with_its_line() -> None:
    text = (
        '[table]\nid = "t"\ngame = "caribbean_stud"\n'
        "[progressive]\nrate_percent = 65\ninitial = 10000\nreset = 10000\n"
        'straight_flush = "ten_percent"\n'
        '[devices.shuffler]\ndriver = "tableside.shuffler"\nurl = "/dev/x"\n'
    )
    with pytest.raises(ConfigError, match=r"t\.toml:4: progressive: .*below the 70% of 555\.13"):
        validate_config(text, "t.toml", use_env=False)
    other_game = text.replace("caribbean_stud", "let_it_ride").replace("= 65", "= 80")
    with pytest.raises(ConfigError, match="not for let_it_ride"):
        validate_config(other_game, "t.toml", use_env=False)


def test_each_accepted_wager_adds_the_rate_exactly() -> None:
    """555.7(c): each $1 wager an acceptor accepts; 555.13(e): the rate goes to the meter."""
    table = Table()
    table("acceptors.wager_accepted", seat=1, credit=1)
    table("acceptors.wager_accepted", seat=2, credit=1)
    assert table.meter() == 10_000_00 + 145  # 72.5 cents each, not rounded away
    table("acceptors.wager_late", seat=3)  # not a wager (555.2(f)(2)): nothing added
    assert table.meter() == 10_000_00 + 145


def test_a_payout_needs_every_step() -> None:
    """555.12(b)'s steps, and nothing of the dealer's hand (555.12(c): paid whatever the dealer
    holds): no dealer's hand is ever reported here, and the payout is made."""
    table = Table()
    table("progressive_hand", seat=3, hand="royal_flush")
    with pytest.raises(Refused, match="not paid: the light at seat 3 is not lit; no "
                       "floorperson has validated seat 3"):  # fmt: skip
        table("pay_progressive", seat=3)
    table("progressive_controller.lights", lit=[3])
    with pytest.raises(Refused, match="no floorperson has validated seat 3"):
        table("pay_progressive", seat=3)
    table("validate_payout", seat=3)
    table("pay_progressive", seat=3)
    assert table.paid == [{"round": 0, "seat": 3, "hand": "royal_flush", "cents": 10_000_00,
                           "meter_cents_before": 10_000_00, "shared_by": 1}]  # fmt: skip
    assert table.meter() == 10_000_00  # the reset amount
    with pytest.raises(Refused, match="has been paid"):
        table("pay_progressive", seat=3)


def test_paid_in_turn_each_at_the_meter_as_it_stands() -> None:
    table = Table()
    for seat in (2, 5):
        table("progressive_hand", seat=seat, hand="straight_flush")
        table("validate_payout", seat=seat)
    table("progressive_controller.lights", lit=[2, 5])
    with pytest.raises(Refused, match="seat 5 is paid first"):
        table("pay_progressive", seat=2)
    table("pay_progressive", seat=5)
    table("pay_progressive", seat=2)
    assert [p["cents"] for p in table.paid] == [1_000_00, 900_00]  # 10%, then 10% of the rest
    assert table.meter() == 10_000_00 - 1_900_00


def test_royal_flushes_share_the_meter_paid_together() -> None:
    """555.13(f): royal flushes of one round share the meter equally and are paid together."""
    table = Table()
    table("acceptors.wager_accepted", seat=1, credit=1)
    for seat in (1, 6):
        table("progressive_hand", seat=seat, hand="royal_flush")
    table("progressive_controller.lights", lit=[1, 6])
    table("validate_payout", seat=6)
    with pytest.raises(Refused, match="paid together: no floorperson has validated seat 1"):
        table("pay_progressive", seat=6)
    table("validate_payout", seat=1)
    table("pay_progressive", seat=6)
    assert [(p["seat"], p["cents"], p["shared_by"]) for p in table.paid] == [
        (6, 5_000_36, 2), (1, 5_000_36, 2)]  # fmt: skip
    assert table.state.claim(1) is not None and table.state.claim(1).paid_cents == 5_000_36  # type: ignore[union-attr]


def test_fixed_amounts_do_not_touch_the_meter() -> None:
    table = Table(PayTable(rate_percent=70, initial_cents=20_000_00, reset_cents=10_000_00,
                           straight_flush="fixed", four_of_a_kind_cents=750_00))  # fmt: skip
    for seat, hand in ((4, "four_of_a_kind"), (3, "straight_flush"), (2, "flush")):
        table("progressive_hand", seat=seat, hand=hand)
        table("validate_payout", seat=seat)
    table("progressive_controller.lights", lit=[2, 3, 4])
    for seat in (4, 3, 2):
        table("pay_progressive", seat=seat)
    assert [p["cents"] for p in table.paid] == [750_00, 5_000_00, 50_00]
    assert table.meter() == 20_000_00


def test_what_is_no_progressive_hand_is_refused() -> None:
    table = Table()
    with pytest.raises(Refused, match="progressive_hand: hand: Input should be 'royal_flush'"):
        table("progressive_hand", seat=1, hand="two_pair")
    with pytest.raises(Refused, match="seat: Input should be less than or equal to 7"):
        table("validate_payout", seat=9)
    with pytest.raises(Refused, match="no progressive hand recorded at seat 4"):
        table("validate_payout", seat=4)
    bare = TableFacts(Game.CARIBBEAN_STUD)
    with pytest.raises(Refused, match="no progressive pay table"):
        step(
            bare,
            TableState(phase=Phase.OPEN),
            table_event("progressive_hand", 0.0, {"seat": 1, "hand": "flush"}),
        )


def test_a_new_round_starts_without_claims() -> None:
    table = Table()
    table("progressive_hand", seat=1, hand="flush")
    table("shoe.deal_started")
    assert table.state.claims == ()


def test_a_dealer_cannot_validate_a_payout() -> None:
    assert refusal("dealer", "validate_payout") == (
        "a dealer may not give 'validate_payout' (it needs: floorperson)"
    )
    assert refusal("floorperson", "validate_payout") is None
    assert refusal("dealer", "pay_progressive") is None


def test_a_shoe_that_reads_cards_records_the_progressive_hand() -> None:
    table = Table()
    table("shoe.deal_started")
    table("shoe.stack_dispensed", target="seat4", count=5, cards=["AS", "KS", "QS", "JS", "10S"])
    table("shoe.stack_dispensed", target="seat2", count=5, cards=["2C", "2D", "9H", "JS", "KD"])
    table("shoe.stack_dispensed", target="dealer", count=5, cards=["AH", "KH", "QH", "JH", "10H"])
    table("shoe.stack_dispensed", target="seat5", count=5, cards=["2H", "5H", "9H", "JH", "KH"])
    assert [(c.seat, c.hand) for c in table.state.claims] == [
        (5, FiveCard.FLUSH),
        (4, FiveCard.ROYAL_FLUSH),
    ]
    assert table.state.claims[1].to_dict()["hand"] == "royal_flush"  # by name in JSON
    # a card that is no card never reaches the table: the codec refuses its byte
    # (tests/test_shoe.py test_malformed_shoe_payloads), and nothing reads "??" as one
    with pytest.raises(ValidationError, match=r"'\?\?' is no card"):
        table("shoe.stack_dispensed", target="seat6", count=5, cards=["??", "2H", "5H", "9H", "JH"])


def test_let_it_ride_bonus_paid_from_the_pay_table() -> None:
    minimums = TableFacts(Game.LET_IT_RIDE)
    pays = {"royal_flush": 50_000, "straight_flush": 2_500, "four_of_a_kind": 400,
            "full_house": 200, "flush": 50, "straight": 25, "three_of_a_kind": 5}  # fmt: skip
    casino = TableFacts(Game.LET_IT_RIDE, bonus_pays=pays)

    def paid(facts: TableFacts, hand: str) -> dict[str, Any]:
        _, seen = step(
            facts,
            TableState(phase=Phase.OPEN),
            table_event("pay_bonus", 0.0, {"seat": 2, "hand": hand}),
        )
        return seen[0].seen.data()

    assert paid(minimums, "royal_flush")["dollars"] == 25_000  # 559.14(d)
    assert paid(casino, "royal_flush")["dollars"] == 50_000  # the casino's higher amount
    assert paid(casino, "three_of_a_kind") == {"round": 0, "seat": 2, "hand": "three_of_a_kind",
                                               "dollars": 5}  # fmt: skip
    with pytest.raises(Refused, match="a lesser hand loses"):
        paid(minimums, "two_pair")
    with pytest.raises(Refused, match="Let It Ride's"):
        step(TableFacts(Game.CARIBBEAN_STUD), TableState(phase=Phase.OPEN),
             table_event("pay_bonus", 0.0, {"seat": 1, "hand": "flush"}))  # fmt: skip
