"""Every library we import is declared: the product's in pyproject.toml's dependencies (or the
extra that brings it: demo, floor), the tests' and benches' in the test extra. A library that
arrives only because another one needs it (paho under aiomqtt) is not declared, and goes when
that one changes."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PRODUCT = ["daemon", "drivers", "floor", "mqtt", "rules", "shuffle", "simulators", "src/tableside"]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0]).lower()


def _declared(*extras: str) -> set[str]:
    found = {_name(r) for r in PROJECT["dependencies"]}
    for extra in extras:
        found |= {_name(r) for r in PROJECT["optional-dependencies"][extra]}
    return found


def _imported(folders: list[str]) -> dict[str, Path]:
    """Top-level modules imported (at module level or inside a function) → a file that does."""
    found: dict[str, Path] = {}
    for folder in folders:
        for path in sorted((ROOT / folder).glob("**/*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    found.setdefault(name.split(".")[0], path)
    return found


def _undeclared(folders: list[str], declared: set[str]) -> list[str]:
    distributions = packages_distributions()
    # a bench script imports its siblings by name (python bench/x.py puts bench/ on the path)
    local = {path.stem for folder in folders for path in (ROOT / folder).glob("**/*.py")}
    bad = []
    for module, path in sorted(_imported(folders).items()):
        # deb: the package build script's folder (deb/build_deb.py), which mypy reads from the
        # repository's root
        if module in sys.stdlib_module_names or module in {"tableside", "tests", "deb", *local}:
            continue
        names = {_name(d) for d in distributions.get(module, [])}
        if not names & declared:
            where = path.relative_to(ROOT)
            bad.append(f"{module} (from {sorted(names) or 'no installed distribution'}, {where})")
    return bad


def test_the_product_imports_only_what_it_declares() -> None:
    assert _undeclared(PRODUCT, _declared("demo", "floor")) == []


def test_the_tests_and_benches_import_only_what_the_test_extra_declares() -> None:
    assert _undeclared(["tests", "bench"], _declared("demo", "floor", "test")) == []


@pytest.mark.parametrize("library", ["aiomqtt", "paho"])
def test_the_product_uses_no_mqtt_library(library: str) -> None:
    """Our own client (mqtt/) serves every part: no library's internals to lean on."""
    assert library not in _imported(PRODUCT)
