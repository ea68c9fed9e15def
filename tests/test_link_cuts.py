"""Device links cut again and again, each the way it happens on a table: a socket dropped, a
serial adapter's tty vanishing and coming back under its udev name, a USB reader unplugged. The
driver reconnects every time and reads the device's identity again."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from tableside.drivers import DeviceEvent, DriverSettings
from tableside.drivers import usb as usb_transport
from tableside.drivers.events import ConnectionEvent, ConnectionState, IdentityEvent
from tableside.drivers.registry import get_driver
from tableside.simulators.listen import serve_pty
from tableside.simulators.registry import build_simulator

from .hil import start_simulator, stop, until
from .test_card_reader import URL, reader, usb_bus

CUTS = 3


def connects(events: list[DeviceEvent]) -> int:
    return sum(isinstance(e, ConnectionEvent) and e.state is ConnectionState.CONNECTED
               for e in events)  # fmt: skip


def disconnects(events: list[DeviceEvent]) -> int:
    return sum(isinstance(e, ConnectionEvent) and e.state is ConnectionState.DISCONNECTED
               for e in events)  # fmt: skip


def identities(events: list[DeviceEvent]) -> int:
    return sum(isinstance(e, IdentityEvent) for e in events)


def driver_for(device_class: str, url: str, events: list[DeviceEvent]) -> asyncio.Task[None]:
    driver = get_driver(f"tableside.{device_class}")(
        device_class, DriverSettings(url=url, heartbeat_timeout=0.5, backoff_max=0.2), events.append
    )
    return asyncio.create_task(driver.run())


async def test_socket_dropped_again_and_again() -> None:
    faults = [f"disconnect@{n}" for n in range(2, 2 + 2 * CUTS, 2)]
    sim = build_simulator("shoe", {"interval": 0.1, "heartbeat": 0.2}, faults)
    url, sim_task = await start_simulator(sim, "socket")
    events: list[DeviceEvent] = []
    task = driver_for("shoe", url, events)
    try:
        await until(lambda: connects(events) >= CUTS + 1 and identities(events) >= CUTS + 1)
        assert not task.done()
        # Each reconnection says how long the device was away; the first has nothing to say.
        ups = [e for e in events if isinstance(e, ConnectionEvent)]
        gaps = [e.gap_s for e in ups if e.state is ConnectionState.CONNECTED]
        assert gaps[0] is None
        assert all(g is not None and g > 0 for g in gaps[1:]), gaps
    finally:
        await stop(task, sim_task)


@pytest.fixture
def no_backend_left() -> Iterator[None]:
    yield
    usb_transport.set_backend(None)


async def test_usb_reader_unplugged_again_and_again(no_backend_left: None) -> None:
    sim = reader(*(f"unplug=0.3@{n}" for n in range(2, 2 + 2 * CUTS, 2)))
    async with usb_bus(sim) as device:
        events: list[DeviceEvent] = []
        task = driver_for("card_reader", URL, events)
        try:
            await until(lambda: connects(events) >= CUTS + 1 and identities(events) >= CUTS + 1)
            assert device.sessions >= CUTS + 1
        finally:
            await stop(task)


async def test_tty_vanishes_and_comes_back_under_its_name(tmp_path: Path) -> None:
    """The config names a stable path (udev's symlink, systemd/99-tableside.rules); the adapter
    is pulled (its tty goes away: the simulator's pty closes) and plugged back (a new tty, the
    symlink made again)."""
    name = tmp_path / "tableside-shuffler"
    events: list[DeviceEvent] = []
    task: asyncio.Task[None] | None = None
    try:
        for cut in range(CUTS + 1):
            sim = build_simulator("shuffler", {"interval": 0.1, "heartbeat": 0.2}, [])
            where: asyncio.Future[str] = asyncio.get_running_loop().create_future()
            sim_task = asyncio.create_task(serve_pty(sim.serve, where.set_result))
            name.unlink(missing_ok=True)
            name.symlink_to(await asyncio.wait_for(where, 5))
            if task is None:
                task = driver_for("shuffler", str(name), events)
            await until(lambda n=cut: connects(events) > n and identities(events) > n)  # type: ignore[misc]
            await until(lambda s=sim: s.cycles >= 1)  # type: ignore[misc]
            await stop(sim_task)  # pulled: the pty is gone
            name.unlink()
            await until(lambda n=cut: disconnects(events) > n)  # type: ignore[misc]
        assert task is not None and not task.done()
    finally:
        if task is not None:
            await stop(task)
