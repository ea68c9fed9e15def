"""Scripted faults: ``NAME[=VALUE]@N`` means "inject NAME (with VALUE) on the Nth cycle"."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["FaultPlan", "FaultSpec", "parse_fault"]

_FAULT_RE = re.compile(r"^(?P<name>[a-z_]+)(?:=(?P<value>[^@]+))?@(?P<at>\d+)$")


@dataclass(frozen=True, slots=True)
class FaultSpec:
    name: str
    value: str | None
    at: int

    def __str__(self) -> str:
        value = "" if self.value is None else f"={self.value}"
        return f"{self.name}{value}@{self.at}"


def parse_fault(text: str, known: Mapping[str, str]) -> FaultSpec:
    """Parse one fault; ``known`` maps each fault name to its one-line help.

    Raises ValueError saying what is wrong and what would be right.
    """
    m = _FAULT_RE.match(text.strip())
    if m is None:
        raise ValueError(f"fault {text!r}: expected NAME[=VALUE]@N, e.g. count=51@3 or jam@2")
    name, value, at = m["name"], m["value"], int(m["at"])
    if name not in known:
        raise ValueError(f"fault {text!r}: unknown fault {name!r} (known: {', '.join(known)})")
    if at < 1:
        raise ValueError(f"fault {text!r}: N counts from 1")
    return FaultSpec(name, value, at)


class FaultPlan:
    """Faults by cycle number; each fires once."""

    def __init__(self, faults: Iterable[FaultSpec]) -> None:
        self._by_cycle: dict[int, list[FaultSpec]] = {}
        for fault in faults:
            self._by_cycle.setdefault(fault.at, []).append(fault)

    def at(self, cycle: int) -> dict[str, str | None]:
        return {f.name: f.value for f in self._by_cycle.get(cycle, ())}

    def __bool__(self) -> bool:
        return bool(self._by_cycle)
