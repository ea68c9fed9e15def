"""A card's rank as a person spells it (drivers/cards.py): every spelling of one rank is the
same card; what could be two cards, or none, is refused saying what a rank may be."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from pydantic import TypeAdapter, ValidationError

from tableside.drivers.cards import RANKS, Card, Rank, card_code, card_name, rank_name
from tableside.drivers.catalog import read_event
from tableside.drivers.shoe.events import DealStarted, StackDispensed
from tableside.drivers.shoe.plan import SEATS, Stack, Target
from tableside.shuffle.deck import new_deck

RANK = TypeAdapter(Rank)
CARD = TypeAdapter(Card)
TARGET = TypeAdapter(Target)


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


def test_every_card_is_one_value_from_its_byte_to_its_name_and_back() -> None:
    """A card is a ``Card`` from the decoder to the rule: one instance per card, its byte
    and its name (JSON's only) each giving it back; a byte that is no card is refused."""
    cards = [Card.of(code) for code in new_deck()]
    assert len({card.name for card in cards}) == 52
    for card in cards:
        assert Card.named(card.spelt()) is card
        assert Card(card.code) == card and Card.of(card.code) is card
        assert (card.number, card.suit) == (card.code & 0x0F, card.code >> 4)
        assert card.name == card.rank + "CDHS"[card.suit] == card_name(card.code)
        assert CARD.validate_json(json.dumps(card.spelt())) is card
        assert CARD.dump_python(card, mode="json") == card.name
    for code in set(range(256)) - set(new_deck()):
        with pytest.raises(ValueError, match="is not a card"):
            Card.of(code)
    for name in ("", "??", "as", "1S", "TS", "10X"):
        with pytest.raises(ValueError, match="is no card"):
            Card.named(name)


def test_the_stack_targets_have_one_source() -> None:
    """drivers/shoe/plan.py declares the stack targets, their bytes and their names; no other
    product module spells a dealer's stack by its name."""
    for target in Target:
        assert Target.named(target.spelt()) is target and Target.of(target.code) is target
        assert TARGET.validate_json(json.dumps(target.spelt())) is target
    assert [t.spelt() for t in SEATS] == [f"seat{n}" for n in range(1, 8)]
    names = {t.spelt() for t in Target if t.seat is None} - {"dealer"}  # also a person's role
    root = Path(__file__).parents[1]
    spelt_elsewhere = [
        f"{path.relative_to(root)}:{node.lineno}"
        for folder in ("drivers", "rules", "daemon", "simulators", "floor", "shuffle")
        for path in sorted((root / folder).rglob("*.py"))
        if path.name != "plan.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and node.value in names
    ]
    assert spelt_elsewhere == []


def test_an_events_named_values_are_spelt_in_its_data_and_read_back() -> None:
    stack = StackDispensed(device="shoe", round=1, index=0, target=Target.SEAT3, count=2,
                           expected=5, cards=(Card.named("AS"), Card.named("10H")))  # fmt: skip
    data = stack.data(include_cards=True)
    assert data == {"round": 1, "index": 0, "target": "seat3", "count": 2, "expected": 5,
                    "cards": ["AS", "10H"]}  # fmt: skip
    assert read_event(StackDispensed, "shoe", json.loads(json.dumps(data))) == stack
    plan = (Stack(Target.SEAT1, 5), Stack(Target.DEALER, 5))
    started = DealStarted(device="shoe", round=2, plan=plan)
    assert started.data() == {"round": 2, "plan": [{"target": "seat1", "size": 5},
                                                   {"target": "dealer", "size": 5}]}  # fmt: skip
    assert read_event(DealStarted, "shoe", started.data()) == started
