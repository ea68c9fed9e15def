"""systemd/mosquitto-bridge.conf as shipped: a pit broker (the shipped broker config and ACL)
bridging every table's messages to a floor broker (the same), both real Mosquittos on free
loopback ports. A table publishes on the pit broker; a persistent subscriber on the floor broker
gets every seq, with its chain entry, across a restart of the floor broker mid-stream."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiomqtt
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from tableside.wire.proof import GENESIS, Chain, record_hash

from .conftest import SYSTEMD, Mosquitto
from .hil import stop, until

#: every test here starts brokers (conftest's fixture does not mark them: they start their own)
pytestmark = pytest.mark.slow

BRIDGE = "pit-01-bridge"
TABLE = "cs-01"
TOPIC = f"tableside/{TABLE}/device/shuffler/event"


def pit_and_floor(directory: Path) -> tuple[Mosquitto, Mosquitto]:
    """Two brokers as shipped; the pit's bridges to the floor with mosquitto-bridge.conf, only
    the floor's address and the bridge's password put in."""
    (directory / "floor").mkdir()
    (directory / "pit").mkdir()
    users = (TABLE, "surveillance", "dealer-ann", "floor", BRIDGE)
    floor = Mosquitto.shipped(directory / "floor", users)
    pit = Mosquitto.shipped(directory / "pit", users)
    text = (SYSTEMD / "mosquitto-bridge.conf").read_text(encoding="utf-8")
    for pattern, replacement in (
        (r"^address floor-broker\.casino\.internal:1883$", f"address 127.0.0.1:{floor.port}"),
        (r"^remote_password change-me$", "remote_password pw"),
    ):
        text, n = re.subn(pattern, replacement, text, flags=re.M)
        assert n == 1, f"the shipped bridge config no longer has {pattern!r}: update this test"
    with pit.conf.open("a", encoding="utf-8") as conf:
        conf.write("\n" + text)
    return pit, floor


@dataclass
class FloorSubscriber:
    """A persistent MQTT v5 session on the floor broker (what `tableside floor` will hold)."""

    port: int
    seqs: list[int] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    chains: dict[int, bool] = field(default_factory=dict)
    bridge_state: str | None = None
    connections: int = 0

    async def run(self) -> None:
        while True:
            properties = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
            properties.SessionExpiryInterval = 3600
            client = aiomqtt.Client(
                "127.0.0.1", self.port, username="surveillance", password="pw",
                identifier="surveillance", protocol=aiomqtt.ProtocolVersion.V5,
                clean_start=False, properties=properties,
            )  # fmt: skip
            try:
                async with client:
                    self.connections += 1
                    await client.subscribe("tableside/#", qos=1)
                    await client.subscribe("tableside-bridge/#", qos=1)
                    async for m in client.messages:
                        assert isinstance(m.payload, bytes)
                        if str(m.topic).startswith("tableside-bridge/"):
                            self.bridge_state = m.payload.decode()
                            continue
                        self.topics.append(str(m.topic))
                        if "/command/" in str(m.topic):
                            continue
                        seq = json.loads(m.payload)["seq"]
                        self.seqs.append(seq)
                        pairs = getattr(m.properties, "UserProperty", None)
                        chain = Chain.from_properties(pairs)
                        self.chains[seq] = chain is not None and chain.holds(
                            seq, str(m.topic), m.retain, m.payload
                        )
            except aiomqtt.MqttError:
                await asyncio.sleep(0.2)


@asynccontextmanager
async def table_on(pit: Mosquitto) -> AsyncIterator[aiomqtt.Client]:
    async with aiomqtt.Client(
        "127.0.0.1", pit.port, username=TABLE, password="pw", identifier=TABLE,
        protocol=aiomqtt.ProtocolVersion.V5,
    ) as client:  # fmt: skip
        yield client


class Stream:
    """A table's messages: seq after seq, each with its chain entry."""

    def __init__(self) -> None:
        self.prev = GENESIS
        self.seq = 0

    async def send(self, client: aiomqtt.Client) -> None:
        self.seq += 1
        payload = json.dumps(
            {"table": TABLE, "ts": "2026-12-01T00:00:00.000Z", "seq": self.seq,
             "republished": False, "redelivered": False, "device": "shuffler",
             "device_class": "shuffler", "event": "shuffle_complete", "data": {}},
            separators=(",", ":"),
        ).encode()  # fmt: skip
        ts = 1764547200.0 + self.seq
        digest = record_hash(self.prev, self.seq, ts, TOPIC, False, payload)
        properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        properties.UserProperty = Chain(self.prev, digest, ts).properties()
        self.prev = digest
        await client.publish(TOPIC, payload, qos=1, properties=properties)


async def test_every_seq_crosses_the_bridge_across_a_floor_broker_restart(
    tmp_path: Path,
) -> None:
    pit, floor = pit_and_floor(tmp_path)
    floor.start()
    pit.start()
    subscriber = FloorSubscriber(floor.port)
    task = asyncio.create_task(subscriber.run(), name="floor.subscriber")
    try:
        await until(lambda: subscriber.bridge_state == "1", within=30)
        stream = Stream()
        async with table_on(pit) as table:
            for _ in range(200):
                await stream.send(table)
            await until(lambda: len(set(subscriber.seqs)) == 200, within=30)
            assert all(subscriber.chains.values()), "a chain entry was lost or altered"

            # mid-stream: the floor broker restarts (a clean stop: its sessions are saved)
            floor.stop()
            for _ in range(300):  # queued at the pit broker for the bridge meanwhile
                await stream.send(table)
            floor.start()
            for _ in range(100):
                await stream.send(table)
                await asyncio.sleep(0.002)
        await until(lambda: len(set(subscriber.seqs)) == 600, within=60)
    finally:
        await stop(task)
        pit.stop()
        floor.stop()
    assert set(subscriber.seqs) == set(range(1, 601))
    assert all(subscriber.chains.values()), "a chain entry was lost or altered"
    assert subscriber.connections >= 2  # it did lose the floor broker
    # in order, apart from what QoS 1 may send twice
    firsts = list(dict.fromkeys(subscriber.seqs))
    assert firsts == sorted(firsts)


async def test_the_bridge_forwards_no_requests_to_the_floor(tmp_path: Path) -> None:
    """People's requests stay in the pit: the floor broker's ACL refuses them from a bridge
    (which forwards everything under tableside/ in the order the pit broker had it)."""
    pit, floor = pit_and_floor(tmp_path)
    floor.start()
    pit.start()
    subscriber = FloorSubscriber(floor.port)
    task = asyncio.create_task(subscriber.run(), name="floor.subscriber")
    try:
        await until(lambda: subscriber.bridge_state == "1", within=30)
        async with aiomqtt.Client(
            "127.0.0.1", pit.port, username="dealer-ann", password="pw",
            identifier="dealer-ann",
        ) as dealer:  # fmt: skip
            # the pit broker takes the request (its ACL lets a dealer ask as a dealer) ...
            await dealer.publish(f"tableside/{TABLE}/command/dealer", b"{}", qos=1)
            stream = Stream()
            async with table_on(pit) as table:
                await stream.send(table)  # ... and the table's message after it
        await until(lambda: subscriber.seqs == [1], within=30)
    finally:
        await stop(task)
        pit.stop()
        floor.stop()
    assert subscriber.topics == [TOPIC]


async def test_what_waits_for_the_floor_survives_a_pit_broker_restart(tmp_path: Path) -> None:
    """The floor broker is down; the pit broker queues for the bridge, on disk; the pit broker
    restarts (a clean stop) before the floor broker is back: nothing is lost."""
    pit, floor = pit_and_floor(tmp_path)
    floor.start()
    pit.start()
    subscriber = FloorSubscriber(floor.port)
    task = asyncio.create_task(subscriber.run(), name="floor.subscriber")
    try:
        await until(lambda: subscriber.bridge_state == "1", within=30)
        stream = Stream()
        async with table_on(pit) as table:
            await stream.send(table)
        await until(lambda: subscriber.seqs == [1], within=30)
        floor.stop()
        async with table_on(pit) as table:
            for _ in range(150):
                await stream.send(table)
        pit.stop()
        pit.start()
        floor.start()
        await until(lambda: len(set(subscriber.seqs)) == 151, within=60)
    finally:
        await stop(task)
        pit.stop()
        floor.stop()
    assert set(subscriber.seqs) == set(range(1, 152))
    assert all(subscriber.chains.values())


async def test_the_floors_replay_requests_reach_the_table_in_the_pit(tmp_path: Path) -> None:
    """The floor repairs a gap by asking the table (``command/auditor``, docs/floor.md): the
    bridge carries that one kind of request into the pit, once, and not back out again; a
    request of any other role sent on the floor broker stays there."""
    pit, floor = pit_and_floor(tmp_path)
    floor.start()
    pit.start()
    subscriber = FloorSubscriber(floor.port)
    task = asyncio.create_task(subscriber.run(), name="floor.subscriber")
    heard: list[str] = []
    try:
        await until(lambda: subscriber.bridge_state == "1", within=30)
        async with table_on(pit) as table:
            await table.subscribe(f"tableside/{TABLE}/command/+", qos=1)

            async def listen() -> None:
                async for m in table.messages:
                    heard.append(str(m.topic))

            listening = asyncio.create_task(listen(), name="table.listen")
            try:
                async with aiomqtt.Client(
                    "127.0.0.1", floor.port, username="floor", password="pw",
                    identifier="floor", protocol=aiomqtt.ProtocolVersion.V5,
                ) as asker:  # fmt: skip
                    await asker.publish(f"tableside/{TABLE}/command/auditor", b"{}", qos=1)
                async with aiomqtt.Client(
                    "127.0.0.1", floor.port, username="dealer-ann", password="pw",
                    identifier="dealer-ann",
                ) as dealer:  # fmt: skip
                    await dealer.publish(f"tableside/{TABLE}/command/dealer", b"{}", qos=1)
                await until(lambda: heard == [f"tableside/{TABLE}/command/auditor"], within=30)
                stream = Stream()
                await stream.send(table)  # a table's message after it, to know the bridge is done
                await until(lambda: subscriber.seqs == [1], within=30)
            finally:
                await stop(listening)
    finally:
        await stop(task)
        pit.stop()
        floor.stop()
    assert heard == [f"tableside/{TABLE}/command/auditor"]
    requests = [f"tableside/{TABLE}/command/{role}" for role in ("auditor", "dealer")]
    assert subscriber.topics == [*requests, TOPIC]  # the auditor's once: not echoed back
