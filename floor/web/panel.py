"""A shuffler's panel on its table's page (issue 19): its health the way WA 230-16-152(a) lists
a shuffler's statistics (shuffles, unsuccessful shuffles, cards per shuffle, count errors,
firmware history) and its shuffle-integrity statistics over time and alerts, from the device
events the table published (daemon/shuffles.py). Each event's ``data`` is read as its type
(the driver's or the table's dataclass, validated by pydantic): one that is not is skipped.
Counted since this floor started (a device event is not retained)."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

from pydantic import TypeAdapter, ValidationError

from tableside.drivers.events import DeviceEvent
from tableside.drivers.shuffler.events import ShuffleCompleted, ShufflerFault, ShuffleStarted
from tableside.wire.events import FirmwareChanged, ShuffleAlert, ShuffleStatistics
from tableside.wire.payloads import DeviceEventPayload

__all__ = ["HISTORY", "ShufflerPanel"]

#: the tested shuffles whose levels the panel's plot keeps, newest
HISTORY = 300
#: the alerts and firmware changes a panel keeps, newest
KEPT = 20

_READ = (ShuffleStarted, ShuffleCompleted, ShufflerFault, ShuffleStatistics, ShuffleAlert,
         FirmwareChanged)  # fmt: skip
_TYPES: dict[str, type[DeviceEvent]] = {cls.kind: cls for cls in _READ}
_ADAPTERS = {kind: TypeAdapter(cls) for kind, cls in _TYPES.items()}


def typed(body: DeviceEventPayload) -> DeviceEvent | None:
    """A shuffler's device event as its type, or None (a kind the panel does not read, or data
    that is not that type's)."""
    adapter = _ADAPTERS.get(body.event)
    if adapter is None:
        return None
    try:
        event: DeviceEvent = adapter.validate_python({**body.data, "device": body.device})
    except ValidationError:
        return None
    return event


@dataclass(slots=True)
class ShufflerPanel:
    started: int = 0
    completed: int = 0
    faults: int = 0
    cards: int = 0
    count_errors: int = 0
    statistics: ShuffleStatistics | None = None
    #: (tested shuffles, {test: level}) after each tested shuffle
    history: collections.deque[tuple[int, dict[str, float]]] = field(
        default_factory=lambda: collections.deque(maxlen=HISTORY)
    )
    alerts: collections.deque[dict[str, object]] = field(
        default_factory=lambda: collections.deque(maxlen=KEPT)
    )
    firmware: collections.deque[dict[str, object]] = field(
        default_factory=lambda: collections.deque(maxlen=KEPT)
    )

    def take(self, event: DeviceEvent, ts: str) -> None:
        match event:
            case ShuffleStarted():
                self.started += 1
            case ShuffleCompleted():
                self.completed += 1
                self.cards += event.card_count
            case ShufflerFault():
                self.faults += 1
            case ShuffleStatistics():
                self.statistics = event
                levels = {str(t["test"]): float(t["level"]) for t in event.tests}
                self.history.append((event.shuffles, levels))
            case ShuffleAlert():
                self.alerts.appendleft({"ts": ts, **event.data()})
            case FirmwareChanged():
                self.firmware.appendleft({"ts": ts, **event.data()})

    def public(self) -> dict[str, object]:
        tried = max(self.started, self.completed + self.faults)

        def per_1000(n: int) -> float | None:
            return round(1000 * n / tried, 1) if tried else None

        s = self.statistics
        return {
            "shuffles": self.completed, "started": tried, "unsuccessful": self.faults,
            "unsuccessful_per_1000": per_1000(self.faults),
            "count_errors": self.count_errors, "count_errors_per_1000": per_1000(self.count_errors),
            "cards_per_shuffle": round(self.cards / self.completed, 1) if self.completed else None,
            "firmware": list(self.firmware),
            "tested": s.shuffles if s else 0, "with_input": s.with_input if s else 0,
            "tests": list(s.tests) if s else [],
            "history": [{"shuffles": n, "levels": levels} for n, levels in self.history],
            "alerts": list(self.alerts),
        }  # fmt: skip
