"""One deck's statistics. ``positions(input, output)`` is where each input card went; the
others read that (or the output alone). Each is O(n): the table runs them on every shuffle."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from tableside.shuffle.deck import is_red

__all__ = [
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
