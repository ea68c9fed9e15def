"""The pay tables' minimums, as the chapters print them, and the check a casino's pay table must
pass before a table starts (docs/configuration.md, ``[pay_tables]``). Odds are "N to 1" as N;
Let It Ride Bonus amounts are dollars.

* 555.13(c): Caribbean Stud's Bet Wager, no less than these odds.
* 557.12(a)(2): Four Card Poker's Ante bonus, no less than these odds.
* 557.12(a)(3): Aces Up, one of Tables I-VII, preselected: the casino names the table.
* 559.14(b): Let It Ride, no less than these odds. 559.14(d): the Let It Ride Bonus, no less
  than these amounts. 559.14(e): the Three Card Bonus, no less than one of Tables A-F.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["MINIMUMS", "TABLES", "check"]

#: "no less than" tables: kind → hand → the least it may pay
MINIMUMS: dict[str, dict[str, float]] = {
    "caribbean_stud_bet": {  # 555.13(c)
        "royal_flush": 100, "straight_flush": 50, "four_of_a_kind": 20, "full_house": 7,
        "flush": 5, "straight": 4, "three_of_a_kind": 3, "two_pair": 2, "one_pair_or_less": 1,
    },
    "four_card_ante_bonus": {  # 557.12(a)(2)
        "four_of_a_kind": 25, "straight_flush": 20, "three_of_a_kind": 2,
    },
    "let_it_ride": {  # 559.14(b)
        "royal_flush": 1000, "straight_flush": 200, "four_of_a_kind": 50, "full_house": 11,
        "flush": 8, "straight": 5, "three_of_a_kind": 3, "two_pair": 2, "tens_or_better": 1,
    },
    "let_it_ride_bonus": {  # 559.14(d), dollars
        "royal_flush": 25_000, "straight_flush": 2_500, "four_of_a_kind": 400,
        "full_house": 200, "flush": 50, "straight": 25, "three_of_a_kind": 5,
    },
}  # fmt: skip

_ACES_UP = ("four_of_a_kind", "straight_flush", "three_of_a_kind", "flush", "straight",
            "two_pair", "pair_of_aces")  # fmt: skip
_THREE_CARD = ("mini_royal", "straight_flush", "three_of_a_kind", "straight", "flush", "pair")

#: "one of the following" tables: kind → table name → hand → odds (None: N/A)
TABLES: dict[str, dict[str, dict[str, float | None]]] = {
    "aces_up": {  # 557.12(a)(3)
        name: dict(zip(_ACES_UP, odds, strict=True))
        for name, odds in {
            "I": (50, 40, 9, 6, 4, 2, 1), "II": (50, 40, 7, 6, 5, 2, 1),
            "III": (50, 30, 9, 6, 4, 2, 1), "IV": (50, 30, 7, 6, 5, 2, 1),
            "V": (50, 40, 8, 5, 4, 3, 1), "VI": (50, 40, 8, 6, 4, 2, 1),
            "VII": (50, 40, 7, 5, 4, 3, 1),
        }.items()
    },
    "three_card_bonus": {  # 559.14(e)
        name: dict(zip(_THREE_CARD, odds, strict=True))
        for name, odds in {
            "A": (None, 40, 30, 6, 4, 1), "B": (None, 40, 30, 5, 4, 1),
            "C": (None, 40, 30, 6, 3, 1), "D": (50, 40, 30, 6, 4, 1),
            "E": (50, 40, 30, 5, 4, 1), "F": (50, 40, 30, 6, 3, 1),
        }.items()
    },
}  # fmt: skip

_CLAUSE = {
    "caribbean_stud_bet": "555.13(c)", "four_card_ante_bonus": "557.12(a)(2)",
    "let_it_ride": "559.14(b)", "let_it_ride_bonus": "559.14(d)",
    "aces_up": "557.12(a)(3)", "three_card_bonus": "559.14(e)",
}  # fmt: skip


def _below(pays: Mapping[str, float], least: Mapping[str, float | None]) -> list[str]:
    short = []
    for hand, minimum in least.items():
        if minimum is None:
            continue
        paid = pays.get(hand)
        if paid is None:
            short.append(f"{hand} is missing (at least {minimum:g})")
        elif paid < minimum:
            short.append(f"{hand} pays {paid:g}, below {minimum:g}")
    return short


def check(kind: str, pays: Mapping[str, float] | str) -> list[str]:
    """What is wrong with a casino's pay table of this kind (empty: it passes). ``pays`` maps
    hands to odds (amounts for the Let It Ride Bonus); for Aces Up it is the table's name."""
    clause = _CLAUSE.get(kind)
    if clause is None:
        return [f"unknown pay table {kind!r} (known: {', '.join(sorted(_CLAUSE))})"]
    if kind == "aces_up":
        if pays not in TABLES["aces_up"]:
            return [f"aces_up must name one of Tables {', '.join(TABLES['aces_up'])} ({clause})"]
        return []
    if isinstance(pays, str):
        return [f"{kind} is a table of hands and what each pays ({clause})"]
    unknown = sorted(set(pays) - set(MINIMUMS.get(kind) or TABLES[kind]["A"]))
    if unknown:
        return [f"{kind}: no such hand {', '.join(unknown)} ({clause})"]
    if kind == "three_card_bonus":
        if any(not _below(pays, table) for table in TABLES[kind].values()):
            return []
        return [f"three_card_bonus pays less than every one of Tables A-F ({clause})"]
    return [f"{kind}: {problem} ({clause})" for problem in _below(pays, MINIMUMS[kind])]
