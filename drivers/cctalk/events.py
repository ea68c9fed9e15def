"""Events of the seat-acceptor bus (table game progressive / bonus wager system)."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Annotated, ClassVar

from pydantic import Field, WithJsonSchema

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
    "LockoutFailed",
    "LockoutReleased",
    "WagerAccepted",
    "WagerLate",
    "WagerRefused",
    "WagerTiming",
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


class WagerTiming(enum.StrEnum):
    """``WagerAccepted.timing``: what is known of when a wager was accepted against the
    lock-out."""

    #: no lock-out had been asked when it was read
    BEFORE_LOCKOUT = "before_lockout"
    #: read by the poll that follows the inhibit: the inhibit had not reached the acceptor yet
    BEFORE_INHIBIT = "before_inhibit"
    #: taken while the seat or the bus was out of reach, and "no more bets" came meanwhile:
    #: before or after it, nobody can tell (the acceptor was not inhibited yet)
    UNKNOWN = "unknown"


#: its event schema says a string, as it always has (docs/schemas/events/); pydantic titles no
#: enum's field by itself
_Timing = Annotated[WagerTiming, WithJsonSchema({"type": "string"}), Field(title="Timing")]


@dataclass(frozen=True, slots=True, kw_only=True)
class WagerAccepted(DeviceEvent):
    """A wager the acceptor accepted before the lock-out reached it: it counts."""

    kind: ClassVar[str] = "wager_accepted"
    seat: int
    credit: int  # the acceptor's credit code (1 = a $1 wager)
    event_counter: int
    #: found by the poll that follows the inhibit: accepted before the lock-out reached it
    during_lockout: bool = False
    #: what is known of when it was accepted against the lock-out
    timing: _Timing = WagerTiming.BEFORE_LOCKOUT
    #: read after the seat or the bus was out of reach for this long (None: routine polling)
    read_after_gap_s: float | None = None


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
    """Events the acceptor took that cannot be read: the event counter moved further than its
    5-event buffer (``lost`` of them, reason ``overrun``), or the acceptor was reset after the
    last read (``lost`` None: how many is unknown, reason ``reset``). Wagers among them are
    unaccounted for: the chips collected are reconciled by hand (555.8(b))."""

    kind: ClassVar[str] = "events_lost"
    seat: int
    lost: int | None
    from_counter: int
    to_counter: int
    reason: str = "overrun"


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
class LockoutFailed(DeviceEvent):
    """A seat's acceptor did not confirm its inhibit within the lock-out budget: it answered
    BUSY or NAK, did not answer, or read back as accepting (header 227). Its wagers after
    "no more bets" may be taken (555.2(f)(2)); the driver keeps trying."""

    kind: ClassVar[str] = "lockout_failed"
    seat: int
    address: int
    detail: str
    budget_ms: float


@dataclass(frozen=True, slots=True, kw_only=True)
class LockoutReleased(DeviceEvent):
    """Betting reopened: ``seats`` confirmed accepting (read back), ``unconfirmed`` did not."""

    kind: ClassVar[str] = "lockout_released"
    seats: tuple[int, ...]
    unconfirmed: tuple[int, ...] = ()
