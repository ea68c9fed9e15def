"""The table's own events, published on a device's topic beside the device's (``device/<device>/
event``): what the table finds of a device, rather than what the device said. Part of the
wire contract: the floor reads them back as these types (floor/web/panel.py), and their data's
JSON Schemas come from them (``tableside schemas``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tableside.drivers.events import DeviceEvent

__all__ = ["FirmwareChanged", "ShuffleAlert", "ShuffleStatistics"]


@dataclass(frozen=True, slots=True, kw_only=True)
class FirmwareChanged(DeviceEvent):
    # A device (or a part of it) reports other firmware than the table last saw (daemon/
    # firmware.py). No docstring: it would be its data's schema description, which has none.
    kind: ClassVar[str] = "firmware_changed"
    part: str  # "" for the device itself, "seat3" for the acceptor at seat 3
    previous: str
    current: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ShuffleStatistics(DeviceEvent):
    """A shuffler's running statistics after one more tested shuffle (no card identities)."""

    kind: ClassVar[str] = "shuffle_statistics"
    shuffle_id: int
    shuffles: int  # tested so far
    with_input: int  # of them, with the order fed known
    skipped: int  # orders of another deck than the first (a short deck, say): not tested
    alerts: int
    #: each test's running statistics (shuffle/monitor.py ``TestStatus``, as its fields)
    tests: tuple[dict[str, str | int | float], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ShuffleAlert(DeviceEvent):
    """The sequential decision flagged the shuffler (shuffle/monitor.py ``Alert``)."""

    kind: ClassVar[str] = "shuffle_alert"
    shuffle_id: int
    test: str
    statistic: float
    p_value: float
    shuffles: int  # the window the test flagged
    log_e: float
    threshold: float
    detail: str
