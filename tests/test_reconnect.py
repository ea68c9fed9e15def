"""Back within the retry cap after a broker outage, with the machine busy: the table tries the
broker at least every RETRY_MAX_S (a broker that closes the connection before CONNACK, as one
starting or stopping does, included), so it reconnects within that of the broker's return, says
``online`` and sends everything that waited."""

from __future__ import annotations

import asyncio
import itertools
import sys
from pathlib import Path

import pytest

from tableside.daemon.app import TableDaemon
from tableside.daemon.publisher import CONNECT_TIMEOUT_S, RETRY_MAX_S

from .conftest import Mosquitto
from .hil import (
    Subscriber,
    make_config,
    simulator,
    start_simulator,
    stop,
    until,
)

pytestmark = pytest.mark.hil

#: the broker's start (the fixture waits for its port) to the first attempt at most RETRY_MAX_S,
#: plus the attempt itself on a loaded machine
SLACK_S = 3.0


async def test_attempts_at_least_every_retry_cap_against_a_broker_that_hangs_up(
    tmp_path: Path,
) -> None:
    """A listener that takes each connection and closes it unanswered, for 20 s, the machine
    busy: the daemon's attempts come no further apart than the retry cap (each one used to wait
    out the whole CONNACK timeout, then the retry delay, up to 25 s between tries)."""
    attempts: list[float] = []
    loop = asyncio.get_running_loop()

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        attempts.append(loop.time())
        await reader.read(1)  # the CONNECT
        writer.close()

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    sim_url, sim_task = await start_simulator(simulator(interval=0.05), "socket")
    daemon = TableDaemon(make_config(f"mqtt://127.0.0.1:{port}", sim_url, tmp_path))
    hog = await asyncio.create_subprocess_exec(sys.executable, "-c", "while True: pass")
    task = asyncio.create_task(daemon.run())
    try:
        await until(lambda: len(attempts) >= 1)
        await asyncio.sleep(20)
    finally:
        hog.kill()
        await hog.wait()
        await stop(task, sim_task)
        server.close()
    gaps = [round(b - a, 2) for a, b in itertools.pairwise(attempts)]
    assert gaps and max(gaps) <= RETRY_MAX_S + SLACK_S, f"between attempts: {gaps}"


async def test_back_within_the_retry_cap_after_outages_under_load(tmp_path: Path) -> None:
    (tmp_path / "broker").mkdir()
    broker = Mosquitto(tmp_path / "broker", persistent=True)
    broker.start()
    sim_url, sim_task = await start_simulator(simulator(interval=0.05), "socket")
    sub = Subscriber(broker.url, "tableside/hil-1/#", client_id="auditor")
    sub_task = asyncio.create_task(sub.run())
    daemon = TableDaemon(make_config(broker.url, sim_url, tmp_path))
    task: asyncio.Task[None] | None = None
    # the machine is busy: a process spinning on the CPU for as long as the outages last
    hog = await asyncio.create_subprocess_exec(sys.executable, "-c", "while True: pass")
    try:
        await asyncio.wait_for(sub.connected.wait(), 10)
        await until(lambda: broker.saved(sub.topic))  # the auditor's session survives a kill
        task = asyncio.create_task(daemon.run())
        for _ in range(3):
            await until(
                lambda: daemon.publisher.connected.is_set() and daemon.publisher.pending < 50
            )
            broker.kill()
            await until(lambda: not daemon.publisher.connected.is_set())
            # long enough for the retries to have grown to their cap
            await asyncio.sleep(15)
            before = daemon.publisher.connections
            broker.start()
            # the documented bound: the retry cap, then the attempt itself
            back_within = RETRY_MAX_S + CONNECT_TIMEOUT_S
            await until(lambda b=before: daemon.publisher.connections > b, back_within)  # type: ignore[misc]
        hog.kill()
        await stop(sim_task)
        async with asyncio.timeout(60):
            await daemon.publisher.flush()
        # everything that waited was sent and acknowledged by the broker, each "online" (the
        # table journals one on every connection, behind what waited) among it
        assert daemon.publisher.pending == 0
        assert daemon.publisher.connections >= 4
    finally:
        if hog.returncode is None:
            hog.kill()
        await hog.wait()
        try:
            await stop(*(t for t in (task, sim_task, sub_task) if t is not None))
        finally:
            broker.stop()
