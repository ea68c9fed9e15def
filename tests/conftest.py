"""Shared fixtures: a real Mosquitto per test on a free loopback port, and a guard that fails
any async test which leaves tasks running behind it."""

from __future__ import annotations

import asyncio
import inspect
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import pytest

from tableside.daemon.discipline import DISCIPLINE_FILE_ENV
from tests.ports import free_port
from tests.postgres import Postgres

__all__ = ["Mosquitto", "free_port"]

pytest_plugins = ["pytester", "tests.floorstores"]

MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
SYSTEMD = Path(__file__).parents[1] / "systemd"


ROOT = Path(__file__).parents[1]


def source_copy(directory: Path) -> Path:
    """The repository's files copied to ``directory/tree``, links kept, for building a wheel:
    a build/ left in the work tree would lend the wheel modules deleted since."""
    tree = directory / "tree"
    left_out = (".git", ".venv", "build", "*.egg-info", "__pycache__", ".mypy_cache", ".ruff_cache")
    shutil.copytree(ROOT, tree, symlinks=True, ignore=shutil.ignore_patterns(*left_out))
    return tree


def shipped_config(state_dir: Path) -> str:
    """config/caribbean-stud.toml as shipped, its state kept in ``state_dir``."""
    return (
        (ROOT / "config" / "caribbean-stud.toml")
        .read_text(encoding="utf-8")
        .replace('state_dir = "/var/lib/tableside"', f'state_dir = "{state_dir}"')
    )


def _wait_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.02)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout} s")


class Mosquitto:
    """A Mosquitto this test owns: loopback only, stoppable and restartable; no persistence
    unless asked for."""

    def __init__(
        self, directory: Path, extra: str = "", scheme: str = "mqtt", *, persistent: bool = False
    ) -> None:
        self.port = free_port()
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        self.directory = directory
        self.conf = directory / "mosquitto.conf"
        anonymous = "" if "allow_anonymous" in extra else "allow_anonymous true\n"
        # persistent: sessions and their queued messages survive a restart (saved every second
        # and on a clean stop), as on a production broker
        persistence = (
            f"persistence true\npersistence_location {directory}/\nautosave_interval 1\n"
            if persistent
            else "persistence false\n"
        )
        # user root: the broker reads the test's own files (certificates, passwords)
        self.conf.write_text(
            f"user root\nlistener {self.port} 127.0.0.1\n{anonymous}{persistence}"
            f"log_dest stderr\nlog_type error\nlog_type warning\n{extra}",
            encoding="utf-8",
        )
        self.proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def shipped(cls, directory: Path, users: Sequence[str], password: str = "pw") -> Mosquitto:
        """The broker config and ACL of systemd/ as shipped, its files moved into ``directory``
        and its listener to a free loopback port; ``users`` log in with ``password``."""
        broker = cls(directory)
        shutil.copy(SYSTEMD / "mosquitto-acl.conf", directory / "tableside-acl.conf")
        passwords = directory / "tableside-passwords"
        for i, user in enumerate(users):
            subprocess.run(
                ["mosquitto_passwd", "-b", *([] if i else ["-c"]), str(passwords), user, password],
                check=True, capture_output=True, timeout=30,
            )  # fmt: skip
        text = (SYSTEMD / "mosquitto-tableside.conf").read_text(encoding="utf-8")
        for path in ("/etc/mosquitto/", "/var/lib/mosquitto/"):
            text = text.replace(path, f"{directory}/")
        listener = re.compile(r"^listener 1883$", re.M)
        assert listener.search(text), "the shipped config's listener moved: update this fixture"
        text = listener.sub(f"listener {broker.port} 127.0.0.1", text)
        broker.conf.write_text(
            f"user root\nlog_dest stderr\nlog_type error\nlog_type warning\n{text}",
            encoding="utf-8",
        )
        return broker

    def saved(self, text: str) -> bool:
        """Whether the broker (``persistent``) has saved ``text`` to disk, as a session survives
        a SIGKILL: a client id or a subscription's topic filter, which the persistence file
        holds as plain text. The broker saves a change within ``autosave_interval``, later on a
        loaded machine: wait on this, not on a sleep."""
        try:
            return text.encode() in (self.directory / "mosquitto.db").read_bytes()
        except FileNotFoundError:
            return False

    def start(self) -> None:
        if not Path(MOSQUITTO).exists():
            raise RuntimeError(f"mosquitto not found at {MOSQUITTO}: apt-get install mosquitto")
        self.proc = subprocess.Popen([MOSQUITTO, "-c", str(self.conf)])
        _RUNNING.add(self)
        _wait_port(self.port)

    def stop(self) -> None:
        _RUNNING.discard(self)
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def kill(self) -> None:
        _RUNNING.discard(self)
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


#: the brokers started and not stopped yet
_RUNNING: set[Mosquitto] = set()


@pytest.fixture(autouse=True)
def _no_broker_outlives_its_test() -> Iterator[None]:
    """A broker a test started and did not stop (its own code failed before the stop) is
    stopped after it: a failed test left Mosquittos running for the rest of the machine's
    day."""
    yield
    for broker in list(_RUNNING):
        broker.stop()


#: a synchronised clock, as a lab's discipline file says it (daemon/discipline.py)
SYNCHRONISED = '{"synchronised": true, "esterror_us": 1000, "maxerror_us": 20000}'


@pytest.fixture(autouse=True, scope="session")
def _synchronised_clock(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every daemon the tests start (in this process or a child) reads its clock's discipline
    from a file saying it is synchronised, through the lab's hook, not from this machine's
    kernel, whose clock a container or CI runner often leaves unsynchronised: a test of the
    clock itself sets the hook (or unsets it, for the kernel) with monkeypatch."""
    path = tmp_path_factory.mktemp("clock") / "discipline.json"
    path.write_text(SYNCHRONISED, encoding="utf-8")
    before = os.environ.get(DISCIPLINE_FILE_ENV)
    os.environ[DISCIPLINE_FILE_ENV] = str(path)
    yield
    if before is None:
        os.environ.pop(DISCIPLINE_FILE_ENV, None)
    else:
        os.environ[DISCIPLINE_FILE_ENV] = before


@pytest.fixture
def mosquitto(tmp_path: Path) -> Iterator[Mosquitto]:
    broker = Mosquitto(tmp_path)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Postgres]:
    """One real PostgreSQL per test session (per xdist worker), on a free loopback port."""
    server = Postgres()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres(postgres_server: Postgres) -> str:
    """A fresh, empty database on the session's PostgreSQL: its URL."""
    return postgres_server.new_database()


@pytest.fixture
async def no_leaked_tasks() -> AsyncIterator[None]:
    """Fail the test if it leaves tasks running (they are cancelled so the next test is clean)."""
    before = set(asyncio.all_tasks())
    yield
    await asyncio.sleep(0)
    current = asyncio.current_task()
    leaked = [t for t in asyncio.all_tasks() - before if t is not current and not t.done()]
    if leaked:
        for task in leaked:
            task.cancel()
        await asyncio.wait(leaked, timeout=5)
        pytest.fail(f"test leaked {len(leaked)} task(s): {sorted(t.get_name() for t in leaked)}")


#: modules whose tests run the daemon, a broker or processes: all of them are ``slow``
_SLOW_MODULES = frozenset({
    "test_cli", "test_contract", "test_flood", "test_hil", "test_integrity", "test_link_cuts",
    "test_lockout", "test_monitor", "test_packaging", "test_reconnect", "test_recovery",
    "test_replay", "test_requests", "test_security", "test_soak", "test_stopping",
    "test_systemd", "test_table_proof", "test_test_clock", "test_broker_matrix",
})  # fmt: skip


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        # the fast tier (./dev.sh test -m "not slow") leaves out whatever starts a broker, a
        # daemon or a process; the whole suite is still ./dev.sh test
        fixturenames = getattr(item, "fixturenames", ())
        module = getattr(item, "module", None)
        name = module.__name__.rsplit(".", 1)[-1] if module is not None else ""
        if {"mosquitto", "postgres"} & set(fixturenames) or name in _SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
        function = getattr(item, "function", None)
        if function is not None and inspect.iscoroutinefunction(function):
            fixturenames = getattr(item, "fixturenames", None)
            if fixturenames is not None and "no_leaked_tasks" not in fixturenames:
                fixturenames.insert(0, "no_leaked_tasks")
