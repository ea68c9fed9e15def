"""The engine: a pure function of (table facts, observation) → rulings. No I/O, no clock."""

from __future__ import annotations

from collections.abc import Iterable

from tableside.rules.model import Observation, Rule, Ruling, TableFacts
from tableside.rules.rows import RULES

__all__ = ["evaluate", "index_by_trigger"]


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
