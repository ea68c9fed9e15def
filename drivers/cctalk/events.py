"""Events of the seat-acceptor bus (table game progressive / bonus wager system)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tableside.drivers.events import DeviceEvent

__all__ = [
    "AcceptorError",
    "AcceptorIdentity",
    "AcceptorOffline",
    "AcceptorOnline",
    "BacklogAtStart",
    "CounterReset",
    "EventsLost",
    "LockoutApplied",
    "LockoutReleased",
    "WagerAccepted",
    "WagerLate",
    "WagerRefused",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class AcceptorIdentity(DeviceEvent):
    kind: ClassVar[str] = "acceptor_identity"
    seat: int
    address: int
    manufacturer: str
    product: str
    serial: str
    software: str
    rom_checksum: str  # hex


@dataclass(frozen=True, slots=True, kw_only=True)
class WagerAccepted(DeviceEvent):
    """A wager the acceptor accepted before the lock-out reached it: it counts."""

    kind: ClassVar[str] = "wager_accepted"
    seat: int
    credit: int  # the acceptor's credit code (1 = a $1 wager)
    event_counter: int
    #: found by the poll that follows the inhibit: accepted before the lock-out reached it
    during_lockout: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class WagerLate(DeviceEvent):
    """A credit seen after the lock-out was in effect: not counted (555.2(f)(2))."""

    kind: ClassVar[str] = "wager_late"
    seat: int
    credit: int
    event_counter: int
    after_lockout_ms: float


@dataclass(frozen=True, slots=True, kw_only=True)
class WagerRefused(DeviceEvent):
    """The acceptor refused a wager because it was inhibited (the lock-out worked)."""

    kind: ClassVar[str] = "wager_refused"
    seat: int
    event_counter: int


@dataclass(frozen=True, slots=True, kw_only=True)
class AcceptorError(DeviceEvent):
    kind: ClassVar[str] = "acceptor_error"
    seat: int
    code: int
    error: str  # jam (credit sensor blocked), reject, …
    event_counter: int


@dataclass(frozen=True, slots=True, kw_only=True)
class EventsLost(DeviceEvent):
    """The event counter moved further than the acceptor's 5-event buffer: events are lost."""

    kind: ClassVar[str] = "events_lost"
    seat: int
    lost: int
    from_counter: int
    to_counter: int


@dataclass(frozen=True, slots=True, kw_only=True)
class BacklogAtStart(DeviceEvent):
    """What an acceptor's buffer held when the driver first read it: events from before this
    connection. Not counted as wagers of the round (nobody can tell which round they were);
    published so the floor sees them rather than having them vanish."""

    kind: ClassVar[str] = "backlog_at_start"
    seat: int
    event_counter: int
    credits: int  # credits among the buffered events
    errors: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class CounterReset(DeviceEvent):
    """The event counter went back to 0: the acceptor was reset or power-cycled."""

    kind: ClassVar[str] = "counter_reset"
    seat: int
    last_counter: int


@dataclass(frozen=True, slots=True, kw_only=True)
class AcceptorOffline(DeviceEvent):
    kind: ClassVar[str] = "acceptor_offline"
    seat: int
    detail: str


@dataclass(frozen=True, slots=True, kw_only=True)
class AcceptorOnline(DeviceEvent):
    kind: ClassVar[str] = "acceptor_online"
    seat: int


@dataclass(frozen=True, slots=True, kw_only=True)
class LockoutApplied(DeviceEvent):
    """Every acceptor was inhibited: ``broadcast_ms`` until the broadcast inhibit left the
    host, ``confirmed_ms`` until the last seat confirmed it (both from the lock-out request)."""

    kind: ClassVar[str] = "lockout_applied"
    broadcast_ms: float
    confirmed_ms: float
    seats: tuple[int, ...]
    unconfirmed: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class LockoutReleased(DeviceEvent):
    kind: ClassVar[str] = "lockout_released"
    seats: tuple[int, ...]
