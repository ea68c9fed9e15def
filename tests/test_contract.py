"""One contract for every tableside-framed device: its driver against its simulator over a real
socket survives line noise and a pulled cable, and reports both as typed events."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tableside.drivers import DeviceEvent, DriverSettings
from tableside.drivers.events import ConnectionEvent, ConnectionState, IdentityEvent, LineNoiseEvent
from tableside.drivers.registry import get_driver
from tableside.simulators.base import FramedSimulator
from tableside.simulators.progressive import progressive_table
from tableside.simulators.registry import build_simulator

from .hil import start_simulator, stop, until

QUICK: dict[str, Any] = {"interval": 0.15, "heartbeat": 0.2}


def framed(device_class: str) -> FramedSimulator:
    faults = ["noise=40@2", "disconnect@3"]
    if device_class == "progressive_controller":
        sim, _bus = progressive_table({1: 3}, faults, betting_time=0.05, **QUICK)
        return sim
    return build_simulator(device_class, QUICK, faults)


@pytest.mark.parametrize(
    "device_class", ["shuffler", "shoe", "card_reader", "progressive_controller"]
)
async def test_noise_and_a_pulled_cable(device_class: str) -> None:
    sim = framed(device_class)
    url, sim_task = await start_simulator(sim, "socket")
    events: list[DeviceEvent] = []
    driver = get_driver(f"tableside.{device_class}")(
        device_class, DriverSettings(url=url, heartbeat_timeout=1.0, backoff_max=0.2), events.append
    )
    task = asyncio.create_task(driver.run())
    try:
        await until(lambda: sim.cycles >= 5 and driver.connects >= 2)
        await until(lambda: any(isinstance(e, LineNoiseEvent) for e in events))
        states = [e.state for e in events if isinstance(e, ConnectionEvent)]
        assert ConnectionState.DISCONNECTED in states
        assert states[-1] == ConnectionState.CONNECTED
        identities = [e for e in events if isinstance(e, IdentityEvent)]
        assert len({e.firmware_sha256 for e in identities}) == 1 and len(identities) >= 2
        assert not task.done()
    finally:
        await stop(task, sim_task)
