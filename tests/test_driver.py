"""The shuffler driver against the simulator over real sockets: what it reports, and that
nothing a device does makes it give up."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from tableside.drivers import DeviceEvent, DriverSettings
from tableside.drivers.commands import NoArgs
from tableside.drivers.errors import DeviceUnavailable
from tableside.drivers.events import ConnectionEvent, ConnectionState, ProtocolErrorEvent
from tableside.drivers.framing import NakReason
from tableside.drivers.link import FramedLink, Notice
from tableside.drivers.messages import Message
from tableside.drivers.shuffler import protocol as p
from tableside.drivers.shuffler.driver import ShufflerDriver
from tableside.drivers.shuffler.events import ShuffleCompleted, ShuffleStarted
from tableside.simulators.shuffler import ShufflerSimulator

from .hil import simulator, start_simulator, stop, until


@asynccontextmanager
async def driven(
    sim: ShufflerSimulator, driver_cls: type[ShufflerDriver] = ShufflerDriver
) -> AsyncIterator[tuple[ShufflerDriver, list[DeviceEvent]]]:
    url, sim_task = await start_simulator(sim, "socket")
    events: list[DeviceEvent] = []
    driver = driver_cls(
        "shuffler", DriverSettings(url=url, heartbeat_timeout=0.5, backoff_max=0.2), events.append
    )
    task = asyncio.create_task(driver.run(), name="driver")
    try:
        yield driver, events
        assert not task.done(), "the driver gave up"
    finally:
        await stop(task, sim_task)


def count(events: list[DeviceEvent], kind: type[DeviceEvent]) -> int:
    return sum(isinstance(e, kind) for e in events)


async def test_cable_pulled_on_a_socket_is_reconnected() -> None:
    sim = simulator("disconnect@2", "disconnect@4")
    async with driven(sim) as (driver, events):
        await until(lambda: count(events, ShuffleCompleted) >= 4)
        states = [e.state for e in events if isinstance(e, ConnectionEvent)]
        assert states.count(ConnectionState.DISCONNECTED) >= 2
        assert driver.connects >= 3
        # The cut-off shuffles started but never completed; nothing was invented for them.
        done = {e.shuffle_id for e in events if isinstance(e, ShuffleCompleted)}
        started = {e.shuffle_id for e in events if isinstance(e, ShuffleStarted)}
        assert {2, 4} <= started and not {2, 4} & done


class _Mute(ShufflerSimulator):
    """A shuffler whose firmware does not implement the identity and status queries."""

    def _on_message(self, message: Notice) -> NakReason | None:
        if isinstance(message, p.QueryIdentity | p.QueryStatus):
            return NakReason.UNKNOWN_TYPE
        return super()._on_message(message)


async def test_device_refusing_queries_still_shuffles() -> None:
    sim = _Mute(interval=0.1, shuffle_time=0.02, heartbeat=0.2)
    async with driven(sim) as (driver, events):
        await until(lambda: count(events, ShuffleCompleted) >= 2)
        refused = [e for e in events if isinstance(e, ProtocolErrorEvent)]
        assert [e.reason for e in refused[:2]] == ["query_refused", "query_refused"]
        assert "UNKNOWN_TYPE" in refused[0].detail
        assert driver.connects == 1


class _Buggy(ShufflerDriver):
    """A driver with a bug that fires on one message kind."""

    def translate(self, message: Message) -> DeviceEvent | None:
        if isinstance(message, p.ShuffleStarted) and message.shuffle_id == 2:
            raise KeyError("bug")
        return super().translate(message)


async def test_a_driver_bug_is_loud_but_not_fatal() -> None:
    sim = simulator()
    async with driven(sim, _Buggy) as (driver, events):
        await until(lambda: count(events, ShuffleCompleted) >= 3)
        lost = [
            e for e in events if isinstance(e, ConnectionEvent) and "internal error" in e.detail
        ]
        assert lost and "KeyError" in lost[0].detail
        assert driver.connects >= 2


async def test_commands_need_a_connected_device() -> None:
    events: list[DeviceEvent] = []
    driver = ShufflerDriver("shuffler", DriverSettings(url="socket://127.0.0.1:9"), events.append)
    with pytest.raises(DeviceUnavailable, match="disconnected"):
        await driver.command("start_shuffle", NoArgs())


async def test_host_message_from_the_device_is_a_protocol_error() -> None:
    class _Confused(ShufflerSimulator):
        async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            link = FramedLink(reader, writer, p.PROTOCOL, lambda m: None, name="confused")
            task = asyncio.create_task(link.run())
            try:
                await link.send(p.StartShuffle())  # a host-to-device message, sent by a device
                await asyncio.sleep(5)
            finally:
                await stop(task)
                await link.aclose()

    async with driven(_Confused()) as (_driver, events):
        await until(lambda: count(events, ProtocolErrorEvent) >= 1)
    error = next(e for e in events if isinstance(e, ProtocolErrorEvent))
    assert error.reason == "unexpected_direction"


async def test_a_device_that_stays_unreachable_is_said_once_and_again_when_why_changes() -> None:
    """Each failed attempt used to be a `connecting` and a `disconnected`: four journal records
    (event and retained state each), some 2,000 an hour of one device retrying, on the
    controller's flash. An attempt that fails as the last one did is not news."""
    with socket.socket() as probe:  # a loopback port nobody listens on: refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    events: list[DeviceEvent] = []
    settings = DriverSettings(url=f"socket://127.0.0.1:{port}", backoff_initial=0.005,
                              backoff_max=0.01)  # fmt: skip
    driver = ShufflerDriver("shuffler", settings, events.append)
    task = asyncio.create_task(driver.run(), name="driver")
    accepted = 0

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        writer.close()

    try:
        await asyncio.sleep(0.3)  # tens of refused attempts
        states = [(e.state, e.detail) for e in events if isinstance(e, ConnectionEvent)]
        assert [state for state, _ in states] == [
            ConnectionState.CONNECTING,
            ConnectionState.DISCONNECTED,
        ]
        assert "cannot open" in states[1][1]
        # now something answers and hangs up at once: another reason, said once more
        server = await asyncio.start_server(hang_up, "127.0.0.1", port)
        async with server:
            await until(lambda: accepted >= 10)
            states = [(e.state, e.detail) for e in events if isinstance(e, ConnectionEvent)]
            assert [state for state, _ in states] == [
                ConnectionState.CONNECTING, ConnectionState.DISCONNECTED,
                ConnectionState.DISCONNECTED,
            ]  # fmt: skip
            assert states[2][1] != states[1][1]
            assert driver.connects == 0
    finally:
        await stop(task)
