"""The wheel holds every module of the package: src/tableside links the top-level folders in,
and setuptools finds the packages (pyproject.toml), so nothing new can silently miss it."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.conftest import source_copy

ROOT = Path(__file__).parents[1]


def test_the_wheel_holds_every_module(tmp_path: Path) -> None:
    tree = source_copy(tmp_path)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(tmp_path), str(tree)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("tableside-*.whl")
    held = set(zipfile.ZipFile(wheel).namelist())
    package = ROOT / "src" / "tableside"

    def ships(folder: str, name: str) -> bool:
        if "__pycache__" in folder:
            return False
        return (
            name.endswith(".py")
            or name == "py.typed"
            or (folder.endswith("scenarios") and name.endswith(".toml"))
        )

    shipped = {
        f"tableside/{Path(folder, name).relative_to(package)}"
        # the links are followed, as setuptools follows them
        for folder, _dirs, files in os.walk(package, followlinks=True)
        for name in files
        if ships(folder, name)
    }
    assert len(shipped) > 80
    assert shipped <= held, sorted(shipped - held)
