"""Every test over a batch of decks (a lab's file), each with its p-value under a fair
shuffler; what :mod:`tableside.shuffle.plots` draws comes from here too."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from tableside.shuffle import laws, stats
from tableside.shuffle.deck import is_red

__all__ = ["Batch", "Result", "run_battery"]

Deck = tuple[int, ...]


@dataclass(frozen=True)
class Result:
    """One test over the batch."""

    test: str
    statistic: float
    expected: float  # the statistic's value expected from a fair shuffler
    p_value: float
    shuffles: int
    law: str  # the null law the p-value comes from
    note: str = ""


@dataclass
class Batch:
    """The results, and the per-deck values the plots draw."""

    cards: int
    results: list[Result] = field(default_factory=list)
    rising: list[int] = field(default_factory=list)
    guesses: list[int] = field(default_factory=list)
    positions: list[list[int]] = field(default_factory=list)  # [input position][output position]


def _sum_test(name: str, values: Sequence[int], law: laws.Law, upper: bool | None,
              what: str) -> Result:  # fmt: skip
    n, total = len(values), sum(values)
    if upper is None:  # two-sided
        p = min(1.0, 2 * min(laws.sum_tail(law, total, n, True),
                             laws.sum_tail(law, total, n, False)))  # fmt: skip
    else:
        p = laws.sum_tail(law, total, n, upper)
    how = "exact" if n <= laws.EXACT_SUM_DECKS else "normal, exact mean and variance"
    return Result(name, total / n, law.mean, p, n, f"sum of {n} × {what} ({how})")


def _chi2(name: str, matrix: list[list[int]], shuffles: int) -> Result:
    """Pearson's X² of an n-by-n table of where things landed, each row and column summing to
    the shuffles: X²·(n-1)/n is χ² with (n-1)² degrees of freedom as shuffles grow (the cells
    of a uniform permutation matrix have covariance P/(n-1), P the projection onto tables with
    zero margins), not the (n-1)²-df χ² of X² itself: its mean is n(n-1)."""
    n = len(matrix)
    expected = shuffles / n
    x2 = sum((o - expected) ** 2 for row in matrix for o in row) / expected
    df = (n - 1) ** 2
    note = "" if expected >= 5 else f"expected counts {expected:.1f} < 5: the χ² law is rough"
    return Result(name, x2, n * (n - 1), laws.chi2_sf(x2 * (n - 1) / n, df), shuffles,
                  f"X²·{n - 1}/{n} ~ χ²({df})", note)  # fmt: skip


def _rare(name: str, count: int, chance: float, shuffles: int, what: str) -> Result:
    p = min(1.0, chance) if count else 1.0
    return Result(name, count, 0.0, p, shuffles, f"P ≤ {what} (union bound)")


def _with_input(batch: Batch, pairs: Sequence[tuple[Deck, Deck]]) -> None:
    n = batch.cards
    sigmas = [stats.positions(a, b) for a, b in pairs]
    batch.rising = [stats.rising_sequences(s) for s in sigmas]
    batch.guesses = [stats.guess_score(s) for s in sigmas]
    batch.positions = [[0] * n for _ in range(n)]
    for s in sigmas:
        for i, j in enumerate(s):
            batch.positions[i][j] += 1
    m = len(pairs)
    tops = sum(s[0] == 0 for s in sigmas)
    bottoms = sum(s[-1] == n - 1 for s in sigmas)
    batch.results += [
        _sum_test("guessing score", batch.guesses, laws.guess_law(n), True, "Poisson-binomial"),
        _sum_test("rising sequences", batch.rising, laws.rising_law(n), False, "Eulerian"),
        _sum_test("valleys", [stats.valleys(s) for s in sigmas], laws.valleys_law(n), False,
                  "peaks law"),
        _sum_test("adjacent pairs kept", [stats.successions(s) for s in sigmas],
                  laws.successions_law(n), True, "successions law"),
        Result("top card stays on top", tops, m / n, laws.binomial_sf(tops, m, 1 / n), m,
               f"Binomial({m}, 1/{n})"),
        Result("bottom card stays at bottom", bottoms, m / n, laws.binomial_sf(bottoms, m, 1 / n),
               m, f"Binomial({m}, 1/{n})"),
        _chi2("positions (COMAR χ²)", batch.positions, m),
    ]  # fmt: skip


def run_battery(decks: Sequence[tuple[Deck | None, Deck]]) -> Batch:
    """``decks``: (input order or None, output order), all of the same cards."""
    n = len(decks[0][1])
    batch = Batch(n)
    pairs = [(a, b) for a, b in decks if a is not None]
    if pairs:
        _with_input(batch, pairs)
    outputs = [b for _, b in decks]
    m, red = len(outputs), sum(map(is_red, outputs[0]))
    index = {card: i for i, card in enumerate(sorted(outputs[0]))}
    cards = [[0] * n for _ in range(n)]
    for out in outputs:
        for j, card in enumerate(out):
            cards[index[card]][j] += 1
    seen: set[Deck] = set()
    repeats = 0
    for out in outputs:
        repeats += out in seen
        seen.add(out)
    ordered = {tuple(sorted(outputs[0])), tuple(sorted(outputs[0], reverse=True))}
    in_order = sum(out in ordered for out in outputs)
    fact = math.factorial(n)
    batch.results += [
        _sum_test("colour changes", [stats.colour_changes(o) for o in outputs],
                  laws.colour_changes_law(red, n - red), None, "runs law (two-sided)"),
        _chi2("card positions χ²", cards, m),
        _rare("repeated output", repeats, math.comb(m, 2) / fact, m, f"C({m}, 2)/{n}!"),
        _rare("sorted output", in_order, 2 * m / fact, m, f"2·{m}/{n}!"),
    ]  # fmt: skip
    return batch
