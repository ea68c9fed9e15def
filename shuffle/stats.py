"""One deck's statistics. ``positions(input, output)`` is where each input card went; the
others read that (or the output alone). Each is O(n): the table runs them on every shuffle."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from tableside.shuffle.deck import is_red

__all__ = [
    "ShelfGuesser",
    "colour_changes",
    "guess_score",
    "positions",
    "prefix_kept",
    "rising_sequences",
    "successions",
    "suffix_kept",
    "valleys",
]


def positions(before: Sequence[int], after: Sequence[int]) -> list[int]:
    """``sigma[i]``: the output position of the card that was i-th from the top going in."""
    where = {card: j for j, card in enumerate(after)}
    return [where[card] for card in before]


def rising_sequences(sigma: Sequence[int]) -> int:
    """Rising sequences (Bayer and Diaconis): 1 + the input cards i whose successor i+1 lies above
    them in the output."""
    return 1 + sum(1 for i in range(len(sigma) - 1) if sigma[i + 1] < sigma[i])


def valleys(sigma: Sequence[int]) -> int:
    """Valleys of the input positions read down the output: a card whose two neighbours both
    lay below it going in. In one shelf pass each shelf comes out falling then rising in the
    machine's deal order (it deals from the bottom), so only the joins between shelves make
    valleys (at most m - 1); the chance of an order depends on this count alone (Diaconis,
    Fulman and Holmes, Thm 3.1; checked by enumeration in the tests)."""
    n = len(sigma)
    came_from = [0] * n  # came_from[j]: input position of the card at output position j
    for i, j in enumerate(sigma):
        came_from[j] = i
    return sum(1 for j in range(1, n - 1) if came_from[j - 1] > came_from[j] < came_from[j + 1])


def successions(sigma: Sequence[int]) -> int:
    """Adjacent pairs kept: input neighbours i, i+1 still next to each other, in order."""
    return sum(1 for i in range(len(sigma) - 1) if sigma[i + 1] == sigma[i] + 1)


def prefix_kept(before: Sequence[int], after: Sequence[int]) -> int:
    """How many top cards are where they were."""
    k = 0
    for a, b in zip(before, after, strict=True):
        if a != b:
            break
        k += 1
    return k


def suffix_kept(before: Sequence[int], after: Sequence[int]) -> int:
    """How many bottom cards are where they were."""
    return prefix_kept(before[::-1], after[::-1])


def colour_changes(after: Sequence[int]) -> int:
    """Neighbours of different colours (red: diamonds, hearts)."""
    colours = [is_red(c) for c in after]
    return sum(1 for a, b in itertools.pairwise(colours) if a != b)


def guess_score(sigma: Sequence[int]) -> int:
    """Correct guesses of the strategy of Diaconis, Fulman and Holmes, knowing the input
    order and seeing each card after guessing it. In the machine's deal labels each shelf comes
    out as a V (falling to its first card, then rising), so: first guess the card dealt last
    (the input's top); after a card, guess the nearest unseen label in the direction the deck
    was going (down after a fall, up after a rise), turning when there is none that way.
    Always an unseen card, so under a uniform deck its law is :func:`laws.guess_law`."""
    n = len(sigma)
    out = [0] * n  # out[j]: deal label at output position j
    for i, j in enumerate(sigma):
        out[j] = n - 1 - i
    below = list(range(-1, n - 1))  # linked list of unseen labels
    above = list(range(1, n + 1))
    guess, falling, score = n - 1, True, 0
    for j, card in enumerate(out):
        score += card == guess
        lo, hi = below[card], above[card]
        if lo >= 0:
            above[lo] = hi
        if hi < n:
            below[hi] = lo
        if j:
            falling = card < out[j - 1]
        nearer, other = (lo, hi) if falling else (hi, lo)
        guess = nearer if 0 <= nearer < n else other
    return score


class ShelfGuesser:
    """The best guess of each next card after one pass of an ``m``-shelf machine, knowing the
    input order and seeing each card after guessing it: the unseen card most likely to come
    next given what has come, under the pass's exact law (an order's chance depends on its
    valleys alone: ``laws.shelf_ways``). What Diaconis, Fulman and Holmes's Table 2 measures
    (their strategy, conjectured best); ``guess_score`` is the fixed strategy the monitor uses.

    ``ways[r][i][b][s]``, for the ``r`` cards still to come: the chance (up to one factor)
    that the next is the unseen card ranked ``i`` among them, ``b`` whether the last card seen
    lies above it, and ``s`` the valleys counted so far; built once a deck size and ``m``."""

    def __init__(self, n: int, m: int) -> None:
        from tableside.shuffle import laws

        exact = laws.shelf_ways_by_valleys(n, m)
        top = len(exact)
        scale = max(exact)
        weight = [w / scale for w in exact] + [0.0] * top
        # perms[r][i][b][u]: orders of r cards whose first is ranked i, b: the card before it
        # lies above it, with u valleys among the first r - 1 (the last has no right neighbour)
        perms: list[list[list[list[float]]]] = [[], [[[1.0], [1.0]]]]
        for r in range(2, n + 1):
            rows = []
            below = [[0.0] * top for _ in range(r)]  # sums over the next card's rank, < i
            above = [[0.0] * top for _ in range(r + 1)]  # and ≥ i
            for i2 in range(r - 2, -1, -1):
                above[i2] = [a + c for a, c in zip(above[i2 + 1], _pad(perms[r - 1][i2][0], top),
                                                   strict=True)]  # fmt: skip
            for i2 in range(r - 1):
                below[i2 + 1] = [a + c for a, c in zip(below[i2], _pad(perms[r - 1][i2][1], top),
                                                       strict=True)]  # fmt: skip
            for i in range(r):
                up, down = above[i], below[i]
                falls_in = [a + d for a, d in zip(up, down, strict=True)]
                valley = [d + (up[u - 1] if u else 0.0) for u, d in enumerate(down)]
                rows.append([falls_in, valley])  # b = 0, b = 1 (a valley when it rises next)
            perms.append(rows)
        self.n = n
        self.ways = [
            [[[sum(c * weight[s + u] for u, c in enumerate(perms[r][i][b])) for s in range(top)]
              for b in (0, 1)] for i in range(r)] if r else []
            for r in range(n + 1)
        ]  # fmt: skip

    def score(self, sigma: Sequence[int]) -> int:
        """Correct guesses on the deck that put input card i at output position sigma[i]."""
        n = self.n
        seen = [0] * n  # seen[j]: input position of the card at output position j
        for i, j in enumerate(sigma):
            seen[j] = i
        unseen = list(range(n))
        score = valleys = 0
        for k, card in enumerate(seen):
            r = n - k
            ways = self.ways[r]
            if k == 0:
                guess = max(range(r), key=lambda i: ways[i][0][0])
            else:
                last = seen[k - 1]
                j = _rank(unseen, last)  # unseen cards below the last one seen
                turns = int(k >= 2 and seen[k - 2] > last)  # the last one a valley if it rises
                guess = max(range(r), key=lambda i: ways[i][1][valleys] if i < j
                            else ways[i][0][min(valleys + turns, len(ways[i][0]) - 1)])  # fmt: skip
            score += unseen[guess] == card
            if k >= 2 and seen[k - 2] > seen[k - 1] < card:
                valleys += 1
            unseen.remove(card)
        return score


def _pad(counts: list[float], size: int) -> list[float]:
    return counts + [0.0] * (size - len(counts))


def _rank(ordered: list[int], value: int) -> int:
    """How many of ``ordered`` (ascending) are below ``value``."""
    import bisect

    return bisect.bisect_left(ordered, value)
