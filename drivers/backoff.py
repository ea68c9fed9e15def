"""Capped exponential backoff with jitter, for reconnect loops; and, for a connection that can
be accepted and then cut at once (an MQTT broker), the rule that only a working connection
starts the waits small again (``connected``, ``ended``)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

__all__ = ["STABLE_S", "Backoff"]

#: a connection that lived this long, its peer answering, was a working one (``Backoff.ended``):
#: well above the table's CONNECT_TIMEOUT_S (10 s), after which a broker that never answers
#: is left
STABLE_S = 30.0


@dataclass(slots=True)
class Backoff:
    """``next()`` gives the delay before the next try: initial·factorⁿ capped at ``maximum``,
    drawn uniformly from [(1 - jitter)·d, d] so a room full of tables does not retry in step."""

    initial: float = 0.1
    maximum: float = 10.0
    factor: float = 2.0
    jitter: float = 0.5
    rng: random.Random = field(default_factory=random.Random)
    #: a connection that lived this long was a working one (``ended``)
    stable_s: float = STABLE_S
    _attempt: int = 0
    _since: float | None = None

    def next(self) -> float:
        delay = min(self.maximum, self.initial * self.factor**self._attempt)
        self._attempt += 1
        return self.rng.uniform(delay * (1 - self.jitter), delay)

    def reset(self) -> None:
        self._attempt = 0

    def connected(self, now: float) -> None:
        """A connection was accepted at ``now``; the waits grow on until it has lived
        ``stable_s``."""
        self._since = now

    def ended(self, now: float, *, worked: bool = True) -> bool:
        """The connection (or the attempt) ended at ``now``: True, and the waits small again,
        when it was a working one (it lived ``stable_s`` and ``worked``: the peer answered
        something on it); False for a flap, a failed try or a peer that never answered, the
        waits growing on."""
        since, self._since = self._since, None
        if worked and since is not None and now - since >= self.stable_s:
            self.reset()
            return True
        return False
