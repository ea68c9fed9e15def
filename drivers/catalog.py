"""Every event type the built-in drivers report, by the name the rules and the wire give it:
``<device class>.<kind>`` (``shoe.stack_dispensed`` → ``StackDispensed``).

This is where a rule row's trigger meets a type: the rows name the fields of the event they
read, and tests/test_rules.py checks each name against this table; ``tableside schemas`` writes
a JSON Schema for each event from it (docs/schemas/events/). Importing it imports the event
modules only (frozen dataclasses, no I/O), never a driver.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable, Mapping
from types import ModuleType
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from tableside.drivers.card_reader import events as card_reader
from tableside.drivers.cctalk import events as acceptors
from tableside.drivers.cctalk import status as acceptor_status
from tableside.drivers.events import (
    ConnectionEvent,
    DeviceEvent,
    FloodingEvent,
    IdentityEvent,
    LineNoiseEvent,
    ProtocolErrorEvent,
)
from tableside.drivers.progressive import events as progressive
from tableside.drivers.shoe import events as shoe
from tableside.drivers.shuffler import events as shuffler

__all__ = ["ANY_DEVICE", "EVENTS", "event_name", "event_schema", "event_type", "read_event"]

#: events every driver may report (drivers/base.py): the link's, not the device class's own
ANY_DEVICE: tuple[type[DeviceEvent], ...] = (
    ConnectionEvent,
    IdentityEvent,
    LineNoiseEvent,
    FloodingEvent,
    ProtocolErrorEvent,
)


def _declared(*modules: ModuleType) -> tuple[type[DeviceEvent], ...]:
    found: Iterable[object] = (getattr(m, name) for m in modules for name in m.__all__)
    return tuple(c for c in found if isinstance(c, type) and issubclass(c, DeviceEvent))


#: device class → the events of its own that its built-in driver reports
EVENTS: Mapping[str, tuple[type[DeviceEvent], ...]] = {
    "shuffler": _declared(shuffler),
    "shoe": _declared(shoe),
    "card_reader": _declared(card_reader),
    "progressive_controller": _declared(progressive),
    "acceptors": _declared(acceptor_status, acceptors),
}

_BY_NAME: dict[str, type[DeviceEvent]] = {
    f"{device_class}.{cls.kind}": cls
    for device_class, own in EVENTS.items()
    for cls in (*ANY_DEVICE, *own)
}


def _names() -> dict[type, str]:
    owners: dict[type[DeviceEvent], list[str]] = {}
    for device_class, own in EVENTS.items():
        for cls in own:
            owners.setdefault(cls, []).append(device_class)
    names: dict[type, str] = {}
    for cls, by in owners.items():
        if len(by) == 1:
            names[cls] = f"{by[0]}.{cls.kind}"
    return names


#: an event type of one device class's own → its name (what a rule row is triggered by)
_NAME_OF: Mapping[type, str] = _names()


def event_name(cls: type) -> str | None:
    """``<device class>.<kind>``, the name of ``cls``'s events, when one device class alone
    reports them (None: a link's event every device reports, or none a built-in driver does)."""
    return _NAME_OF.get(cls)


def event_type(name: str) -> type[DeviceEvent] | None:
    """The event type of ``<device class>.<kind>`` (None: no built-in device reports it)."""
    return _BY_NAME.get(name)


_CARDS = ("a card identity: sent only by a table whose config allows it ([table] "
          "publish_card_identities); left out otherwise")  # fmt: skip


def event_schema(name: str, cls: type[DeviceEvent]) -> dict[str, object]:
    """The JSON Schema of the ``data`` of a device-event message (docs/mqtt.md) whose event is
    ``cls``: its fields but ``device`` (the message's own), card identities optional."""
    schema: dict[str, object] = _data_model(cls).model_json_schema()
    properties = schema.get("properties")
    for f in dataclasses.fields(cls):  # a card field the event always has: no default shown
        if (f.name in cls.card_fields and f.default is dataclasses.MISSING
                and isinstance(properties, dict)):  # fmt: skip
            properties[f.name].pop("default", None)
    return {"$comment": f"data of a device event {name!r}", **schema}


def read_event(cls: type[DeviceEvent], device: str, data: Mapping[str, object]) -> DeviceEvent:
    """The event of a device-event message's ``data`` (``DeviceEvent.data()`` read back: a
    card, a stack target, a plan from their names); pydantic's ValidationError for data that
    is not the event's."""
    read = _data_model(cls).model_validate(data)
    return cls(device=device, **{name: getattr(read, name) for name in read.model_fields_set})


_MODELS: dict[type[DeviceEvent], type[BaseModel]] = {}


def _data_model(cls: type[DeviceEvent]) -> type[BaseModel]:
    """The ``data`` of ``cls``'s messages as a pydantic model (its schema, its reading), made
    at first use."""
    model = _MODELS.get(cls)
    if model is None:
        model = _MODELS[cls] = _made_model(cls)
    return model


def _made_model(cls: type[DeviceEvent]) -> type[BaseModel]:
    hints = typing.get_type_hints(cls, include_extras=True)
    # untyped values: create_model's ** keywords also take its own options (__config__, …)
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name == "device":
            continue
        if f.name in cls.card_fields:  # never required: a table may leave it out
            default = None if f.default is dataclasses.MISSING else f.default
            fields[f.name] = (hints[f.name], Field(default=default, description=_CARDS))
        elif f.default is not dataclasses.MISSING:
            fields[f.name] = (hints[f.name], f.default)
        else:
            fields[f.name] = (hints[f.name], ...)
    doc = cls.__doc__ or ""
    model: type[BaseModel] = create_model(
        cls.__name__,
        __config__=ConfigDict(extra="forbid"),
        __doc__=None if doc.startswith(f"{cls.__name__}(") else doc,  # not dataclass's own
        **fields,
    )
    return model
