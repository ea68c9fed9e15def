"""``tableside verify-install``: the software self-check regulators ask a controller for.

It hashes every file of the installed ``tableside`` package (SHA-256 per file, then one
SHA-256 over the sorted list of ``path hash`` lines), so an auditor can compare one figure with
the one published for the release. Where the installation kept a RECORD of file hashes (a
normal wheel install), every file is also checked against it and a changed, missing or added
file is named.

The release manifest (docs/software.md) goes further: made when the package is built, from the
wheels the install will hold or from an install, it names every file of the directory that holds
the ``tableside`` package (site-packages in an install, so tableside and every dependency) with
its SHA-256; :func:`check_manifest` finds a changed, missing or added file there, and the daemon
runs it before it opens a device (daemon/software.py).
"""

from __future__ import annotations

import base64
import csv
import email
import hashlib
import io
import json
import os
import re
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, StringConstraints, ValidationError

import tableside

__all__ = [
    "InstallReport",
    "Manifest",
    "ManifestError",
    "SoftwareCheck",
    "check_manifest",
    "default_manifest_path",
    "manifest_from_install",
    "manifest_from_wheels",
    "software_root",
    "verify_install",
    "write_manifest",
]


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
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").digest()


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


# --- the release manifest ---------------------------------------------------------------------

Sha256Hex = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


class Manifest(BaseModel):
    """The release manifest: tableside's version and every file the install holds → SHA-256."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    format: Literal[1] = 1
    version: str
    #: every distribution the manifest covers → its version (tableside's among them)
    distributions: dict[str, str]
    #: path relative to the directory holding the ``tableside`` package (site-packages) → hex
    files: dict[str, Sha256Hex]

    def to_bytes(self) -> bytes:
        """The manifest as written: sorted keys, one line per file, so a build is reproducible."""
        return (json.dumps(self.model_dump(), indent=1, sort_keys=True) + "\n").encode()


class ManifestError(Exception):
    """A manifest cannot be made (a wheel that contradicts its RECORD, no tableside wheel)."""


def default_manifest_path() -> Path:
    """Where a packaged install keeps its manifest, unless the config names another."""
    return Path(sys.prefix) / "share" / "tableside" / "manifest.json"


def software_root() -> Path:
    """The directory holding the ``tableside`` package: site-packages in an install, ``src/`` in
    a checkout."""
    return Path(tableside.__file__).absolute().parent.parent


# Written by the installer, not by the wheel: pip rewrites RECORD and adds these.
_INSTALLER_FILES = frozenset({"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"})


def _left_out(relative: str) -> bool:
    parts = relative.split("/")
    if "__pycache__" in parts or relative.endswith(".pyc"):
        return True  # made by Python when it imports; never in a wheel
    if len(parts) == 2 and parts[0].endswith(".dist-info"):
        return parts[1] in _INSTALLER_FILES or parts[1].startswith("RECORD.")
    return False


def _installed_files(root: Path) -> Iterator[tuple[str, Path]]:
    # followlinks: in a source checkout the package's parts are links to the top-level folders
    for folder, dirs, names in os.walk(root, followlinks=True):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in names:
            path = Path(folder, name)
            relative = path.relative_to(root).as_posix()
            if not _left_out(relative):
                yield relative, path


def manifest_from_install(root: Path | None = None) -> Manifest:
    """The manifest of what is installed now (every file under :func:`software_root`)."""
    root = software_root() if root is None else root
    files = {relative: _sha256(path).hex() for relative, path in _installed_files(root)}
    distributions = {
        dist.metadata["Name"]: dist.version for dist in metadata.distributions(path=[str(root)])
    }
    distributions.setdefault("tableside", tableside.__version__)
    return Manifest(version=tableside.__version__, distributions=distributions, files=files)


_DATA_INTO_SITE_PACKAGES = re.compile(r"^[^/]+\.data/(?:purelib|platlib)/(.+)$")


def _record_hash(encoded: str) -> str | None:
    mode, _, value = encoded.partition("=")
    if mode != "sha256" or not value:
        return None
    return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).hex()


def manifest_from_wheels(directory: Path) -> Manifest:
    """The manifest of the install that these wheels will make (pip into site-packages).

    Each member is hashed and held to the wheel's own RECORD; members a wheel installs outside
    site-packages (``*.data/scripts``, ``data``, ``headers``) are not in the manifest.
    """
    files: dict[str, str] = {}
    owner: dict[str, str] = {}
    distributions: dict[str, str] = {}
    wheels = sorted(directory.glob("*.whl"))
    if not wheels:
        raise ManifestError(f"no wheels in {directory}")
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            names = [n for n in archive.namelist() if not n.endswith("/")]
            records = [n for n in names if re.fullmatch(r"[^/]+\.dist-info/RECORD", n)]
            if len(records) != 1:
                raise ManifestError(f"{wheel.name}: not one .dist-info/RECORD")
            info = records[0].removesuffix("/RECORD")
            meta = email.message_from_bytes(archive.read(info + "/METADATA"))
            distributions[str(meta["Name"])] = str(meta["Version"])
            rows = csv.reader(io.StringIO(archive.read(records[0]).decode()))
            recorded = {row[0]: _record_hash(row[1]) for row in rows if len(row) >= 2}
            for name in names:
                digest = hashlib.sha256(archive.read(name)).hexdigest()
                expected = recorded.get(name)
                if expected is not None and expected != digest:
                    raise ManifestError(f"{wheel.name}: {name} differs from its RECORD")
                if expected is None and name not in recorded and name != records[0]:
                    raise ManifestError(f"{wheel.name}: {name} is not in its RECORD")
                if (data := _DATA_INTO_SITE_PACKAGES.match(name)) is not None:
                    name = data.group(1)
                elif name.split("/")[0].endswith(".data"):
                    continue  # scripts, headers, data: installed outside site-packages
                if _left_out(name):
                    continue
                if name in owner:
                    raise ManifestError(f"{name} is in both {owner[name]} and {wheel.name}")
                owner[name] = wheel.name
                files[name] = digest
    version = next((v for n, v in distributions.items() if _normal(n) == "tableside"), None)
    if version is None:
        raise ManifestError(f"no tableside wheel in {directory}")
    return Manifest(version=version, distributions=distributions, files=files)


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def write_manifest(manifest: Manifest, path: Path) -> str:
    """Write the manifest; return its SHA-256 (the figure the floor approves)."""
    data = manifest.to_bytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class SoftwareCheck:
    """The installed files held to a manifest: what the ``software`` record says."""

    manifest: Path
    #: the manifest file's SHA-256; None when it could not be read
    manifest_sha256: str | None = None
    #: the manifest's version (tableside's); None when it could not be read
    version: str | None = None
    changed: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    added: tuple[str, ...] = ()
    #: why the check could not be made (no manifest, unreadable, another version running)
    problem: str | None = None
    files: int = 0

    @property
    def ok(self) -> bool:
        return self.problem is None and not (self.changed or self.missing or self.added)


def check_manifest(path: Path, root: Path | None = None) -> SoftwareCheck:
    """Hold every file under ``root`` (:func:`software_root`) to the manifest at ``path``."""
    root = software_root() if root is None else root
    try:
        data = path.read_bytes()
    except OSError as exc:
        return SoftwareCheck(path, problem=f"cannot read {path}: {exc.strerror}")
    digest = hashlib.sha256(data).hexdigest()
    try:
        manifest = Manifest.model_validate_json(data)
    except ValidationError as exc:
        invalid = f"{path} is not a manifest: {exc.errors()[0]['msg']}"
        return SoftwareCheck(path, digest, problem=invalid)
    expected = manifest.files
    found = dict(_installed_files(root))
    changed = [
        relative
        for relative, want in expected.items()
        if relative in found and _sha256(found[relative]).hex() != want
    ]
    problem: str | None = None
    if manifest.version != tableside.__version__:
        problem = f"the manifest is for {manifest.version}; {tableside.__version__} is running"
    return SoftwareCheck(
        path,
        digest,
        manifest.version,
        changed=tuple(sorted(changed)),
        missing=tuple(sorted(set(expected) - set(found))),
        added=tuple(sorted(set(found) - set(expected))),
        problem=problem,
        files=len(expected),
    )
