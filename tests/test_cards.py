"""A card's rank as a person spells it (drivers/cards.py): every spelling of one rank is the
same card; what could be two cards, or none, is refused saying what a rank may be."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter, ValidationError

from tableside.drivers.cards import RANKS, Rank, card_code, card_name, rank_name

RANK = TypeAdapter(Rank)


@pytest.mark.parametrize(
    ("spelt", "name"),
    [(7, "7"), ("7", "7"), (2, "2"), (10, "10"), ("10", "10"), ("T", "10"), ("t", "10"),
     (1, "A"), ("1", "A"), ("a", "A"), ("A", "A"), ("ace", "A"), ("Ace", "A"), ("j", "J"),
     ("jack", "J"), ("queen", "Q"), ("Q", "Q"), ("k", "K"), ("KING", "K"), ("king", "K")],
)  # fmt: skip
def test_one_rank_however_it_is_spelt(spelt: object, name: str) -> None:
    assert rank_name(spelt) == name
    assert RANK.validate_python(spelt) == name
    assert RANK.validate_json(f'"{spelt}"' if isinstance(spelt, str) else str(spelt)) == name


@pytest.mark.parametrize("bad", [0, 11, 12, 13, "11", "13", -7, 7.0, True, None, "", "X",
                                 "7 ", "seven", "7S", [7]])  # fmt: skip
def test_what_is_no_rank_or_two_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match=r"a card's rank is A \(or ace, 1\), 2\.\.10"):
        rank_name(bad)
    with pytest.raises(ValidationError, match="a card's rank is A"):
        RANK.validate_python(bad)


def test_the_names_are_those_of_the_card_bytes() -> None:
    assert [card_name(card_code(r, 3))[:-1] for r in range(1, 14)] == list(RANKS)
    assert RANK.json_schema()["anyOf"][0]["enum"] == list(RANKS)
