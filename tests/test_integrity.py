"""``tableside verify-install``: the installed software's hash, the release manifest, and
tampering found."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tableside.cli import main
from tableside.daemon.integrity import check_manifest, verify_install
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


def _wheel(tmp_path: Path) -> Path:
    """tableside's wheel, built from a copy of the tree (no network, the venv's setuptools)."""
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(wheels), str(source_copy(tmp_path))],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    return wheels


def test_a_manifest_made_from_the_wheels_holds_the_install_they_make(tmp_path: Path) -> None:
    """Made at build time from the wheels (before any install exists), the manifest matches the
    install pip makes of them, and names a changed, a missing and an added file."""
    wheels = _wheel(tmp_path)
    manifest = tmp_path / "share" / "manifest.json"
    made = subprocess.run(
        [sys.executable, "-m", "tableside", "verify-install", "--write-manifest", str(manifest),
         "--from-wheels", str(wheels)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    digest = hashlib.sha256(manifest.read_bytes()).hexdigest()
    assert f"manifest sha256: {digest}" in made.stdout
    files = json.loads(manifest.read_text())["files"]
    assert "tableside/rules/rows.py" in files and "tableside-0.1.0.dist-info/METADATA" in files
    assert not any("RECORD" in path or "__pycache__" in path for path in files)
    # --target, never --prefix: pip would uninstall the venv's own tableside first
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(site),
         *map(str, wheels.glob("*.whl"))],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    shutil.rmtree(site / "bin")  # --target puts the scripts here; a venv, in its own bin/
    env = {**os.environ, "PYTHONPATH": str(site)}
    run = [sys.executable, "-m", "tableside", "verify-install", "--manifest", str(manifest)]
    clean = subprocess.run(run, capture_output=True, text=True, env=env, timeout=60)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert f"manifest sha256: {digest}" in clean.stdout and "version: 0.1.0" in clean.stdout
    assert f"MANIFEST: all {len(files)} files match" in clean.stdout
    with (site / "tableside" / "rules" / "rows.py").open("a") as f:
        f.write("# a quiet change\n")
    (site / "tableside" / "shuffle" / "plots.py").unlink()
    (site / "sitecustomize.py").write_text("print('hello')\n")
    tampered = subprocess.run(run, capture_output=True, text=True, env=env, timeout=60)
    assert tampered.returncode == 1
    for line in ("changed: tableside/rules/rows.py", "missing: tableside/shuffle/plots.py",
                 "added: sitecustomize.py", "MANIFEST: MISMATCH"):  # fmt: skip
        assert line in tampered.stdout, tampered.stdout


def test_a_manifest_of_the_running_install(tmp_path: Path) -> None:
    """Written from what runs (here the checkout's src/), it matches until a file changes; a
    missing manifest is a mismatch, not a pass."""
    manifest = tmp_path / "manifest.json"
    assert main(["verify-install", "--write-manifest", str(manifest)]) == 0
    check = check_manifest(manifest)
    assert check.ok and check.version == "0.1.0" and check.files > 80
    assert check.manifest_sha256 == hashlib.sha256(manifest.read_bytes()).hexdigest()
    assert main(["verify-install", "--manifest", str(manifest)]) == 0
    other = json.loads(manifest.read_text())
    other["files"]["tableside/rules/rows.py"] = "0" * 64
    manifest.write_text(json.dumps(other))
    assert check_manifest(manifest).changed == ("tableside/rules/rows.py",)
    assert main(["verify-install", "--manifest", str(manifest)]) == 1
    gone = check_manifest(tmp_path / "none.json")
    assert not gone.ok and gone.problem is not None and "cannot read" in gone.problem
