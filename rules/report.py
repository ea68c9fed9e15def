"""docs/rules.md, generated from the rows: every rule, its clause, what triggers it, what it
requires, and the tests that name the clause (``tableside rules docs/rules.md``)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from tableside.rules.model import Rule
from tableside.rules.rows import RULES

__all__ = ["render", "tests_naming"]

_GAMES = {"caribbean_stud": "CS", "four_card_poker": "FCP", "let_it_ride": "LIR",
          "spanish_21": "S21"}  # fmt: skip


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
    clause = re.compile(r"\b(5\d\d\.\d+\([a-z]\)(?:\(\d+\))?)")
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
    parts = [f"{w.field} {w.op} {getattr(w.value, 'value', w.value)!r}" for w in rule.when]
    return ", ".join(parts) or "always"


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
        lines.append(
            f"| {_clause(rule)} | `{rule.id}`: {rule.summary} | {games} | `{rule.trigger}` "
            f"| {_when(rule)} | {actions} | {rule.affects} | {proved} |"
        )
    lines += [
        "",
        f"{sum(1 for _ in RULES)} rules.",
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
