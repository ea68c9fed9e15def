"""systemd: our sd_notify against a fake NOTIFY_SOCKET (systemd cannot be PID 1 here), the
watchdog stopping when the event loop hangs, and the unit checked by systemd-analyze."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tableside.daemon.app import TableDaemon
from tableside.daemon.sdnotify import Notifier, NotifyError

from .conftest import free_port
from .hil import make_config, simulator, start_simulator, stop

ROOT = Path(__file__).parents[1]
UNIT = ROOT / "systemd" / "tableside@.service"


class FakeSystemd:
    """The receiving end of NOTIFY_SOCKET: every datagram with the time it came."""

    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.settimeout(0.1)
        self.received: list[tuple[float, str]] = []
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop:
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            self.received.append((time.monotonic(), data.decode()))

    def close(self) -> None:
        self._stop = True
        self._thread.join(5)
        self.sock.close()

    def lines(self, prefix: str) -> list[float]:
        return [
            t for t, msg in self.received for line in msg.split("\n") if line.startswith(prefix)
        ]


@pytest.fixture
def fake_systemd(tmp_path: Path) -> Iterator[FakeSystemd]:
    fake = FakeSystemd(str(tmp_path / "notify.sock"))
    yield fake
    fake.close()


async def test_ready_watchdog_and_stopping(tmp_path: Path, fake_systemd: FakeSystemd) -> None:
    sim = simulator()
    url, sim_task = await start_simulator(sim, "socket")
    env = {"NOTIFY_SOCKET": str(tmp_path / "notify.sock"), "WATCHDOG_USEC": "200000",
           "WATCHDOG_PID": str(os.getpid())}  # fmt: skip
    notifier = Notifier(env)
    assert notifier.watchdog_interval == pytest.approx(0.1)
    daemon = TableDaemon(
        make_config(f"mqtt://127.0.0.1:{free_port()}", url, tmp_path), notifier=notifier
    )
    task = asyncio.create_task(daemon.run())
    try:
        async with asyncio.timeout(10):
            while not fake_systemd.lines("READY=1") or len(fake_systemd.lines("WATCHDOG=1")) < 3:
                await asyncio.sleep(0.02)
        # The loop hangs for 0.6 s: no ping may come out of it meanwhile (a pinger of its own,
        # a thread, would send one every 0.1 s). A ping sent just before the hang may be
        # stamped late by the fake's thread on a loaded machine: 0.25 s is allowed for that.
        hung_from = time.monotonic()
        time.sleep(0.6)  # noqa: ASYNC251  # blocking the loop on purpose: that is the test
        hung_to = time.monotonic()
        async with asyncio.timeout(10):  # pings resume once the loop runs again
            while not [t for t in fake_systemd.lines("WATCHDOG=1") if t > hung_to]:
                await asyncio.sleep(0.02)
        pings = fake_systemd.lines("WATCHDOG=1")
        assert not [t for t in pings if hung_from + 0.25 < t < hung_to]
        status = [msg for _, msg in fake_systemd.received if "STATUS=" in msg]
        assert any("devices connected" in s for s in status)
    finally:
        await stop(task, sim_task)
    assert fake_systemd.lines("STOPPING=1")


def test_abstract_socket_and_errors_are_raised(tmp_path: Path) -> None:
    name = f"tableside-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as receiver:
        receiver.bind("\0" + name)
        Notifier({"NOTIFY_SOCKET": "@" + name}).ready("hello")
        assert receiver.recv(100) == b"READY=1\nSTATUS=hello"
    with pytest.raises(NotifyError, match="sd_notify to"):
        Notifier({"NOTIFY_SOCKET": str(tmp_path / "nobody-listens")}).watchdog()
    quiet = Notifier({})
    assert not quiet.enabled and quiet.watchdog_interval is None
    quiet.ready()  # outside systemd: nothing to do, nothing raised
    other = Notifier({"NOTIFY_SOCKET": "/x", "WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"})
    assert other.watchdog_interval is None  # the watchdog is another process's


def _installed_unit(tmp_path: Path) -> Path:
    exe = Path(sys.executable).with_name("tableside")
    unit = tmp_path / "tableside@cs-01.service"
    unit.write_text(UNIT.read_text().replace("/opt/tableside/bin/tableside", str(exe)))
    return unit


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_unit_verifies(tmp_path: Path) -> None:
    result = subprocess.run(
        ["systemd-analyze", "verify", str(_installed_unit(tmp_path))],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "tableside" not in result.stderr, result.stderr


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze here")
def test_unit_is_hardened_yet_reaches_serial_and_usb(tmp_path: Path) -> None:
    result = subprocess.run(
        ["systemd-analyze", "security", "--offline=yes", str(_installed_unit(tmp_path))],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    match = re.search(r"Overall exposure level for \S+: ([\d.]+)", result.stdout)
    assert match, result.stdout[-500:] + result.stderr
    assert float(match.group(1)) <= 2.5, result.stdout[-2000:]
    text = UNIT.read_text()
    settings = ["Type=notify", "WatchdogSec=", "SupplementaryGroups=dialout", "Restart=always",
              "DeviceAllow=char-ttyUSB rw", "DeviceAllow=char-usb_device rw",
              "ProtectSystem=strict", "StateDirectory=tableside"]  # fmt: skip
    for needed in settings:
        assert needed in text, needed
