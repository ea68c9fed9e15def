"""A device command is "ok" once the device acknowledged it, and only then; otherwise the answer
says it was not delivered, and nothing is left half-done: a device that took a command carries
it out even when its link restarts before the work begins, and a host whose journal is slow
still sees the device's acknowledgement of its own command (it waited for the journal before
reading on, and called a command the device had taken unacknowledged)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tableside.daemon.app import TableDaemon
from tableside.drivers.errors import LinkTimeout
from tableside.drivers.link import ArqPolicy, FramedLink, Notice
from tableside.drivers.shuffler import protocol as p
from tableside.simulators.shuffler import ShufflerSimulator

from .conftest import Mosquitto
from .hil import (
    SimulatedTable,
    Subscriber,
    ask,
    event,
    make_config,
    simulated_table,
    simulator,
    start_simulator,
    state,
    stop,
)
from .nullmodem import null_modem, passthrough


def _delivered_or_said_not(result: dict[str, Any]) -> None:
    if not result["ok"]:
        assert "not delivered" in result["error"] or "refused it" in result["error"], result


async def test_a_command_taken_as_the_link_restarts_is_carried_out(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    """A shuffler on a serial line (a pty) that sent its Identity before the daemon opened the
    line: the daemon flushes it unread, so the shuffler's link times out and restarts just
    after the daemon's start_shuffle came in and was acknowledged. The dealer was told "ok";
    the shuffle must happen (the shuffler forgot it with its link, and never shuffled)."""
    sim = simulator(interval=None, policy=ArqPolicy(ack_timeout=2.0, retries=0))
    sim.silent_disconnect = True
    sub = Subscriber(mosquitto.url, "tableside/#")
    sub_task = asyncio.create_task(sub.run(), name="subscriber")
    await asyncio.wait_for(sub.connected.wait(), 10)
    url, sim_task = await start_simulator(sim, "pty")
    await asyncio.sleep(0.3)  # the shuffler's Identity waits on the line, unacknowledged
    daemon = TableDaemon(make_config(mosquitto.url, url, tmp_path))
    daemon_task = asyncio.create_task(daemon.run(), name="daemon")
    table = SimulatedTable(sim, daemon, sub, url, {})
    try:
        await daemon.publisher.connected.wait()
        await sub.wait_for(state("connected"))
        result = await ask(table, mosquitto.port, "dealer", "start_shuffle", "s1",
                           device="shuffler")  # fmt: skip
        assert result["ok"], result  # it was acknowledged: the device took it
        await sub.wait_for(event("shuffle_started"), within=10)
        await sub.wait_for(event("shuffle_complete"), within=10)
        assert sim.connections == 2, "the shuffler's link did restart"
    finally:
        await stop(daemon_task, sim_task)
        await stop(sub_task)


def _slow_journal(seconds: float) -> Callable[[TableDaemon], Awaitable[None]]:
    original = TableDaemon._settle

    async def settle(self: TableDaemon) -> None:
        await asyncio.sleep(seconds)
        await original(self)

    return settle


async def test_a_slow_journal_does_not_make_a_taken_command_look_undelivered(
    mosquitto: Mosquitto, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every device event waits 0.6 s to be durable before its frame is acknowledged (a slow
    disk); the host's own frames are acknowledged by the shuffler at once, but the host read no
    acknowledgement while it waited for its journal: with 0.4 s for one, start_shuffle was
    answered "not acknowledged" and shuffled all the same. It is ok, and it shuffles."""
    monkeypatch.setattr(TableDaemon, "_settle", _slow_journal(0.6))

    def patient_device(config: Any) -> Any:
        devices = {name: d.model_copy(update={"ack_timeout_s": 0.1, "retries": 3})
                   for name, d in config.devices.items()}  # fmt: skip
        return config.model_copy(update={"devices": devices})

    async with simulated_table(
        mosquitto.url,
        tmp_path,
        ShufflerSimulator(interval=None, shuffle_time=0.05, heartbeat=5.0),
        adjust=patient_device,
    ) as table:
        await table.daemon.publisher.connected.wait()
        await table.subscriber.wait_for(event("status"), within=10)  # its link is up
        results = []
        for n in range(3):  # while its events wait for the journal
            results.append(await ask(table, mosquitto.port, "dealer", "start_shuffle", f"s{n}",
                                     device="shuffler"))  # fmt: skip
            if results[-1]["ok"]:
                break
            _delivered_or_said_not(results[-1])
        assert results[0]["ok"], results
        await table.subscriber.wait_for(event("shuffle_complete"), within=15)
        assert len(table.subscriber.matching(event("shuffle_started"))) == 1


async def test_the_link_reads_acknowledgements_while_it_settles() -> None:
    """The link itself: the host delivered the device's frame and waits (settle) before it
    ACKs it; meanwhile its own frame is acknowledged by the device, and the host takes that
    acknowledgement at once. The device's frame is ACKed only once the settle is done."""
    settled = asyncio.Event()

    async def slow_settle() -> None:
        await asyncio.sleep(0.5)
        settled.set()

    got: list[Notice] = []

    def on_host(message: Notice) -> None:
        got.append(message)

    async with null_modem(passthrough) as ((hr, hw), (dr, dw)):
        host = FramedLink(hr, hw, p.PROTOCOL, lambda m: on_host(m), name="host",
                          policy=ArqPolicy(ack_timeout=0.1, retries=1),
                          settle=slow_settle)  # fmt: skip
        device = FramedLink(dr, dw, p.PROTOCOL, lambda m: None, name="device",
                            policy=ArqPolicy(ack_timeout=1.0, retries=0))  # fmt: skip
        tasks = [asyncio.create_task(host.run()), asyncio.create_task(device.run())]
        try:
            started = time.monotonic()
            from_device = asyncio.create_task(device.send(p.ShuffleStarted(7)))
            await asyncio.sleep(0.05)  # the host has it, and settles
            await host.send(p.StartShuffle())  # acknowledged while the host settles
            assert not settled.is_set()
            assert time.monotonic() - started < 0.4
            await from_device
            assert settled.is_set(), "the device's frame is ACKed after the settle"
            assert [type(m) for m in got] == [p.ShuffleStarted]
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)
            host.close()
            device.close()


async def test_a_command_nobody_acknowledges_is_not_delivered_and_the_link_is_reopened(
    mosquitto: Mosquitto, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shuffler's acknowledgements of a StartShuffle never reach the table (the line drops
    them, every retry): start_shuffle is answered "not delivered", never ok; the table gives up
    on that link and opens it again, and the next start_shuffle is the first one shuffled."""
    real_send = FramedLink.send
    deaf = {"times": 1}

    async def send(self: FramedLink, message: Any) -> None:
        deaf_now = deaf["times"] and isinstance(message, p.StartShuffle)
        if deaf_now and self.name.startswith("shuffler@"):
            deaf["times"] -= 1
            raise LinkTimeout(f"{self.name}: StartShuffle seq 2 not acknowledged after 4 tries")
        await real_send(self, message)

    monkeypatch.setattr(FramedLink, "send", send)
    async with simulated_table(mosquitto.url, tmp_path, simulator(interval=None)) as table:
        await table.daemon.publisher.connected.wait()
        await table.subscriber.wait_for(event("status"), within=10)
        result = await ask(table, mosquitto.port, "dealer", "start_shuffle", "s",
                           device="shuffler")  # fmt: skip
        assert not result["ok"]
        assert result["error"].startswith("start_shuffle: not delivered to shuffler: it did not "
                                          "acknowledge it (shuffler@"), result  # fmt: skip
        await table.subscriber.wait_for(state("disconnected"), within=10)
        await table.subscriber.wait_for(lambda m: m.kind == "state" and m.payload.get(
            "connects", 0) >= 2 and m.payload["connection"] == "connected", within=10)  # fmt: skip
        again = await ask(table, mosquitto.port, "dealer", "start_shuffle", "s2",
                          device="shuffler")  # fmt: skip
        assert again["ok"], again
        (started,) = await table.subscriber.wait_for(event("shuffle_started"))
        assert started.payload["data"]["shuffle_id"] == 1, "the first was never delivered"
