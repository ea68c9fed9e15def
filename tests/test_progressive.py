"""The progressive / bonus wager system: ccTalk codec, and the control device and the acceptor
bus end to end: lock-out, late wagers, and every seat fault reaching the daemon typed."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import aiomqtt
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tableside.daemon.app import TableDaemon
from tableside.daemon.config import BrokerConfig, Config, DeviceConfig, TableConfig
from tableside.drivers.cctalk.driver import AcceptorBusOptions
from tableside.drivers.cctalk.protocol import (
    BadChecksum,
    CcTalkDecoder,
    CcTalkFrame,
    decode_credit_buffer,
)
from tableside.drivers.framing import Frame
from tableside.drivers.messages import Message
from tableside.drivers.progressive import protocol as pp
from tableside.rules.model import Game
from tableside.simulators.progressive import (
    ControllerSettings,
    ProgressiveControllerSimulator,
    progressive_table,
)

from .conftest import Mosquitto
from .hil import Predicate, Subscriber, event, start_simulator, stop

frames = st.builds(
    CcTalkFrame,
    st.integers(0, 255),
    st.integers(0, 255),
    st.integers(0, 255),
    st.binary(max_size=40),
)


@given(st.lists(frames, min_size=1, max_size=5), st.data())
def test_cctalk_frames_round_trip_split_anywhere(
    batch: list[CcTalkFrame], data: st.DataObject
) -> None:
    wire = b"".join(f.to_bytes() for f in batch)
    cut = data.draw(st.integers(0, len(wire)))
    decoder = CcTalkDecoder()
    got = []
    for part in (wire[:cut], wire[cut:]):
        decoder.feed(part)
        while isinstance(item := decoder.next_event(), CcTalkFrame):
            got.append(item)
    assert got == batch
    assert sum(batch[0].to_bytes()) % 256 == 0  # the simple checksum


@given(st.binary(max_size=300))
def test_cctalk_decoder_never_raises(noise: bytes) -> None:
    decoder = CcTalkDecoder()
    decoder.feed(noise)
    for _ in range(len(noise) + 1):
        if not isinstance(decoder.next_event(), CcTalkFrame | BadChecksum):
            break


def test_cctalk_length_over_the_limit_is_not_a_frame() -> None:
    # Found by bench/fuzz.py: a LEN byte of 253..255 whose checksum happens to work out.
    body = bytes((1, 255, 3, 0)) + bytes(255)
    decoder = CcTalkDecoder()
    decoder.feed(body + bytes(((-sum(body)) & 0xFF,)))
    for _ in range(len(body) + 2):
        item = decoder.next_event()
        assert not isinstance(item, CcTalkFrame) or len(item.data) <= 252


def test_cctalk_known_bytes_and_credit_buffer() -> None:
    # Simple poll to address 2 from the host: 02 00 01 FE FF (from the ccTalk specification)
    assert CcTalkFrame(2, 1, 254).to_bytes() == bytes.fromhex("020001feff")
    counter, results = decode_credit_buffer(bytes([7, 1, 0, 0, 2, 0, 0, 0, 0, 0, 0]))
    assert counter == 7 and results[:2] == [(1, 0), (0, 2)]
    with pytest.raises(ValueError, match="11 bytes"):
        decode_credit_buffer(b"\x01")


controller_messages: st.SearchStrategy[Message] = st.one_of(
    st.builds(pp.ControllerStatus, st.booleans(), st.integers(0, 127), st.booleans(), st.booleans(),
              st.integers(0, 2**32 - 1)),
    st.builds(pp.ButtonPressed, st.sampled_from(pp.Button)),
    st.builds(pp.LightsState, st.integers(0, 127)),
    st.builds(pp.KeySwitch, st.booleans()),
    st.builds(pp.DoorChanged, st.booleans()),
    st.builds(pp.SetLights, st.integers(0, 127)),
    st.builds(pp.SetMeter, st.integers(0, 2**32 - 1)),
)  # fmt: skip


@given(controller_messages, st.integers(0, 255))
def test_every_controller_message_round_trips(message: Message, seq: int) -> None:
    frame = Frame.from_bytes(pp.PROTOCOL.encode(message, seq).to_bytes())
    assert pp.PROTOCOL.decode(frame) == message


def kind_is(name: str, **data: Any) -> Predicate:
    return lambda m: (
        m.kind == "event" and m.payload["event"] == name
        and all(m.payload["data"].get(k) == v for k, v in data.items())
    )  # fmt: skip


SEATS = {1: 3, 2: 4, 3: 5}


async def test_progressive_system_end_to_end(mosquitto: Mosquitto, tmp_path: Path) -> None:
    controller, bus = progressive_table(
        SEATS,
        ["jam@2", "late_wager@3", "ignore_inhibit@1", "bad_checksum@3", "stuck_light@1",
         "no_reply=2@1", "power_cycle=3@2"],
        interval=1.5, heartbeat=0.2, betting_time=0.3, players=(1, 2, 3),
    )  # fmt: skip
    controller_url, controller_task = await start_simulator(controller, "socket")
    bus_url, bus_task = await start_simulator(bus, "socket")  # type: ignore[arg-type]
    config = Config(
        table=TableConfig(id="prog-1", game=Game.CARIBBEAN_STUD, state_dir=tmp_path),
        broker=BrokerConfig(url=mosquitto.url),
        devices={
            "progressive": DeviceConfig(
                driver="tableside.progressive_controller", url=controller_url, heartbeat_timeout_s=1
            ),
            "acceptors": DeviceConfig(
                driver="tableside.acceptors", url=bus_url, retries=2,
                options=AcceptorBusOptions(seats=SEATS, poll_interval_s=0.05)),
        },
    )  # fmt: skip
    sub = Subscriber(mosquitto.url, "tableside/prog-1/#")
    sub_task = asyncio.create_task(sub.run())
    await asyncio.wait_for(sub.connected.wait(), 10)
    daemon = TableDaemon(config)
    task = asyncio.create_task(daemon.run())
    try:
        identities = await sub.wait_for(event("acceptor_identity"), count=3)
        # Nothing was in the acceptors' buffers before the first round.
        assert not sub.matching(event("backlog_at_start"))
        assert {i.payload["data"]["seat"] for i in identities} == {1, 2, 3}
        assert identities[0].payload["data"]["rom_checksum"].startswith("5ea7")
        # Round 1: seats 1 and 3 wager, seat 2's acceptor is jammed; then no more bets.
        lockouts = await sub.wait_for(event("lockout_applied"))
        lockout = lockouts[0]
        assert lockout.payload["data"]["seats"] == [1, 2, 3]
        assert lockout.payload["data"]["unconfirmed"] == []
        await sub.wait_for(kind_is("acceptor_error", seat=2, error="jam"))
        # The late wager at seat 3 is refused by its inhibited acceptor; seat 1's acceptor
        # ignores the inhibit, so its late wager is credited: seen late, never counted.
        await sub.wait_for(kind_is("wager_refused", seat=3))
        late = await sub.wait_for(kind_is("wager_late", seat=1))
        assert late[0].payload["seq"] > lockout.payload["seq"]
        counted = [
            m
            for m in sub.matching(event("wager_accepted"))
            if m.payload["seq"] < late[0].payload["seq"]
        ]
        assert sorted(m.payload["data"]["seat"] for m in counted) == [1, 3]
        # The stuck lamp: light seats 1 and 2, the controller senses only 2.
        async with aiomqtt.Client("127.0.0.1", mosquitto.port) as client:
            await client.publish(
                "tableside/prog-1/command/dealer",
                json.dumps(
                    {"command": "set_lights", "device": "progressive", "args": {"seats": [1, 2]}}
                ),
                qos=1,
            )
        mismatch = await sub.wait_for(event("light_mismatch"))
        assert mismatch[0].payload["data"] == {"seats": [1], "commanded": [1, 2], "lit": [2]}
        # Round 2: seat 1 stops answering, and answers again in round 3.
        await sub.wait_for(kind_is("acceptor_offline", seat=1), within=30)
        await sub.wait_for(kind_is("acceptor_online", seat=1), within=30)
        # Round 3: seat 2 was power-cycled; its event counter went back to 0.
        await sub.wait_for(kind_is("counter_reset", seat=2), within=30)
        # Bets open releases the lock-out, reported once every seat is released (seat by seat,
        # behind the bus's polling); the dealer's no more bets overtakes a release still going
        # on, and a loaded machine's first rounds, their faults retried, may all have been
        # overtaken: a later round's release is reported.
        await sub.wait_for(event("lockout_released"), within=30)
        assert lockout.payload["data"]["confirmed_ms"] > 0
        # The bad checksum in round 1 was retried and reported as line noise, not lost.
        noise = [m for m in sub.matching(event("line_noise")) if "/acceptors/" in m.topic]
        assert noise and noise[0].payload["data"]["crc_errors"] >= 1
        # Each seat's acceptor identity is part of the bus's retained state.
        states = [m for m in sub.matching(lambda m: m.kind == "state" and "/acceptors/" in m.topic)]
        assert set(states[-1].payload["parts"]) == {"seat1", "seat2", "seat3"}
        assert states[-1].payload["parts"]["seat2"]["serial"] == "100002"
        assert not task.done()
    finally:
        await stop(task, controller_task, bus_task, sub_task)
    assert daemon.handling_errors == 0


def test_progressive_faults_are_checked() -> None:
    with pytest.raises(ValueError, match="no acceptor at seat 6"):
        progressive_table(SEATS, ["jam@6"])
    with pytest.raises(ValueError, match="unknown fault 'explode'"):
        progressive_table(SEATS, ["explode@1"])
    with pytest.raises(ValueError, match="VALUE is the round number"):
        progressive_table(SEATS, ["jam=x@1"])


async def test_a_lockout_that_cannot_happen_is_said(mosquitto: Mosquitto, tmp_path: Path) -> None:
    from .conftest import free_port

    controller, _bus = progressive_table(SEATS, [], interval=0.3, heartbeat=0.2, betting_time=0.05)
    controller_url, controller_task = await start_simulator(controller, "socket")
    config = Config(
        table=TableConfig(id="prog-2", game=Game.LET_IT_RIDE, state_dir=tmp_path),
        broker=BrokerConfig(url=mosquitto.url),
        devices={
            "progressive": DeviceConfig(
                driver="tableside.progressive_controller", url=controller_url
            ),
            # nothing listens here: the acceptor bus is down
            "acceptors": DeviceConfig(
                driver="tableside.acceptors",
                url=f"socket://127.0.0.1:{free_port()}",
                options=AcceptorBusOptions(seats=SEATS),
            ),
        },
    )
    sub = Subscriber(mosquitto.url, "tableside/prog-2/#")
    sub_task = asyncio.create_task(sub.run())
    await asyncio.wait_for(sub.connected.wait(), 10)
    task = asyncio.create_task(TableDaemon(config).run())
    try:
        failed = await sub.wait_for(kind_is("table_action_failed", action="lock_out"))
        assert "acceptors: bus is" in failed[0].payload["data"]["detail"]
    finally:
        await stop(task, controller_task, sub_task)


async def test_what_an_acceptor_held_before_we_connected_is_said(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    _controller, bus = progressive_table(SEATS, [])
    seat1 = bus.by_seat[1]
    seat1.accepting = True
    seat1.insert_wager()
    seat1.insert_wager()
    seat1.jammed = True
    seat1.insert_wager()
    bus_url, bus_task = await start_simulator(bus, "socket")  # type: ignore[arg-type]
    config = Config(
        table=TableConfig(id="prog-3", game=Game.LET_IT_RIDE, state_dir=tmp_path),
        broker=BrokerConfig(url=mosquitto.url),
        devices={"acceptors": DeviceConfig(
            driver="tableside.acceptors", url=bus_url,
            options=AcceptorBusOptions(seats=SEATS, poll_interval_s=0.05))},
    )  # fmt: skip
    sub = Subscriber(mosquitto.url, "tableside/prog-3/#")
    sub_task = asyncio.create_task(sub.run())
    await asyncio.wait_for(sub.connected.wait(), 10)
    task = asyncio.create_task(TableDaemon(config).run())
    try:
        (backlog,) = await sub.wait_for(event("backlog_at_start"))
        assert backlog.payload["data"] == {
            "seat": 1, "event_counter": 3, "credits": 2, "errors": ["jam"]
        }  # fmt: skip
        assert not sub.matching(event("wager_accepted"))
    finally:
        await stop(task, bus_task, sub_task)


async def test_progressive_meter_and_payout_through_the_daemon(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    """The meter grows with the wagers the acceptors accept; a royal flush is paid only once
    its light is lit and a floorperson (not the dealer) validated it, from the meter, which then
    starts again at the reset amount; it all survives a restart."""
    from tableside.daemon.config import ProgressiveConfig

    controller, bus = progressive_table(SEATS, [], interval=0.6, heartbeat=0.2,
                                        betting_time=0.2, players=(1, 2, 3))  # fmt: skip
    controller_url, controller_task = await start_simulator(controller, "socket")
    bus_url, bus_task = await start_simulator(bus, "socket")  # type: ignore[arg-type]
    config = Config(
        table=TableConfig(id="prog-2", game=Game.CARIBBEAN_STUD, state_dir=tmp_path),
        broker=BrokerConfig(url=mosquitto.url),
        progressive=ProgressiveConfig(rate_percent=75, initial=10_000, reset=8_000,
                                      straight_flush="ten_percent"),
        devices={
            "progressive": DeviceConfig(driver="tableside.progressive_controller",
                                        url=controller_url, heartbeat_timeout_s=1),
            "acceptors": DeviceConfig(
                driver="tableside.acceptors", url=bus_url,
                options=AcceptorBusOptions(seats=SEATS, poll_interval_s=0.05)),
        },
    )  # fmt: skip
    sub = Subscriber(mosquitto.url, "tableside/prog-2/#")
    sub_task = asyncio.create_task(sub.run())
    await asyncio.wait_for(sub.connected.wait(), 10)

    def table(m: Any) -> bool:
        return bool(m.kind == "table" and not m.retained)

    asked = iter(range(1000))

    async def ask(client: aiomqtt.Client, role: str, command: str, **args: Any) -> dict[str, Any]:
        body = {"command": command, "device": "table" if command != "set_lights" else
                "progressive", "args": args, "request_id": f"r{next(asked)}"}  # fmt: skip
        await client.publish(f"tableside/prog-2/command/{role}", json.dumps(body), qos=1)
        found = await sub.wait_for(
            lambda m: m.kind == "command_result" and m.payload["request_id"] == body["request_id"]
        )
        return dict(found[-1].payload)

    daemon = TableDaemon(config)
    task = asyncio.create_task(daemon.run())
    try:
        wagers = await sub.wait_for(event("wager_accepted"), count=3, within=30)
        meter = await sub.wait_for(lambda m: table(m) and m.payload["meter_cents"] > 10_000_00)
        assert meter[-1].payload["meter_cents"] == 10_000_00 + 75 * len(
            [w for w in sub.matching(event("wager_accepted"))
             if w.payload["seq"] < meter[-1].payload["seq"]])  # fmt: skip
        assert wagers
        async with aiomqtt.Client("127.0.0.1", mosquitto.port) as client:
            assert (await ask(client, "dealer", "progressive_hand", seat=2, hand="royal_flush"))[
                "ok"
            ]
            refused = await ask(client, "dealer", "pay_progressive", seat=2)
            assert "not paid: the light at seat 2 is not lit" in refused["error"]
            assert (await ask(client, "dealer", "set_lights", seats=[2]))["ok"]
            await sub.wait_for(lambda m: table(m) and m.payload["state"]["claims"]
                               and m.payload["state"]["claims"][0]["lit"])  # fmt: skip
            refused = await ask(client, "dealer", "validate_payout", seat=2)
            assert (
                refused["error"]
                == "a dealer may not give 'validate_payout' (it needs: floorperson)"
            )
            assert (await ask(client, "floorperson", "validate_payout", seat=2))["ok"]
            before = daemon.runtime.state.meter_cents
            assert (await ask(client, "dealer", "pay_progressive", seat=2))["ok"]
        (paid,) = [m for m in sub.matching(table) if m.payload["cause"] == "pay_progressive"]
        assert paid.payload["state"]["claims"][0]["paid_cents"] == before
        assert paid.payload["meter_cents"] <= 8_000_00 + 75 * 10  # reset, then a few wagers
    finally:
        await stop(task, controller_task, bus_task, sub_task)
    # Restarted: the meter is where it was, not back at the initial amount.
    kept = daemon.runtime.state.meter_cents
    again = TableDaemon(config)
    assert again.runtime.state.meter_cents == kept
    again.journal.close()


def test_the_controllers_settings_are_its_fields() -> None:
    """``progressive_table`` takes the controller's own fields, but what it makes (its bus and
    its faults), each typed: ``ControllerSettings`` declares them."""
    made = {"bus", "faults", "seat_faults"}
    fields = {f.name for f in dataclasses.fields(ProgressiveControllerSimulator)}
    assert set(ControllerSettings.__optional_keys__) == fields - made
