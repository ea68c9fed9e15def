"""Shuffle integrity on the table: the orders a card-recognising shuffler reports, kept sealed
while their deck may still be dealt, then tested (shuffle/monitor.py). Only statistics and
alerts leave the table; the orders themselves are card identities (WA 230-16-152(b)).

**An undealt order is a secret.** A shuffler reports the order it made as soon as it made it:
the order of the deck about to be dealt, exactly what a cheat wants. ``ShuffleIntegrity.seal``
holds it in memory, where no journal record, log line or topic has it, until the deck it ordered is
out of play: the shuffler completes its next shuffle of that deck (the deck came back to it).
Then ``release`` hands it back to be journaled (as any card identity: off the wire unless
``publish_card_identities``) and tested. A daemon that stops loses the sealed orders (at most
one a deck): a shuffle untested, never a secret kept on disk.

No I/O (tests/test_layers.py): the runtime (daemon/runtime.py) journals what this returns.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from tableside.drivers.shuffler.events import ShuffleOrdered
from tableside.rules.model import Action, Game, Rule
from tableside.shuffle.deck import codes_of
from tableside.shuffle.monitor import Alert, ShuffleMonitor, TestStatus
from tableside.wire.events import ShuffleAlert, ShuffleStatistics

__all__ = ["INTEGRITY_ALERT", "ShuffleIntegrity", "alert_rule"]

#: the integrity alert's "rule": a surveillance alert, not a ruling of 58 Pa. Code (which has no
#: clause on a shuffler's randomness); its reference is the clause that asks for a test
INTEGRITY_ALERT = Rule(
    id="integrity.shuffle-alert",
    games=frozenset(Game),
    on="shuffler.shuffle_alert",
    when=(),
    actions=(Action.ALERT,),
    citation="COMAR 36.05.02.17(F)",
    words=(
        "An automated shuffling device must meet a 95 percent confidence level using a "
        "standard chi-squared test for goodness of fit."
    ),
    summary=(
        "Surveillance alert (not a Pennsylvania ruling): the shuffler's orders fail a "
        "randomness test (docs/shuffle.md; Diaconis, Fulman & Holmes 2013)."
    ),
)


def alert_rule(alert: ShuffleAlert) -> Rule:
    """An integrity alert's ruling: its test, statistic and p-value in its summary."""
    return dataclasses.replace(
        INTEGRITY_ALERT,
        summary=(
            f"Surveillance alert (not a Pennsylvania ruling): {alert.device}'s orders fail "
            f"the {alert.test} test over {alert.shuffles} shuffles (statistic "
            f"{alert.statistic:.4g}, p = {alert.p_value:.3g}): {alert.detail}. Take the "
            "shuffler out of use until it is inspected (docs/shuffle.md)."
        ),
    )


def _status(test: TestStatus) -> dict[str, str | int | float]:
    return {"test": test.test, "shuffles": test.shuffles, "mean": round(test.mean, 4),
            "expected": round(test.expected, 4), "level": round(test.level, 4),
            "high": round(test.high, 4)}  # fmt: skip


@dataclass
class ShuffleIntegrity:
    """Every recognising shuffler's sealed orders and sequential decision."""

    monitors: dict[str, ShuffleMonitor] = field(default_factory=dict)
    #: per shuffler, the id of the newest ruling its alerts opened (one open at a time)
    ruled: dict[str, int] = field(default_factory=dict)
    _sealed: dict[tuple[str, str], ShuffleOrdered] = field(default_factory=dict)

    def seal(self, order: ShuffleOrdered) -> None:
        """Hold the order of a deck that may still be dealt (a newer one of the same deck
        replaces it: that deck was shuffled again, the older order never dealt from)."""
        self._sealed[order.device, order.deck] = order

    def sealed(self, device: str) -> int:
        """How many orders of ``device`` are held (the count only: never the orders)."""
        return sum(1 for d, _ in self._sealed if d == device)

    def release(self, device: str, deck: str, shuffle_id: int) -> ShuffleOrdered | None:
        """``device`` completed shuffle ``shuffle_id`` of ``deck``: the order it made of that
        deck in an earlier shuffle is out of play now; it, or None. An order of this very
        shuffle (a device that sent it before its completion) stays sealed: it is the deck
        about to be dealt."""
        order = self._sealed.get((device, deck))
        if order is None or order.shuffle_id == shuffle_id:
            return None
        return self._sealed.pop((device, deck))

    def observe(self, order: ShuffleOrdered) -> tuple[ShuffleStatistics, ShuffleAlert | None]:
        """Test a released order: the shuffler's statistics now, and its alert if the decision
        flags it. An order whose cards are not a deck (a card twice) is tested by nothing and
        counted as skipped."""
        monitor = self.monitors.setdefault(order.device, ShuffleMonitor())
        alert: Alert | None = None
        made = codes_of(order.output_cards)
        fed = codes_of(order.input_cards) if order.input_cards else None
        if made is None or (order.input_cards and fed is None):
            monitor.skipped += 1
        else:
            alert = monitor.observe(fed, made)
        statistics = ShuffleStatistics(
            device=order.device, shuffle_id=order.shuffle_id, shuffles=monitor.shuffles,
            with_input=monitor.with_input, skipped=monitor.skipped, alerts=monitor.alerts,
            tests=tuple(_status(t) for t in monitor.status()),
        )  # fmt: skip
        if alert is None:
            return statistics, None
        return statistics, ShuffleAlert(
            device=order.device, shuffle_id=order.shuffle_id, **dataclasses.asdict(alert)
        )
