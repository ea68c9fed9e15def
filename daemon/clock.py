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

__all__ = ["RunClock"]


class RunClock:
    """Unix time for one run of the daemon: wall time at start, plus monotonic elapsed time."""

    def __init__(self, not_before: float = 0.0) -> None:
        # time.time is looked up at call time, so a test can step the wall clock
        self._base = max(time.time(), not_before)
        self._started = time.monotonic()

    def now(self) -> float:
        return self._base + (time.monotonic() - self._started)

    def wall_offset(self) -> float:
        """How far the wall clock has stepped away from this clock since the start (seconds;
        positive: the wall clock is ahead)."""
        return time.time() - self.now()
