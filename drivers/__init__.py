"""Device drivers: transports, framing, protocols, drivers. Knows nothing of the daemon.

Public surface: ``open_transport``, ``Driver`` and ``DriverSettings``, the registry, events.
"""

from tableside.drivers.base import Driver, DriverSettings, EventSink
from tableside.drivers.events import ConnectionState, DeviceEvent
from tableside.drivers.registry import available_drivers, get_driver
from tableside.drivers.transport import open_transport

__all__ = [
    "ConnectionState",
    "DeviceEvent",
    "Driver",
    "DriverSettings",
    "EventSink",
    "available_drivers",
    "get_driver",
    "open_transport",
]
