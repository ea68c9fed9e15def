"""Driver for the progressive system's control device (docs/protocols/progressive-controller.md)."""

from __future__ import annotations

from typing import ClassVar

from tableside.drivers.base import DriverSettings, EventSink, FramedDriver
from tableside.drivers.commands import SET_LIGHTS, SET_METER, Args, SetLights, SetMeter, names
from tableside.drivers.events import DeviceEvent
from tableside.drivers.messages import Message, MessageSet
from tableside.drivers.progressive import protocol as p
from tableside.drivers.progressive.events import (
    ButtonPressed,
    ControllerStatus,
    DoorChanged,
    KeySwitchMoved,
    LightMismatch,
    LightsChanged,
)

__all__ = ["ProgressiveControllerDriver"]


class ProgressiveControllerDriver(FramedDriver):
    device_class: ClassVar[str] = "progressive_controller"
    protocol: ClassVar[MessageSet] = p.PROTOCOL
    commands: ClassVar[frozenset[str]] = FramedDriver.commands | names(SET_LIGHTS, SET_METER)

    def __init__(self, name: str, settings: DriverSettings, sink: EventSink) -> None:
        super().__init__(name, settings, sink)
        self._commanded: int | None = None

    async def command(self, name: str, args: Args) -> None:
        match args:
            case SetLights(seats=seats) if name == SET_LIGHTS.name:
                mask = sum(1 << (s - 1) for s in set(seats))
                self._commanded = mask
                await self.send(p.SetLights(mask))
            case SetMeter(cents=cents) if name == SET_METER.name:
                await self.send(p.SetMeter(cents))
            case _:
                await super().command(name, args)

    def translate(self, message: Message) -> DeviceEvent | None:
        d = self.name
        match message:
            case p.ControllerStatus():
                return ControllerStatus(
                    device=d,
                    state="locked_out" if message.locked else "betting_open",
                    fault="door_open" if message.door_open else None,
                    lights=p.seats_of(message.lights),
                    key_reset=message.key_reset,
                    meter_cents=message.meter_cents,
                )
            case p.ButtonPressed():
                return ButtonPressed(device=d, button=message.button)
            case p.LightsState():
                commanded = self._commanded
                if commanded is not None and commanded != message.lights:
                    wrong = p.seats_of(commanded ^ message.lights)
                    return LightMismatch(
                        device=d,
                        seats=wrong,
                        commanded=p.seats_of(commanded),
                        lit=p.seats_of(message.lights),
                    )
                return LightsChanged(
                    device=d,
                    lit=p.seats_of(message.lights),
                    commanded=None if commanded is None else p.seats_of(commanded),
                )
            case p.KeySwitch():
                return KeySwitchMoved(device=d, reset=message.reset)
            case p.DoorChanged():
                return DoorChanged(device=d, open=message.open)
        return None  # a message of the protocol this driver does not report
