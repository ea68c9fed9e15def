"""How an automated dealing shoe dispenses a round, per game (pure; no I/O).

58 Pa. Code § 555.10(b), § 557.10(b), § 559.12(b); Spanish 21 is not dealt from an automated
dealing shoe under Chapter 551.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from tableside.drivers.shoe.plan import Plan, Stack, Target
from tableside.rules.model import Game

__all__ = ["dispense_pattern", "plan_misfit", "stack_size"]


def dispense_pattern(game: Game, positions: Sequence[int]) -> Plan:
    """The stacks a round needs, in the order the shoe dispenses them.

    ``positions``: the betting positions (1..7, from the dealer's left) with a wager.
    """
    seats = sorted(set(positions))
    if not seats or any(not 1 <= s <= 7 for s in seats):
        raise ValueError(f"positions must be 1..7 with at least one, got {list(positions)}")
    if game is Game.CARIBBEAN_STUD:
        # 555.10(b): five to each player with an Ante, then five to the dealer
        return (*_stacks(seats, 5), Stack(Target.DEALER, 5))
    if game is Game.FOUR_CARD_POKER:
        # 557.10(b): five each, five to the dealer, then five more of which only the bottom card
        # becomes the dealer's sixth and the other four are discarded
        return (*_stacks(seats, 5), Stack(Target.DEALER, 5), Stack(Target.DEALER_EXTRA, 5))
    if game is Game.LET_IT_RIDE:
        # 559.12(b): three each, then three for the community, left card discarded
        return (*_stacks(seats, 3), Stack(Target.COMMUNITY, 3))
    raise ValueError(f"{game.value} is not dealt from an automated dealing shoe")


def _stacks(seats: list[int], size: int) -> tuple[Stack, ...]:
    return tuple(Stack(Target.at_seat(seat), size) for seat in seats)


def stack_size(game: Game, target: Target) -> int | None:
    """The cards the game's dealing procedure puts in the stack for ``target``; None when the
    game deals no such stack from a shoe."""
    return _sizes(game).get(None if target.seat is not None else target)


def plan_misfit(game: Game, plan: Plan) -> str | None:
    """Why a shoe's announced plan is not the game's dealing procedure for the seats it names
    (None: it fits): stack sizes, the dealer's or community stacks, their order."""
    seats = [s.target.seat for s in plan if s.target.seat is not None]
    try:
        wanted = dispense_pattern(game, seats)
    except ValueError as exc:
        return f"the plan {_show(plan)} fits no {game.value} deal: {exc}"
    if tuple(plan) == wanted:
        return None
    return f"the shoe's plan is {_show(plan)}; {game.value} deals {_show(wanted)}"


def _show(stacks: Plan) -> str:
    return ", ".join(f"{s.target}×{s.size}" for s in stacks) or "nothing"


@functools.cache
def _sizes(game: Game) -> dict[Target | None, int]:
    """The size of each stack the game deals: a seat's (key None), the dealer's stacks'."""
    try:
        pattern = dispense_pattern(game, [1])
    except ValueError:
        return {}  # not dealt from a shoe in stacks
    return {(None if s.target.seat is not None else s.target): s.size for s in pattern}
