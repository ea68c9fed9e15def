"""bench/fleet.py for a few tables for a couple of seconds against the test's own Mosquitto: a
plain MQTT v5 subscriber gets every seq of every table, each message's chain entry holds and
links to the one before, every checkpoint's signature verifies against the key the fleet wrote,
every payload is one of the daemon's models, and the report names the last seq of each."""

from __future__ import annotations

import asyncio
import json
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import aiomqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions
from pydantic import BaseModel

from tableside.wire import proof
from tableside.wire.payloads import (
    CommandResult,
    DeviceEventPayload,
    DeviceStatePayload,
    RulingPayload,
    StatusPayload,
    TablePayload,
)

from .conftest import Mosquitto
from .hil import record_dup_flags, stop

FLEET = Path(__file__).parents[1] / "bench" / "fleet.py"
MODELS: dict[str, type[BaseModel]] = {
    "status": StatusPayload,
    "state": DeviceStatePayload,
    "event": DeviceEventPayload,
    "ruling": RulingPayload,
    "table": TablePayload,
    "command_result": CommandResult,
}


@dataclass
class Heard:
    seq: int
    topic: str
    retain: bool
    payload: bytes
    chain: proof.Chain | None
    #: the MQTT DUP flag: the broker sent it again after its own delivery went unacknowledged
    dup: bool = False


@dataclass
class Listener:
    """MQTT v5, Retain As Published (the retain flag is part of the hash); with a client id, a
    persistent session that connects again when the broker comes back."""

    port: int
    client_id: str | None = None
    heard: dict[str, list[Heard]] = field(default_factory=lambda: defaultdict(list))
    subscribed: asyncio.Event = field(default_factory=asyncio.Event)
    connections: int = 0

    async def run(self) -> None:
        while True:
            properties = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
            properties.SessionExpiryInterval = 3600 if self.client_id else 0
            client = aiomqtt.Client(
                "127.0.0.1", self.port, identifier=self.client_id,
                protocol=aiomqtt.ProtocolVersion.V5, clean_start=self.client_id is None,
                properties=properties,
            )  # fmt: skip
            dups = record_dup_flags(client)
            try:
                async with client:
                    self.connections += 1
                    # retained messages only for a new subscription: not again on reconnecting
                    options = SubscribeOptions(qos=1, retainAsPublished=True, retainHandling=1)
                    await client.subscribe("tableside/#", options=options)
                    self.subscribed.set()
                    async for m in client.messages:
                        self._take(m, dups.popleft())
            except aiomqtt.MqttError:
                await asyncio.sleep(0.1)

    def _take(self, m: aiomqtt.Message, dup: bool) -> None:
        assert isinstance(m.payload, bytes)
        data = json.loads(m.payload)
        if data.get("will"):
            return  # the last will repeats a seq, and carries no chain entry
        chain = proof.Chain.from_properties(getattr(m.properties, "UserProperty", None))
        self.heard[data["table"]].append(
            Heard(data["seq"], str(m.topic), m.retain, m.payload, chain, dup)
        )


async def fleet(broker: Mosquitto, out: Path, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, str(FLEET), "--broker", broker.url, "--out", str(out), *args
    )


async def test_a_small_fleet_loses_nothing_and_every_chain_holds(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    listener = Listener(mosquitto.port)
    task = asyncio.create_task(listener.run(), name="listener")
    try:
        await asyncio.wait_for(listener.subscribed.wait(), 10)
        proc = await fleet(
            mosquitto, tmp_path, "--tables", "3", "--rate", "25", "--duration", "2.5",
            "--daemons", "1", "--checkpoint-interval", "0.5", "--bad-deck-every", "2",
            "--ramp", "0.3", "--check-at", mosquitto.url,
        )  # fmt: skip
        assert await asyncio.wait_for(proc.wait(), 60) == 0
        report = json.loads((tmp_path / "fleet.json").read_text(encoding="utf-8"))
        keys = json.loads((tmp_path / "keys.json").read_text(encoding="utf-8"))
        tables = report["tables"]
        assert set(tables) == {"fleet-0001", "fleet-0002", "fleet-0003", "fleet-d01"}
        assert set(keys) == set(tables)

        def all_heard() -> bool:
            return all(
                {h.seq for h in listener.heard[t]} >= set(range(r["last_seq"] + 1))
                for t, r in tables.items()
            )

        async with asyncio.timeout(20):
            while not all_heard():
                await asyncio.sleep(0.05)
    finally:
        await stop(task)

    assert report["messages"] == sum(r["messages"] for r in tables.values() if not r.get("daemon"))
    # the fleet's own check (--check-at) saw what this test's subscriber saw
    check = report["check"]
    assert check["missing"] == 0 and check["duplicates"] == 0
    assert check["received"] == sum(r["last_seq"] + 1 for r in tables.values())
    assert 0 < check["journaled_to_received_ms"]["p99"] < 5000
    for table, row in tables.items():
        heard = listener.heard[table]
        seqs = [h.seq for h in heard]
        # every seq once, in order, and nothing after the last the report names
        assert row["first_seq"] == 0
        assert seqs == list(range(row["last_seq"] + 1)), f"{table}: {seqs}"
        if row.get("daemon"):
            continue  # a daemon's chain entries come with the table-proof branch
        assert row["messages"] == row["last_seq"] + 1 and row["unsent"] == 0
        key = proof.trusted_key(keys[table])
        prev = proof.GENESIS
        hashes: dict[int, bytes] = {}
        kinds: set[str] = set()
        for h in heard:
            assert h.chain is not None, f"{table} seq {h.seq}: no chain entry"
            assert h.chain.holds(h.seq, h.topic, h.retain, h.payload), f"{table} seq {h.seq}"
            assert h.chain.prev == prev, f"{table} seq {h.seq}: the chain breaks"
            prev = hashes[h.seq] = h.chain.hash
            kind = h.topic.rsplit("/", 1)[-1]
            kinds.add(kind)
            if kind == "checkpoint":
                body = json.loads(h.payload)
                assert body["key"] == keys[table]
                assert bytes.fromhex(body["head"]) == hashes[body["upto_seq"]]
                signature = bytes.fromhex(body["signature"])
                assert proof.verify_checkpoint(
                    key, table, body["upto_seq"], bytes.fromhex(body["head"]), signature
                )
            else:
                MODELS[kind].model_validate_json(h.payload)  # the daemon's own schema
        assert {"status", "state", "event", "ruling", "table", "command_result",
                "checkpoint"} <= kinds  # fmt: skip
        assert row["checkpoints"] >= 3 and row["rulings"] >= 1
        assert json.loads(heard[-1].payload)["status"] == "offline"  # the last word


async def test_the_fleet_rides_out_a_broker_restart(tmp_path: Path) -> None:
    """The broker stops and starts again mid-run: each table connects again and sends again
    what was not acknowledged, marked redelivered (its chain entry still holds); a persistent
    subscriber gets every seq."""
    (tmp_path / "broker").mkdir()
    broker = Mosquitto(tmp_path / "broker", persistent=True)
    broker.start()
    listener = Listener(broker.port, client_id="auditor-1")
    task = asyncio.create_task(listener.run(), name="listener")
    try:
        await asyncio.wait_for(listener.subscribed.wait(), 10)
        proc = await fleet(
            broker, tmp_path, "--tables", "3", "--rate", "40", "--duration", "5", "--ramp", "0.2",
        )  # fmt: skip
        async with asyncio.timeout(20):
            while min(len(listener.heard[f"fleet-000{i}"]) for i in (1, 2, 3)) < 20:
                await asyncio.sleep(0.02)
        broker.stop()
        broker.start()
        assert await asyncio.wait_for(proc.wait(), 60) == 0
        report = json.loads((tmp_path / "fleet.json").read_text(encoding="utf-8"))
        tables = report["tables"]
        async with asyncio.timeout(20):
            while not all(
                {h.seq for h in listener.heard[t]} >= set(range(r["last_seq"] + 1))
                for t, r in tables.items()
            ):
                await asyncio.sleep(0.05)
    finally:
        await stop(task)
        broker.stop()
    assert listener.connections >= 2
    for table, row in tables.items():
        assert row["connections"] >= 2, f"{table} never lost the broker"
        assert row["unsent"] == 0
        heard = listener.heard[table]
        assert {h.seq for h in heard} == set(range(row["last_seq"] + 1))
        for h in heard:
            assert h.chain is not None and h.chain.holds(h.seq, h.topic, h.retain, h.payload)
        # a repeat is marked: redelivered by the table, or the DUP flag of the broker's own resend
        unmarked = [h.seq for h in heard if b'"redelivered":true' not in h.payload and not h.dup]
        assert len(unmarked) == len(set(unmarked)), f"{table}: an unmarked duplicate"
        # each connection after the first journaled an "online" of its own
        online = [h for h in heard if h.topic.endswith("/status") and b'"online"' in h.payload]
        assert len({h.seq for h in online}) == row["connections"]
