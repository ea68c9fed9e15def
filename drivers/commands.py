"""Every command a device's driver carries out, declared once: its name and its typed
arguments. A driver lists the declarations it takes (``Driver.commands``) and gets the
arguments as they were parsed; rules/commands.py gives each the roles and phases a person
needs to give it. No I/O."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator

from tableside.drivers.shoe import protocol as shoe

__all__ = [
    "DEAL",
    "DEVICE_COMMANDS",
    "LOCK_OUT",
    "QUERY_IDENTITY",
    "QUERY_STATUS",
    "RELEASE",
    "SELF_TEST",
    "SET_LIGHTS",
    "SET_METER",
    "START_SHUFFLE",
    "Args",
    "Deal",
    "DeviceCommand",
    "NoArgs",
    "Seat",
    "SetLights",
    "SetMeter",
    "StackArg",
    "names",
]


class Args(BaseModel):
    """A command's arguments: unknown names are refused, and so are wrong types."""

    # built at first use, not at import: a table meets most commands rarely or never
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class NoArgs(Args):
    pass


Seat = Annotated[StrictInt, Field(ge=1, le=7, description="a betting position, 1..7")]

_TARGETS = {"dealer": shoe.DEALER, "dealer_extra": shoe.DEALER_EXTRA, "community": shoe.COMMUNITY}


class StackArg(Args):
    """One stack the shoe dispenses: to ``seat1``..``seat7`` (or 1..7), ``dealer``,
    ``dealer_extra`` or ``community``."""

    target: str | StrictInt
    size: Annotated[StrictInt, Field(ge=1, le=52)]

    @field_validator("target")
    @classmethod
    def _a_target(cls, target: str | int) -> str | int:
        code = _code(target)
        if code is None:
            raise ValueError(f"{target!r} is none of seat1..seat7, dealer, dealer_extra, community")
        return target

    def stack(self) -> shoe.Stack:
        code = _code(self.target)
        assert code is not None  # the validator checked it
        return shoe.Stack(code, self.size)


def _code(target: str | int) -> int | None:
    if isinstance(target, str) and target.startswith("seat") and target[4:].isdigit():
        target = int(target[4:])
    if isinstance(target, str):
        return _TARGETS.get(target)
    return target if 1 <= target <= 7 else None


class Deal(Args):
    round: Annotated[StrictInt, Field(ge=1, lt=2**32)]
    #: at most 32: the shoe's Deal frame carries no more (drivers/shoe/protocol.py)
    stacks: Annotated[list[StackArg], Field(min_length=1, max_length=32)]


class SetLights(Args):
    seats: list[Seat]


class SetMeter(Args):
    cents: Annotated[StrictInt, Field(ge=0, lt=2**32)]


@dataclass(frozen=True, slots=True)
class DeviceCommand:
    """A device command: its name and the arguments it takes."""

    name: str
    args: type[Args] = NoArgs


START_SHUFFLE = DeviceCommand("start_shuffle")
DEAL = DeviceCommand("deal", Deal)
SET_LIGHTS = DeviceCommand("set_lights", SetLights)
SET_METER = DeviceCommand("set_meter", SetMeter)
LOCK_OUT = DeviceCommand("lock_out")
RELEASE = DeviceCommand("release")
SELF_TEST = DeviceCommand("self_test")
QUERY_STATUS = DeviceCommand("query_status")
QUERY_IDENTITY = DeviceCommand("query_identity")

DEVICE_COMMANDS = {
    c.name: c
    for c in (START_SHUFFLE, DEAL, SET_LIGHTS, SET_METER, LOCK_OUT, RELEASE, SELF_TEST,
              QUERY_STATUS, QUERY_IDENTITY)
}  # fmt: skip


def names(*commands: DeviceCommand) -> frozenset[str]:
    """A driver's ``commands``: the names of the declarations it takes."""
    return frozenset(c.name for c in commands)
