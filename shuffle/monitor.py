"""One sequential decision per shuffler: every test as CUSUMs of likelihood ratios against
their exact null laws, with one false-alarm budget shared among them.

Each detector adds, per shuffle, the log of a likelihood ratio whose mean under a fair shuffler
is exactly 1 (an exponential tilt of the test's exact law, the exact law after k riffles, a
mixture over "the top k cards kept", a Bernoulli cell); a CUSUM of such steps with threshold h
raises a false alarm at most once per e^h shuffles on average (Lorden 1971). The budget
(``BUDGET``, alarms per fair shuffle) is split evenly among the tests and within a test among
its detectors, so the whole decision raises at most one false alarm per 1/BUDGET fair shuffles.
``docs/shuffle.md`` states the design and ``bench/shuffle_detection.py`` measures it.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tableside.shuffle import laws, stats
from tableside.shuffle.deck import is_red

__all__ = ["BUDGET", "Alert", "ShuffleMonitor", "TestStatus"]

#: false alarms per fair shuffle the whole decision may raise: one per 10 million shuffles, ten
#: times under the goal (fewer than one per 100,000: a busy table's shuffler in a year or so)
BUDGET = 1e-7
#: a cell detector's alternative: the card (or input position) lands there every other shuffle
CELL_TARGET = 0.5
#: the "top/bottom cards kept" alternative: one shuffle in ten keeps some top cards in place
KEPT_RATE = 0.1
KEPT_DEPTHS = (1, 2, 3, 5)
#: outputs remembered to spot a repeat
REMEMBERED = 4096


@dataclass(frozen=True)
class Alert:
    """The decision flagged a shuffler: which test, over how many shuffles, how sure."""

    test: str
    statistic: float  # the test's statistic over the window (see ``detail``)
    p_value: float  # the window's p-value under a fair shuffler (exact law, or as stated)
    shuffles: int  # the window: shuffles since the detector last stood at zero
    log_e: float  # the CUSUM's log likelihood ratio that crossed ``threshold``
    threshold: float
    detail: str


@dataclass(frozen=True)
class TestStatus:
    """A test's running statistics (no card identities)."""

    test: str
    shuffles: int
    mean: float  # of the test's statistic per shuffle
    expected: float  # its mean under a fair shuffler
    level: float  # the largest of its detectors' CUSUMs as a fraction of its threshold
    high: float  # the largest level it ever reached (1 is an alert)


class _Cusum:
    """A CUSUM over a statistic whose value indexes a table of log likelihood-ratio steps."""

    def __init__(self, steps: Sequence[float]) -> None:
        self.steps = steps
        self.value = 0.0
        self.total = 0  # the statistic summed over the window
        self.count = 0  # the window's shuffles
        self.peak = 0  # the statistic's largest value in the window

    def add(self, x: int) -> float:
        step = self.steps[x] if x < len(self.steps) else self.steps[-1]
        if self.value + step <= 0.0:
            self.value, self.total, self.count, self.peak = 0.0, 0, 0, 0
        else:
            self.value += step
            self.total += x
            self.count += 1
            self.peak = max(self.peak, x)
        return self.value

    def reset(self) -> None:
        self.value, self.total, self.count, self.peak = 0.0, 0, 0, 0


def _tilt(law: laws.Law, lam: float) -> list[float]:
    psi = law.log_mgf(lam)
    return [lam * x - psi for x in range(len(law.probs))]


def _ratio(alt: laws.Law, null: laws.Law) -> list[float]:
    return [
        math.log(a / p) if a > 0 else -math.inf for a, p in zip(alt.probs, null.probs, strict=True)
    ]


def _kept(n: int) -> list[float]:
    """log(1 - q + q·mean_k 1[kept ≥ k]·n!/(n-k)!): a mixture of "top k kept" alternatives."""
    w = KEPT_RATE / len(KEPT_DEPTHS)
    return [
        math.log(1 - KEPT_RATE + w * sum(math.perm(n, k) for k in KEPT_DEPTHS if k <= x))
        for x in range(n + 1)
    ]


@dataclass
class _Test:
    """One test: its detectors, the statistic they read, its law for the window's p-value."""

    name: str
    detectors: list[_Cusum]
    thresholds: list[float]
    law: laws.Law
    upper: bool  # large values are the suspicious ones (else small; None-like both: colour)
    unit: str
    seen: int = 0
    summed: int = 0
    high: float = 0.0

    def observe(self, x: int) -> Alert | None:
        self.seen += 1
        self.summed += x
        hit: Alert | None = None
        for cusum, h in zip(self.detectors, self.thresholds, strict=True):
            value = cusum.add(x)
            self.high = max(self.high, value / h)
            if value >= h and hit is None:
                hit = self._alert(cusum, h)
        if hit is not None:
            for cusum in self.detectors:
                cusum.reset()
        return hit

    def _alert(self, cusum: _Cusum, h: float) -> Alert:
        mean = cusum.total / cusum.count
        upper = self.upper if self.name != "colour changes" else mean > self.law.mean
        p = laws.sum_tail(self.law, cusum.total, cusum.count, upper)
        detail = (
            f"{mean:.2f} {self.unit} per shuffle over {cusum.count} shuffles "
            f"({self.law.mean:.2f} expected from a fair shuffler)"
        )
        return Alert(self.name, mean, p, cusum.count, cusum.value, h, detail)

    def status(self) -> TestStatus:
        level = max(c.value / h for c, h in zip(self.detectors, self.thresholds, strict=True))
        mean = self.summed / self.seen if self.seen else math.nan
        return TestStatus(self.name, self.seen, mean, self.law.mean, level, self.high)


class _Cells:
    """n x n Bernoulli CUSUMs (what lands where), updated lazily: a shuffle touches n cells."""

    def __init__(self, name: str, n: int, threshold: float) -> None:
        self.name, self.n, self.threshold = name, n, threshold
        p0 = 1.0 / n
        self.up = math.log(CELL_TARGET / p0)
        self.down = math.log((1 - CELL_TARGET) / (1 - p0))  # < 0, per shuffle it misses
        self.value = [0.0] * (n * n)
        self.last = [0] * (n * n)  # the shuffle of the cell's last hit
        self.hits = [0] * (n * n)
        self.start = [0] * (n * n)
        self.seen = 0
        self.high = 0.0
        #: the cells whose CUSUM stood above zero when last hit (every other one is at zero)
        self.live: set[int] = set()

    def observe(self, rows: Sequence[int]) -> Alert | None:
        """``rows[j]``: the row (input position, or card index) that landed at position j."""
        self.seen += 1
        t, n, hit = self.seen, self.n, None
        for j, row in enumerate(rows):
            cell = row * n + j
            decayed = self.value[cell] + self.down * (t - self.last[cell] - 1)
            if decayed <= 0.0:
                decayed, self.hits[cell], self.start[cell] = 0.0, 0, t
            self.value[cell] = decayed + self.up
            self.live.add(cell)
            self.hits[cell] += 1
            self.last[cell] = t
            self.high = max(self.high, self.value[cell] / self.threshold)
            if self.value[cell] >= self.threshold and hit is None:
                hit = self._alert(cell)
        return hit

    def _alert(self, cell: int) -> Alert:
        shuffles = self.seen - self.start[cell] + 1
        hits = self.hits[cell]
        p = min(1.0, self.n * self.n * laws.binomial_sf(hits, shuffles, 1.0 / self.n))
        row, column = divmod(cell, self.n)
        # the card itself is not named: an alert leaves the table, card identities do not
        what = f"input position {row + 1}" if self.name == "positions" else "one card"
        detail = (
            f"{what} at output position {column + 1} in {hits} of {shuffles} shuffles "
            f"(1 in {self.n} expected; p Bonferroni over the {self.n * self.n} cells)"
        )
        alert = Alert(self.name, hits / shuffles, p, shuffles, self.value[cell], self.threshold,
                      detail)  # fmt: skip
        self.value = [0.0] * (self.n * self.n)
        self.live.clear()
        return alert

    def status(self) -> TestStatus:
        """The highest cell's CUSUM now: only the cells hit since they last stood at zero can
        be above it (a few hundred of the 2,704; each decays to zero within a few shuffles)."""
        t, level, gone = self.seen, 0.0, []
        for cell in self.live:
            v = self.value[cell] + self.down * (t - self.last[cell])
            if v <= 0.0:
                gone.append(cell)
            elif v > level:
                level = v
        self.live.difference_update(gone)
        n = 1.0 / self.n
        return TestStatus(self.name, t, n, n, level / self.threshold, self.high)


def _kept_law(n: int) -> laws.Law:
    """Top cards in place under a uniform deck: (n - k)! of the n! orders keep k or more."""
    at_least = [math.factorial(n - k) for k in range(n + 1)]
    return laws.Law.from_counts([a - b for a, b in zip(at_least, [*at_least[1:], 0], strict=True)])


def _colour_law(deck: Sequence[int]) -> laws.Law:
    red = sum(map(is_red, deck))
    return laws.colour_changes_law(red, len(deck) - red)


#: a statistic of (input, output, sigma); sigma is empty for the tests of outputs alone
Statistic = Callable[[Sequence[int], Sequence[int], list[int]], int]


@dataclass(frozen=True)
class _Spec:
    """A test as the decision runs it: its law, which side is suspicious, its detectors."""

    name: str
    law: Callable[[Sequence[int]], laws.Law]
    upper: bool
    unit: str
    detectors: Callable[[laws.Law, int], list[list[float]]]  # (law, n) → step tables
    statistic: Statistic
    family: int = 1  # tests sharing one family's share of the budget


_WITH_INPUT = (
    _Spec("guessing score", lambda d: laws.guess_law(len(d)), True, "correct guesses",
          lambda law, n: [_tilt(law, 0.3), _tilt(law, 0.9)],
          lambda a, b, s: stats.guess_score(s)),
    _Spec("rising sequences", lambda d: laws.rising_law(len(d)), False, "rising sequences",
          lambda law, n: [_ratio(laws.riffle_rising_law(n, k), law) for k in (5, 7)],
          lambda a, b, s: stats.rising_sequences(s)),
    _Spec("valleys", lambda d: laws.valleys_law(len(d)), False, "valleys",
          lambda law, n: [_tilt(law, -0.5), _tilt(law, -1.5)],
          lambda a, b, s: stats.valleys(s)),
    _Spec("adjacent pairs kept", lambda d: laws.successions_law(len(d)), True, "pairs",
          lambda law, n: [_tilt(law, 1.0)], lambda a, b, s: stats.successions(s)),
    _Spec("top cards kept", lambda d: _kept_law(len(d)), True, "cards",
          lambda law, n: [_kept(n)], lambda a, b, s: stats.prefix_kept(a, b), family=2),
    _Spec("bottom cards kept", lambda d: _kept_law(len(d)), True, "cards",
          lambda law, n: [_kept(n)], lambda a, b, s: stats.suffix_kept(a, b), family=2),
)  # fmt: skip
_COLOUR = _Spec("colour changes", _colour_law, False, "colour changes",
                lambda law, n: [_tilt(law, 0.25), _tilt(law, -0.25)],
                lambda a, b, s: stats.colour_changes(b))  # fmt: skip
#: the families sharing the budget: the six above (top and bottom cards as one), colour, the
#: two cell families, and the repeated or sorted orders
FAMILIES = 10


class ShuffleMonitor:
    """One shuffler's sequential decision; feed it every shuffle with :meth:`observe`.

    Decks other than the first one's cards (a short deck, say) are counted in ``skipped`` and
    tested by nothing: a count error is the rules' business."""

    def __init__(self, budget: float = BUDGET) -> None:
        self.budget = budget
        self.shuffles = 0
        self.with_input = 0
        self.skipped = 0
        self.alerts = 0
        self._cards: frozenset[int] | None = None
        self._tests: list[_Test] = []
        self._cells: dict[str, _Cells] = {}
        self._memory: deque[bytes] = deque(maxlen=REMEMBERED)
        self._remembered: set[bytes] = set()

    def _build(self, deck: Sequence[int]) -> None:
        n = len(deck)
        self._cards = frozenset(deck)
        self._index = {card: i for i, card in enumerate(sorted(deck))}
        share = self.budget / FAMILIES

        def test(spec: _Spec) -> _Test:
            law = spec.law(deck)
            steps = spec.detectors(law, n)
            h = math.log(len(steps) * spec.family / share)
            return _Test(spec.name, [_Cusum(s) for s in steps], [h] * len(steps), law,
                         spec.upper, spec.unit)  # fmt: skip

        self._with_input = [(test(spec), spec.statistic) for spec in _WITH_INPUT]
        self._colour = test(_COLOUR)
        self._tests = [t for t, _ in self._with_input] + [self._colour]
        cell_h = math.log(n * n / share)
        self._cells = {
            "positions": _Cells("positions", n, cell_h),
            "card positions": _Cells("card positions", n, cell_h),
        }
        self._immediate = share  # p-value under which a repeat or a sorted order is flagged
        self._sorted = {bytes(sorted(deck)), bytes(sorted(deck, reverse=True))}

    def observe(self, before: Sequence[int] | None, after: Sequence[int]) -> Alert | None:
        """One shuffle: the order that went in (None when unknown) and the order it made. The
        strongest alert any test raised on it, or None."""
        if self._cards is None:
            self._build(after)
        if (
            frozenset(after) != self._cards
            or len(after) != len(self._cards)
            or (before is not None and (len(before) != len(after) or set(before) != self._cards))
        ):
            self.skipped += 1
            return None
        self.shuffles += 1
        found = [self._repeat(before, after)]
        if before is not None:
            self.with_input += 1
            sigma = stats.positions(before, after)
            found += [t.observe(f(before, after, sigma)) for t, f in self._with_input]
            came_from = [0] * len(sigma)
            for i, j in enumerate(sigma):
                came_from[j] = i
            found.append(self._cells["positions"].observe(came_from))
        found.append(self._colour.observe(_COLOUR.statistic((), after, [])))
        found.append(self._cells["card positions"].observe([self._index[c] for c in after]))
        alerts = [a for a in found if a is not None]
        if not alerts:
            return None
        self.alerts += 1
        return min(alerts, key=lambda a: (a.p_value, -a.log_e))

    def _repeat(self, before: Sequence[int] | None, after: Sequence[int]) -> Alert | None:
        """A repeated or sorted output: under a fair shuffler its chance is the number of
        orders it could have matched over n!, which no real shuffle reaches."""
        key = bytes(after)
        named = set(self._sorted)
        if before is not None:
            named |= {bytes(before), bytes(reversed(before))}
        fact = math.factorial(len(after))
        alert: Alert | None = None
        if key in named:
            p = len(named) / fact
            why = "the output is the input order, its reverse, or a sorted deck"
            alert = Alert("sorted output", 1.0, p, 1, -math.log(p), -math.log(self._immediate), why)
        elif key in self._remembered:
            p = len(self._memory) / fact
            alert = Alert("repeated output", 1.0, p, len(self._memory), -math.log(p),
                          -math.log(self._immediate),
                          f"the output repeats one of the last {len(self._memory)}")  # fmt: skip
        if len(self._memory) == self._memory.maxlen:
            self._remembered.discard(self._memory[0])
        self._memory.append(key)
        self._remembered.add(key)
        return alert

    def status(self) -> tuple[TestStatus, ...]:
        """Every test's running statistics."""
        return tuple(t.status() for t in self._tests) + tuple(
            c.status() for c in self._cells.values()
        )
