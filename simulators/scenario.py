"""Scenario files for ``tableside simulate``: a simulator's settings, faults, identity (TOML)."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Scenario", "load_scenario"]

_IDENTITY_KEYS = frozenset({"vendor", "model", "serial", "firmware_version"})


@dataclass(frozen=True, slots=True)
class Scenario:
    """A scenario file, read: the simulator's own settings (checked when it is built, against
    its fields), the faults it scripts, and who it says it is."""

    settings: dict[str, object] = field(default_factory=dict)
    faults: list[str] = field(default_factory=list)
    identity: dict[str, str] = field(default_factory=dict)


def load_scenario(path: Path) -> Scenario:
    """Read and check a scenario; raise ValueError naming the file and what is wrong."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not valid TOML: {exc}") from exc
    faults: object = data.pop("faults", [])
    if not isinstance(faults, list) or not all(isinstance(f, str) for f in faults):
        raise ValueError(f'{path}: faults must be a list of strings like "jam@2"')
    identity: object = data.pop("identity", {})
    if not isinstance(identity, dict) or set(identity) - _IDENTITY_KEYS:
        raise ValueError(f"{path}: [identity] takes only {sorted(_IDENTITY_KEYS)}")
    if not all(isinstance(v, str) for v in identity.values()):
        raise ValueError(f"{path}: [identity]: each of {sorted(identity)} is a string")
    # The other keys are the simulator's own settings, checked when it is built.
    return Scenario(settings=data, faults=faults, identity=identity)
