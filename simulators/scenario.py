"""Scenario files for ``tableside simulate``: a simulator's settings, faults, identity (TOML)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

__all__ = ["load_scenario"]

_IDENTITY_KEYS = frozenset({"vendor", "model", "serial", "firmware_version"})


def load_scenario(path: Path) -> dict[str, Any]:
    """Read and check a scenario; raise ValueError naming the file and what is wrong."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{path}: cannot read: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not valid TOML: {exc}") from exc
    # Other keys are the simulator's own settings, checked when it is built.
    faults = data.get("faults", [])
    if not isinstance(faults, list) or not all(isinstance(f, str) for f in faults):
        raise ValueError(f'{path}: faults must be a list of strings like "jam@2"')
    identity = data.get("identity", {})
    if not isinstance(identity, dict) or set(identity) - _IDENTITY_KEYS:
        raise ValueError(f"{path}: [identity] takes only {sorted(_IDENTITY_KEYS)}")
    return data
