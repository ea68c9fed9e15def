"""What every bench writes beside its figures: the machine, and the commit measured."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

__all__ = ["ROOT", "commit", "machine"]

#: this checkout
ROOT = Path(__file__).resolve().parent.parent


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def commit(checkout: Path = ROOT) -> str:
    """The short commit of ``checkout`` (empty when it is not a git checkout)."""
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, cwd=checkout, check=False).stdout.strip()  # fmt: skip
