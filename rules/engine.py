"""The engine: a pure function of (table facts, observation) → rulings. No I/O, no clock."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from tableside.rules.model import FactRef, FieldRef, Observation, Rule, Ruling, TableFacts
from tableside.rules.rows import RULES
from tableside.rules.seen import SEEN_BY_KIND

__all__ = ["evaluate", "index_by_trigger", "row_problems"]


def index_by_trigger(rules: Iterable[Rule]) -> dict[str, tuple[Rule, ...]]:
    """The rules each observation kind can trigger, each list in row order."""
    index: dict[str, list[Rule]] = {}
    for rule in rules:
        index.setdefault(rule.trigger, []).append(rule)
    return {kind: tuple(rows) for kind, rows in index.items()}


#: the shipped rows by trigger: an observation is tried against its own kind's rows only (a
#: rule whose trigger is another kind never applies)
_RULES_BY_TRIGGER = index_by_trigger(RULES)


def evaluate(
    facts: TableFacts, observation: Observation, rules: Iterable[Rule] = RULES
) -> list[Ruling]:
    """Every ruling the rules require for this observation at this table, in row order."""
    if rules is RULES:
        rules = _RULES_BY_TRIGGER.get(observation.kind, ())
    return [Ruling(rule, observation) for rule in rules if rule.applies(facts, observation)]


def row_problems(rules: Iterable[Rule] = RULES) -> list[str]:
    """Each row against the type of what its trigger names: a device's event
    (``shoe.stack_dispensed``, drivers/catalog.py) or the table's own (``table.round``,
    rules/seen.py). The trigger is something the table sees, and every field the row reads is
    of that type (the type checker checks the names; this, that a row reads its own trigger's
    type, which would otherwise never hold). tests/test_rules.py asserts there is none."""
    from tableside.drivers.catalog import event_type  # the check's, not the engine's

    problems = []
    for rule in rules:
        kind = rule.trigger.removeprefix("table.")
        cls = SEEN_BY_KIND.get(kind) if kind != rule.trigger else event_type(rule.trigger)
        if cls is None:
            problems.append(f"{rule.id}: nothing the table sees is {rule.trigger!r}")
            continue
        reads: list[type] = [w.of for w in rule.when]
        reads += [w.value.of for w in rule.when if isinstance(w.value, FieldRef)]
        problems += [f"{rule.id}: reads {of.__name__}, not {cls.__name__} ({rule.trigger})"
                     for of in reads if not issubclass(cls, of)]  # fmt: skip
        targeted = rule.affects == "target" or any(w.value is FactRef.STACK_SIZE for w in rule.when)
        if targeted and "target" not in {f.name for f in dataclasses.fields(cls)}:
            problems.append(f"{rule.id}: {cls.__name__} ({rule.trigger}) has no target")
    return problems
