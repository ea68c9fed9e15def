"""Every command a device's driver carries out, declared once: its name and its typed
arguments. A driver lists the declarations it takes (``Driver.commands``) and gets the
arguments as they were parsed; rules/commands.py gives each the roles and phases a person
needs to give it. No I/O."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, StrictInt, WithJsonSchema
from pydantic_core import PydanticCustomError

from tableside.drivers.shoe.plan import SEATS, Stack, Target

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
    "TargetArg",
    "TargetName",
    "names",
]


class Args(BaseModel):
    """A command's arguments: unknown names are refused, and so are wrong types."""

    # built at first use, not at import: a table meets most commands rarely or never
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class NoArgs(Args):
    pass


Seat = Annotated[StrictInt, Field(ge=1, le=7, description="a betting position, 1..7")]


def _named(value: object) -> Target:
    if isinstance(value, Target):
        return value
    if not isinstance(value, str):
        raise PydanticCustomError("string_type", "Input should be a valid string")
    try:
        return Target.named(value)
    except ValueError:  # said as the pattern the schema gives says it
        raise PydanticCustomError(
            "string_pattern_mismatch", f"String should match pattern '^({_NAMES})$'"
        ) from None


def _named_or_seat(value: object) -> Target:
    if isinstance(value, Target):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 7:
        return Target.at_seat(value)
    if isinstance(value, str):
        try:
            return Target.named(value)
        except ValueError:
            pass
    raise ValueError(f"{value!r} is none of seat1..seat7, dealer, dealer_extra, community")


#: the names of the stack targets, as a JSON Schema pattern (from Target: one vocabulary)
_NAMES = "|".join(
    [f"seat[{SEATS[0].seat}-{SEATS[-1].seat}]", *(t.spelt() for t in Target if t.seat is None)]
)

#: a stack target in a command's arguments, by its name (``seat3``, ``dealer``)
TargetName = Annotated[
    Target,
    PlainValidator(_named),
    WithJsonSchema({"pattern": f"^({_NAMES})$", "type": "string"}),
]
#: a stack target in a command's arguments, by its name or a betting position's number (1..7)
TargetArg = Annotated[
    Target,
    PlainValidator(_named_or_seat),
    WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "integer"}]}),
]


class StackArg(Args):
    """One stack the shoe dispenses: to ``seat1``..``seat7`` (or 1..7), ``dealer``,
    ``dealer_extra`` or ``community``."""

    target: TargetArg
    size: Annotated[StrictInt, Field(ge=1, le=52)]

    def stack(self) -> Stack:
        return Stack(self.target, self.size)


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
