"""Exact null laws of the shuffle statistics under a uniform deck, and the tails they give.

Every law here is exact (integers and :class:`fractions.Fraction`, turned to floats once), so
the tests in ``tests/test_shuffle_laws.py`` can check each against brute force on small decks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import cache

__all__ = [
    "Law",
    "binomial_sf",
    "chi2_sf",
    "colour_changes_law",
    "guess_law",
    "normal_sf",
    "riffle_rising_law",
    "riffle_tv",
    "rising_law",
    "shelf_tv",
    "shelf_ways",
    "shelf_ways_by_valleys",
    "successions_law",
    "valleys_law",
]


@dataclass(frozen=True)
class Law:
    """A law on 0, 1, …, len(probs) - 1, and what the tests take from it."""

    probs: tuple[float, ...]

    @classmethod
    def from_counts(cls, counts: Sequence[int]) -> Law:
        total = sum(counts)
        return cls(tuple(float(Fraction(c, total)) for c in counts))

    @property
    def mean(self) -> float:
        return math.fsum(k * p for k, p in enumerate(self.probs))

    @property
    def variance(self) -> float:
        mean = self.mean
        return math.fsum((k - mean) ** 2 * p for k, p in enumerate(self.probs))

    def cdf(self, x: int) -> float:
        """P(X ≤ x)."""
        return min(1.0, math.fsum(self.probs[: max(0, x + 1)]))

    def sf(self, x: int) -> float:
        """P(X ≥ x)."""
        return min(1.0, math.fsum(self.probs[max(0, x) :]))

    def log_mgf(self, lam: float) -> float:
        """log E[exp(lam·X)], the normaliser of the tilted law."""
        top = max(k * lam for k, p in enumerate(self.probs) if p > 0)
        return top + math.log(
            math.fsum(p * math.exp(k * lam - top) for k, p in enumerate(self.probs) if p > 0)
        )

    def convolve(self, other: Law) -> Law:
        out = [0.0] * (len(self.probs) + len(other.probs) - 1)
        for i, p in enumerate(self.probs):
            if p:
                for j, q in enumerate(other.probs):
                    out[i + j] += p * q
        return Law(tuple(out))


def normal_sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2.0))


#: sums of up to this many decks get their exact law (convolution); beyond it, the normal law
#: with the sum's exact mean and variance (the decks are independent under the null)
EXACT_SUM_DECKS = 20


def sum_tail(law: Law, total: int, decks: int, upper: bool) -> float:
    """P(S ≥ total) (``upper``) or P(S ≤ total) for S the sum of ``decks`` independent draws."""
    if decks <= EXACT_SUM_DECKS:
        acc = law
        for _ in range(decks - 1):
            acc = acc.convolve(law)
        return acc.sf(total) if upper else acc.cdf(total)
    mean, sd = decks * law.mean, math.sqrt(decks * law.variance)
    return normal_sf((total - 0.5 - mean) / sd) if upper else normal_sf((mean - total - 0.5) / sd)


@cache
def _eulerian(n: int) -> tuple[int, ...]:
    """A(n, d): permutations of n with d descents, d = 0 … n-1."""
    row = [1]
    for m in range(2, n + 1):
        row = [
            (d + 1) * (row[d] if d < len(row) else 0) + (m - d) * (row[d - 1] if d else 0)
            for d in range(m)
        ]
    return tuple(row)


@cache
def rising_law(n: int) -> Law:
    """Rising sequences of a uniform deck of n (index r; r = 0 has probability 0): Eulerian."""
    return Law.from_counts((0, *_eulerian(n)))


@cache
def riffle_rising_law(n: int, k: int) -> Law:
    """Rising sequences after k GSR riffles: A(n, r-1)·C(2^k + n - r, n) / 2^(kn) (Bayer and
    Diaconis 1992)."""
    a = 2**k
    counts = [0] + [e * math.comb(a + n - r, n) for r, e in enumerate(_eulerian(n), start=1)]
    return Law.from_counts(counts)


def riffle_tv(n: int, k: int) -> float:
    """Total variation from uniform after k riffles of n cards, exactly (rational arithmetic)."""
    a, total = 2**k, 2 ** (k * n)
    fact = math.factorial(n)
    dist = Fraction(0)
    for r, e in enumerate(_eulerian(n), start=1):
        dist += e * abs(Fraction(math.comb(a + n - r, n), total) - Fraction(1, fact))
    return float(dist / 2)


@cache
def _valley_counts(n: int) -> tuple[int, ...]:
    """How many permutations of n have v interior valleys (= interior peaks, by complement):
    inserting the largest card into a permutation with v peaks makes v peaks in 2v + 2 places
    and v + 1 in the n - 2v others."""
    row = [1]  # n = 1
    for m in range(2, n + 1):
        nxt = [0] * (m // 2 + 1)
        for v, count in enumerate(row):
            nxt[v] += (2 * v + 2) * count
            if m - 2 - 2 * v > 0:
                nxt[v + 1] += (m - 2 - 2 * v) * count
        row = nxt
    return tuple(row)


@cache
def valleys_law(n: int) -> Law:
    """Interior valleys of a uniform permutation of n (``_valley_counts``)."""
    return Law.from_counts(_valley_counts(n))


def shelf_ways(order: Sequence[int], m: int) -> int:
    """How many of the (2m)^n equally likely choices of one m-shelf pass (a shelf and a side
    per card: shuffle/models.py ``Shelf``) over the deck 0, 1, …, n - 1 make ``order`` (the
    input positions read down the output). Each shelf comes out rising then falling in input
    positions (it is dealt from the bottom, each card above or below the shelf's), and its
    first card's side changes nothing: the ways to cut ``order`` into m such runs, empty ones
    allowed, each non-empty one counted twice."""
    n = len(order)
    ends: list[int] = []  # ends[t]: the longest run from t that rises then falls ends here
    for t in range(n):
        e, falling = t + 1, False
        while e < n:
            if order[e] < order[e - 1]:
                falling = True
            elif falling:
                break
            e += 1
        ends.append(e)
    ways = [1] + [0] * n  # cuts of order[:i] into the shelves so far
    for _ in range(m):
        nxt = list(ways)  # this shelf empty
        for t in range(n):
            if ways[t]:
                for i in range(t + 1, ends[t] + 1):
                    nxt[i] += 2 * ways[t]
        ways = nxt
    return ways[n]


@cache
def shelf_ways_by_valleys(n: int, m: int) -> tuple[int, ...]:
    """``shelf_ways`` of an order of n cards with v valleys, for v = 0, 1, …, n // 2: an
    order's chance depends on its valleys alone (Diaconis, Fulman and Holmes 2013, Thm 3.1),
    so one order per count (0 where n cards cannot have that many)."""
    # v valleys: 1 0 3 2 … (2v - 1) (2v - 2) then 2v, 2v + 1, … rising
    return tuple(shelf_ways([i ^ 1 for i in range(2 * v)] + list(range(2 * v, n)), m)
                 if 2 * v < n else 0 for v in range(n // 2 + 1))  # fmt: skip


def shelf_tv(n: int, m: int) -> float:
    """Total variation from uniform after one m-shelf pass of n cards, exactly: each valley
    count's chance, weighted by how many orders have it (rational arithmetic)."""
    total, fact = (2 * m) ** n, math.factorial(n)
    dist = Fraction(0)
    for orders, ways in zip(_valley_counts(n), shelf_ways_by_valleys(n, m), strict=True):
        dist += orders * abs(Fraction(ways, total) - Fraction(1, fact))
    return float(dist / 2)


@cache
def successions_law(n: int) -> Law:
    """Adjacent pairs kept (input cards i, i+1 adjacent and in order in the output): exactly k
    of the n - 1 pairs in C(n-1, k)·S(n-k) permutations, S(m) those of m with none."""

    def none(m: int) -> int:
        return sum((-1) ** j * math.comb(m - 1, j) * math.factorial(m - j) for j in range(m))

    return Law.from_counts([math.comb(n - 1, k) * none(n - k) for k in range(n)])


@cache
def guess_law(n: int) -> Law:
    """Correct guesses with feedback when each guess is an unseen card: under a uniform deck
    the i-th guess (k cards left) is right with probability 1/k, independently of the others
    (Poisson-binomial; mean H_n, variance H_n - H_n^(2))."""
    probs = [Fraction(1)]
    for k in range(1, n + 1):
        p = Fraction(1, k)
        probs = [
            (probs[j] if j < len(probs) else 0) * (1 - p) + (probs[j - 1] * p if j else 0)
            for j in range(len(probs) + 1)
        ]
    return Law(tuple(float(p) for p in probs))


@cache
def colour_changes_law(red: int, black: int) -> Law:
    """Colour changes between neighbours when ``red`` red and ``black`` black cards are in
    uniform order: the Wald-Wolfowitz runs law, changes = runs - 1."""
    n = red + black
    counts = [0] * max(1, n)
    for runs in range(1, n + 1):
        k, odd = divmod(runs, 2)
        if runs == 1:
            ways = 1 if red == 0 or black == 0 else 0
        elif not odd:
            ways = 2 * _c(red - 1, k - 1) * _c(black - 1, k - 1)
        else:
            ways = _c(red - 1, k) * _c(black - 1, k - 1) + _c(red - 1, k - 1) * _c(black - 1, k)
        counts[runs - 1] = ways
    return Law.from_counts(counts)


def _c(n: int, k: int) -> int:
    return math.comb(n, k) if 0 <= k <= n else 0


def binomial_sf(k: int, trials: int, p: float) -> float:
    """P(K ≥ k) for K ~ Binomial(trials, p), summed term by term from k up."""
    if k <= 0:
        return 1.0
    if k > trials:
        return 0.0
    log_term = (
        math.lgamma(trials + 1) - math.lgamma(k + 1) - math.lgamma(trials - k + 1)
        + k * math.log(p) + (trials - k) * math.log1p(-p)
    )  # fmt: skip
    total, term, j = 0.0, math.exp(log_term), k
    while term > total * 1e-17 and j <= trials:
        total += term
        term *= (trials - j) / (j + 1) * p / (1 - p)
        j += 1
    return min(1.0, total)


def chi2_sf(x: float, df: int) -> float:
    """P(χ²_df ≥ x): the regularised upper incomplete gamma Q(df/2, x/2)."""
    a, y = df / 2.0, x / 2.0
    if y <= 0:
        return 1.0
    log_front = -y + a * math.log(y) - math.lgamma(a)
    if y < a + 1:  # series for P, then Q = 1 - P
        term = total = 1.0 / a
        k = a
        while abs(term) > abs(total) * 1e-15:
            k += 1
            term *= y / k
            total += term
        return max(0.0, 1.0 - math.exp(log_front) * total)
    tiny = 1e-300  # continued fraction for Q (modified Lentz)
    b = y + 1.0 - a
    c, d = 1.0 / tiny, 1.0 / b
    h = d
    for i in range(1, 100_000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return min(1.0, math.exp(log_front) * h)
