"""Which firmware each device ran last, kept across restarts, so a change is noticed.

A device (or an acceptor on a ccTalk bus) that reports another firmware hash or ROM checksum
than it did before is published as a ``firmware_changed`` event: regulators expect approved
software only, and a silent swap must not go unnoticed.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from tableside.drivers.events import DeviceEvent

__all__ = ["FirmwareChanged", "FirmwareRecord"]


@dataclass(frozen=True, slots=True, kw_only=True)
class FirmwareChanged(DeviceEvent):
    kind: ClassVar[str] = "firmware_changed"
    part: str  # "" for the device itself, "seat3" for the acceptor at seat 3
    previous: str
    current: str


class FirmwareRecord:
    """``<state_dir>/<table>/firmware.json``: device (and part) → last firmware hash seen."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            loaded = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            loaded = {}
        except (OSError, ValueError) as exc:
            raise RuntimeError(
                f"{path}: firmware record unreadable ({exc}); fix or remove it"
            ) from exc
        self._seen: dict[str, str] = {str(k): str(v) for k, v in dict(loaded).items()}

    def check(self, device: str, part: str, current: str) -> FirmwareChanged | None:
        """Remember ``current``; return the event when it differs from what was seen before."""
        key = f"{device}/{part}" if part else device
        previous = self._seen.get(key)
        if previous == current:
            return None
        self._seen[key] = current
        self._save()
        if previous is None:
            return None  # first sight of this device: nothing to compare with
        return FirmwareChanged(device=device, part=part, previous=previous, current=current)

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self._seen, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, self.path)
