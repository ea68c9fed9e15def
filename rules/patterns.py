"""How an automated dealing shoe dispenses a round, per game (pure; no I/O).

58 Pa. Code § 555.10(b), § 557.10(b), § 559.12(b); Spanish 21 is not dealt from an automated
dealing shoe under Chapter 551.
"""

from __future__ import annotations

from collections.abc import Sequence

from tableside.rules.model import Game

__all__ = ["COMMUNITY", "DEALER", "DEALER_EXTRA", "dispense_pattern"]

DEALER = "dealer"
DEALER_EXTRA = "dealer_extra"
COMMUNITY = "community"


def dispense_pattern(game: Game, positions: Sequence[int]) -> list[dict[str, str | int]]:
    """The stacks a round needs, in the order the shoe dispenses them.

    ``positions``: the betting positions (1..7, from the dealer's left) with a wager.
    """
    seats = sorted(set(positions))
    if not seats or any(not 1 <= s <= 7 for s in seats):
        raise ValueError(f"positions must be 1..7 with at least one, got {list(positions)}")
    if (
        game is Game.CARIBBEAN_STUD
    ):  # 555.10(b): five to each player with an Ante, then five to the dealer
        return [*_stacks(seats, 5), {"target": DEALER, "size": 5}]
    if game is Game.FOUR_CARD_POKER:
        # 557.10(b): five each, five to the dealer, then five more of which only the bottom card
        # becomes the dealer's sixth and the other four are discarded
        return [
            *_stacks(seats, 5),
            {"target": DEALER, "size": 5},
            {"target": DEALER_EXTRA, "size": 5},
        ]
    if (
        game is Game.LET_IT_RIDE
    ):  # 559.12(b): three each, then three for the community, left card discarded
        return [*_stacks(seats, 3), {"target": COMMUNITY, "size": 3}]
    raise ValueError(f"{game.value} is not dealt from an automated dealing shoe")


def _stacks(seats: list[int], size: int) -> list[dict[str, str | int]]:
    return [{"target": f"seat{seat}", "size": size} for seat in seats]
