"""Baccarat's coup as pure functions (rules/baccarat.py), without the table: the cards to the
hands in dealing order, the cards the drawing rules call for, when a coup drawn card by card
is judged, and the burn."""

from __future__ import annotations

import pytest

from tableside.rules.baccarat import burn, cards_due, hands, stayed_short, to_judge


def ranks(*names: str) -> tuple[int, ...]:
    order = ("A", "2", "3", "4", "5", "6", "7", "8", "9", "10", "J", "Q", "K")
    return tuple(order.index(n) + 1 for n in names)


def test_cards_go_to_the_hands_in_dealing_order() -> None:
    # P 2+4 = 6 stands, B 3+K = 3 draws: the fifth card is the Banker's
    assert hands(ranks("2", "3", "4", "K", "5")) == {
        "player": ["2", "4"], "banker": ["3", "K", "5"], "extra": [],
    }  # fmt: skip
    # P 4 draws: the fifth card is the Player's, the sixth the Banker's, any more extra
    assert hands(ranks("2", "K", "2", "K", "A", "3", "9")) == {
        "player": ["2", "2", "A"], "banker": ["K", "K", "3"], "extra": ["9"],
    }  # fmt: skip


def test_the_cards_the_drawing_rules_call_for() -> None:
    assert cards_due(ranks("9", "K", "K", "2")) == 4  # a Natural
    assert cards_due(ranks("2", "3", "4", "K")) == 5  # P stands on 6, B draws on 3
    assert cards_due(ranks("2", "K", "2", "K")) is None  # P draws: the Banker's turn unknown
    assert cards_due(ranks("2", "K", "2", "K", "A")) == 6  # B 0 draws on anything


def test_a_coup_drawn_card_by_card_is_judged_once_complete_and_for_each_card_too_many() -> None:
    coup = ranks("9", "K", "K", "2", "4")
    assert to_judge(coup[:3], 0) is None  # fewer than four cards
    judged = to_judge(coup[:4], 0)
    assert judged is not None and judged.natural and judged.extra_cards == 0
    assert to_judge(coup[:4], 4) is None  # judged already
    again = to_judge(coup, 4)  # a fifth card after a Natural: judged again, with it
    assert again is not None and again.natural and again.player_drew
    # P 4 must draw: four cards are short, judged only when the next coup starts
    short = ranks("2", "K", "2", "K")
    assert to_judge(short, 0) is None
    left = stayed_short(short, 0)
    assert left is not None and left.player_should_draw and not left.player_drew
    assert stayed_short(coup, 5) is None and stayed_short(coup[:3], 0) is None


@pytest.mark.parametrize(
    ("rank", "first", "burned"),
    [("A", True, 1), ("7", True, 7), ("K", True, 10), ("10", False, 0), ("7", False, 7)],
)
def test_the_burn(rank: str, first: bool, burned: int) -> None:
    assert burn(rank, first=first) == burned
    with pytest.raises(ValueError, match="no card rank"):
        burn("1", first=first)
