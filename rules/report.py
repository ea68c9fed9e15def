"""docs/rules.md, generated from the rows: every rule, its clause, what triggers it, what it
requires, and the tests that name the clause (``tableside rules docs/rules.md``)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from tableside.drivers.named import Named
from tableside.rules.model import FieldRef, Rule, When
from tableside.rules.rows import RULES

__all__ = ["ENFORCED_ELSEWHERE", "index_clauses", "render", "tests_naming"]

_GAMES = {"caribbean_stud": "CS", "four_card_poker": "FCP", "let_it_ride": "LIR",
          "spanish_21": "S21"}  # fmt: skip


_CLAUSE = re.compile(r"\b((?:5\d\d|643a)\.\d+\([a-z]\)(?:\(\d+\)(?:\([ivx]+\))?)?)")


def _clause(rule: Rule) -> str:
    return rule.citation.removeprefix("58 Pa. Code § ")


def _chunks(text: str) -> list[tuple[str | None, str]]:
    """A test file cut at its top-level statements; decorators go with the def they precede.
    Each chunk: (the test's or the constant's name, or None; its text)."""
    starts = [m.start() for m in re.finditer(r"(?m)^(?:@|async def |def |class |\w+\s*[:=])", text)]
    out: list[tuple[str | None, str]] = []
    pending = ""
    for a, b in zip(starts, [*starts[1:], len(text)], strict=True):
        piece = text[a:b]
        if piece.startswith("@"):
            pending += piece
            continue
        name = re.match(r"(?:async )?def (test_\w+)|([A-Z][A-Z0-9_]*)\s*[:=]", piece)
        out.append((name and (name.group(1) or name.group(2)), pending + piece))
        pending = ""
    return out


def tests_naming(tests: Path) -> dict[str, list[str]]:
    """Clause (``555.5(a)``) → ``file::test`` of every test that names it, in its body, its
    decorators, or a module-level table it uses (``SHOE_STOP = {…: "555.14(f)"}``)."""
    clause = _CLAUSE
    found: dict[str, list[str]] = {}
    for path in sorted(tests.glob("test_*.py")):
        chunks = _chunks(path.read_text(encoding="utf-8"))
        tables = {name: set(clause.findall(body)) for name, body in chunks
                  if name and not name.startswith("test_")}  # fmt: skip
        for name, body in chunks:
            if not name or not name.startswith("test_"):
                continue
            named = set(clause.findall(body))
            for table, clauses in tables.items():
                if re.search(rf"\b{table}\b", body):
                    named |= clauses
            for each in sorted(named):
                found.setdefault(each, []).append(f"{path.name}::{name}")
    return found


def _when(rule: Rule) -> str:
    return _when_of(rule.when) or "always"


def _when_of(when: Iterable[When]) -> str:
    return ", ".join(f"{w.field} {w.op} {_value(w.value)}" for w in when)


def _value(value: object) -> str:
    """A condition's value as the page shows it: another field by its name (``expected``), a
    fact of the table's config by its name in quotes, anything else as written."""
    if isinstance(value, FieldRef):
        return value.field
    if isinstance(value, tuple):
        return repr(tuple(_word(v) for v in value))
    return repr(_word(value))


def _word(value: object) -> object:
    """A value by the word JSON spells it with (an enum's, a stack target's name)."""
    if isinstance(value, Named):
        return value.spelt()
    return getattr(value, "value", value)


#: the clauses of ../shared/regulations/README.md's index that no row (or not only a row)
#: enforces: clause → (where it is enforced, how). docs/rules.md lists each with its tests.
ENFORCED_ELSEWHERE: dict[str, tuple[str, str]] = {
    "555.2(f)": ("drivers/cctalk, daemon/runtime.py, rules/commands.py",
                 'the control device\'s "no more bets" (its button, or the table command) locks '
                 "every acceptor out (master inhibit, confirmed per seat); a seat that does not "
                 "confirm is a ruling"),
    "555.2(f)(2)": ("drivers/cctalk/driver.py",
                    'a wager attempted after "no more bets" is not recognised by a locked-out '
                    "acceptor; a credit seen after the inhibit is reported as wager_late"),
    "559.2(f)": ("drivers/cctalk, daemon/runtime.py, rules/commands.py",
                 "Let It Ride's bonus wagering system: the same lock-out as 555.2(f)"),
    "559.2(f)(2)": ("drivers/cctalk/driver.py",
                    "Let It Ride: the same refusal of a late wager as 555.2(f)(2)"),
    "555.7(c)": ("drivers/cctalk/driver.py, rules/table.py",
                 "the $1 progressive wager an acceptor accepts is reported (wager_accepted), "
                 "counted for 555.8(b) and added to the meter"),
    "555.12(b)": ("rules/progressive.py, rules/table.py, rules/commands.py",
                  "a progressive payout is refused until the hand is recorded, the seat's light "
                  "is lit (the control device says so) and a floorperson validated it"),
    "555.13(d)": ("rules/paytables.py, rules/progressive.py (checked when a config loads)",
                  "a progressive pay table below the minimums is refused; a royal flush takes "
                  "the meter, a straight flush 10% of it or $5,000"),
    "555.12(c)": ("rules/progressive.py, rules/table.py",
                  "a progressive payout never asks whether the dealer's hand qualifies"),
    "555.13(e)": ("daemon/config.py ([progressive] rate_percent 70-100), rules/progressive.py",
                  "a config below 70% is refused; the meter grows by the rate per wager"),
    "555.13(f)": ("rules/progressive.py, rules/table.py",
                  "royal flushes of one round share the meter equally, paid together"),
    "559.14(d)": ("rules/paytables.py (checked when a config loads), rules/table.py",
                  "a Let It Ride Bonus pay table below the minimums is refused; pay_bonus pays "
                  "the table's amounts"),
}  # fmt: skip


#: each fact the rows judge, and every path it reaches the table by (tests/test_paths.py)
_PATHS = (
    ("a round starts (`table.round`: shuffle, decks, deck age, stub count due, the reader's "
     "inspection, the cover card's last hand, a halt)",
     "`start_round`; baccarat: a `coup` after one was dealt in the round",
     "a shoe's `deal_started`; a reading baccarat shoe's first card of a coup"),
    ("a card face up (555.14(b), 557.13(a), 559.15(a), 551.16(a))", "`card_face_up`",
     "a shoe's `card_face_up` (counted with the dealer's, this round)"),
    ("a stack or hand of the wrong size (555.14(d), 557.13(c), 559.15(c))", "`misdeal`",
     "a shoe's `stack_dispensed`"),
    ("the stub count's outcome (555.8(h) and their like)", "`stub_count`",
     "an automated shoe's `stub_removed`, with the cards it dealt (the dealer still counts "
     "every five rounds)"),
    ("a ten in the shoe, Spanish 21 (551.16(b))", "`ten_found`; an `up_card` of 10",
     "a reading shoe's `stack_dispensed` or `card_face_up`"),
    ("the card reader malfunctions (551.16(m))", "",
     "its `fault`, its `status`, a failed `self_test`"),
    ("new cards (deck age, the cover card, a new shoe's burn)", "`new_cards`",
     "a baccarat shoe's `cards_loaded`"),
    ("the up card against the reader and more cards (551.16(l), 551.8(e))",
     "`up_card`, `more_cards`, before or after the reader", "the reader's `hole_card_checked`"),
)  # fmt: skip


def _halts() -> list[str]:
    """The section on halts: what stops, when, and what becomes of the round in play."""
    from tableside.rules.commands import COMMANDS  # the declarations, not the rows'

    dealing = ", ".join(
        f"`{c.name}`" + ("" if len(c.deals) > 1 else f" ({next(iter(c.deals)).value})")
        for c in COMMANDS.values() if c.deals
    )  # fmt: skip
    return [
        "## Halts",
        "",
        "A ruling whose actions include `halt_dealing` or `remove_deck` halts dealing until a",
        "floorperson resolves it, or until the end its clause names is seen (551.16(m): the",
        "card reader repaired, its self-test passed, or replaced, `device_installed`; 551.2(e):",
        "the day's inspection). A halt stops dealing at once, in every phase, the round in play",
        f"included: every command that deals ({dealing}) is refused",
        "while it holds, naming the ruling and its clause; a floorperson may override with a",
        "reason (journaled with the result), and the cards so dealt are ruled on again: its",
        "clause's `…-dealt-while-halted` row, or 551.16(m)'s `halted-reader` while the reader",
        "is not repaired or replaced. A device cannot be refused what it already did: a shoe",
        "that deals a round, or a reading shoe that deals a coup, while dealing is halted is",
        "ruled on the same way.",
        "",
        "What becomes of the round in play is the clause's to say. 551.16(m) voids nothing",
        '("the dealer may not continue dealing … until the card reader device is repaired or',
        'replaced"): the round stays where it is, its wagers stand, and it is dealt on once the',
        "reader is repaired or replaced. A halting ruling that also voids (551.16(b)'s second",
        "ten, a wrong stub count not misdealt) says so in its own actions (`void_all_hands`,",
        "`return_wagers`); 555.5(b) and its like remove the deck and void nothing.",
    ]


def index_clauses(index: Path) -> set[str]:
    """Every clause the regulations' index names (``555.14(f)``, ``643a.9(a)(1)``)."""
    return set(_CLAUSE.findall(index.read_text(encoding="utf-8")))


def render(rules: Iterable[Rule] = RULES, tests: Mapping[str, list[str]] | None = None) -> str:
    tests = tests or {}
    lines = [
        "# Rules in force",
        "",
        "Generated from the rows in [`rules/`](../rules/) by `tableside rules docs/rules.md`; a",
        "test fails when this page is stale. Each row's clause words are checked, verbatim,",
        "against `../shared/regulations` (tests/test_rules.py). **Proved by** lists the tests",
        "that name the clause.",
        "",
        "| clause | rule | games | trigger | when | actions | affects | proved by |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for rule in rules:
        games = ", ".join(_GAMES.get(g.value, g.value) for g in sorted(rule.games))
        proved = "<br>".join(f"`{t}`" for t in tests.get(_clause(rule), [])) or "**none**"
        actions = ", ".join(a.value for a in rule.actions)
        if rule.until:
            ends = " or ".join(f"`{u.trigger}`" + (f" ({_when_of(u.when)})" if u.when else "")
                               for u in rule.until)  # fmt: skip
            actions += f"; the halt ends at {ends} (the ruling stays open)"
        clause = _clause(rule)
        if rule.replaces:
            clause += f" (replaced {rule.replaces.removeprefix('58 Pa. Code § ')})"
        lines.append(
            f"| {clause} | `{rule.id}`: {rule.summary} | {games} | `{rule.trigger}` "
            f"| {_when(rule)} | {actions} | {rule.affects} | {proved} |"
        )
    lines += [
        "",
        f"{sum(1 for _ in RULES)} rules.",
        "",
        "## Clauses enforced outside the rows",
        "",
        "Every clause of the regulations' index that no row above enforces, where it is",
        "enforced instead, and the tests that name it.",
        "",
        "| clause | where | how | proved by |",
        "| --- | --- | --- | --- |",
        *(
            f"| {clause} | {where} | {how} | "
            + ("<br>".join(f"`{t}`" for t in tests.get(clause, [])) or "**none**")
            + " |"
            for clause, (where, how) in ENFORCED_ELSEWHERE.items()
        ),
        "",
        "## The clause of the dealing method",
        "",
        "A chapter deals from a manual shoe, from the hand or from an automated shoe, each in a",
        "section of its own words (555.8, 555.9, 555.10 and their like); a row that enforces one",
        "of them applies only to the method the table declared (`declare_method`; an automated",
        "shoe until then), so a ruling cites the clause whose words fit how the cards were dealt:",
        "the stub count, its outcomes, the automated shuffler for hand dealing, and the chips",
        "counted against the wagers the system accepted (Caribbean Stud: 555.8(b), a manual",
        "shoe's; dealt from the hand or an automated shoe, 555.9(a)(3) and 555.10(a)(2) ask for",
        "the lock-out only, so a count there is journaled with the table and cites nothing; Let",
        "It Ride: 559.10(b), 643a.9(a)(3)(i), 559.12(a)(2)). Let It Ride dealt from the hand",
        "cites 643a.9, the text in force, its words as the regulations hold them; the 2010",
        "clause it replaced (559.11) is named beside it, in the table above and in each ruling's",
        "summary, for a reader of older records.",
        "",
        "## Every path to a fact",
        "",
        "A fact a row judges reaches it the same way whoever tells the table:",
        "",
        "| fact | the dealer's or a floorperson's word | a device |",
        "| --- | --- | --- |",
        *(f"| {fact} | {said} | {device} |" for fact, said, device in _PATHS),
        "",
        *_halts(),
        "",
        "## Not rows",
        "",
        "* **Progressive payouts** (555.12(b), 555.13(d)-(f)): the pay table's minimums, the",
        "  meter, the three steps before a payout, the order of payment and royal flushes sharing",
        "  the meter are in [`rules/progressive.py`](../rules/progressive.py) and the table state",
        "  machine; proved by `test_progressive_payouts.py` and, through the daemon,",
        "  `test_progressive.py::test_progressive_meter_and_payout_through_the_daemon`.",
        "* **Dispense patterns** (555.10(b), 557.10(b), 559.12(b)): the stacks an automated",
        "  shoe deals for the seats with a wager, in [`rules/patterns.py`](../rules/patterns.py);",
        "  proved by `test_shoe.py` (pure and through the daemon's `deal_round`).",
        "* **Pay tables** (555.13(c), 557.12(a)(2)-(3), 559.14(b), (d), (e)): the minimums in",
        "  [`rules/paytables.py`](../rules/paytables.py), checked when a config is loaded;",
        "  proved by `test_paytables.py`.",
        "* **Hand rankings** (555.6, 557.6, 559.6, 543.6, 543.11):",
        "  [`rules/hands.py`](../rules/hands.py), proved against every five-, four- and three-card",
        "  hand and an exact eight-deck baccarat enumeration in `test_hands.py`.",
        "",
    ]
    return "\n".join(lines)
