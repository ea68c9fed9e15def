"""The acceptor bus's own status event (what the device state shows)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from tableside.drivers.events import DeviceEvent, StatusReport

__all__ = ["AcceptorBusStatus"]


@dataclass(frozen=True, slots=True, kw_only=True)
class AcceptorBusStatus(DeviceEvent, StatusReport):
    kind: ClassVar[str] = "status"
    state: Literal["accepting", "locked_out"]
    fault: str | None  # lockout_unconfirmed, acceptor_offline when any seat does not answer
    seats_online: tuple[int, ...]
    seats_offline: tuple[int, ...]
    #: seats whose inhibit (or release) is not confirmed (lockout_unconfirmed)
    seats_unconfirmed: tuple[int, ...] = ()
