"""Drivers by name: the built-in ones, plus any installed under the ``tableside.drivers`` entry
point group (a device maker's out-of-tree driver; see docs/drivers.md)."""

from __future__ import annotations

from importlib.metadata import entry_points

from tableside.drivers.base import Driver
from tableside.drivers.card_reader.driver import CardReaderDriver
from tableside.drivers.cctalk.driver import CcTalkAcceptorsDriver
from tableside.drivers.progressive.driver import ProgressiveControllerDriver
from tableside.drivers.shoe.driver import ShoeDriver
from tableside.drivers.shuffler.driver import ShufflerDriver

__all__ = ["ENTRY_POINT_GROUP", "UnknownDriver", "available_drivers", "get_driver"]

ENTRY_POINT_GROUP = "tableside.drivers"

_BUILTIN: dict[str, type[Driver]] = {
    "tableside.shuffler": ShufflerDriver,
    "tableside.shoe": ShoeDriver,
    "tableside.card_reader": CardReaderDriver,
    "tableside.progressive_controller": ProgressiveControllerDriver,
    "tableside.acceptors": CcTalkAcceptorsDriver,
}


class UnknownDriver(LookupError):
    pass


def available_drivers() -> dict[str, str]:
    """Name → where it comes from, for error messages and ``tableside check-config``."""
    found = {name: "built in" for name in _BUILTIN}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep.value)
    return found


def get_driver(name: str) -> type[Driver]:
    if name in _BUILTIN:
        return _BUILTIN[name]
    for ep in entry_points(group=ENTRY_POINT_GROUP, name=name):
        cls = ep.load()
        if not (isinstance(cls, type) and issubclass(cls, Driver)):
            raise UnknownDriver(f"entry point {name!r} ({ep.value}) is not a Driver subclass")
        return cls
    raise UnknownDriver(
        f"no driver named {name!r} (available: {', '.join(sorted(available_drivers()))})"
    )
