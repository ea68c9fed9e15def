"""The table's side of the floor's proof (docs/floor.md), against the real daemon and a real
Mosquitto, judged by a plain MQTT v5 subscriber that knows only wire/proof.py: every message
carries a chain entry that holds, across a broker restart (redelivered and republished copies
included); checkpoints are signed with the key `tableside key` prints, and nothing else
verifies; an auditor's replay sends the journaled bytes whose hashes chain, and names what
retention deleted."""

from __future__ import annotations

import asyncio
import itertools
import json
import sqlite3
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiomqtt
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

from tableside.cli import main
from tableside.daemon.app import TableDaemon
from tableside.daemon.config import load_config
from tableside.daemon.journal import verify_file
from tableside.wire import proof

from .conftest import Mosquitto
from .hil import make_config, simulator, start_simulator, stop, until


@dataclass(frozen=True)
class Heard:
    topic: str
    payload: bytes
    retain: bool
    chain: proof.Chain | None

    @property
    def body(self) -> dict[str, Any]:
        return dict(json.loads(self.payload))


@dataclass
class ChainSubscriber:
    """What the floor does first: an MQTT v5 subscription with Retain As Published (the hash
    covers the retain flag a message was sent with), keeping each message's bytes and chain
    entry. With ``session``, a persistent session the broker keeps across its own restart."""

    port: int
    topic: str
    session: str | None = None
    heard: list[Heard] = field(default_factory=list)
    connected: asyncio.Event = field(default_factory=asyncio.Event)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        while True:
            connect = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
            if self.session is not None:
                connect.SessionExpiryInterval = 3600
            client = aiomqtt.Client(
                "127.0.0.1",
                self.port,
                identifier=self.session,
                protocol=aiomqtt.ProtocolVersion.V5,
                clean_start=self.session is None,
                properties=connect,
            )
            try:
                async with client:
                    options = SubscribeOptions(qos=1, retainAsPublished=True)
                    await client.subscribe(self.topic, options=options)
                    self.connected.set()
                    async for m in client.messages:
                        if "/command/" in str(m.topic) or "/response/" in str(m.topic):
                            continue
                        assert isinstance(m.payload, bytes)
                        pairs = getattr(m.properties, "UserProperty", None)
                        chain = proof.Chain.from_properties(pairs)
                        self.heard.append(Heard(str(m.topic), m.payload, m.retain, chain))
                        self._changed.set()
            except aiomqtt.MqttError:
                self.connected.clear()
                await asyncio.sleep(0.1)

    def on(self, suffix: str) -> list[Heard]:
        return [h for h in self.heard if h.topic.endswith(suffix)]

    async def wait_for(self, suffix: str, count: int = 1, within: float = 20) -> list[Heard]:
        async with asyncio.timeout(within):
            while len(found := self.on(suffix)) < count:
                self._changed.clear()
                await self._changed.wait()
        return found


def verify_chains(heard: list[Heard]) -> dict[int, proof.Chain]:
    """Every journaled message's chain entry holds for the bytes received; each seq's copies
    carry one entry; returns the entries by seq."""
    chains: dict[int, proof.Chain] = {}
    for h in heard:
        if h.topic.endswith("/replay"):
            continue  # a replay carries its record in its payload, not as properties
        body = h.body
        if body.get("will"):
            assert h.chain is None, "the will is no journal record: it carries no chain"
            continue
        assert h.chain is not None, f"no chain entry on {h.topic} seq {body['seq']}"
        seq = body["seq"]
        assert h.chain.holds(seq, h.topic, h.retain, h.payload), (h.topic, seq, h.payload[:200])
        if seq in chains:
            assert (chains[seq].prev, chains[seq].hash) == (h.chain.prev, h.chain.hash), seq
        chains[seq] = h.chain
    return chains


def assert_linked(chains: dict[int, proof.Chain], first: int, last: int) -> None:
    """Each seq's chain-prev is the previous seq's chain-hash: nothing missing, inserted or
    reordered between ``first`` and ``last``."""
    missing = [s for s in range(first, last + 1) if s not in chains]
    assert not missing, f"{len(missing)} seq never heard, first {missing[:10]}"
    if first == 0:
        assert chains[0].prev == proof.GENESIS
    for seq in range(first + 1, last + 1):
        assert chains[seq].prev == chains[seq - 1].hash, f"chain broken at seq {seq}"


async def test_every_message_carries_its_chain_across_a_broker_restart(tmp_path: Path) -> None:
    """A busy table while its broker is stopped and started (on persistence, so the
    subscriber's session survives): every message the subscriber has, redelivered and
    republished copies included, carries a chain entry that holds for its bytes, and the
    entries link seq to seq from the first record to the last."""
    (tmp_path / "broker").mkdir()
    broker = Mosquitto(tmp_path / "broker", persistent=True)
    broker.start()
    sim_url, sim_task = await start_simulator(simulator(interval=0.005), "socket")
    sub = ChainSubscriber(broker.port, "tableside/hil-1/#", session="floor-proof")
    sub_task = asyncio.create_task(sub.run(), name="subscriber")
    daemon = TableDaemon(make_config(broker.url, sim_url, tmp_path))
    task: asyncio.Task[None] | None = None
    try:
        await asyncio.wait_for(sub.connected.wait(), 10)
        task = asyncio.create_task(daemon.run(), name="daemon")
        outages = 0
        # Twice or more, until a record went out again marked redelivered: the broker stops,
        # a backlog builds in the journal, the broker returns, and stops again while the
        # backlog is being sent (sends in flight, unacknowledged).
        while daemon.publisher.redelivered == 0 or outages < 2:
            assert outages < 10, "no send was ever in flight when the broker stopped"
            mark = daemon.journal.next_seq + 200
            await until(lambda mark=mark: daemon.journal.acked >= mark, 60)  # type: ignore[misc]
            broker.stop()  # SIGTERM: the broker saves the subscriber's session
            await until(lambda: not daemon.publisher.connected.is_set(), 10)
            backlog = daemon.journal.next_seq + 300
            await until(lambda backlog=backlog: daemon.journal.next_seq >= backlog, 30)  # type: ignore[misc]
            published = daemon.publisher.published
            broker.start()
            await until(lambda published=published: daemon.publisher.published > published, 30)  # type: ignore[misc]
            broker.stop()  # mid-drain
            outages += 2
            await until(lambda: not daemon.publisher.connected.is_set(), 10)
            broker.start()
            await until(lambda: daemon.publisher.connected.is_set(), 30)
        await stop(sim_task)
        async with asyncio.timeout(60):
            await daemon.publisher.flush()
        last = daemon.journal.next_seq - 1
        await until(lambda: max((h.body["seq"] for h in sub.heard), default=-1) >= last, 60)
    finally:
        try:
            await stop(*(t for t in (task, sim_task, sub_task) if t is not None))
        finally:
            broker.stop()
    chains = verify_chains(sub.heard)
    assert_linked(chains, 0, last)
    bodies = [h.body for h in sub.heard]
    redelivered = sum(bool(b.get("redelivered")) for b in bodies)
    republished = sum(bool(b.get("republished")) for b in bodies)
    assert redelivered > 0 and republished > 0, (redelivered, republished)
    print(f"outages {outages}, seqs 0..{last}, messages {len(sub.heard)}, "
          f"redelivered {redelivered}, republished {republished}: every chain holds")  # fmt: skip
    assert verify_file(tmp_path / "hil-1" / "journal.sqlite")[1] == []


def _table_config(path: Path, state_dir: Path, broker: str, shuffler: str, interval: float) -> Path:
    path.write_text(
        f'[table]\nid = "proof-1"\ngame = "caribbean_stud"\nstate_dir = "{state_dir}"\n'
        f'[broker]\nurl = "{broker}"\nkeepalive_s = 5\n'
        f"[proof]\ncheckpoint_interval_s = {interval}\n"
        f'[devices.shuffler]\ndriver = "tableside.shuffler"\nurl = "{shuffler}"\n',
        encoding="utf-8",
    )
    return path


async def test_checkpoints_are_signed_with_the_key_tableside_key_prints(
    mosquitto: Mosquitto, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`tableside key` finds no key before the table's first start; the daemon makes it
    before going online, and keeps it across restarts; every checkpoint (each interval, and
    one on a clean stop, just before "offline") verifies with the printed key for the head the
    chain reached; an altered or forged checkpoint does not."""
    sim_url, sim_task = await start_simulator(simulator(interval=0.05), "socket")
    config_path = _table_config(tmp_path / "t.toml", tmp_path, mosquitto.url, sim_url, 0.3)
    assert main(["key", "--config", str(config_path)]) == 2
    assert "has no key yet" in capsys.readouterr().err
    daemon = TableDaemon(load_config(config_path, use_env=False))
    key_file = tmp_path / "proof-1" / proof.KEY_FILE
    assert key_file.stat().st_mode & 0o777 == 0o600, "made before the daemon runs"
    sub = ChainSubscriber(mosquitto.port, "tableside/proof-1/#")
    sub_task = asyncio.create_task(sub.run(), name="subscriber")
    await asyncio.wait_for(sub.connected.wait(), 10)
    task = asyncio.create_task(daemon.run(), name="daemon")
    try:
        await sub.wait_for("/checkpoint", 3)  # the timer's
        await stop(task)
        first_run_ends = daemon.journal.head[0]
        # again, with a timer that never fires: the stop's checkpoint is the only one
        _table_config(config_path, tmp_path, mosquitto.url, sim_url, 3600)
        daemon = TableDaemon(load_config(config_path, use_env=False))
        task = asyncio.create_task(daemon.run(), name="daemon")
        await until(lambda: daemon.journal.acked >= first_run_ends + 20)
        await stop(task)
        await until(lambda: sub.on("/status")[-1].body["seq"] == daemon.journal.head[0])
    finally:
        await stop(*(t for t in (task, sim_task, sub_task) if not t.done()))
    assert main(["key", "--config", str(config_path)]) == 0
    out, err = capsys.readouterr()
    public_hex = out.strip()
    assert str(key_file) in err
    public = proof.trusted_key(public_hex)
    chains = verify_chains(sub.heard)
    checkpoints = [h.body for h in sub.on("/checkpoint")]
    for c in checkpoints:
        head = bytes.fromhex(c["head"])
        assert c["upto_seq"] == c["seq"] - 1 and c["key"] == public_hex
        assert chains[c["upto_seq"]].hash == head, "it signs the head the chain reached"
        assert chains[c["seq"]].prev == head
        assert proof.verify_checkpoint(public, "proof-1", c["upto_seq"], head,
                                       bytes.fromhex(c["signature"]))  # fmt: skip
    first, second = ([c for c in checkpoints if (c["seq"] > first_run_ends) is later]
                     for later in (False, True))  # fmt: skip
    assert len(first) >= 3
    last = sub.on("/status")[-1].body
    assert last["status"] == "offline" and not last["will"]
    assert [c["seq"] for c in second] == [last["seq"] - 1], "on a clean stop, before offline"
    # altered, or signed by another key: refused
    c = second[0]
    head, signature = bytes.fromhex(c["head"]), bytes.fromhex(c["signature"])
    assert not proof.verify_checkpoint(public, "proof-1", c["upto_seq"] + 1, head, signature)
    assert not proof.verify_checkpoint(public, "proof-2", c["upto_seq"], head, signature)
    other_head = chains[c["upto_seq"] - 1].hash
    assert not proof.verify_checkpoint(public, "proof-1", c["upto_seq"], other_head, signature)
    flipped = bytes([signature[0] ^ 1]) + signature[1:]
    assert not proof.verify_checkpoint(public, "proof-1", c["upto_seq"], head, flipped)
    forger = proof.load_or_create_key(tmp_path / "forger")
    forged = proof.sign_checkpoint(forger, "proof-1", c["upto_seq"], head)
    assert not proof.verify_checkpoint(public, "proof-1", c["upto_seq"], head, forged)


def _journaled(path: Path, first: int, last: int) -> dict[int, tuple[str, bool, bytes]]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT seq, topic, retain, payload FROM records WHERE seq BETWEEN ? "
                            "AND ?", (first, last))  # fmt: skip
        return {s: (t, bool(r), bytes(p)) for s, t, r, p in rows}
    finally:
        conn.close()


async def _ask(port: int, role: str, name: str, **args: Any) -> dict[str, Any]:
    """A request over MQTT v5 with a response topic; the table's result."""
    rid = uuid.uuid4().hex[:8]
    response = f"tableside/proof-1/response/test/{rid}"
    props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
    props.ResponseTopic = response
    props.CorrelationData = rid.encode()
    body = {"command": name, "device": "table", "args": args, "request_id": rid}
    async with aiomqtt.Client("127.0.0.1", port, protocol=aiomqtt.ProtocolVersion.V5) as client:
        await client.subscribe(response, qos=1)
        await client.publish(f"tableside/proof-1/command/{role}", json.dumps(body), qos=1,
                             properties=props)  # fmt: skip
        async with asyncio.timeout(20):
            async for m in client.messages:
                assert isinstance(m.payload, bytes)
                return dict(json.loads(m.payload))
    raise AssertionError("no result")


async def test_an_auditors_replay_sends_the_journaled_bytes_chained(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    """The auditor asks for a range: each record comes on <table>/replay exactly as journaled
    (payload byte for byte, its hash recomputed from what arrived, chained to the one before,
    and the same entry the live message carried); the result is journaled like any other.
    Records retention deleted are named (pruned_before), never invented. Any other command
    from the auditor, a replay from anyone else, and a range the journal cannot have are
    refused, saying why."""
    sim_url, sim_task = await start_simulator(simulator(interval=0.02), "socket")
    config_path = _table_config(tmp_path / "t.toml", tmp_path, mosquitto.url, sim_url, 60)
    sub = ChainSubscriber(mosquitto.port, "tableside/proof-1/#")
    sub_task = asyncio.create_task(sub.run(), name="subscriber")
    await asyncio.wait_for(sub.connected.wait(), 10)
    daemon = TableDaemon(load_config(config_path, use_env=False))
    task = asyncio.create_task(daemon.run(), name="daemon")
    journal = tmp_path / "proof-1" / "journal.sqlite"
    try:
        await until(lambda: daemon.journal.acked >= 60)
        result = await _ask(mosquitto.port, "auditor", "replay", from_seq=5, to_seq=40)
        assert result["ok"] and result["replayed"] == 36 and result["pruned_before"] is None
        # the result is itself a journaled message, after every replay went out
        await until(lambda: len(sub.on("/replay")) >= 36 and bool(sub.on("/command_result")))
        journaled_result = [h for h in sub.on("/command_result")
                            if h.body["request_id"] == result["request_id"]]  # fmt: skip
        assert journaled_result and journaled_result[0].chain is not None
        replays = [json.loads(h.payload) for h in sub.on("/replay")]
        assert [r["seq"] for r in replays] == list(range(5, 41))
        stored = _journaled(journal, 5, 40)
        live = verify_chains(sub.heard)
        for r in replays:
            payload = r["payload"].encode()
            assert (r["topic"], r["retain"], payload) == stored[r["seq"]], r["seq"]
            prev, digest = bytes.fromhex(r["prev"]), bytes.fromhex(r["hash"])
            assert proof.record_hash(prev, r["seq"], r["ts"], r["topic"], r["retain"],
                                     payload) == digest  # fmt: skip
            assert (live[r["seq"]].prev, live[r["seq"]].hash) == (prev, digest)
            assert r["replayed"] is True and r["table"] == "proof-1"
        for before, after in itertools.pairwise(replays):
            assert after["prev"] == before["hash"]

        # who may ask, and for what
        refused = await _ask(mosquitto.port, "auditor", "open_table")
        assert refused["error"] == "an auditor may not give 'open_table' (it needs: floorperson)"
        refused = await _ask(mosquitto.port, "dealer", "replay", from_seq=0, to_seq=1)
        assert refused["error"] == "a dealer may not give 'replay' (it needs: auditor)"
        refused = await _ask(mosquitto.port, "auditor", "replay", from_seq=0, to_seq=5000)
        assert "at most 5000 a request" in refused["error"]
        beyond = daemon.journal.next_seq + 100
        refused = await _ask(mosquitto.port, "auditor", "replay", from_seq=0, to_seq=beyond)
        assert refused["error"].startswith(f"replay: to_seq {beyond} is beyond the table's "
                                           "newest record")  # fmt: skip
        assert len(sub.on("/replay")) == 36, "a refused replay sends nothing"

        # retention deletes what the broker acknowledged: a replay names it, sends the rest
        daemon.journal.retain_days = 1e-9
        assert await asyncio.to_thread(daemon.journal.prune) > 0
        await daemon.journal.wait_stored(daemon.journal.durable_seq)  # SQLite is behind the log
        kept = _journaled(journal, 0, 10**9)
        first_kept = min(kept)
        await until(lambda: daemon.journal.durable_seq >= first_kept + 5)
        result = await _ask(mosquitto.port, "auditor", "replay", from_seq=3,
                            to_seq=first_kept + 5)  # fmt: skip
        assert result["ok"] and result["pruned_before"] == first_kept, result
        assert result["replayed"] == 6
        await until(lambda: len(sub.on("/replay")) == 36 + 6)
        assert [h.body["seq"] for h in sub.on("/replay")][36:] == list(
            range(first_kept, first_kept + 6)
        )
    finally:
        await stop(*(t for t in (task, sim_task, sub_task) if not t.done()))
