"""The card reader: codec, and the unchanged pyusb driver end to end through the simulated USB
bus (unplug, stall, time-outs injected), plus the same driver over a serial line."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiomqtt
import pytest
import usb.core
import usb.util
from hypothesis import given
from hypothesis import strategies as st

from tableside.daemon.app import TableDaemon
from tableside.drivers import usb as usb_transport
from tableside.drivers.card_reader import protocol as p
from tableside.drivers.errors import TransportOpenError
from tableside.drivers.framing import Frame
from tableside.drivers.messages import Message
from tableside.drivers.transport import open_transport
from tableside.drivers.usb import UsbPort, parse_usb_url
from tableside.drivers.wire import MalformedPayload
from tableside.rules.model import Game
from tableside.simulators.base import FramedSimulator
from tableside.simulators.card_reader import CardReaderSimulator
from tableside.simulators.registry import build_simulator
from tableside.simulators.usb import SimulatedUsbBackend, SimulatedUsbDevice

from .conftest import Mosquitto
from .hil import Subscriber, event, make_config, simulated_table, simulator, state, stop, until

VID, PID, SERIAL = 0x1209, 0x7AB1, "SIMR0001"
URL = f"usb://{VID:04x}:{PID:04x}?serial={SERIAL}"

u32 = st.integers(0, 2**32 - 1)
reader_faults = st.none() | st.sampled_from(p.ReaderFaultCode)
messages: st.SearchStrategy[Message] = st.one_of(
    st.builds(p.ReaderStatus, st.sampled_from(p.ReaderState), reader_faults, st.booleans(), u32),
    st.builds(p.SelfTestResult, st.booleans(), st.integers(0, 65535), st.text(max_size=20)),
    st.builds(p.HoleCardChecked, u32, st.booleans()),
    st.builds(p.ReaderFault, st.sampled_from(p.ReaderFaultCode), st.text(max_size=20)),
    st.just(p.RunSelfTest()),
)  # fmt: skip


@given(messages, st.integers(0, 255))
def test_every_reader_message_round_trips(message: Message, seq: int) -> None:
    frame = Frame.from_bytes(p.PROTOCOL.encode(message, seq).to_bytes())
    assert p.PROTOCOL.decode(frame) == message


@pytest.mark.parametrize(
    ("message_type", "payload", "complaint"),
    [
        (p.HoleCardChecked.TYPE, b"\x00\x00\x00\x01\x02", "blackjack must be 0 or 1"),
        (p.ReaderStatus.TYPE, b"\x00\x00\x02\x00\x00\x00\x00", "reserved flag"),
        (p.SelfTestResult.TYPE, b"\x05\x00\x00\x00", "passed must be 0 or 1"),
    ],
)
def test_malformed_reader_payloads(message_type: int, payload: bytes, complaint: str) -> None:
    with pytest.raises(MalformedPayload, match=complaint):
        p.PROTOCOL.decode(Frame(seq=0, type=message_type, payload=payload))


def reader(*faults: str, **settings: object) -> CardReaderSimulator:
    sim = build_simulator(
        "card_reader",
        {"interval": 0.15, "read_time": 0.01, "fault_clear_time": 0.05, "heartbeat": 0.2}
        | settings,
        faults,
    )  # fmt: skip
    assert isinstance(sim, CardReaderSimulator)
    return sim


@asynccontextmanager
async def usb_bus(sim: FramedSimulator) -> AsyncIterator[SimulatedUsbDevice]:
    device = SimulatedUsbDevice(
        VID, PID, SERIAL, sim.serve, asyncio.get_running_loop(), product_name="SIM card reader"
    )
    if isinstance(sim, CardReaderSimulator):
        sim.usb_hooks.update(
            unplug=lambda v: device.unplug(float(v or 1)),
            stall=lambda v: device.stall(int(v or 1)),
            usb_timeout=lambda v: device.time_out_writes(int(v or 1)),
        )
    usb_transport.set_backend(SimulatedUsbBackend(device))
    try:
        yield device
    finally:
        usb_transport.set_backend(None)
        await device.aclose()


@pytest.fixture
def no_backend_left() -> Iterator[None]:
    yield
    usb_transport.set_backend(None)


async def test_pyusb_sees_real_descriptors(no_backend_left: None) -> None:
    async with usb_bus(reader(interval=None)) as device:
        backend = SimulatedUsbBackend(device)
        found = usb.core.find(idVendor=VID, idProduct=PID, backend=backend)
        assert found is not None
        assert found.serial_number == SERIAL and found.product == "SIM card reader"
        configs = list(found)  # walks configurations, interfaces, alternate settings
        assert [[e.bEndpointAddress for e in intf] for intf in configs[0]] == [[0x01, 0x81]]
        usb.util.dispose_resources(found)


async def test_open_errors_are_clear(no_backend_left: None) -> None:
    async with usb_bus(reader(interval=None)):
        with pytest.raises(TransportOpenError, match="no such USB device"):
            await open_transport(f"usb://{VID:04x}:{PID:04x}?serial=OTHER")
        with pytest.raises(TransportOpenError, match="expected usb://VID:PID"):
            await open_transport("usb://reader")


async def test_a_closed_port_never_opens_the_device_again(no_backend_left: None) -> None:
    """pyusb opens a device and claims its interface again, implicitly, for a transfer after
    ``dispose_resources``: the reader thread's last read racing the close did so (a second
    session on the bus that nobody ended). A closed port refuses the transfer instead."""
    async with usb_bus(reader(interval=None)) as device:
        port = await asyncio.to_thread(UsbPort, parse_usb_url(URL))
        assert device.sessions == 1
        await asyncio.to_thread(port.close)
        with pytest.raises(ConnectionResetError, match="closed"):
            await asyncio.to_thread(port.read)
        with pytest.raises(ConnectionResetError, match="closed"):
            await asyncio.to_thread(port.write, b"\x00")
        assert device.sessions == 1


async def test_an_open_cancelled_while_the_device_powers_up_closes_what_it_opened(
    no_backend_left: None,
) -> None:
    """The open runs in a thread, which cancelling cannot stop: the cancelled open returns once
    that thread's port is closed again, not leaving it claimed until the garbage collector
    happens to dispose of it (or never, in a reference cycle)."""
    async with usb_bus(reader(interval=None)) as device:
        device.power_up_s = 0.5
        opening = asyncio.create_task(open_transport(URL))
        await asyncio.sleep(0.1)  # the open is in the claim, waiting for the firmware
        opening.cancel()
        with pytest.raises(asyncio.CancelledError):
            await opening
        assert device.sessions == 1  # the thread's open had finished
        await until(lambda: device.running == 0, within=10)  # and its port was closed


async def test_usb_reader_end_to_end_with_bus_faults(
    mosquitto: Mosquitto, tmp_path: Path, no_backend_left: None
) -> None:
    sim = reader(
        "blackjack@1", "stall=2@2", "usb_timeout=1@3", "tamper@4", "door@5", "unplug=0.5@6",
        "selftest_fail@7", "malfunction@9",
    )  # fmt: skip
    async with usb_bus(sim) as device:
        subscriber = Subscriber(mosquitto.url, "tableside/#")
        sub_task = asyncio.create_task(subscriber.run())
        await asyncio.wait_for(subscriber.connected.wait(), 10)
        config = make_config(
            mosquitto.url, {"card_reader": URL}, tmp_path, Game.SPANISH_21, heartbeat_timeout=0.5
        )
        daemon = TableDaemon(config)
        task = asyncio.create_task(daemon.run())
        try:
            sub = subscriber
            checks = await sub.wait_for(event("hole_card_checked"), count=1)
            assert checks[0].payload["data"] == {"check_id": 1, "blackjack": True}
            faults = await sub.wait_for(event("fault"), count=2)
            assert [f.payload["data"]["fault"] for f in faults] == ["tamper", "door_open"]
            # unplug: ENODEV ends the link; the reader is found again when it is back
            await sub.wait_for(state("disconnected"))
            await sub.wait_for(
                lambda m: (
                    m.kind == "state"
                    and m.payload["connection"] == "connected"
                    and m.payload["connects"] >= 2
                ),
                within=30,
            )
            assert device.sessions >= 2
            # Cycles 1-3, 7 and 8 check a card (4 and 5 are faults, 6 is cut off by the unplug).
            # Then the malfunction that halts the reader (551.16(m)).
            await sub.wait_for(
                lambda m: (
                    m.kind == "event"
                    and m.payload["event"] == "hole_card_checked"
                    and m.payload["data"]["check_id"] >= 5
                ),
                within=30,
            )
            malfunction = await sub.wait_for(
                lambda m: m.kind == "event" and m.payload["event"] == "fault"
                and m.payload["data"]["fault"] == "malfunction", within=30,
            )  # fmt: skip
            assert malfunction
            halt = await sub.wait_for(lambda m: m.kind == "ruling")
            assert halt[0].payload["clause"] == "58 Pa. Code § 551.16(m)"
            assert halt[0].payload["actions"] == ["halt_dealing", "alert"]
            # The dealer runs the self-test: it fails (scripted at cycle 7), the fault stays.
            async with aiomqtt.Client("127.0.0.1", mosquitto.port) as client:
                await client.publish(
                    "tableside/hil-1/command/dealer",
                    json.dumps({"command": "self_test", "device": "card_reader"}),
                    qos=1,
                )
            (result,) = await sub.wait_for(event("self_test"))
            assert result.payload["data"]["passed"] is False
            reader_state = await sub.wait_for(
                lambda m: m.kind == "state" and m.payload.get("fault") == "malfunction"
            )
            assert reader_state[-1].payload["identity"]["model"] == "SIM-READER-1"
            assert device.pending_stalls == 0 and device.pending_write_timeouts == 0
            assert not task.done()
        finally:
            await stop(task)
            await stop(sub_task)


async def test_same_driver_over_a_serial_line(mosquitto: Mosquitto, tmp_path: Path) -> None:
    sim = reader("blackjack@2")
    async with simulated_table(
        mosquitto.url, tmp_path, simulator(interval=None), others={"card_reader": sim},
        mode="pty", game=Game.SPANISH_21,
    ) as table:  # fmt: skip
        checks = await table.subscriber.wait_for(event("hole_card_checked"), count=2)
        assert [c.payload["data"]["blackjack"] for c in checks][1] is True
        status = table.subscriber.matching(event("status"))
        reader_status = [s for s in status if s.topic.endswith("/card_reader/event")]
        assert reader_status[0].payload["data"]["reveals_hole_card"] is False
        assert reader_status[0].payload["data"]["reveals_source"] == "device"


@pytest.mark.parametrize(("reveals", "clause"), [(True, "551.16(l)(1)"), (False, "551.16(l)(2)")])
async def test_reader_used_on_a_wrong_up_card_through_the_daemon(
    mosquitto: Mosquitto, tmp_path: Path, reveals: bool, clause: str
) -> None:
    """The dealer says the up card is a 7; the reader then checks the hole card: the ruling
    depends on what the reader itself reports of its model (551.16(l)(1) or (2))."""
    import json

    import aiomqtt

    sim = reader(reveals_hole_card=reveals)
    async with simulated_table(
        mosquitto.url, tmp_path, simulator(interval=None), others={"card_reader": sim},
        game=Game.SPANISH_21,
    ) as table:  # fmt: skip
        sub = table.subscriber
        await sub.wait_for(event("status"))
        await table.daemon.publisher.connected.wait()
        async with aiomqtt.Client("127.0.0.1", mosquitto.port) as client:
            for role, command, args in (("floorperson", "open_table", {}),
                                        ("floorperson", "reader_inspected", {}),
                                        ("dealer", "start_round", {}),
                                        ("dealer", "up_card", {"rank": "7"})):  # fmt: skip
                body = {"command": command, "device": "table", "args": args}
                await client.publish(f"tableside/hil-1/command/{role}", json.dumps(body), qos=1)
        found = await sub.wait_for(
            lambda m: m.kind == "ruling" and m.payload["clause"] == f"58 Pa. Code § {clause}"
        )
        assert found[0].payload["event"]["event"] == "hole_card_checked"


async def test_a_rank_as_a_person_types_it_through_the_daemon(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    """``tableside command … up_card rank=7``: the command line reads ``7`` as a number, and a
    rank is a rank however it is spelt (it was refused: "Input should be 'A', '2', …"); ``k``
    and ``king`` are the king; ``11`` could be a jack or an ace and is refused, saying what a
    rank may be."""
    from tableside.cli import main

    async with simulated_table(
        mosquitto.url, tmp_path, simulator(interval=None), others={"card_reader": reader()},
        game=Game.SPANISH_21,
    ) as table:  # fmt: skip
        await table.daemon.publisher.connected.wait()
        common = ["--table", "hil-1", "--broker", mosquitto.url]

        def ask(role: str, name: str, *args: str) -> int:
            return main(["command", role, "table", name, *args, *common])

        assert await asyncio.to_thread(ask, "floorperson", "open_table") == 0
        assert await asyncio.to_thread(ask, "floorperson", "reader_inspected") == 0
        assert await asyncio.to_thread(ask, "dealer", "start_round") == 0
        assert await asyncio.to_thread(ask, "dealer", "up_card", "rank=7") == 0
        assert table.daemon.runtime.state.up_card == "7"
        for spelt in ("rank=k", "rank=king", 'rank="K"'):
            assert await asyncio.to_thread(ask, "dealer", "up_card", spelt) == 0, spelt
            assert table.daemon.runtime.state.up_card == "K"
        # refused by the command line itself, saying why, before anything is sent (exit 2)
        assert await asyncio.to_thread(ask, "dealer", "up_card", "rank=11") == 2
        assert table.daemon.runtime.state.up_card == "K"
        from tableside.rules.commands import COMMANDS, Refused

        with pytest.raises(
            Refused, match=r"rank: a card's rank is A \(or ace, 1\), 2..10.*\(got 11\)"
        ):
            COMMANDS["up_card"].parse({"rank": 11})
