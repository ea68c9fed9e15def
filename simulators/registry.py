"""Simulators by device class, and building one from options (CLI flags or a scenario file)."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import TypeAdapter, ValidationError

from tableside.simulators.base import LINE_FAULTS, FramedSimulator, SimIdentity
from tableside.simulators.card_reader import CardReaderSimulator
from tableside.simulators.faults import parse_fault
from tableside.simulators.shoe import ShoeSimulator, parse_plan_spec
from tableside.simulators.shuffler import ShufflerSimulator

__all__ = ["SIMULATORS", "build_simulator", "check_settings", "settings_of"]

SIMULATORS: dict[str, type[FramedSimulator]] = {
    "shuffler": ShufflerSimulator,
    "shoe": ShoeSimulator,
    "card_reader": CardReaderSimulator,
}

_NOT_SETTINGS = {"faults", "identity", "silent_disconnect", "policy", "usb_hooks"}


def settings_of(cls: type[FramedSimulator]) -> list[str]:
    """The options a simulator takes (its dataclass fields), as scenario keys."""
    return sorted(f.name for f in dataclasses.fields(cls) if f.name not in _NOT_SETTINGS)


def check_settings(cls: type, settings: Mapping[str, object], what: str) -> None:
    """Each setting of the type its field declares, strictly (``interval = "5"`` is no number,
    ``two_deck = 1`` no flag; a whole number is a number of seconds): ValueError names it."""
    hints = typing.get_type_hints(cls)
    for key, value in settings.items():
        try:
            TypeAdapter(hints[key]).validate_python(value, strict=True)
        except ValidationError as exc:
            expected = exc.errors()[0]["msg"]
            raise ValueError(f"{what} simulator: {key}: {expected}, not {value!r}") from None


def build_simulator(
    device_class: str,
    settings: Mapping[str, Any],
    faults: Iterable[str] = (),
    identity: Mapping[str, str] | None = None,
    *,
    silent_disconnect: bool = False,
) -> FramedSimulator:
    """Raise ValueError saying what is wrong (unknown class, key, fault or value)."""
    if device_class not in SIMULATORS:
        raise ValueError(f"no simulator for {device_class!r} (have: {', '.join(SIMULATORS)})")
    cls = SIMULATORS[device_class]
    allowed = settings_of(cls)
    unknown = set(settings) - set(allowed)
    if unknown:
        raise ValueError(
            f"unknown keys {sorted(unknown)} for the {device_class} simulator (known: {allowed})"
        )
    kwargs = dict(settings)
    if isinstance(kwargs.get("plan"), str):
        kwargs["plan"] = parse_plan_spec(kwargs["plan"])
    check_settings(cls, kwargs, device_class)
    known_faults = {**cls.FAULTS, **LINE_FAULTS}
    try:
        return cls(
            faults=[parse_fault(f, known_faults) for f in faults],
            identity=SimIdentity(**{"model": cls.MODEL, **(identity or {})}),
            silent_disconnect=silent_disconnect,
            **kwargs,
        )
    except TypeError as exc:
        raise ValueError(f"{device_class} simulator: {exc}") from exc
