"""What every bench writes beside its figures (the machine, and the commit measured), and the
tree it measures compiled to bytecode as an install leaves it."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

__all__ = ["ROOT", "commit", "compiled", "machine"]

#: this checkout
ROOT = Path(__file__).resolve().parent.parent


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def commit(checkout: Path = ROOT) -> str:
    """The short commit of ``checkout`` (empty when it is not a git checkout)."""
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, cwd=checkout, check=False).stdout.strip()  # fmt: skip


def compiled(root: Path) -> None:
    """``root``'s package compiled to bytecode, as installing a wheel leaves it: otherwise a
    run where ``PYTHONDONTWRITEBYTECODE`` is set (this machine sets it) compiles every module
    at each start, which a table never does. Python reads the caches whatever that says. The
    package's layers are symlinks (``src/tableside/daemon`` → ``daemon``), which compileall
    does not follow when it walks a folder: each is named."""
    package = root / "src" / "tableside"
    layers = [p for p in sorted(package.iterdir()) if p.is_dir() and p.name != "__pycache__"]
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(package), *map(str, layers)],
                   check=True, stdout=subprocess.DEVNULL)  # fmt: skip
