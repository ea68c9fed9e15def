"""SIGTERM always stops the real daemon, within the unit's TimeoutStopSec, whatever the broker
does: gone a few milliseconds before the signal (a systemd shutdown stopping the local broker
and the table together), never reachable, or half-open (accepts and never answers CONNECT;
answers CONNECT and then stalls)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tableside.cli.common import run_async as _run_async
from tableside.drivers.tasks import first_to_end
from tests.ports import free_port

from .conftest import Mosquitto
from .hil import Subscriber, simulator, start_simulator, stop

pytestmark = pytest.mark.hil

UNIT = Path(__file__).parents[1] / "systemd" / "tableside@.service"
#: what systemd gives the daemon between SIGTERM and SIGKILL
TIMEOUT_STOP_S = float(re.findall(r"^TimeoutStopSec=(\d+)", UNIT.read_text(), re.M)[0])


def write_config(path: Path, broker: str, device: str) -> Path:
    path.write_text(
        f'[table]\nid = "stop-1"\ngame = "caribbean_stud"\nstate_dir = "{path.parent}"\n'
        f'[broker]\nurl = "{broker}"\nkeepalive_s = 5\n'
        f'[devices.shuffler]\ndriver = "tableside.shuffler"\nurl = "{device}"\n'
        "heartbeat_timeout_s = 1.0\n",
        encoding="utf-8",
    )
    return path


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def start_daemon(
    started: list[subprocess.Popen[bytes]], config: Path, log: Path
) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TABLESIDE_")}
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tableside", "run", "--config", str(config)],
            stdout=out, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    started.append(proc)
    return proc


def tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


def logged(log: Path, word: str) -> bool:
    return log.exists() and word in log.read_text(errors="replace")


async def stops_in_time(proc: subprocess.Popen[bytes], log: Path) -> None:
    """SIGTERM now; the process must have exited 0 within TimeoutStopSec."""
    proc.send_signal(signal.SIGTERM)
    try:
        code = await asyncio.to_thread(proc.wait, TIMEOUT_STOP_S)
    except subprocess.TimeoutExpired:
        text = await asyncio.to_thread(tail, log)
        raise AssertionError(
            f"still running {TIMEOUT_STOP_S} s after SIGTERM; log:\n{text}"
        ) from None
    assert code == 0, await asyncio.to_thread(tail, log)


@contextlib.asynccontextmanager
async def shuffler() -> AsyncIterator[str]:
    url, task = await start_simulator(simulator(interval=0.05), "socket")
    try:
        yield url
    finally:
        await stop(task)


@pytest.mark.parametrize(
    ("how", "after_ms"),
    [(signal.SIGTERM, 0), (signal.SIGTERM, 2), (signal.SIGTERM, 10), (signal.SIGKILL, 2)],
    ids=["stopped-0ms", "stopped-2ms", "stopped-10ms", "killed-2ms"],
)
async def test_sigterm_just_after_the_broker_went_away(
    tmp_path: Path, spawn: list[subprocess.Popen[bytes]], after_ms: int, how: signal.Signals
) -> None:
    """The broker is stopped or killed, and the daemon gets SIGTERM ``after_ms`` later (three
    times each: the window is a race): it stops, every time."""
    broker = Mosquitto(tmp_path)
    log = tmp_path / "daemon.log"
    async with shuffler() as device:
        config = write_config(tmp_path / "stop-1.toml", broker.url, device)
        for _ in range(3):
            broker.start()
            sub = Subscriber(broker.url, "tableside/stop-1/#")
            sub_task = asyncio.create_task(sub.run())
            try:
                proc = start_daemon(spawn, config, log)
                await sub.wait_for(lambda m: m.kind == "event", within=30)
            finally:
                await stop(sub_task)
            assert broker.proc is not None
            broker.proc.send_signal(how)
            await asyncio.sleep(after_ms / 1000)
            try:
                await stops_in_time(proc, log)
            finally:
                broker.stop()


async def test_sigterm_with_no_broker_at_all(
    tmp_path: Path, spawn: list[subprocess.Popen[bytes]]
) -> None:
    log = tmp_path / "daemon.log"
    async with shuffler() as device:
        config = write_config(tmp_path / "stop-1.toml", f"mqtt://127.0.0.1:{free_port()}", device)
        proc = start_daemon(spawn, config, log)
        await until_logged(log, "broker_unavailable")
        await stops_in_time(proc, log)


#: MQTT v5 CONNACK: session not present, success, no properties
CONNACK_V5 = b"\x20\x03\x00\x00\x00"


@pytest.mark.parametrize("answer", [b"", CONNACK_V5], ids=["never-answers", "connack-then-stall"])
async def test_sigterm_with_a_half_open_broker(
    tmp_path: Path, spawn: list[subprocess.Popen[bytes]], answer: bytes
) -> None:
    """A listener that takes the connection and then says nothing (or only CONNACK, and then
    nothing: no SUBACK, no PUBACK) holds the daemon mid-connect or mid-send: SIGTERM still
    stops it."""
    talked = asyncio.Event()
    handlers: list[asyncio.Task[Any]] = []

    async def stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handlers.append(asyncio.current_task())  # type: ignore[arg-type]
        try:
            await reader.read(1)
            writer.write(answer)
            await writer.drain()
            talked.set()
            await reader.read()  # never another byte, until the daemon hangs up
        finally:
            writer.close()

    server = await asyncio.start_server(stall, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    log = tmp_path / "daemon.log"
    try:
        async with shuffler() as device:
            config = write_config(tmp_path / "stop-1.toml", f"mqtt://127.0.0.1:{port}", device)
            proc = start_daemon(spawn, config, log)
            await asyncio.wait_for(talked.wait(), 30)
            await until_logged(log, "daemon_started")
            await asyncio.sleep(0.5)  # the daemon waits for its answer (CONNACK, or SUBACK)
            await stops_in_time(proc, log)
    finally:
        server.close()
        await stop(*handlers)


async def until_logged(log: Path, word: str, within: float = 30) -> None:
    async with asyncio.timeout(within):
        while not await asyncio.to_thread(logged, log, word):
            await asyncio.sleep(0.05)


def test_a_stop_that_hangs_is_forced_and_said(capsys: pytest.CaptureFixture[str]) -> None:
    """The last line of defence: a cancellation swallowed somewhere (a bug) does not keep the
    process past its stop deadline; it is logged, with the tasks still running, and the exit
    status says so."""

    async def swallows_the_first_cancel() -> int:
        loop = asyncio.get_running_loop()
        loop.call_later(0.05, os.kill, os.getpid(), signal.SIGTERM)
        with contextlib.suppress(asyncio.CancelledError):  # the bug under test
            await asyncio.sleep(60)
        await asyncio.sleep(60)
        return 0

    assert _run_async(swallows_the_first_cancel(), stop_deadline=0.5) == 1
    said = capsys.readouterr()
    assert "stop_overdue" in said.out + said.err  # where the log goes depends on its setup


async def test_a_link_failing_as_the_supervisor_is_cancelled_still_stops_it() -> None:
    """The race behind the hung stops, made deterministic: a connection's task fails in the
    same loop iteration as its reconnect loop is cancelled. With a TaskGroup in place of
    first_to_end (drivers/tasks.py) the loop takes the failure, reconnects, and runs on."""
    broken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    reconnects = 0

    async def link() -> None:
        await broken

    async def idle() -> None:
        await asyncio.Event().wait()

    async def supervisor() -> None:
        nonlocal reconnects
        while True:
            try:
                await first_to_end({"link": link(), "idle": idle()})
            except ValueError:
                reconnects += 1
                await asyncio.sleep(0.01)

    task = asyncio.create_task(supervisor())
    await asyncio.sleep(0.01)
    broken.set_exception(ValueError("the broker hung up"))
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=5)
    assert task in done and task.cancelled(), f"still running after {reconnects} reconnects"
