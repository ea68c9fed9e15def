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
from paho.mqtt.subscribeoptions import SubscribeOptions
from pydantic import BaseModel

from tableside.daemon import proof
from tableside.daemon.payloads import (
    CommandResult,
    DeviceEventPayload,
    DeviceStatePayload,
    RulingPayload,
    StatusPayload,
    TablePayload,
)

from .conftest import Mosquitto
from .hil import stop

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


@dataclass
class Listener:
    """MQTT v5, Retain As Published (the retain flag is part of the hash)."""

    port: int
    heard: dict[str, list[Heard]] = field(default_factory=lambda: defaultdict(list))
    subscribed: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        async with aiomqtt.Client(
            "127.0.0.1", self.port, protocol=aiomqtt.ProtocolVersion.V5
        ) as client:
            options = SubscribeOptions(qos=1, retainAsPublished=True)
            await client.subscribe("tableside/#", options=options)
            self.subscribed.set()
            async for m in client.messages:
                assert isinstance(m.payload, bytes)
                data = json.loads(m.payload)
                if data.get("will"):
                    continue  # the last will repeats a seq, and carries no chain entry
                chain = proof.Chain.from_properties(getattr(m.properties, "UserProperty", None))
                self.heard[data["table"]].append(
                    Heard(data["seq"], str(m.topic), m.retain, m.payload, chain)
                )


async def test_a_small_fleet_loses_nothing_and_every_chain_holds(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    listener = Listener(mosquitto.port)
    task = asyncio.create_task(listener.run(), name="listener")
    try:
        await asyncio.wait_for(listener.subscribed.wait(), 10)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(FLEET), "--tables", "3", "--rate", "25", "--duration", "2.5",
            "--daemons", "1", "--checkpoint-interval", "0.5", "--bad-deck-every", "2",
            "--ramp", "0.3", "--broker", mosquitto.url, "--out", str(tmp_path),
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
    for table, row in tables.items():
        heard = listener.heard[table]
        seqs = [h.seq for h in heard]
        # every seq once, in order, and nothing after the last the report names
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
