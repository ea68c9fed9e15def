"""The wire contract (wire/) is what the table, the floor and the tools share: the floor
imports nothing of the daemon, and the contract nothing of either (issue 29)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _imports(folder: str) -> list[tuple[str, int, str]]:
    """Every module a folder's files import by name: (file, line, module)."""
    found = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module is not None:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            found += [(str(path.relative_to(ROOT)), node.lineno, name) for name in names]
    return found


@pytest.mark.parametrize(
    ("folder", "banned"),
    [("floor", ("tableside.daemon",)), ("wire", ("tableside.daemon", "tableside.floor"))],
)
def test_a_folder_imports_none_of_what_it_must_not(folder: str, banned: tuple[str, ...]) -> None:
    wrong = [f"{file}:{line}: {name}" for file, line, name in _imports(folder)
             if name.startswith(banned)]  # fmt: skip
    assert wrong == []


def test_the_floor_loads_nothing_of_the_daemon() -> None:
    """Not even through what it imports (the contract, the rules, the MQTT client)."""
    script = (
        "import importlib, pkgutil, sys\n"
        "import tableside.floor as floor\n"
        "for m in pkgutil.walk_packages(floor.__path__, 'tableside.floor.'):\n"
        "    try:\n"
        "        importlib.import_module(m.name)\n"
        "    except ModuleNotFoundError as exc:\n"  # an optional dependency (aiohttp, psycopg)
        "        if (exc.name or '').startswith('tableside'):\n"
        "            raise\n"
        "print(sorted(n for n in sys.modules if n.startswith('tableside.daemon')))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, timeout=120)  # fmt: skip
    assert out.stdout.strip() == "[]"
