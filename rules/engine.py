"""The engine: a pure function of (table facts, observation) → rulings. No I/O, no clock."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from tableside.rules.model import FactRef, FieldRef, Observation, Rule, Ruling, TableFacts
from tableside.rules.rows import RULES

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
    """Each row triggered by a device event (``shoe.stack_dispensed``) against that event's
    type (drivers/catalog.py): the trigger is an event a device reports, and every field the
    row reads is one of its fields. A field renamed in a driver's event, or misspelt in a row,
    is named here (tests/test_rules.py asserts there is none)."""
    from tableside.drivers.catalog import event_type  # the check's, not the engine's

    problems = []
    for rule in rules:
        if rule.trigger.startswith("table."):
            continue  # the table's own observations (rules/table.py)
        cls = event_type(rule.trigger)
        if cls is None:
            problems.append(f"{rule.id}: no device reports {rule.trigger!r}")
            continue
        names = {f.name for f in dataclasses.fields(cls)}
        read = [w.field for w in rule.when]
        read += [w.value.field for w in rule.when if isinstance(w.value, FieldRef)]
        if rule.affects == "target" or any(w.value is FactRef.STACK_SIZE for w in rule.when):
            read.append("target")
        problems += [f"{rule.id}: {cls.__name__} ({rule.trigger}) has no field {name!r}"
                     for name in read if name not in names]  # fmt: skip
    return problems
