"""Build tableside's Debian package (``./dev.sh deb``; what it installs: systemd/README.md).

``python deb/build_deb.py [--out DIR]`` writes ``DIR/tableside_<version>_<arch>.deb``. The
package carries wheels of tableside and of its runtime dependencies (the daemon's: no extras, so
neither the floor's PostgreSQL store and web view nor the demo's broker), at exactly the
versions installed in the Python that runs this script (the venv the tests ran in); its
postinst makes the virtual environment /opt/tableside from them with no network (``pip install
--no-index``). Where the wheels come from is this machine's pip configuration (its index, its
find-links), reached at build time only.

The Depends line is read off the wheels' tags (PEP 425): a wheel built for one CPython's ABI
pins the package to that minor version, a ``manylinux_2_34`` wheel needs glibc 2.34, a
platform wheel makes the package one architecture's.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Wheel", "build", "debian_version", "depends", "main"]

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent

PACKAGE = "tableside"
PREFIX = "opt/tableside"  # the venv, made by postinst; sys.prefix of the installed daemon
SHARE = f"{PREFIX}/share/tableside"  # the wheels, and the manifest where the daemon looks
UNIT = "usr/lib/systemd/system/tableside@.service"
# A conffile in /etc, not a packaged rule in /usr/lib/udev: its ids and serial numbers are
# examples a site edits in place, and dpkg keeps those edits across upgrades.
RULES = "etc/udev/rules.d/99-tableside.rules"
EXAMPLES = "etc/tableside/examples"  # every game's config, as in config/; conffiles
MAINTAINER = "tableside maintainers <tableside@example.invalid>"

# PEP 600's and its predecessors' glibc versions (manylinux1: PEP 513, 2010: 571, 2014: 599).
_LEGACY_MANYLINUX = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}
# a wheel's machine to Debian's architecture name
_ARCHITECTURES = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "armhf", "i686": "i386",
                  "ppc64le": "ppc64el", "s390x": "s390x", "riscv64": "riscv64"}  # fmt: skip


class BuildError(Exception):
    """The package cannot be built as asked; the message says why."""


@dataclass(frozen=True)
class Wheel:
    """A wheel's name and its compatibility tags, from its file name (PEP 427, PEP 425)."""

    name: str
    version: str
    pythons: frozenset[str]
    abis: frozenset[str]
    platforms: frozenset[str]

    @classmethod
    def from_filename(cls, filename: str) -> Wheel:
        parts = filename.removesuffix(".whl").split("-")
        if not filename.endswith(".whl") or len(parts) not in (5, 6):
            raise BuildError(f"{filename}: not a wheel's file name")
        name, version, *_build, python, abi, platform = parts
        return cls(name, version, frozenset(python.split(".")), frozenset(abi.split(".")),
                   frozenset(platform.split(".")))  # fmt: skip

    def architecture(self) -> str | None:
        """Debian's name for the machine this wheel is for; None when it runs on any."""
        if self.platforms == {"any"}:
            return None
        machines = set()
        for platform in self.platforms:
            match = re.fullmatch(r"(?:manylinux\w*?|linux)_(x86_64|aarch64|armv7l|i686|"
                                 r"ppc64le|s390x|riscv64)", platform)  # fmt: skip
            if match is None:
                raise BuildError(f"{self.name} {self.version}: no wheel for Debian ({platform})")
            machines.add(_ARCHITECTURES[match.group(1)])
        if len(machines) != 1:
            raise BuildError(f"{self.name} {self.version}: one wheel for {sorted(machines)}")
        return machines.pop()

    def glibc(self) -> tuple[int, int] | None:
        """The oldest glibc this wheel runs on (the most lenient of its tags); None: no need."""
        needs = []
        for platform in self.platforms:
            tag = platform.rsplit("_", 1)[0] if platform.startswith("manylinux") else None
            if tag in _LEGACY_MANYLINUX:
                needs.append(_LEGACY_MANYLINUX[tag])
            elif match := re.fullmatch(r"manylinux_(\d+)_(\d+)_\w+", platform):
                needs.append((int(match.group(1)), int(match.group(2))))
        return min(needs) if needs else None

    def cpython(self) -> tuple[tuple[int, int], bool] | None:
        """(the CPython it was built for, whether only that minor version: not abi3); None when
        it is pure Python."""
        matches = (re.fullmatch(r"cp(\d)(\d+)", python) for python in self.pythons)
        versions = [(int(m.group(1)), int(m.group(2))) for m in matches if m]
        if not versions or self.abis == {"none"}:
            return None
        return min(versions), "abi3" not in self.abis


def debian_version(version: str) -> str:
    """A PEP 440 version as Debian orders it: a pre-release sorts before its release (``~``)."""
    match = re.fullmatch(r"(\d+(?:\.\d+)*)(?:(a|b|rc)(\d+))?(?:\.post(\d+))?(?:\.dev(\d+))?",
                         version)  # fmt: skip
    if match is None:
        raise BuildError(f"version {version!r}: not one this script maps to Debian's")
    release, pre, pre_n, post, dev = match.groups()
    out = release
    if pre:
        out += f"~{pre}{pre_n}"
    if post:
        out += f"+post{post}"
    if dev:
        out += f"~dev{dev}"
    return out


def depends(wheels: Iterable[Wheel], requires_python: tuple[int, int]) -> tuple[str, str]:
    """(Architecture, Depends) for a package carrying these wheels."""
    lowest = requires_python
    exact: set[tuple[int, int]] = set()
    architectures: set[str] = set()
    glibc: tuple[int, int] | None = None
    for wheel in wheels:
        if (arch := wheel.architecture()) is not None:
            architectures.add(arch)
        if (needs := wheel.glibc()) is not None:
            glibc = max(glibc or needs, needs)
        if (built := wheel.cpython()) is not None:
            python, only_that = built
            if only_that:
                exact.add(python)
            lowest = max(lowest, python)
    if len(architectures) > 1 or len(exact) > 1:
        raise BuildError(f"wheels for more than one machine: {sorted(architectures)} {exact}")
    pythons = [f"python3 (>= {lowest[0]}.{lowest[1]})"]
    if exact:
        ((major, minor),) = exact
        if (major, minor) < lowest:
            raise BuildError(f"a wheel for CPython {major}.{minor}, older than {lowest}")
        pythons = [f"python3 (>= {major}.{minor})", f"python3 (<< {major}.{minor + 1})"]
    fields = [*pythons, "python3-venv", "adduser"]
    if glibc is not None:
        fields.append(f"libc6 (>= {glibc[0]}.{glibc[1]})")
    return (architectures.pop() if architectures else "all"), ", ".join(fields)


def _run(command: Sequence[str | Path], env: dict[str, str] | None = None) -> str:
    words = [str(part) for part in command]
    result = subprocess.run(words, capture_output=True, text=True, check=False, env=env)
    if result.returncode != 0:
        raise BuildError(f"{' '.join(words)} failed:\n{result.stderr.strip()}")
    return result.stdout


def _source_copy(directory: Path) -> Path:
    """The repository's files, links kept: a build/ in the work tree would lend the wheel
    modules deleted since (tests/conftest.py's source_copy, for the same reason)."""
    tree = directory / "tree"
    left_out = (".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".mypy_cache",
                ".ruff_cache", "node_modules", ".pytest_cache", ".hypothesis")  # fmt: skip
    shutil.copytree(ROOT, tree, symlinks=True, ignore=shutil.ignore_patterns(*left_out))
    return tree


def _wheels(tree: Path, into: Path, work: Path) -> list[Wheel]:
    """tableside's wheel and its runtime dependencies', at the versions installed here."""
    installed = _run([sys.executable, "-m", "pip", "list", "--format=freeze", "--exclude-editable"])
    pins = [line for line in installed.splitlines() if not line.lower().startswith(f"{PACKAGE}==")]
    constraints = work / "constraints.txt"
    constraints.write_text("\n".join(pins) + "\n")
    # no build isolation: tableside is built with the setuptools installed here, nothing fetched
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-build-isolation",
          "--wheel-dir", into, "--constraint", constraints, tree])  # fmt: skip
    wheels = [Wheel.from_filename(path.name) for path in sorted(into.glob("*.whl"))]
    if [w.name for w in wheels if w.name == PACKAGE] != [PACKAGE]:
        names = sorted(path.name for path in into.iterdir())
        raise BuildError(f"expected one {PACKAGE} wheel in {names}")
    return wheels


def _manifest(tree: Path, wheels: Path, path: Path) -> None:
    """The release manifest of the venv these wheels will make (docs/software.md), written by
    the tableside being packaged: made here, before any venv exists, and held by the package
    where the installed daemon looks for it (``<sys.prefix>/share/tableside/manifest.json``)."""
    env = os.environ | {"PYTHONPATH": str(tree / "src")}
    _run([sys.executable, "-m", "tableside", "verify-install", "--write-manifest", path,
          "--from-wheels", wheels], env=env)  # fmt: skip
    path.chmod(0o644)


def _control(fields: dict[str, str], description: str) -> str:
    lines = [f"{key}: {value}" for key, value in fields.items()]
    summary, _, body = description.strip().partition("\n\n")
    lines.append(f"Description: {summary}")
    lines += [f" {line}" if line else " ." for line in body.splitlines()]
    return "\n".join(lines) + "\n"


DESCRIPTION = """\
table-side controller for casino table games

tableside talks to a table's devices (shufflers, dealing shoes, card readers, progressive and
bonus wager systems), turns what they report into the rulings 58 Pa. Code requires, journals
every message and publishes it over MQTT.

This package holds tableside and the wheels of its runtime dependencies; the virtual
environment /opt/tableside is made from them at install, with no network. One table is one
instance of tableside@.service (installed, not enabled), reading /etc/tableside/<name>.toml.
"""


def _installed_size(stage: Path) -> int:
    """Installed-Size in KiB: the package's files and what its wheels unpack to in the venv
    (byte-compiled files aside)."""
    files = [p for p in stage.rglob("*") if p.is_file() and not p.is_symlink()]
    total = sum(p.stat().st_size for p in files)
    for wheel in (p for p in files if p.suffix == ".whl"):
        with zipfile.ZipFile(wheel) as archive:
            total += sum(member.file_size for member in archive.infolist())
    return (total + 1023) // 1024


def _md5sums(stage: Path) -> str:
    lines = []
    for path in sorted(stage.rglob("*")):
        relative = path.relative_to(stage)
        if path.is_file() and not path.is_symlink() and relative.parts[0] != "DEBIAN":
            lines.append(f"{hashlib.md5(path.read_bytes()).hexdigest()}  {relative.as_posix()}")
    return "\n".join(lines) + "\n"


def _put(source: Path, stage: Path, target: str, mode: int = 0o644) -> None:
    path = stage / target
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, path)
    path.chmod(mode)


def build(out: Path) -> Path:
    """Build the package into ``out``; its path."""
    if shutil.which("dpkg-deb") is None:
        raise BuildError("dpkg-deb is not installed (apt-get install dpkg)")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    version = debian_version(project["version"])
    floor = re.fullmatch(r">=\s*(\d+)\.(\d+)", project["requires-python"].strip())
    if floor is None:
        raise BuildError(f"requires-python {project['requires-python']!r}: expected >=X.Y")
    requires_python = (int(floor.group(1)), int(floor.group(2)))
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="tableside-deb-") as scratch:
        work = Path(scratch)
        tree = _source_copy(work)
        stage = work / "stage"
        wheel_dir = stage / SHARE / "wheels"
        wheel_dir.mkdir(parents=True)
        wheels = _wheels(tree, wheel_dir, work)
        for path in wheel_dir.iterdir():
            path.chmod(0o644)
        architecture, depends_on = depends(wheels, requires_python)
        manifest = stage / SHARE / "manifest.json"
        _manifest(tree, wheel_dir, manifest)
        _put(tree / "systemd" / "tableside@.service", stage, UNIT)
        _put(tree / "systemd" / "99-tableside.rules", stage, RULES)
        examples = sorted((tree / "config").glob("*.toml"))
        for example in examples:
            _put(example, stage, f"{EXAMPLES}/{example.name}")
        (stage / "usr/bin").mkdir(parents=True)
        (stage / "usr/bin/tableside").symlink_to(f"/{PREFIX}/bin/tableside")
        _put(HERE / "copyright", stage, "usr/share/doc/tableside/copyright")
        debian = stage / "DEBIAN"
        debian.mkdir()
        for script in ("postinst", "prerm", "postrm"):
            _put(HERE / script, stage, f"DEBIAN/{script}", 0o755)
        conffiles = [f"/{RULES}"] + [f"/{EXAMPLES}/{e.name}" for e in examples]
        (debian / "conffiles").write_text("\n".join(conffiles) + "\n")
        (debian / "md5sums").write_text(_md5sums(stage))
        fields = {
            "Package": PACKAGE,
            "Version": version,
            "Architecture": architecture,
            "Maintainer": MAINTAINER,
            "Installed-Size": str(_installed_size(stage)),
            "Depends": depends_on,
            # pyusb's backend, for Spanish 21's card reader (drivers/usb.py); no other device
            "Recommends": "libusb-1.0-0",
            "Section": "misc",
            "Priority": "optional",
        }
        (debian / "control").write_text(_control(fields, DESCRIPTION))
        for folder in [stage, *(p for p in stage.rglob("*") if p.is_dir() and not p.is_symlink())]:
            folder.chmod(0o755)
        deb = out / f"{PACKAGE}_{version}_{architecture}.deb"
        _run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", stage, deb])
        shutil.copyfile(manifest, out / f"{PACKAGE}_{version}_{architecture}.manifest.json")
    return deb


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="where (default: dist/)")
    args = parser.parse_args(argv)
    try:
        deb = build(args.out)
    except BuildError as exc:
        print(f"build_deb: {exc}", file=sys.stderr)
        return 1
    print(deb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
