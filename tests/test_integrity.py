"""``tableside verify-install``: the installed software's hash, and tampering found."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tableside.cli import main
from tableside.daemon.integrity import verify_install
from tests.conftest import source_copy

ROOT = Path(__file__).parents[1]


def test_the_checkout_hashes_every_package_file(capsys: object) -> None:
    report = verify_install()
    assert "rules/rows.py" in report.files and "drivers/cctalk/driver.py" in report.files
    assert len(report.digest) == 64 and report.digest == verify_install().digest
    assert main(["verify-install", "--expect", report.digest]) == 0
    assert main(["verify-install", "--expect", "0" * 64]) == 1


def test_a_wheel_install_is_checked_against_its_record(tmp_path: Path) -> None:
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site),
         str(source_copy(tmp_path))],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(site)}
    run = [sys.executable, "-m", "tableside", "verify-install"]
    clean = subprocess.run(run, capture_output=True, text=True, env=env, timeout=60)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "RECORD: every file matches" in clean.stdout
    # the same files, installed or checked out, give the same figure
    assert f"sha256: {verify_install().digest}" in clean.stdout
    with (site / "tableside" / "rules" / "rows.py").open("a") as f:
        f.write("# a quiet change\n")
    tampered = subprocess.run(run, capture_output=True, text=True, env=env, timeout=60)
    assert tampered.returncode == 1
    assert "changed: rules/rows.py" in tampered.stdout
