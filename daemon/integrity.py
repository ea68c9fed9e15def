"""``tableside verify-install``: the software self-check regulators ask a controller for.

It hashes every file of the installed ``tableside`` package (SHA-256 per file, then one
SHA-256 over the sorted list of ``path hash`` lines), so an auditor can compare one figure with
the one published for the release. Where the installation kept a RECORD of file hashes (a
normal wheel install), every file is also checked against it and a changed, missing or added
file is named.
"""

from __future__ import annotations

import base64
import hashlib
import os
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import tableside

__all__ = ["InstallReport", "verify_install"]


@dataclass
class InstallReport:
    root: Path
    files: dict[str, str] = field(default_factory=dict)  # relative path → sha256 hex
    changed: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    unrecorded: list[str] = field(default_factory=list)
    checked_against_record: bool = False

    @property
    def digest(self) -> str:
        lines = "".join(f"{path} {digest}\n" for path, digest in sorted(self.files.items()))
        return hashlib.sha256(lines.encode()).hexdigest()

    @property
    def ok(self) -> bool:
        return not (self.changed or self.missing or self.unrecorded)


def _sha256(path: Path) -> bytes:
    return hashlib.sha256(path.read_bytes()).digest()


def verify_install() -> InstallReport:
    root = Path(tableside.__file__).resolve().parent
    report = InstallReport(root)
    package_dir = Path(tableside.__file__).parent
    # followlinks: in a source checkout the package's parts are links to the top-level folders
    for folder, dirs, names in os.walk(package_dir, followlinks=True):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in names:
            path = Path(folder, name)
            if path.suffix != ".pyc":
                relative = path.relative_to(package_dir).as_posix()
                report.files[relative] = _sha256(path).hex()
    try:
        recorded = metadata.distribution("tableside").files or []
    except metadata.PackageNotFoundError:
        return report
    record = {}
    for entry in recorded:
        parts = entry.parts
        if parts and parts[0] == "tableside" and entry.hash and entry.hash.mode == "sha256":
            record[Path(*parts[1:]).as_posix()] = entry.hash.value
    if not record:
        return report  # an editable install keeps no RECORD of the package's files
    report.checked_against_record = True
    for relative, digest in report.files.items():
        expected = record.get(relative)
        actual = base64.urlsafe_b64encode(bytes.fromhex(digest)).rstrip(b"=").decode()
        if expected is None:
            report.unrecorded.append(relative)
        elif expected != actual:
            report.changed.append(relative)
    report.missing = sorted(set(record) - set(report.files))
    return report
