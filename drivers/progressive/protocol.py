"""The tableside progressive-controller protocol, version 1 (sans-IO, no asyncio).

The dealer's control device of a table game progressive or bonus wager system: the "no more
bets" / lock-out button (555.2(f)(2)), a light per betting position (555.12(b): the light on
the acceptor of a winning progressive hand must be lit before it is paid), the progressive
meter display, the reset key switch and the door. Byte by byte:
docs/protocols/progressive-controller.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Self

from tableside.drivers.common import (
    Heartbeat,
    Identity,
    QueryIdentity,
    QueryStatus,
    WireEnum,
    decode_enum,
)
from tableside.drivers.messages import MessageSet
from tableside.drivers.wire import MalformedPayload, PayloadReader, PayloadWriter

__all__ = [
    "PROTOCOL",
    "Button",
    "ButtonPressed",
    "ControllerStatus",
    "DoorChanged",
    "Identity",
    "KeySwitch",
    "LightsState",
    "QueryIdentity",
    "QueryStatus",
    "SetLights",
    "SetMeter",
    "seats_of",
]


def seats_of(mask: int) -> tuple[int, ...]:
    """Light mask → lit seats: bit 0 is seat 1 … bit 6 is seat 7."""
    return tuple(seat for seat in range(1, 8) if mask & (1 << (seat - 1)))


def _mask(value: int, what: str) -> int:
    if value & 0x80:
        raise MalformedPayload(f"{what}: bit 7 is reserved in 0x{value:02x}")
    return value


class Button(WireEnum):
    NO_MORE_BETS = "no_more_bets", 1  # the lock-out
    BETS_OPEN = "bets_open", 2


@dataclass(frozen=True, slots=True)
class ControllerStatus:
    """``locked`` u8 (0/1), ``lights`` u8 mask, ``door_open`` u8, ``key_reset`` u8,
    ``meter_cents`` u32."""

    TYPE: ClassVar[int] = 0x21
    locked: bool
    lights: int
    door_open: bool
    key_reset: bool
    meter_cents: int

    def to_payload(self) -> bytes:
        w = PayloadWriter().u8(int(self.locked)).u8(self.lights).u8(int(self.door_open))
        return w.u8(int(self.key_reset)).u32(self.meter_cents).getvalue()

    @classmethod
    def from_payload(cls, payload: bytes) -> Self:
        r = PayloadReader(payload, "ControllerStatus")
        locked, lights, door, key = r.u8(), _mask(r.u8(), "ControllerStatus.lights"), r.u8(), r.u8()
        if max(locked, door, key) > 1:
            raise MalformedPayload("ControllerStatus: flags must be 0 or 1")
        msg = cls(bool(locked), lights, bool(door), bool(key), r.u32())
        r.end()
        return msg


@dataclass(frozen=True, slots=True)
class ButtonPressed:
    """``button`` u8 (Button)."""

    TYPE: ClassVar[int] = 0x22
    button: Button

    def to_payload(self) -> bytes:
        return PayloadWriter().u8(self.button).getvalue()

    @classmethod
    def from_payload(cls, payload: bytes) -> Self:
        r = PayloadReader(payload, "ButtonPressed")
        msg = cls(decode_enum(Button, r.u8(), "ButtonPressed.button"))
        r.end()
        return msg


@dataclass(frozen=True, slots=True)
class LightsState:
    """The lights as they really are (sensed), after every change: ``lights`` u8 mask."""

    TYPE: ClassVar[int] = 0x23
    lights: int

    def to_payload(self) -> bytes:
        return PayloadWriter().u8(self.lights).getvalue()

    @classmethod
    def from_payload(cls, payload: bytes) -> Self:
        r = PayloadReader(payload, "LightsState")
        msg = cls(_mask(r.u8(), "LightsState.lights"))
        r.end()
        return msg


@dataclass(frozen=True, slots=True)
class KeySwitch:
    """The meter reset key switch moved: ``reset`` u8 (1: turned to reset)."""

    TYPE: ClassVar[int] = 0x24
    reset: bool

    def to_payload(self) -> bytes:
        return PayloadWriter().u8(int(self.reset)).getvalue()

    @classmethod
    def from_payload(cls, payload: bytes) -> Self:
        r = PayloadReader(payload, "KeySwitch")
        value = r.u8()
        r.end()
        if value > 1:
            raise MalformedPayload(f"KeySwitch: must be 0 or 1, got {value}")
        return cls(bool(value))


@dataclass(frozen=True, slots=True)
class DoorChanged:
    """``open`` u8 (0/1)."""

    TYPE: ClassVar[int] = 0x26
    open: bool

    def to_payload(self) -> bytes:
        return PayloadWriter().u8(int(self.open)).getvalue()

    @classmethod
    def from_payload(cls, payload: bytes) -> Self:
        r = PayloadReader(payload, "DoorChanged")
        value = r.u8()
        r.end()
        if value > 1:
            raise MalformedPayload(f"DoorChanged: must be 0 or 1, got {value}")
        return cls(bool(value))


@dataclass(frozen=True, slots=True)
class SetLights:
    """Host → device: light exactly these seats (``lights`` u8 mask); answered by LightsState."""

    TYPE: ClassVar[int] = 0x40
    lights: int

    def to_payload(self) -> bytes:
        return PayloadWriter().u8(self.lights).getvalue()

    @classmethod
    def from_payload(cls, payload: bytes) -> Self:
        r = PayloadReader(payload, "SetLights")
        msg = cls(_mask(r.u8(), "SetLights.lights"))
        r.end()
        return msg


@dataclass(frozen=True, slots=True)
class SetMeter:
    """Host → device: show this progressive meter amount (``cents`` u32)."""

    TYPE: ClassVar[int] = 0x43
    cents: int

    def to_payload(self) -> bytes:
        return PayloadWriter().u32(self.cents).getvalue()

    @classmethod
    def from_payload(cls, payload: bytes) -> Self:
        r = PayloadReader(payload, "SetMeter")
        msg = cls(r.u32())
        r.end()
        return msg


PROTOCOL = MessageSet(
    "progressive_controller",
    Identity,
    ControllerStatus,
    ButtonPressed,
    LightsState,
    KeySwitch,
    Heartbeat,
    DoorChanged,
    SetLights,
    QueryStatus,
    QueryIdentity,
    SetMeter,
)
