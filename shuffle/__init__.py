"""Shuffle integrity: simulated machines, the tests with their exact null laws, and one
sequential decision per shuffler (docs/shuffle.md). Pure: no I/O, standard library only."""

from tableside.shuffle.deck import CardSpellingError, new_deck, parse_card, parse_deck, spell
from tableside.shuffle.models import (
    Fair,
    Model,
    Riffle,
    Rig,
    Shelf,
    ShuffleSpecError,
    parse_shuffle,
)
from tableside.shuffle.monitor import BUDGET, Alert, ShuffleMonitor, TestStatus

__all__ = [
    "BUDGET",
    "Alert",
    "CardSpellingError",
    "Fair",
    "Model",
    "Riffle",
    "Rig",
    "Shelf",
    "ShuffleMonitor",
    "ShuffleSpecError",
    "TestStatus",
    "new_deck",
    "parse_card",
    "parse_deck",
    "parse_shuffle",
    "spell",
]
