"""A device's typed event for a test that names only the fields it cares about."""

from __future__ import annotations

import dataclasses
import enum
import typing
from typing import Any

from pydantic import TypeAdapter

from tableside.drivers.catalog import event_type
from tableside.drivers.events import DeviceEvent
from tableside.drivers.named import Named
from tableside.rules.commands import COMMANDS
from tableside.rules.table import DeviceReport, EscalateRulings, Halt, RulingsOpened, TableEvent


def _blank(hint: Any) -> Any:
    """A neutral value for a field the test leaves out (None where the type allows it; an
    enum's first member, a Literal's first word)."""
    args = typing.get_args(hint)
    if type(None) in args:
        return None
    if typing.get_origin(hint) is typing.Literal:
        return args[0]
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return next(iter(hint))
    for kind, value in ((tuple, ()), (bool, False), (int, 0), (float, 0.0), (str, "")):
        if hint is kind or typing.get_origin(hint) is kind:
            return value
    raise TypeError(f"no blank value for {hint}")


def _named(hint: Any) -> bool:
    """Whether a field's type holds a named value (a card, a stack target, a plan)."""
    if isinstance(hint, type) and issubclass(hint, Named):
        return True
    return any(_named(arg) for arg in typing.get_args(hint))


def typed(hint: Any, value: Any) -> Any:
    """A value as given, a named one also by its name (``"AS"``, ``"seat3"``, a plan as JSON),
    read as the wire's data is (drivers/named.py)."""
    return TypeAdapter(hint).validate_python(value) if _named(hint) else value


def device_event(name: str, device: str = "dev", **fields: Any) -> DeviceEvent:
    """``device_event("shoe.deal_started", plan=…)``: the catalog's type for ``<class>.<kind>``
    (drivers/catalog.py), the fields not given blank; a card, a stack target or a plan given
    typed or by its name. An unknown field is a TypeError."""
    cls = event_type(name)
    if cls is None:
        raise LookupError(f"no device event {name!r} in drivers/catalog.py")
    hints = typing.get_type_hints(cls)
    given = {
        f.name: typed(hints[f.name], fields[f.name]) if f.name in fields else _blank(hints[f.name])
        for f in dataclasses.fields(cls)
        if f.name != "device" and (f.name in fields or f.default is dataclasses.MISSING)
    }
    unknown = set(fields) - {f.name for f in dataclasses.fields(cls)}
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {', '.join(sorted(unknown))}")
    return cls(device=device, **given)


def table_event(kind: str, at: float, data: dict[str, Any] | None = None) -> TableEvent:
    """A person's command by name, its arguments parsed as the daemon parses them (a bad one
    is Refused), the daemon's own word (``rulings_opened``, ``halt``,
    ``escalate_rulings``), or (``<class>.<kind>``) a device's typed event."""
    given = data or {}
    if kind == "rulings_opened":
        return RulingsOpened(tuple(given["rulings"]), at)
    if kind == "halt":
        return Halt(given["device_class"], at)
    if kind == "escalate_rulings":
        return EscalateRulings(given["after_s"], at)
    if "." in kind:
        device_class = kind.partition(".")[0]
        return DeviceReport.of(device_class, device_event(kind, **(data or {})), at)
    command = COMMANDS[kind]
    return command.said(command.parse(data or {}), at)
