"""Events of the progressive system's control device."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from tableside.drivers.events import DeviceEvent, StatusReport
from tableside.drivers.progressive.protocol import Button

__all__ = [
    "Button",
    "ButtonPressed",
    "ControllerStatus",
    "DoorChanged",
    "KeySwitchMoved",
    "LightMismatch",
    "LightsChanged",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerStatus(DeviceEvent, StatusReport):
    kind: ClassVar[str] = "status"
    state: Literal["betting_open", "locked_out"]
    fault: Literal["door_open"] | None
    lights: tuple[int, ...]
    key_reset: bool
    meter_cents: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ButtonPressed(DeviceEvent):
    kind: ClassVar[str] = "button"
    button: Button


@dataclass(frozen=True, slots=True, kw_only=True)
class LightsChanged(DeviceEvent):
    kind: ClassVar[str] = "lights"
    lit: tuple[int, ...]
    commanded: tuple[int, ...] | None


@dataclass(frozen=True, slots=True, kw_only=True)
class LightMismatch(DeviceEvent):
    """A light is not as commanded (a stuck or dead lamp): 555.12(b) cannot be checked."""

    kind: ClassVar[str] = "light_mismatch"
    seats: tuple[int, ...]
    commanded: tuple[int, ...]
    lit: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class KeySwitchMoved(DeviceEvent):
    kind: ClassVar[str] = "key_switch"
    reset: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class DoorChanged(DeviceEvent):
    kind: ClassVar[str] = "door"
    open: bool
