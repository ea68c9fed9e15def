"""Drivers by name: the built-in ones, plus any installed under the ``tableside.drivers`` entry
point group (a device maker's out-of-tree driver; see docs/drivers.md)."""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import entry_points

from tableside.drivers.base import Driver
from tableside.errors import ConfigurationError

__all__ = ["ENTRY_POINT_GROUP", "UnknownDriver", "available_drivers", "get_driver"]

ENTRY_POINT_GROUP = "tableside.drivers"

# Imported when a config names them: a table runs the drivers it has, and loads no other.
_BUILTIN: dict[str, str] = {
    "tableside.shuffler": "tableside.drivers.shuffler.driver:ShufflerDriver",
    "tableside.shoe": "tableside.drivers.shoe.driver:ShoeDriver",
    "tableside.card_reader": "tableside.drivers.card_reader.driver:CardReaderDriver",
    "tableside.progressive_controller":
        "tableside.drivers.progressive.driver:ProgressiveControllerDriver",
    "tableside.acceptors": "tableside.drivers.cctalk.driver:CcTalkAcceptorsDriver",
}  # fmt: skip


class UnknownDriver(ConfigurationError, LookupError):
    pass


def available_drivers() -> dict[str, str]:
    """Name → where it comes from, for error messages and ``tableside check-config``."""
    found = {name: "built in" for name in _BUILTIN}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep.value)
    return found


def get_driver(name: str) -> type[Driver]:
    if name in _BUILTIN:
        module, _, attr = _BUILTIN[name].partition(":")
        cls: type[Driver] = getattr(import_module(module), attr)
        return cls
    for ep in entry_points(group=ENTRY_POINT_GROUP, name=name):
        cls = ep.load()
        if not (isinstance(cls, type) and issubclass(cls, Driver)):
            raise UnknownDriver(f"entry point {name!r} ({ep.value}) is not a Driver subclass")
        return cls
    raise UnknownDriver(
        f"no driver named {name!r} (available: {', '.join(sorted(available_drivers()))})"
    )
