"""The per-table sequence counter: never repeats, never goes backwards, across restarts.

Numbers are reserved in blocks: before the first number of a new block is used, the block's
end is written and fsynced. A clean shutdown records the exact last number, so the next run
carries straight on. After a crash or power loss the next run starts after the reserved
block, which leaves a visible gap of unused numbers: the subscriber sees that something may
have been lost there, which is true until the durable journal (issue 5) lands.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["SeqCounter"]


class SeqCounter:
    def __init__(self, path: Path, block: int = 1000) -> None:
        self.path = path
        self.block = block
        state = self._read()
        if state.get("clean"):
            self._next = int(state["last"]) + 1
        else:
            self._next = int(state.get("reserved", -1)) + 1
        self._reserved = self._next - 1
        self._write(reserved=self._reserved, last=self._next - 1, clean=False)

    def _read(self) -> dict[str, int | bool]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise RuntimeError(
                f"{self.path}: sequence state unreadable ({exc}); refusing to start, since "
                "seq numbers could repeat. Restore the file, or remove it only if this table "
                "has never published (subscribers would see repeated numbers)."
            ) from exc
        if not isinstance(data, dict):
            raise RuntimeError(f"{self.path}: sequence state is not a JSON object")
        return data

    def _write(self, **state: int | bool) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    @property
    def last(self) -> int:
        """The last number handed out (-1 if none yet)."""
        return self._next - 1

    def next(self) -> int:
        n = self._next
        if n > self._reserved:
            self._reserved = n + self.block - 1
            self._write(reserved=self._reserved, last=n - 1, clean=False)
        self._next = n + 1
        return n

    def close(self) -> None:
        """Record a clean stop: the next run continues at last + 1."""
        self._write(reserved=self._reserved, last=self._next - 1, clean=True)
