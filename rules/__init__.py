"""The rule engine: clauses of 58 Pa. Code as rows of data, and a pure evaluator."""

from tableside.rules.engine import evaluate
from tableside.rules.model import Action, Game, Observation, Rule, Ruling, TableFacts
from tableside.rules.rows import RULES

__all__ = ["RULES", "Action", "Game", "Observation", "Rule", "Ruling", "TableFacts", "evaluate"]
