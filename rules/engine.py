"""The engine: a pure function of (table facts, observation) → rulings. No I/O, no clock."""

from __future__ import annotations

from collections.abc import Iterable

from tableside.rules.model import Observation, Rule, Ruling, TableFacts
from tableside.rules.rows import RULES

__all__ = ["evaluate"]


def evaluate(
    facts: TableFacts, observation: Observation, rules: Iterable[Rule] = RULES
) -> list[Ruling]:
    """Every ruling the rules require for this observation at this table, in row order."""
    return [Ruling(rule, observation) for rule in rules if rule.applies(facts, observation)]
