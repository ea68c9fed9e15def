"""What the shuffle benches write: their figures, with the command, commit and machine."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from provenance import commit, machine

__all__ = ["RESULTS", "provenance", "write"]

RESULTS = Path(__file__).parent / "results"


def provenance(script: str) -> dict[str, object]:
    return {
        "command": " ".join([f"bench/{script}", *sys.argv[1:]]),
        "commit": commit(),
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def write(result: dict[str, object], folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / name
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"written: {out}")
    return out
