"""The daemon's one idea of "now": Unix time read once per run, then moved on by the monotonic
clock, so a step of the wall clock (NTP, an operator, a bad RTC) changes nothing within a run.

Elapsed times (deck age, retention) are differences of this clock: within a run they are
monotonic elapsed time. Across a restart the clock starts again from the wall clock, but never
before ``not_before`` (the newest time the journal recorded), so a wall clock that went back
while the daemon was stopped cannot make a deck younger. (A wall clock that went *forward* while
it was stopped cannot be told from the time it really was stopped.)
"""

from __future__ import annotations

import time
from dataclasses import dataclass

__all__ = ["LabClock", "RunClock"]


@dataclass(frozen=True, slots=True)
class LabClock:
    """A lab's clock for hardware-in-the-loop runs: the table's time starts ``offset_s`` from
    the wall clock and runs ``speed`` times as fast, so deck age (4 h, 8 h) and the gaming day
    can be driven end to end in seconds. Refused by a production config (docs/configuration.md);
    every message published under it says so (``test_clock``)."""

    speed: float = 1.0
    offset_s: float = 0.0

    def __str__(self) -> str:
        return f"x{self.speed:g} {self.offset_s:+g}s"


class RunClock:
    """Unix time for one run of the daemon: wall time at start, plus monotonic elapsed time
    (under a lab's LabClock: shifted, and faster)."""

    def __init__(self, not_before: float = 0.0, test: LabClock | None = None) -> None:
        # time.time is looked up at call time, so a test can step the wall clock
        self.test = test
        offset = test.offset_s if test else 0.0
        self._speed = test.speed if test else 1.0
        self._base = max(time.time() + offset, not_before)
        self._started = time.monotonic()

    @property
    def speed(self) -> float:
        """Table seconds per real second (1, except under a lab's clock)."""
        return self._speed

    def now(self) -> float:
        return self._base + (time.monotonic() - self._started) * self._speed

    def wall_offset(self) -> float:
        """How far the wall clock has stepped away from this clock since the start (seconds;
        positive: the wall clock is ahead)."""
        return time.time() - self.now()
