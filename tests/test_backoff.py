"""The reconnect waits (drivers/backoff.py): only a working connection starts them small again,
one that lived ``stable_s`` with its peer answering; a flap or a peer that never answers keeps
them growing."""

from __future__ import annotations

import random

from tableside.drivers.backoff import Backoff


def _grown(backoff: Backoff, tries: int) -> float:
    for _ in range(tries):
        backoff.next()
    return backoff.next()


def test_only_a_working_connection_starts_the_waits_small_again() -> None:
    backoff = Backoff(initial=1.0, maximum=64.0, jitter=0.0, stable_s=30.0, rng=random.Random(1))
    assert _grown(backoff, 3) == 8.0
    backoff.connected(100.0)
    assert not backoff.ended(100.05)  # accepted and cut at once: a flap
    assert backoff.next() == 16.0
    backoff.connected(200.0)
    assert not backoff.ended(260.0, worked=False)  # lived long, its peer never answered
    assert backoff.next() == 32.0
    backoff.connected(300.0)
    assert backoff.ended(330.0)  # a working connection
    assert backoff.next() == 1.0
    assert not backoff.ended(400.0)  # an attempt that never connected
    assert backoff.next() == 2.0
