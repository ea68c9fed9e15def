"""Decks as the project spells its cards (``drivers/cards.py``: ``AS``, ``10H``, ``QC``)."""

from __future__ import annotations

from collections.abc import Sequence

from tableside.drivers.cards import Card, card_code, card_name
from tableside.errors import ConfigurationError

__all__ = [
    "CardSpellingError",
    "codes_of",
    "is_red",
    "new_deck",
    "parse_card",
    "parse_deck",
    "spell",
]

_BY_NAME = {card_name(card_code(r, s)): card_code(r, s) for s in range(4) for r in range(1, 14)}


class CardSpellingError(ConfigurationError, ValueError):
    """A card or deck that is not one: says which."""


def new_deck() -> tuple[int, ...]:
    """The 52 cards: clubs A…K, diamonds, hearts, spades (the order of their codes)."""
    return tuple(sorted(_BY_NAME.values()))


def parse_card(text: str) -> int:
    """``"AS"``, ``"as"``, ``"10h"`` or ``"TH"`` → the card's code."""
    name = text.strip().upper()
    name = "10" + name[1:] if name.startswith("T") else name
    if name not in _BY_NAME:
        raise CardSpellingError(f"{text!r} is no card (spelt as AS, 10H, QC)")
    return _BY_NAME[name]


def parse_deck(names: Sequence[object]) -> tuple[int, ...]:
    """A list of card names; refuses a non-string and a card twice."""
    cards: list[int] = []
    for i, name in enumerate(names, start=1):
        if not isinstance(name, str):
            raise CardSpellingError(f"card {i} is {name!r}, not a card name")
        cards.append(parse_card(name))
    seen: set[int] = set()
    for i, code in enumerate(cards, start=1):
        if code in seen:
            raise CardSpellingError(f"card {i} ({card_name(code)}) appears twice")
        seen.add(code)
    return tuple(cards)


def codes_of(cards: Sequence[Card]) -> tuple[int, ...] | None:
    """The table's cards (its events', drivers/cards.py ``Card``) as codes; None when a card
    comes twice (``parse_deck`` reads a person's names)."""
    codes = tuple(card.code for card in cards)
    if len(set(codes)) != len(codes):
        return None
    return codes


def spell(deck: Sequence[int]) -> list[str]:
    return [card_name(code) for code in deck]


def is_red(code: int) -> bool:
    """Diamonds (suit 1) and hearts (suit 2)."""
    return (code >> 4) in (1, 2)
