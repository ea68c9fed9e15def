"""How an automated dealing shoe dispenses a round, per game (pure; no I/O).

58 Pa. Code § 555.10(b), § 557.10(b), § 559.12(b); Spanish 21 is not dealt from an automated
dealing shoe under Chapter 551.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from tableside.rules.model import Game

__all__ = ["COMMUNITY", "DEALER", "DEALER_EXTRA", "dispense_pattern", "plan_misfit", "stack_size"]

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


def stack_size(game: Game, target: str) -> int | None:
    """The cards the game's dealing procedure puts in the stack for ``target`` (``seat3``,
    ``dealer``, …); None when the game deals no such stack from a shoe."""
    return _sizes(game).get("seat" if target.startswith("seat") else target)


def plan_misfit(game: Game, plan: Sequence[Mapping[str, Any]]) -> str | None:
    """Why a shoe's announced plan is not the game's dealing procedure for the seats it names
    (None: it fits): stack sizes, the dealer's or community stacks, their order."""
    try:
        announced = [(str(s["target"]), int(s["size"])) for s in plan]
    except (KeyError, TypeError, ValueError):
        return f"the plan is unreadable: {list(plan)!r}"
    seats = [int(t[4:]) for t, _ in announced if t.startswith("seat") and t[4:].isdigit()]
    try:
        wanted = [(str(s["target"]), int(s["size"])) for s in dispense_pattern(game, seats)]
    except ValueError as exc:
        return f"the plan {_show(announced)} fits no {game.value} deal: {exc}"
    if announced == wanted:
        return None
    return f"the shoe's plan is {_show(announced)}; {game.value} deals {_show(wanted)}"


def _show(stacks: Sequence[tuple[str, int]]) -> str:
    return ", ".join(f"{target}×{size}" for target, size in stacks) or "nothing"


@functools.cache
def _sizes(game: Game) -> dict[str, int]:
    try:
        pattern = dispense_pattern(game, [1])
    except ValueError:
        return {}  # not dealt from a shoe in stacks
    return {("seat" if str(s["target"]).startswith("seat") else str(s["target"])): int(s["size"])
            for s in pattern}  # fmt: skip
