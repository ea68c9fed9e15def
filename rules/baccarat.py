"""Baccarat's coup: the cards of a coup to the Player's and Banker's Hands in dealing order,
how many cards the drawing rules call for, the burn, and a coup judged against 543.11 and its
Table 1. Pure functions; the table's state machine (rules/table.py) keeps the coup being drawn
and calls them."""

from __future__ import annotations

from collections.abc import Sequence

from tableside.drivers.cards import RANKS
from tableside.rules.hands import baccarat_point, baccarat_value, banker_draws, player_draws
from tableside.rules.seen import Coup

__all__ = ["burn", "cards_due", "coup", "hands", "stayed_short", "to_judge"]


def to_judge(ranks: tuple[int, ...], judged: int) -> Coup | None:
    """The coup a shoe that reads cards has drawn so far (``ranks``, ``judged`` of them judged
    already), to judge now: once it is complete by the drawing rules, and again with each card
    too many; None while it is short or nothing changed."""
    if len(ranks) < 4:
        return None
    due = cards_due(ranks)
    if due is not None and len(ranks) >= due and len(ranks) > judged:
        return coup(**hands(ranks))
    return None


def stayed_short(ranks: tuple[int, ...], judged: int) -> Coup | None:
    """The coup to judge as the next one starts: one of four cards or more that never was
    judged (it stayed short of what the drawing rules call for); else None."""
    return coup(**hands(ranks)) if judged == 0 and len(ranks) >= 4 else None


def cards_due(ranks: tuple[int, ...]) -> int | None:
    """How many cards this coup should have by the drawing rules (None: not known yet)."""
    p, b = baccarat_point(ranks[0:3:2]), baccarat_point(ranks[1:4:2])
    if not player_draws(p, b):
        return 5 if banker_draws(p, b, None) else 4
    if len(ranks) < 5:
        return None
    return 6 if banker_draws(p, b, baccarat_value(ranks[4])) else 5


def hands(ranks: tuple[int, ...]) -> dict[str, list[str]]:
    """The coup's cards to the hands, in dealing order: P B P B, then the Player's third when
    it was due (or when nobody's was: 543.14(b)'s case), then the Banker's."""
    names: list[str] = [RANKS[r - 1] for r in ranks]
    player, banker = [names[0], names[2]], [names[1], names[3]]
    p, b = baccarat_point(ranks[0:3:2]), baccarat_point(ranks[1:4:2])
    rest = names[4:]
    if rest:
        to_banker_first = not player_draws(p, b) and banker_draws(p, b, None)
        (banker if to_banker_first else player).append(rest.pop(0))
    # what is left: the Player's third if it has none (a card no rule allowed, 543.14(b)),
    # then the Banker's
    for hand in (player, banker):
        if rest and len(hand) < 3:
            hand.append(rest.pop(0))
    return {"player": player, "banker": banker, "extra": rest}


def burn(rank: str, *, first: bool) -> int:
    """How many cards more are burned. The first card of a shoe (543.5(g), 545.5(f)) counts a
    10, jack, queen or king as ten; a card found face up (543.14(d), 545.15(d)) burns "the value
    of the card", and 543.6(a)(2) gives those a value of zero. An ace is one either way."""
    if rank not in RANKS:
        raise ValueError(f"no card rank {rank!r} ({', '.join(RANKS)})")
    if first:
        return 1 if rank == "A" else 10 if rank in ("10", "J", "Q", "K") else int(rank)
    return baccarat_value(RANKS.index(rank) + 1)


def coup(player: Sequence[str], banker: Sequence[str], extra: Sequence[str]) -> Coup:
    """A coup as dealt (from a shoe that reads cards, or the dealer: two or three ranks a hand)
    against 543.11 and its Table 1: who drew, and who should have."""
    p_ranks = [RANKS.index(r) + 1 for r in player]
    b_ranks = [RANKS.index(r) + 1 for r in banker]
    p, b = baccarat_point(p_ranks[:2]), baccarat_point(b_ranks[:2])
    natural = p >= 8 or b >= 8
    player_should = player_draws(p, b)
    extra_cards = len(extra)
    banker_drew = len(b_ranks) == 3
    # 543.14(b), 545.15(b): a third card the Player's Hand was not allowed is the Banker's
    # third when the Banker must draw (judged as if the Player stood), else the first card of
    # the next hand. The Banker is then judged with that card where the clause puts it, never
    # with it as the Player's third.
    in_error = not natural and len(p_ranks) == 3 and not player_should
    if in_error:
        banker_should = banker_draws(p, b, None)
        goes = "banker" if banker_should else "next_hand"
        if goes == "banker":
            extra_cards += banker_drew  # the Banker's own third card is one card too many
            banker_drew = True
    else:
        third = baccarat_value(p_ranks[2]) if len(p_ranks) == 3 else None
        banker_should, goes = banker_draws(p, b, third), None
    return Coup(
        extra_cards=extra_cards,
        natural=natural,
        player_drew=len(p_ranks) == 3,
        player_should_draw=player_should,
        player_third_goes_to=goes,
        banker_drew=banker_drew,
        banker_should_draw=banker_should,
        player_points=baccarat_point(p_ranks[:2] if in_error else p_ranks),
        banker_points=baccarat_point(b_ranks),
    )
