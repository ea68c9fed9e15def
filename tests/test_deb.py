"""The Debian package (``./dev.sh deb``, deb/build_deb.py): built from this tree, its contents,
and, as root with dpkg (as CI runs), installed with ``dpkg -i`` with no network, checked the way
a technician would, removed and purged, the machine left as it was."""

from __future__ import annotations

import fcntl
import importlib.util
import io
import json
import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import pytest

from tests.conftest import shipped_config

ROOT = Path(__file__).parents[1]


def _builder() -> ModuleType:
    """deb/build_deb.py, which is a script, not part of the package the tests import."""
    spec = importlib.util.spec_from_file_location("build_deb", ROOT / "deb" / "build_deb.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


if TYPE_CHECKING:  # mypy reads it from the repository's root
    import deb.build_deb as build_deb
else:
    build_deb = _builder()
BuildError, Wheel = build_deb.BuildError, build_deb.Wheel
debian_version, depends = build_deb.debian_version, build_deb.depends
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]

# what the package puts on a machine (postinst's venv and user, and the state directory, too)
PREFIX = Path("/opt/tableside")
STATE = Path("/var/lib/tableside")
CONFIG = Path("/etc/tableside")
UNIT = Path("/usr/lib/systemd/system/tableside@.service")
RULES = Path("/etc/udev/rules.d/99-tableside.rules")
ON_PATH = Path("/usr/bin/tableside")
MANIFEST = PREFIX / "share/tableside/manifest.json"
EXAMPLES = sorted(p.name for p in (ROOT / "config").glob("*.toml"))
# maintainer scripts run with this, not with the test's (PYTHONPATH, a pyenv's python3 on PATH)
PLAIN = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}

pytestmark = pytest.mark.xdist_group("deb")  # one worker builds once, and installs alone


def _run(*command: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(c) for c in command], capture_output=True, text=True, timeout=timeout, env=PLAIN
    )


def test_wheel_tags_make_the_depends_line() -> None:
    core = Wheel.from_filename(
        "pydantic_core-2.50.5-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
    )
    crypto = Wheel.from_filename("cryptography-50.0.2-cp311-abi3-manylinux_2_34_x86_64.whl")
    pure = Wheel.from_filename("pyserial-3.5-py2.py3-none-any.whl")
    assert core.architecture() == "amd64"
    assert (core.glibc(), core.cpython()) == ((2, 17), ((3, 11), True))
    assert (crypto.glibc(), crypto.cpython()) == ((2, 34), ((3, 11), False))
    assert (pure.architecture(), pure.glibc(), pure.cpython()) == (None, None, None)
    assert depends([pure], (3, 11)) == ("all", "python3 (>= 3.11), python3-venv, adduser")
    # abi3 from 3.11 on: any later Python; a cp311 ABI: that minor version only
    assert depends([pure, crypto], (3, 11))[1].startswith("python3 (>= 3.11), python3-venv")
    assert depends([core, crypto, pure], (3, 11)) == (
        "amd64",
        "python3 (>= 3.11), python3 (<< 3.12), python3-venv, adduser, libc6 (>= 2.34)",
    )
    arm = Wheel.from_filename("pydantic_core-2.50.5-cp311-cp311-manylinux_2_17_aarch64.whl")
    with pytest.raises(BuildError, match="more than one machine"):
        depends([core, arm], (3, 11))
    with pytest.raises(BuildError, match="no wheel for Debian"):
        Wheel.from_filename("x-1-cp311-cp311-musllinux_1_2_x86_64.whl").architecture()
    assert [debian_version(v) for v in ("0.1.0", "1.2rc1", "1.2.post3", "1.3.dev4")] == [
        "0.1.0", "1.2~rc1", "1.2+post3", "1.3~dev4"
    ]  # fmt: skip
    assert subprocess.run(["dpkg", "--compare-versions", "1.2~rc1", "lt", "1.2"]).returncode == 0


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package, built by the script ./dev.sh deb runs, with the Python running the tests."""
    if shutil.which("dpkg-deb") is None:
        pytest.skip("no dpkg-deb here (apt-get install dpkg)")
    out = tmp_path_factory.mktemp("deb")
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, str(ROOT / "deb" / "build_deb.py"), "--out", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    print(f"built in {time.monotonic() - started:.1f} s")
    (deb,) = out.glob("*.deb")
    return deb


def _control(deb: Path, name: str) -> str:
    """One member of the package's control archive (control, conffiles, postinst, …)."""
    return subprocess.run(
        ["dpkg-deb", "-I", str(deb), name], capture_output=True, text=True, check=True
    ).stdout


def _field(deb: Path, name: str) -> str:
    return subprocess.run(
        ["dpkg-deb", "-f", str(deb), name], capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.mark.slow
def test_the_package_holds_the_install(built: Path) -> None:
    info = subprocess.run(["dpkg-deb", "-I", str(built)], capture_output=True, text=True,
                          check=True).stdout  # fmt: skip
    fields = dict(re.findall(r"^ (\S+): (.*)$", info, re.MULTILINE))
    assert fields["Package"] == "tableside"
    assert fields["Version"] == debian_version(VERSION)
    assert built.name == f"tableside_{fields['Version']}_{fields['Architecture']}.deb"
    for needed in ("python3 (>= 3.11)", "python3-venv", "adduser"):
        assert needed in fields["Depends"], fields["Depends"]
    conffiles = _control(built, "conffiles").split()
    assert conffiles == [str(RULES)] + [f"{CONFIG}/examples/{name}" for name in EXAMPLES]
    listing = subprocess.run(["dpkg-deb", "-c", str(built)], capture_output=True, text=True,
                             check=True).stdout  # fmt: skip
    # "mode owner size date time ./path[ -> target]"
    rows = [line.split(maxsplit=5) for line in listing.splitlines()]
    modes = {row[5].split(" -> ")[0]: row[0] for row in rows}
    assert {row[1] for row in rows} == {"root/root"}
    for path in (UNIT, RULES, MANIFEST, *(CONFIG / "examples" / name for name in EXAMPLES)):
        assert modes[f".{path}"] == "-rw-r--r--", path
    assert modes[f".{ON_PATH}"].startswith("l")
    assert f"./usr/bin/tableside -> {PREFIX}/bin/tableside" in listing
    # not enabled: nothing in /etc/systemd; the state directory is postinst's, never dpkg's
    assert "./etc/systemd" not in listing and f".{STATE}" not in listing
    for script in ("postinst", "prerm", "postrm"):
        assert _control(built, script).startswith("#!/bin/sh\n"), script
        assert re.search(rf"\*\s+{script}\s", info), info  # executable: "*"
    wheels = {Wheel.from_filename(Path(row[5]).name).name.lower().replace("_", "-")
              for row in rows if row[5].endswith(".whl")}  # fmt: skip
    # the daemon's dependencies only: no floor (PostgreSQL, aiohttp), no demo broker
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for requirement in project["dependencies"]:
        name = re.match(r"[A-Za-z0-9._-]+", requirement)
        assert name and name.group(0).lower().replace("_", "-") in wheels, requirement
    assert "tableside" in wheels
    assert not wheels & {"psycopg", "psycopg-binary", "aiohttp", "amqtt"}, wheels
    # the release manifest: beside the package and inside it, the same bytes
    beside = built.with_name(built.name.removesuffix(".deb") + ".manifest.json")
    archive = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(built)], capture_output=True,
                             check=True).stdout  # fmt: skip
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        inside = tar.extractfile(f".{MANIFEST}")
        assert inside is not None and inside.read() == beside.read_bytes()
    manifest = json.loads(beside.read_text())
    assert manifest["version"] == VERSION
    assert "tableside/__init__.py" in manifest["files"]
    # made from exactly the wheels the package carries
    assert {name.lower().replace("_", "-") for name in manifest["distributions"]} == wheels


# ---- installed with dpkg -----------------------------------------------------------------------


def _blockers() -> list[str]:
    """What the machine already has that the package would install or a test would remove."""
    found = [str(p) for p in (PREFIX, STATE, CONFIG, UNIT, RULES, ON_PATH) if os.path.lexists(p)]
    if _run("dpkg-query", "-W", "tableside").returncode == 0:
        found.append("a tableside package (dpkg -l tableside)")
    try:
        pwd.getpwnam("tableside")
        found.append("a user named tableside")
    except KeyError:
        pass
    return found


def _unmet(deb: Path) -> list[str]:
    """The package's Depends this machine does not meet (dpkg -i would refuse it)."""
    unmet = []
    python = _run("/usr/bin/python3", "-c", "import sys; print(*sys.version_info[:2])")
    have = tuple(map(int, python.stdout.split())) if python.returncode == 0 else None
    depends_line = _field(deb, "Depends")
    for op, major, minor in re.findall(r"python3 \((>=|<<) (\d+)\.(\d+)\)", depends_line):
        bound = (int(major), int(minor))
        if have is None or not (have >= bound if op == ">=" else have < bound):
            unmet.append(f"python3 ({op} {major}.{minor}) (/usr/bin/python3 is {have})")
    for package in ("python3-venv", "adduser"):
        status = _run("dpkg-query", "-W", "-f=${db:Status-Status}", package).stdout
        if status != "installed":
            unmet.append(package)
    return unmet


def _dpkg(*args: str | Path, offline: bool = False) -> subprocess.CompletedProcess[str]:
    """dpkg, waiting (up to two minutes) for the lock another apt or dpkg may hold."""
    command: list[str | Path] = ["dpkg", *args]
    if offline:  # a network namespace of its own: nothing but loopback, and that down
        command = ["unshare", "--net", *command]
    deadline = time.monotonic() + 120
    while True:
        result = _run(*command, timeout=300)
        if "lock" not in result.stderr or time.monotonic() > deadline:
            return result
        time.sleep(1)


@pytest.fixture
def machine() -> Iterator[None]:
    """The machine to itself, as it was before, and as it was after: whatever the test's dpkg
    added (the package, its venv, the user, the state directory, the configs) is taken off."""
    if os.geteuid() != 0 or shutil.which("dpkg") is None:
        pytest.skip("installs with dpkg: needs root and dpkg (CI runs as root)")
    # one test of this at a time on the machine, whichever worktree runs it
    with open("/tmp/tableside-test-deb.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if blockers := _blockers():
            pytest.skip(f"the machine has these already, not to be touched: {blockers}")
        try:
            yield
        finally:
            if _run("dpkg-query", "-W", "tableside").returncode == 0:
                _dpkg("--purge", "tableside")
            for path in (PREFIX, STATE, CONFIG):
                shutil.rmtree(path, ignore_errors=True)
            for path in (RULES, ON_PATH, UNIT):
                if os.path.lexists(path):
                    path.unlink()
            if _run("getent", "passwd", "tableside").returncode == 0:
                _run("userdel", "tableside")
            if _run("getent", "group", "tableside").returncode == 0:
                _run("groupdel", "tableside")
            assert not _blockers(), _blockers()


@pytest.mark.slow
def test_installs_verifies_and_removes_with_dpkg(built: Path, machine: None) -> None:
    if unmet := _unmet(built):
        pytest.skip(f"dpkg -i would refuse it here: unmet Depends {unmet}")
    # with no network at all: the venv comes from the wheels in the package
    offline = _run("unshare", "--net", "true").returncode == 0
    started = time.monotonic()
    installed = _dpkg("-i", built, offline=offline)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    print(f"dpkg -i ({'no network' if offline else 'network not cut'}): "
          f"{time.monotonic() - started:.1f} s")  # fmt: skip

    user = pwd.getpwnam("tableside")
    state = STATE.stat()
    assert (state.st_uid, stat.S_IMODE(state.st_mode)) == (user.pw_uid, 0o750)
    tableside = PREFIX / "bin" / "tableside"
    # every game's example, read as the unit's ExecStartPre does: by the daemon's user
    examples = [CONFIG / "examples" / name for name in EXAMPLES]
    check = _run("runuser", "-u", "tableside", "--", tableside, "check-config", *examples)
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.count(": ok (table ") == len(EXAMPLES), check.stdout
    assert _run(ON_PATH, "--version").stdout.split() == ["tableside", VERSION]

    # the installed files against the release manifest the package carries, read by the
    # daemon's user, as the daemon's own check at start reads them (the same check_manifest)
    verified = _run("runuser", "-u", "tableside", "--", tableside, "verify-install", "--manifest")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert f"manifest: {MANIFEST}" in verified.stdout
    assert re.search(r"MANIFEST: all \d+ files match", verified.stdout), verified.stdout
    assert _run(tableside, "verify-install").returncode == 0  # and each file against its RECORD
    # a file that differed would be named: a copy of the manifest expecting another
    # __init__.py (the installed files are left as they are)
    expected = json.loads(MANIFEST.read_text())
    expected["files"]["tableside/__init__.py"] = "0" * 64
    other = STATE / "other-manifest.json"
    other.write_text(json.dumps(expected))
    mismatch = _run(tableside, "verify-install", "--manifest", other)
    other.unlink()
    assert mismatch.returncode == 1
    assert "changed: tableside/__init__.py" in mismatch.stdout, mismatch.stdout

    # the installed unit, as a table's instance: its ExecStart and ExecStartPre are the
    # installed program (systemd cannot run here: this is the check)
    if shutil.which("systemd-analyze") is None:
        print("no systemd-analyze here: the installed unit is not verified")
    else:
        unit = _run("systemd-analyze", "verify", "tableside@cs-01.service")
        assert unit.returncode == 0, unit.stdout + unit.stderr

    # a table's journal and config, then the package again, as an upgrade goes (prerm upgrade,
    # the venv made anew): the journal, its directory and the config are left as they are
    journal = STATE / "cs-01" / "journal.sqlite"
    journal.parent.mkdir()
    journal.write_bytes(b"a table's records")
    table_config = CONFIG / "cs-01.toml"
    shutil.copyfile(examples[0], table_config)
    again = _dpkg("-i", built, offline=offline)
    assert again.returncode == 0, again.stdout + again.stderr
    assert _run(tableside, "verify-install", "--manifest").returncode == 0
    kept = STATE.stat()
    assert (kept.st_uid, kept.st_gid, kept.st_mode) == (state.st_uid, state.st_gid, state.st_mode)
    assert journal.read_bytes() == b"a table's records"

    # dpkg -r: the software goes, the config and every table's journal stay
    removed = _dpkg("-r", "tableside")
    assert removed.returncode == 0, removed.stdout + removed.stderr
    assert not PREFIX.exists() and not UNIT.exists() and not ON_PATH.is_symlink()
    assert journal.read_bytes() == b"a table's records"
    assert all(example.exists() for example in examples) and RULES.exists()
    assert f"{STATE}: the tables' journals, kept" in removed.stdout, removed.stdout
    status = _run("dpkg-query", "-W", "-f=${db:Status-Status}", "tableside").stdout
    assert status == "config-files"

    # dpkg -P: the package's config goes too; what stays is said
    purged = _dpkg("-P", "tableside")
    assert purged.returncode == 0, purged.stdout + purged.stderr
    assert "never deleted by a package manager" in purged.stdout, purged.stdout
    assert f"{STATE}: the tables' journals" in purged.stdout
    assert f"{table_config}: a table's config, written by a person" in purged.stdout
    assert "the system user tableside" in purged.stdout
    assert not any(example.exists() for example in examples) and not RULES.exists()
    assert journal.read_bytes() == b"a table's records" and table_config.exists()
    assert _run("dpkg-query", "-W", "tableside").returncode != 0
    assert not PREFIX.exists()
    print(f"install, checks, remove and purge: {time.monotonic() - started:.1f} s")


@pytest.mark.slow
def test_the_wheels_install_with_no_index(built: Path, tmp_path: Path) -> None:
    """What postinst does, without root: a venv from the package's wheels alone, offline."""
    if os.geteuid() == 0 and shutil.which("dpkg") is not None:
        pytest.skip("as root, test_installs_verifies_and_removes_with_dpkg installs them")
    subprocess.run(["dpkg-deb", "-x", str(built), str(tmp_path / "root")], check=True)
    wheels = tmp_path / "root" / str(PREFIX).lstrip("/") / "share/tableside/wheels"
    venv = tmp_path / "venv"
    assert _run("/usr/bin/python3", "-I", "-m", "venv", venv).returncode == 0
    cut = ["unshare", "--map-root-user", "--net"]
    offline = _run(*cut, "true").returncode == 0
    command = [str(venv / "bin/python"), "-I", "-m", "pip", "install", "--isolated", "--quiet",
               "--no-index", "--find-links", str(wheels), "--only-binary", ":all:",
               "tableside"]  # fmt: skip
    env = PLAIN | {"PIP_CONFIG_FILE": os.devnull}
    result = subprocess.run([*cut, *command] if offline else command, capture_output=True,
                            text=True, timeout=300, env=env)  # fmt: skip
    assert result.returncode == 0, result.stderr
    config = tmp_path / "cs-01.toml"
    config.write_text(shipped_config(tmp_path / "state"))
    check = _run(venv / "bin/tableside", "check-config", config)
    assert check.returncode == 0, check.stdout + check.stderr
