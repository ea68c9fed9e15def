"""Typed device events: what drivers hand upward. Plain frozen dataclasses, no I/O."""

from __future__ import annotations

import enum
from dataclasses import dataclass, fields
from typing import ClassVar

from tableside.drivers.named import Named

__all__ = [
    "ConnectionEvent",
    "ConnectionState",
    "DeviceEvent",
    "FaultReport",
    "FloodingEvent",
    "IdentityEvent",
    "LineNoiseEvent",
    "ProtocolErrorEvent",
    "StatusReport",
]


class ConnectionState(enum.StrEnum):
    CONNECTING = "connecting"
    CONNECTED = "connected"
    STALE = "stale"  # link open, but no frame within the heartbeat timeout
    DISCONNECTED = "disconnected"


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceEvent:
    """Base of every device event. ``kind`` names it on the wire."""

    kind: ClassVar[str] = "event"
    # Fields holding card identities. They stay on the table unless the config allows them out.
    card_fields: ClassVar[frozenset[str]] = frozenset()
    device: str

    def data(self, *, include_cards: bool = False) -> dict[str, object]:
        """The event's own fields (without ``device``) as JSON writes them, card identities left
        out by default: a card, a stack target, a plan spelt by name (drivers/named.py)."""
        out: dict[str, object] = {}
        for f in fields(self):
            if f.name == "device" or (f.name in self.card_fields and not include_cards):
                continue
            value = getattr(self, f.name)
            if isinstance(value, tuple):
                out[f.name] = [v.spelt() if isinstance(v, Named) else v for v in value]
            else:
                out[f.name] = value.spelt() if isinstance(value, Named) else value
        return out


class StatusReport:
    """Mixed into a device class's ``status`` event: what the device says of itself, shown in
    its retained state (``device_state``, ``fault``). Declares the fields, adds none (the
    event's own dataclass fields keep their order on the wire)."""

    __slots__ = ()
    state: str
    fault: str | None


class FaultReport:
    """Mixed into a device class's ``fault`` event: the fault its retained state shows."""

    __slots__ = ()
    fault: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionEvent(DeviceEvent):
    kind: ClassVar[str] = "connection"
    state: ConnectionState
    detail: str = ""
    #: on "connected" after an outage (stale or disconnected): how long the device was away,
    #: in seconds; what it did meanwhile the table did not hear
    gap_s: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class IdentityEvent(DeviceEvent):
    kind: ClassVar[str] = "identity"
    vendor: str
    model: str
    serial: str
    firmware_version: str
    firmware_sha256: str  # hex


@dataclass(frozen=True, slots=True, kw_only=True)
class LineNoiseEvent(DeviceEvent):
    """Garbage bytes or damaged frames on the line (totals since the link opened)."""

    kind: ClassVar[str] = "line_noise"
    crc_errors: int
    discarded_bytes: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FloodingEvent(DeviceEvent):
    """The device sends more frames than its budget (drivers/link.py ``Flooding``): from
    ``active`` true its frames are taken at ``per_s`` and the rest wait, unacknowledged;
    ``active`` false when it is under budget again, with how many frames were ``held`` and how
    many left ``unacknowledged`` for the device to send again."""

    kind: ClassVar[str] = "flooding"
    active: bool
    per_s: float
    held: int
    unacknowledged: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ProtocolErrorEvent(DeviceEvent):
    """An intact frame the protocol does not allow; the device was NAKed."""

    kind: ClassVar[str] = "protocol_error"
    frame_type: int
    reason: str
    detail: str
