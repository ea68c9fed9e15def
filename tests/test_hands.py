"""The hand evaluators against published combinatorics (every hand, not a sample) and against
the ranking clauses' own examples; baccarat against an exact enumeration of an 8-deck shoe."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from tableside.rules.hands import (
    Card,
    FiveCard,
    FourCard,
    ThreeCardBonus,
    baccarat_coup,
    baccarat_point,
    banker_draws,
    best_four,
    five_card,
    four_card,
    player_draws,
    spanish_21_total,
    three_card_bonus,
)

DECK: list[Card] = [(rank, suit) for rank in range(1, 14) for suit in range(4)]
RANKS = {"A": 1, "T": 10, "J": 11, "Q": 12, "K": 13} | {str(n): n for n in range(2, 10)}


def hand(text: str) -> list[Card]:
    """``"AS KS QS JS TS"`` → cards (suits C D H S = 0..3)."""
    return [(RANKS[c[0]], "CDHS".index(c[1])) for c in text.split()]


@pytest.mark.slow
def test_every_five_card_hand_in_its_known_count() -> None:
    counts = Counter(five_card(h)[0] for h in itertools.combinations(DECK, 5))
    assert counts == {
        FiveCard.ROYAL_FLUSH: 4,
        FiveCard.STRAIGHT_FLUSH: 36,
        FiveCard.FOUR_OF_A_KIND: 624,
        FiveCard.FULL_HOUSE: 3_744,
        FiveCard.FLUSH: 5_108,
        FiveCard.STRAIGHT: 10_200,
        FiveCard.THREE_OF_A_KIND: 54_912,
        FiveCard.TWO_PAIR: 123_552,
        FiveCard.PAIR: 1_098_240,
        FiveCard.HIGH_CARD: 1_302_540,
    }
    assert sum(counts.values()) == 2_598_960


@pytest.mark.slow
def test_every_three_card_hand_in_its_known_count() -> None:
    counts = Counter(three_card_bonus(h) for h in itertools.combinations(DECK, 3))
    assert counts == {
        ThreeCardBonus.MINI_ROYAL: 4,
        ThreeCardBonus.STRAIGHT_FLUSH: 44,
        ThreeCardBonus.THREE_OF_A_KIND: 52,
        ThreeCardBonus.STRAIGHT: 720,
        ThreeCardBonus.FLUSH: 1_096,
        ThreeCardBonus.PAIR: 3_744,
        ThreeCardBonus.NOTHING: 16_440,
    }
    assert sum(counts.values()) == 22_100


@pytest.mark.slow
def test_every_four_card_hand_in_its_known_count() -> None:
    counts = Counter(four_card(h)[0] for h in itertools.combinations(DECK, 4))
    assert counts == {
        FourCard.FOUR_OF_A_KIND: 13,
        FourCard.STRAIGHT_FLUSH: 44,
        FourCard.THREE_OF_A_KIND: 2_496,
        FourCard.FLUSH: 2_816,
        FourCard.STRAIGHT: 2_772,
        FourCard.TWO_PAIR: 2_808,
        FourCard.PAIR: 82_368,
        FourCard.HIGH_CARD: 177_408,
    }
    assert sum(counts.values()) == 270_725


@pytest.mark.parametrize(
    ("higher", "lower"),
    [
        # 555.6(b)(2), 559.6(b)(2): K-Q-J-10-9 the highest straight flush, 5-4-3-2-A the lowest
        ("AS KS QS JS TS", "KH QH JH TH 9H"),
        ("6D 5D 4D 3D 2D", "5C 4C 3C 2C AC"),
        ("2C 2D 2H 2S 3C", "AH AD AC KS KD"),  # four 2s over a full house
        # (b)(4): three aces and two kings the highest full house, three 2s and two 3s the lowest
        ("AS AH AD KS KH", "KS KH KD AS AH"),
        ("3S 3H 3D 2S 2H", "2S 2H 2D 3S 3H"),
        # 559.6(b)(5): A-K-Q-J-9 the highest flush, 2-3-4-5-7 the lowest
        ("AS KS QS JS 9S", "KD QD JD 9D 8D"),
        ("3C 4C 5C 6C 8C", "2C 3C 4C 5C 7C"),
        # (b)(6): A-K-Q-J-10 the highest straight, the wheel the lowest; never around the corner
        ("AS KD QH JC TS", "KS QD JH TC 9S"),
        ("6S 5D 4H 3C 2S", "5S 4D 3H 2C AS"),
        ("5S 4D 3H 2C AS", "AS KD 7H 3C 2S"),
        ("2H 3D 4S 5C AD", "QS KD AH 2C 3S"),
        # (b)(8): aces and kings the highest two pair, 3s and 2s the lowest
        ("AS AH KS KH 2C", "AS AH QS QH KC"),
        ("3S 3H 2S 2H 5C", "AS AH KS QH JC"),
        # 555.6(c): the highest card not in the other hand decides
        ("AS AH 9S 5H 3C", "AD AC 9D 5C 2C"),
        ("AS KH 9S 5H 3C", "AD QC JD 9C 8C"),
    ],
)
def test_five_card_order_as_the_clauses_give_it(higher: str, lower: str) -> None:
    assert five_card(hand(higher)) > five_card(hand(lower))


def test_five_card_tie() -> None:
    assert five_card(hand("AS KH 9S 5H 3C")) == five_card(hand("AD KC 9D 5C 3D"))
    assert five_card(hand("AS KS QS JS TS"))[0] is FiveCard.ROYAL_FLUSH


@pytest.mark.parametrize(
    ("higher", "lower"),
    [
        ("2C 2D 2H 2S", "AS KS QS JS"),  # 557.6(b): four of a kind over a straight flush
        ("AS KS QS JS", "2C 2D 2H AS"),  # the straight flush over three of a kind
        ("2C 2D 2H 3S", "AS KS QS 9S"),  # three of a kind over a flush
        ("2S 3S 4S 7S", "AS KD QH JC"),  # a flush over a straight
        ("5S 4D 3H 2C", "4S 3D 2H AC"),  # 4-3-2-A the lowest straight
        ("4S 3D 2H AC", "AS AD KH KC"),  # a straight over two pair
        ("AS AD 2H 3C", "KS KD QH JC"),  # the higher pair
    ],
)
def test_four_card_order_as_the_clause_gives_it(higher: str, lower: str) -> None:
    assert four_card(hand(higher)) > four_card(hand(lower))


def test_four_card_poker_plays_the_best_four() -> None:
    assert four_card(hand("KS AD 2H 3C"))[0] is FourCard.HIGH_CARD  # no straight round the ace
    value, cards = best_four(hand("9S 9D 9H 4S 7S"))  # a player's five
    assert value[0] is FourCard.THREE_OF_A_KIND and sorted(cards) == sorted(hand("9S 9D 9H 7S"))
    value, _ = best_four(hand("2S 5S 8S JS 3D 3C"))  # the dealer's six
    assert value[0] is FourCard.FLUSH
    with pytest.raises(ValueError, match="5 or 6"):
        best_four(hand("2S 5S 8S JS"))


@pytest.mark.parametrize(
    ("cards", "expected"),
    [
        ("AS KS QS", ThreeCardBonus.MINI_ROYAL),
        ("AS 2S 3S", ThreeCardBonus.STRAIGHT_FLUSH),
        ("AD KS QH", ThreeCardBonus.STRAIGHT),
        ("AD 2S 3H", ThreeCardBonus.STRAIGHT),
        ("KD AS 2H", ThreeCardBonus.NOTHING),  # 559.6(c)(4): an ace may not join a king and a 2
        ("2D 7D JD", ThreeCardBonus.FLUSH),
        ("7D 7S 7H", ThreeCardBonus.THREE_OF_A_KIND),
        ("7D 7S 2H", ThreeCardBonus.PAIR),
    ],
)
def test_three_card_bonus_hands(cards: str, expected: ThreeCardBonus) -> None:
    assert three_card_bonus(hand(cards)) is expected


def test_baccarat_point_counts_and_table_1() -> None:
    assert baccarat_point([13, 9]) == 9 and baccarat_point([7, 8]) == 5
    assert baccarat_point([1, 10, 12]) == 1
    assert not player_draws(5, 8) and not player_draws(6, 2) and player_draws(5, 7)
    assert not banker_draws(9, 0, None)
    assert banker_draws(3, 5, None) and not banker_draws(3, 6, None)
    assert banker_draws(0, 3, 9) and not banker_draws(0, 3, 8)
    assert banker_draws(0, 6, 7) and not banker_draws(0, 6, 5)
    assert not banker_draws(0, 7, 6) and banker_draws(0, 2, 8)
    # shoe order: P, B, P, B, then the Player's third, then the Banker's
    assert baccarat_coup([2, 3, 1, 10, 4, 7, 13]) == (7, 0, 6)
    with pytest.raises(ValueError, match="ran out"):
        baccarat_coup([2, 3, 1, 10])


@pytest.mark.slow
def test_eight_deck_baccarat_exactly() -> None:
    """Every coup from a full eight-deck shoe, weighted by its exact probability (cards drawn
    without replacement): banker 45.86%, player 44.62%, tie 9.52%."""
    left = {v: 32 for v in range(1, 10)} | {0: 128}  # tens and court cards count 0
    total = 416
    rank = {v: (10 if v == 0 else v) for v in left}
    wins = {"banker": 0.0, "player": 0.0, "tie": 0.0}

    def draw(p: float, v: int) -> float:
        nonlocal total
        share = p * left[v] / total
        left[v] -= 1
        total -= 1
        return share

    def put_back(v: int) -> None:
        nonlocal total
        left[v] += 1
        total += 1

    def settle(prob: float, player: list[int], banker: list[int]) -> None:
        p, b = baccarat_point(player), baccarat_point(banker)
        wins["player" if p > b else "banker" if b > p else "tie"] += prob

    def banker_turn(prob: float, player: list[int], banker: list[int], third: int | None) -> None:
        p2, b2 = baccarat_point(player[:2]), baccarat_point(banker)
        if not banker_draws(p2, b2, third):
            settle(prob, player, banker)
            return
        for v in range(10):
            if left[v]:
                settle(draw(prob, v), player, [*banker, rank[v]])
                put_back(v)

    def coup(prob: float, initial: list[int]) -> None:
        player, banker = [rank[initial[0]], rank[initial[2]]], [rank[initial[1]], rank[initial[3]]]
        p, b = baccarat_point(player), baccarat_point(banker)
        if not player_draws(p, b):
            banker_turn(prob, player, banker, None)
            return
        for v in range(10):
            if left[v]:
                banker_turn(draw(prob, v), [*player, rank[v]], banker, v)
                put_back(v)

    def deal(prob: float, initial: list[int]) -> None:
        if len(initial) == 4:
            coup(prob, initial)
            return
        for v in range(10):
            if left[v]:
                deal(draw(prob, v), [*initial, v])
                put_back(v)

    deal(1.0, [])
    assert sum(wins.values()) == pytest.approx(1.0, abs=1e-12)
    assert round(wins["banker"] * 100, 2) == 45.86
    assert round(wins["player"] * 100, 2) == 44.62
    assert round(wins["tie"] * 100, 2) == 9.52


@pytest.mark.parametrize(
    ("ranks", "expected"),
    [
        ([1, 6], (17, True)),
        ([1, 6, 10], (17, False)),
        ([1, 1, 9], (21, True)),
        ([13, 12, 1], (21, False)),
        ([1, 13], (21, True)),
        ([9, 8, 7], (24, False)),
    ],
)
def test_spanish_21_totals(ranks: list[int], expected: tuple[int, bool]) -> None:
    assert spanish_21_total(ranks) == expected
