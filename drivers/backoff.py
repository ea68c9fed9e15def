"""Capped exponential backoff with jitter, for reconnect loops."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

__all__ = ["Backoff"]


@dataclass(slots=True)
class Backoff:
    """``next()`` gives the delay before the next try: initial·factorⁿ capped at ``maximum``,
    drawn uniformly from [(1 - jitter)·d, d] so a room full of tables does not retry in step."""

    initial: float = 0.1
    maximum: float = 10.0
    factor: float = 2.0
    jitter: float = 0.5
    rng: random.Random = field(default_factory=random.Random)
    _attempt: int = 0

    def next(self) -> float:
        delay = min(self.maximum, self.initial * self.factor**self._attempt)
        self._attempt += 1
        return self.rng.uniform(delay * (1 - self.jitter), delay)

    def reset(self) -> None:
        self._attempt = 0
