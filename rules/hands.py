"""Hand evaluators, where the shoe reads cards: pure functions, no I/O.

A card is ``(rank, suit)``: rank 1 = ace … 13 = king, suit 0-3 (the wire's convention,
drivers/cards.py). Each evaluator returns a value that orders hands as the chapter ranks them:
compare two hands' values with ``<`` and ``==`` (a tie is a tie, 555.6(c), 557.6(c), 559.6(b)).

* ``five_card`` — Caribbean Stud (555.6) and Let It Ride (559.6(b)): royal flush down to high
  card; the ace plays high, or low only in A-2-3-4-5.
* ``four_card`` / ``best_four`` — Four Card Poker (557.6): four of a kind over a straight flush,
  three of a kind over a flush; the best four of a player's five or the dealer's six cards.
* ``three_card_bonus`` — Let It Ride's Three Card Bonus hands (559.6(c)), in the order the clause
  lists them.
* ``baccarat_point``, ``player_draws``, ``banker_draws``, ``baccarat_coup`` — point counts and
  the third-card rules (543.6, 543.11 and Table 1; 545 alike).
* ``spanish_21_total`` — a blackjack total with its soft ace.

Proved against published combinatorics in tests/test_hands.py (every five-, four- and
three-card hand; an exact enumeration of an eight-deck baccarat shoe).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from enum import IntEnum

from tableside.drivers.named import Named

__all__ = [
    "Card",
    "FiveCard",
    "FourCard",
    "ThreeCardBonus",
    "baccarat_coup",
    "baccarat_point",
    "banker_draws",
    "best_four",
    "five_card",
    "four_card",
    "player_draws",
    "spanish_21_total",
    "three_card_bonus",
]

Card = tuple[int, int]


class FiveCard(Named, IntEnum):
    """555.6(b), 559.6(b), highest last so that a higher category compares greater. Spelt
    ``royal_flush`` only in JSON."""

    HIGH_CARD = 0
    PAIR = 1
    TWO_PAIR = 2
    THREE_OF_A_KIND = 3
    STRAIGHT = 4
    FLUSH = 5
    FULL_HOUSE = 6
    FOUR_OF_A_KIND = 7
    STRAIGHT_FLUSH = 8
    ROYAL_FLUSH = 9

    def spelt(self) -> str:
        return self.name.lower()

    @classmethod
    def named(cls, name: str) -> FiveCard:
        """The hand of its name (``royal_flush``); ValueError for anything else."""
        if name != name.lower() or name.upper() not in cls.__members__:
            raise ValueError(f"{name!r} is no five-card hand")
        return cls[name.upper()]


class FourCard(IntEnum):
    """557.6(b): four of a kind is the best hand; three of a kind beats a flush."""

    HIGH_CARD = 0
    PAIR = 1
    TWO_PAIR = 2
    STRAIGHT = 3
    FLUSH = 4
    THREE_OF_A_KIND = 5
    STRAIGHT_FLUSH = 6
    FOUR_OF_A_KIND = 7


class ThreeCardBonus(IntEnum):
    """559.6(c), in the clause's order (a hand that is none of them is NOTHING)."""

    NOTHING = 0
    PAIR = 1
    THREE_OF_A_KIND = 2
    STRAIGHT = 3
    FLUSH = 4
    STRAIGHT_FLUSH = 5
    MINI_ROYAL = 6


def _high(rank: int) -> int:
    """Poker value of a rank: 2..13 as they are, the ace 14."""
    return 14 if rank == 1 else rank


def _straight_top(values: Sequence[int]) -> int | None:
    """The top card of a straight made of these distinct values (high first), or None. The
    ace also plays low, but only at the bottom (A-2-3-4(-5)): never around the corner."""
    n = len(values)
    if len(set(values)) != n:
        return None
    if values[0] - values[-1] == n - 1:
        return values[0]
    if values[0] == 14 and values[1:] == list(range(n, 1, -1)):
        return n  # the wheel: its top card is the 5 (or the 4, the 3)
    return None


def _shape(cards: Sequence[Card]) -> tuple[list[int], list[int], bool]:
    """Values grouped: by count, then by value (high first); whether all one suit."""
    counts: dict[int, int] = {}
    suit = cards[0][1]
    flush = True
    for rank, s in cards:
        value = 14 if rank == 1 else rank
        counts[value] = counts.get(value, 0) + 1
        flush = flush and s == suit
    grouped = sorted(((n, v) for v, n in counts.items()), reverse=True)
    return [v for _, v in grouped], [n for n, _ in grouped], flush


def five_card(cards: Sequence[Card]) -> tuple[int, ...]:
    """(category, tie-breaking values…) for five cards; 555.6 and 559.6."""
    if len(cards) != 5:
        raise ValueError(f"a five-card hand has 5 cards, not {len(cards)}")
    values, shape, flush = _shape(cards)
    top = _straight_top(values) if len(values) == 5 else None
    if top is not None and flush:
        category = FiveCard.ROYAL_FLUSH if top == 14 else FiveCard.STRAIGHT_FLUSH
        return (category, top)
    if shape[0] == 4:
        return (FiveCard.FOUR_OF_A_KIND, *values)
    if shape == [3, 2]:
        return (FiveCard.FULL_HOUSE, *values)
    if flush:
        return (FiveCard.FLUSH, *values)
    if top is not None:
        return (FiveCard.STRAIGHT, top)
    if shape[0] == 3:
        return (FiveCard.THREE_OF_A_KIND, *values)
    if shape[:2] == [2, 2]:
        return (FiveCard.TWO_PAIR, *values)
    if shape[0] == 2:
        return (FiveCard.PAIR, *values)
    return (FiveCard.HIGH_CARD, *values)


def four_card(cards: Sequence[Card]) -> tuple[int, ...]:
    """(category, tie-breaking values…) for four cards; 557.6."""
    if len(cards) != 4:
        raise ValueError(f"a Four Card Poker hand has 4 cards, not {len(cards)}")
    values, shape, flush = _shape(cards)
    top = _straight_top(values) if len(values) == 4 else None
    if shape[0] == 4:
        return (FourCard.FOUR_OF_A_KIND, *values)
    if top is not None and flush:
        return (FourCard.STRAIGHT_FLUSH, top)
    if shape[0] == 3:
        return (FourCard.THREE_OF_A_KIND, *values)
    if flush:
        return (FourCard.FLUSH, *values)
    if top is not None:
        return (FourCard.STRAIGHT, top)
    if shape[:2] == [2, 2]:
        return (FourCard.TWO_PAIR, *values)
    if shape[0] == 2:
        return (FourCard.PAIR, *values)
    return (FourCard.HIGH_CARD, *values)


def best_four(cards: Sequence[Card]) -> tuple[tuple[int, ...], tuple[Card, ...]]:
    """The best four of a player's five or the dealer's six cards (557.10, 557.11): its value
    and the four cards."""
    if len(cards) not in (5, 6):
        raise ValueError(f"Four Card Poker picks from 5 or 6 cards, not {len(cards)}")
    return max((four_card(four), four) for four in itertools.combinations(cards, 4))


def three_card_bonus(cards: Sequence[Card]) -> ThreeCardBonus:
    """Let It Ride's Three Card Bonus hand (559.6(c)); A-K-Q and A-2-3 are straights, K-A-2 is
    not."""
    if len(cards) != 3:
        raise ValueError(f"a Three Card Bonus hand has 3 cards, not {len(cards)}")
    values, shape, flush = _shape(cards)
    top = _straight_top(values) if len(values) == 3 else None
    if top is not None and flush:
        return ThreeCardBonus.MINI_ROYAL if top == 14 else ThreeCardBonus.STRAIGHT_FLUSH
    if flush:
        return ThreeCardBonus.FLUSH
    if top is not None:
        return ThreeCardBonus.STRAIGHT
    if shape[0] == 3:
        return ThreeCardBonus.THREE_OF_A_KIND
    if shape[0] == 2:
        return ThreeCardBonus.PAIR
    return ThreeCardBonus.NOTHING


# -- baccarat (543.6, 543.11; 545 likewise) --------------------------------------------------


def baccarat_value(rank: int) -> int:
    """543.6: a 10 and the court cards count 0, an ace 1, the rest their face value."""
    return 0 if rank >= 10 else rank


def baccarat_point(ranks: Iterable[int]) -> int:
    """The Point Count: the sum of the values, less 10 as often as it is 10 or more."""
    return sum(baccarat_value(r) for r in ranks) % 10


def player_draws(player: int, banker: int) -> bool:
    """543.11(a)-(b), on the first two cards' points: no draw when either is a Natural."""
    return player <= 5 and banker <= 7


#: 543.11 Table 1: for the Banker's Point Count 3-6, the Player's third card values (0-9) on
#: which the Banker's Hand draws.
BANKER_DRAWS_ON: dict[int, frozenset[int]] = {
    3: frozenset({0, 1, 2, 3, 4, 5, 6, 7, 9}),
    4: frozenset({2, 3, 4, 5, 6, 7}),
    5: frozenset({4, 5, 6, 7}),
    6: frozenset({6, 7}),
}


def banker_draws(player: int, banker: int, player_third: int | None) -> bool:
    """543.11(a) and (c): ``player_third`` is the value of the Player's third card, or None when
    the Player's Hand stayed."""
    if player >= 8 or banker >= 8:
        return False  # a Natural: no more cards
    if player_third is None:
        return banker <= 5
    if banker <= 2:
        return True
    if banker == 7:
        return False
    return player_third in BANKER_DRAWS_ON[banker]


def baccarat_coup(cards: Sequence[int]) -> tuple[int, int, int]:
    """Deal a coup from card ranks in shoe order (543.9(c): the first and third to the Player,
    the second and fourth to the Banker, then any third cards, the Player's first). Returns
    (Player's points, Banker's points, cards used); raises ValueError when the shoe runs out."""
    if len(cards) < 4:
        raise ValueError("a coup needs at least four cards")
    player, banker = [cards[0], cards[2]], [cards[1], cards[3]]
    used = 4
    p, b = baccarat_point(player), baccarat_point(banker)
    third: int | None = None
    if player_draws(p, b):
        if used >= len(cards):
            raise ValueError("the shoe ran out before the Player's third card")
        player.append(cards[used])
        third = baccarat_value(cards[used])
        used += 1
    if banker_draws(p, b, third):
        if used >= len(cards):
            raise ValueError("the shoe ran out before the Banker's third card")
        banker.append(cards[used])
        used += 1
    return baccarat_point(player), baccarat_point(banker), used


# -- Spanish 21 -------------------------------------------------------------------------------


def spanish_21_total(ranks: Iterable[int]) -> tuple[int, bool]:
    """(total, soft): court cards count 10, an ace 11 when that does not bust the hand (the hand
    is then soft), else 1. Spanish 21 decks have no 10s (551.3(a)); a 10 still counts 10."""
    total, aces = 0, 0
    for rank in ranks:
        if rank == 1:
            aces += 1
            total += 1
        else:
            total += min(rank, 10)
    if aces and total + 10 <= 21:
        return total + 10, True
    return total, False
