"""The shuffle tests' null laws: each sums to 1, matches brute force on small decks, and gives
the published figures."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from fractions import Fraction

import pytest

from tableside.shuffle import laws, stats
from tableside.shuffle.deck import new_deck


def law_of(statistic: object, n: int) -> list[float]:
    """The statistic's law over all n! orders, by enumeration."""
    assert callable(statistic)
    counts = Counter(statistic(list(p)) for p in itertools.permutations(range(n)))
    return [counts[k] / math.factorial(n) for k in range(max(counts) + 1)]


def close(law: laws.Law, brute: list[float]) -> bool:
    padded = list(law.probs) + [0.0] * (len(brute) - len(law.probs))
    return all(abs(a - b) < 1e-12 for a, b in itertools.zip_longest(padded, brute, fillvalue=0))


@pytest.mark.parametrize("n", range(2, 8))
def test_each_law_is_the_enumerated_one(n: int) -> None:
    assert close(laws.rising_law(n), law_of(stats.rising_sequences, n))
    assert close(laws.valleys_law(n), law_of(stats.valleys, n))
    assert close(laws.successions_law(n), law_of(stats.successions, n))
    # the guessing strategy always names an unseen card, so under a uniform deck its score
    # has the Poisson-binomial law, whatever the strategy: checked over every order
    assert close(laws.guess_law(n), law_of(stats.guess_score, n))


@pytest.mark.parametrize(("red", "black"), [(1, 1), (2, 3), (3, 3), (4, 2)])
def test_the_colour_law_is_the_enumerated_one(red: int, black: int) -> None:
    deck = [c for c in new_deck() if (c >> 4) in (1, 2)][:red] + [
        c for c in new_deck() if (c >> 4) in (0, 3)
    ][:black]
    counts = Counter(stats.colour_changes(p) for p in itertools.permutations(deck))
    total = math.factorial(red + black)
    brute = [counts[k] / total for k in range(max(counts) + 1)]
    assert close(laws.colour_changes_law(red, black), brute)


def test_every_law_sums_to_one_and_has_the_published_moments() -> None:
    for law in (laws.rising_law(52), laws.valleys_law(52), laws.successions_law(52),
                laws.guess_law(52), laws.colour_changes_law(26, 26),
                laws.riffle_rising_law(52, 7)):  # fmt: skip
        assert math.isclose(math.fsum(law.probs), 1.0, abs_tol=1e-12)
    assert laws.rising_law(52).mean == pytest.approx(26.5)
    assert math.sqrt(laws.rising_law(52).variance) == pytest.approx(2.1, abs=0.01)
    assert laws.guess_law(52).mean == pytest.approx(4.538, abs=5e-4)
    assert laws.guess_law(52).variance == pytest.approx(2.912, abs=5e-4)
    assert laws.colour_changes_law(26, 26).mean == pytest.approx(26)
    assert math.sqrt(laws.colour_changes_law(26, 26).variance) == pytest.approx(3.6, abs=0.05)


def gsr_law(n: int, k: int) -> dict[int, Fraction]:
    """Rising sequences after k GSR riffles, by enumeration: a riffle is a string of n bits,
    each with chance 1/2^n, the top packet's cards going where the zeros are."""
    outcomes: Counter[tuple[int, ...]] = Counter({tuple(range(n)): 1})
    for _ in range(k):
        after: Counter[tuple[int, ...]] = Counter()
        for deck, weight in outcomes.items():
            for bits in itertools.product((0, 1), repeat=n):
                cut = bits.count(0)
                top, bottom = iter(deck[:cut]), iter(deck[cut:])
                after[tuple(next(bottom) if b else next(top) for b in bits)] += weight
        outcomes = after
    total = sum(outcomes.values())
    law: Counter[int] = Counter()
    for deck, weight in outcomes.items():
        law[stats.rising_sequences(stats.positions(range(n), deck))] += weight
    return {r: Fraction(w, total) for r, w in law.items()}


@pytest.mark.parametrize(("n", "k"), [(4, 1), (4, 2), (5, 2), (3, 3)])
def test_the_riffle_law_is_the_enumerated_one(n: int, k: int) -> None:
    law = laws.riffle_rising_law(n, k)
    for r, p in gsr_law(n, k).items():
        assert law.probs[r] == pytest.approx(float(p), abs=1e-12)


def test_total_variation_after_riffles_is_bayer_and_diaconis_row() -> None:
    row = [1.000, 1.000, 1.000, 1.000, 0.924, 0.614, 0.334, 0.167, 0.085, 0.043]
    assert [round(laws.riffle_tv(52, k), 3) for k in range(1, 11)] == row


def test_the_tails() -> None:
    assert laws.chi2_sf(3.841459, 1) == pytest.approx(0.05, abs=1e-6)
    assert laws.chi2_sf(2601, 2601) == pytest.approx(0.4963, abs=1e-3)
    assert laws.chi2_sf(18.307, 10) == pytest.approx(0.05, abs=1e-4)
    brute = sum(math.comb(40, j) * 0.1**j * 0.9 ** (40 - j) for j in range(7, 41))
    assert laws.binomial_sf(7, 40, 0.1) == pytest.approx(brute, rel=1e-12)
    law = laws.guess_law(6)
    twice = law.convolve(law)
    assert laws.sum_tail(law, 5, 2, True) == pytest.approx(twice.sf(5))


@pytest.mark.parametrize(("n", "m"), [(5, 1), (5, 2), (5, 3), (6, 2)])
def test_the_ways_to_make_an_order_in_one_shelf_pass_are_the_machines(n: int, m: int) -> None:
    """``shelf_ways`` against every choice the machine can make (tests/test_shuffle_models.py
    ``shelf_law``), for every order; and ``shelf_tv`` against the total variation that law
    gives."""
    from tableside.shuffle.laws import shelf_tv, shelf_ways
    from tableside.shuffle.models import Shelf
    from tests.test_shuffle_models import shelf_law

    law = shelf_law(Shelf(m), n)
    total = (2 * m) ** n
    for order in itertools.permutations(range(n)):
        assert Fraction(shelf_ways(order, m), total) == law.get(order, Fraction(0)), order
    tv = sum(abs(law.get(o, Fraction(0)) - Fraction(1, math.factorial(n)))
             for o in itertools.permutations(range(n))) / 2  # fmt: skip
    assert shelf_tv(n, m) == float(tv)


def test_one_shelf_pass_of_52_cards_is_table_1_of_the_paper() -> None:
    """Diaconis, Fulman and Holmes 2013, Table 1 (../shared/SHUFFLING.md)."""
    from tableside.shuffle.laws import shelf_tv

    paper = {10: 1.000, 20: 0.720, 30: 0.391, 50: 0.159, 100: 0.041, 200: 0.010}
    assert {m: round(shelf_tv(52, m), 3) for m in paper} == paper


@pytest.mark.parametrize(("n", "m"), [(5, 2), (6, 2), (6, 3)])
def test_the_shelf_guesser_is_the_best_any_strategy_can_do(n: int, m: int) -> None:
    """``ShelfGuesser``'s expected score under one pass equals the best possible with complete
    feedback: the sum over every prefix of the chance of its likeliest next card."""
    from tableside.shuffle.models import Shelf
    from tableside.shuffle.stats import ShelfGuesser
    from tests.test_shuffle_models import shelf_law

    law = shelf_law(Shelf(m), n)
    guesser = ShelfGuesser(n, m)
    ours = sum(p * guesser.score(stats.positions(range(n), o)) for o, p in law.items())
    best = Fraction(0)
    for k in range(n):
        nexts: dict[tuple[int, ...], Counter[int]] = {}
        for order, p in law.items():
            nexts.setdefault(order[:k], Counter())[order[k]] += p  # type: ignore[assignment]
        best += sum(max(chances.values()) for chances in nexts.values())
    assert abs(ours - float(best)) < 1e-12
