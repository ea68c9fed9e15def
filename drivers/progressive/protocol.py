"""The tableside progressive-controller protocol, version 1 (sans-IO, no asyncio).

The dealer's control device of a table game progressive or bonus wager system: the "no more
bets" / lock-out button (555.2(f)(2)), a light per betting position (555.12(b): the light on
the acceptor of a winning progressive hand must be lit before it is paid), the progressive
meter display, the reset key switch and the door. Byte by byte:
docs/protocols/progressive-controller.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, ClassVar

from tableside.drivers.common import (
    Heartbeat,
    Identity,
    QueryIdentity,
    QueryStatus,
    WireEnum,
)
from tableside.drivers.layout import U32, Field, Struct
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


class _LightMask(Field):
    """A light mask, one byte: bit 0 is seat 1 … bit 6 is seat 7; bit 7 is reserved."""

    __slots__ = ()

    def write(self, w: PayloadWriter, value: int, what: str) -> None:
        w.u8(value)

    def read(self, r: PayloadReader, what: str) -> int:
        value = r.u8()
        if value & 0x80:
            raise MalformedPayload(f"{what}: bit 7 is reserved in 0x{value:02x}")
        return value


Lights = Annotated[int, _LightMask()]


class Button(WireEnum):
    NO_MORE_BETS = "no_more_bets", 1  # the lock-out
    BETS_OPEN = "bets_open", 2


@dataclass(frozen=True, slots=True)
class ControllerStatus(Struct):
    """``locked`` u8 (0/1), ``lights`` u8 mask, ``door_open`` u8, ``key_reset`` u8,
    ``meter_cents`` u32."""

    TYPE: ClassVar[int] = 0x21
    locked: bool
    lights: Lights
    door_open: bool
    key_reset: bool
    meter_cents: U32


@dataclass(frozen=True, slots=True)
class ButtonPressed(Struct):
    """``button`` u8 (Button)."""

    TYPE: ClassVar[int] = 0x22
    button: Button


@dataclass(frozen=True, slots=True)
class LightsState(Struct):
    """The lights as they really are (sensed), after every change: ``lights`` u8 mask."""

    TYPE: ClassVar[int] = 0x23
    lights: Lights


@dataclass(frozen=True, slots=True)
class KeySwitch(Struct):
    """The meter reset key switch moved: ``reset`` u8 (1: turned to reset)."""

    TYPE: ClassVar[int] = 0x24
    reset: bool


@dataclass(frozen=True, slots=True)
class DoorChanged(Struct):
    """``open`` u8 (0/1)."""

    TYPE: ClassVar[int] = 0x26
    open: bool


@dataclass(frozen=True, slots=True)
class SetLights(Struct):
    """Host → device: light exactly these seats (``lights`` u8 mask); answered by LightsState."""

    TYPE: ClassVar[int] = 0x40
    lights: Lights


@dataclass(frozen=True, slots=True)
class SetMeter(Struct):
    """Host → device: show this progressive meter amount (``cents`` u32)."""

    TYPE: ClassVar[int] = 0x43
    cents: U32


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
