"""The floor service (floor/service.py) on a real Mosquitto: a table's chained stream stored and
verified, a gap repaired from the table's journal by replays, and each kind of tampering flagged.
The table is tests/floorpeer.py's peer: real chains, real Ed25519 signatures, real replays."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiomqtt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from tableside.floor.service import Floor, RepairPolicy
from tableside.floor.store import Store, TableState, open_store
from tableside.wire import proof
from tests.conftest import Mosquitto
from tests.floorpeer import PeerTable

FAST = RepairPolicy(interval_s=0.2, retry_s=0.5, max_retry_s=2.0, rate_per_s=100, note_after=3)


async def until_true(condition: Callable[[], Awaitable[bool]], within: float = 30) -> None:
    """Until ``await condition()`` holds; TimeoutError after ``within`` seconds."""
    async with asyncio.timeout(within):
        while not await condition():
            await asyncio.sleep(0.05)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with open_store(f"sqlite:///{tmp_path}/floor.db") as opened:
        yield opened


@contextlib.asynccontextmanager
async def running(floor: Floor) -> AsyncIterator[Floor]:
    task = asyncio.create_task(floor.run(), name="test-floor")
    try:
        async with asyncio.timeout(10):
            await floor.subscribed.wait()
        yield floor
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@contextlib.asynccontextmanager
async def table_on(broker: Mosquitto, peer: PeerTable) -> AsyncIterator[aiomqtt.Client]:
    """The peer answering replays, and a client to publish its stream with."""
    ready: asyncio.Future[aiomqtt.Client] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(peer.serve(broker.url, ready.set_result), name="test-peer")
    try:
        async with asyncio.timeout(10):
            client = await ready
        yield client
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _state(store: Store, table: str = "cs-01") -> TableState:
    state = await store.state(table)
    assert state is not None
    return state


async def test_a_stream_with_a_gap_is_stored_repaired_and_verified(
    mosquitto: Mosquitto, store: Store
) -> None:
    peer = PeerTable()
    await store.enrol("cs-01", proof.public_key_hex(peer.key))
    floor = Floor(store, mosquitto.url, client_id="floor-a", repair=FAST)
    async with running(floor), table_on(mosquitto, peer) as client:
        for n in range(20):
            record = peer.event(n)
            if record.seq not in (6, 7, 8, 15):  # lost on the way: the floor never hears them
                await peer.publish(client, record)
        await peer.publish(client, peer.checkpoint())  # seq 20, signs 19

        async def complete() -> bool:
            s = await store.state("cs-01")
            return s is not None and s.gaps == [] and s.progress.signed_upto == 19

        await until_true(complete)
        state = await _state(store)
        assert state.progress.verified_upto == state.highest_seq and not state.progress.broken
        assert state.problems == 0 and state.flagged is None
        assert (6, 8) in peer.asked and any(a <= 15 <= b for a, b in peer.asked)
        stored = {m.seq or 0: m for m in await store.records("cs-01")}
        assert set(range(21)) <= set(stored)
        assert all(stored[s].replayed for s in (6, 7, 8, 15))
        assert not any(stored[s].replayed for s in (0, 5, 9, 19))
        for seq, m in stored.items():
            assert m.verdict == "ok" and m.hash == peer.records[seq].hash
        replayed = floor.metrics.registry.get_sample_value("tableside_floor_replayed_records_total")
        assert replayed is not None and replayed >= 4


async def test_altered_and_inserted_messages_are_flagged(
    mosquitto: Mosquitto, store: Store
) -> None:
    peer = PeerTable()
    floor = Floor(store, mosquitto.url, client_id="floor-b", repair=FAST)
    async with running(floor), table_on(mosquitto, peer) as client:
        for _ in range(3):
            await peer.publish(client, peer.event())
        # seq 3: its payload altered on the way, its chain entry kept
        three = peer.event()
        await peer.publish(client, three, payload=three.payload.replace(b"52", b"51"))
        # seq 4: an impostor's, chained correctly to seq 3 (anyone can compute a hash) ...
        impostor = PeerTable(records=dict(peer.records))
        inserted = impostor.event(99)
        await impostor.publish(client, inserted)
        # ... then the table's own seq 4 and 5
        four, five = peer.event(), peer.event()
        await peer.publish(client, four)
        await peer.publish(client, five)

        async def flagged() -> bool:
            s = await store.state("cs-01")
            return s is not None and s.conflicts == 1 and s.progress.contiguous_upto == 5

        await until_true(flagged)
        stored = {m.seq or 0: m for m in await store.records("cs-01")}
        assert stored[3].verdict == "altered"
        assert stored[4].hash == inserted.hash  # the impostor came first ...
        (conflict,) = await store.messages("cs-01", kind="conflict")
        assert conflict.hash == four.hash  # ... and the table's own is kept beside it, flagged
        assert stored[5].verdict == "break"  # its chain-prev is the real 4's hash
        state = await _state(store)
        assert state.progress.verified_upto == 2 and state.progress.broken
        problems = " | ".join(str(p) for p in await store.problems("cs-01"))
        assert "seq 3: its chain-hash is not the hash of what arrived" in problems
        assert "seq 4 is already stored with other content" in problems
        assert "seq 5: chain break" in problems


async def test_a_gap_the_table_cannot_fill_stays_and_is_noted(
    mosquitto: Mosquitto, store: Store
) -> None:
    peer = PeerTable(withheld={5})
    floor = Floor(store, mosquitto.url, client_id="floor-c", repair=FAST)
    async with running(floor), table_on(mosquitto, peer) as client:
        for _ in range(10):
            record = peer.event()
            if record.seq != 5:
                await peer.publish(client, record)

        async def noted() -> bool:
            return any("still missing after 3" in p.what for p in await store.problems("cs-01"))

        await until_true(noted)
        state = await _state(store)
        assert (5, 5) in state.gaps and state.progress.verified_upto == 4
        assert sum(1 for a, b in peer.asked if a <= 5 <= b) >= 3


async def test_only_the_table_asked_moves_where_its_journal_starts(
    mosquitto: Mosquitto, store: Store
) -> None:
    """A replay's result saying the table's journal starts later (``pruned_before``) moves the
    table's start only from that table, answering this floor's request, as far as its own seq:
    forged ones, sent with the request id read off the broker, hide no gap."""
    peer = PeerTable(pruned_before=3)
    other = PeerTable(table="cs-09")
    impostor = PeerTable(records=dict(peer.records))
    floor = Floor(store, mosquitto.url, client_id="floor-p", repair=FAST)
    forged = asyncio.Event()

    async def forge(client: aiomqtt.Client) -> None:
        await client.subscribe("tableside/cs-01/command/auditor", qos=1)
        async for request in client.messages:
            rid = json.loads(bytes(request.payload))["request_id"]
            claim = {"role": "auditor", "device": "table", "command": "replay", "ok": True,
                     "request_id": rid, "replayed": 0, "pruned_before": 1000}  # fmt: skip
            await other.publish(client, other.message("command_result", **claim))
            for _ in range(len(impostor.records), 15):
                impostor.event()  # seq 15: its claim is past its own seq
            await impostor.publish(client, impostor.message("command_result", **claim))
            forged.set()
            return

    async with (
        running(floor),
        aiomqtt.Client("127.0.0.1", mosquitto.port, protocol=aiomqtt.ProtocolVersion.V5)
        as client,
    ):  # fmt: skip
        forger = asyncio.create_task(forge(client))
        for n in range(10):
            record = peer.event(n)
            if record.seq >= 3:  # 0..2: never heard, and gone from the table's journal
                await peer.publish(client, record)
        await other.publish(client, other.event())
        async with asyncio.timeout(30):
            await forged.wait()
        await forger

        async def heard() -> bool:
            theirs = [await store.messages(t, f"tableside/{t}/command_result")
                      for t in ("cs-01", "cs-09")]  # fmt: skip
            return all(theirs)

        await until_true(heard)
        assert (await _state(store, "cs-09")).pruned_before in (None, 0)
        assert (await _state(store)).pruned_before in (None, 0)
        async with table_on(mosquitto, peer):  # the table answers the floor's next request

            async def started() -> bool:
                return (await _state(store)).pruned_before == 3

            await until_true(started)
        assert (await _state(store)).pruned_before == 3  # not the forgers' 1000
        assert (await _state(store, "cs-09")).pruned_before in (None, 0)


async def test_forged_and_unenrolled_checkpoints_are_flagged(
    mosquitto: Mosquitto, store: Store
) -> None:
    peer, stranger = PeerTable(), PeerTable(table="cs-02")
    await store.enrol("cs-01", proof.public_key_hex(peer.key))
    floor = Floor(store, mosquitto.url, client_id="floor-d", repair=FAST)
    async with running(floor), table_on(mosquitto, peer) as client:
        await peer.publish(client, peer.event())
        await peer.publish(client, peer.checkpoint(key=Ed25519PrivateKey.generate()))
        await stranger.publish(client, stranger.event())
        await stranger.publish(client, stranger.checkpoint())
        await peer.publish(client, peer.event())  # after the forged checkpoint: flagged too

        async def both() -> bool:
            # stored, and walked: the walk's progress is written after the batch's records
            one, two = await store.state("cs-01"), await store.state("cs-02")
            return (
                one is not None and one.records == 3 and one.progress.contiguous_upto == 2
                and two is not None and two.records == 2 and two.progress.contiguous_upto == 1
            )  # fmt: skip

        await until_true(both)
        forged = (await store.records("cs-01", 1, 1))[0]
        assert forged.verdict == "forged" and "not the enrolled one" in forged.reason
        unenrolled = (await store.records("cs-02", 1, 1))[0]
        assert unenrolled.verdict == "not-enrolled"
        one, two = await _state(store, "cs-01"), await _state(store, "cs-02")
        assert one.flagged is not None and "not the enrolled one" in one.flagged
        assert two.flagged is not None and "no key is enrolled" in two.flagged
        assert one.progress.signed_upto is None and one.progress.verified_upto == 2
        first, *flagged = await store.records("cs-01")
        assert first.flagged is None and [m.flagged for m in flagged] == [one.flagged] * 2
        assert [m.flagged for m in await store.records("cs-02")] == [None, two.flagged]
        # enrolling the table's key clears the flag
        await store.enrol("cs-02", proof.public_key_hex(stranger.key))
        assert (await _state(store, "cs-02")).flagged is None


async def test_after_the_floor_was_away_it_converges(mosquitto: Mosquitto, store: Store) -> None:
    """The floor down while the table goes on, and its broker session lost with it (a new
    client id): on its return it asks the table for what came after the highest seq stored."""
    peer = PeerTable()
    async with table_on(mosquitto, peer) as client:
        async with running(Floor(store, mosquitto.url, client_id="floor-e1", repair=FAST)):
            for _ in range(5):
                await peer.publish(client, peer.event())

            async def five() -> bool:
                s = await store.state("cs-01")
                return s is not None and s.highest_seq == 4

            await until_true(five)
        for _ in range(30):  # nobody stores these
            await peer.publish(client, peer.event())
        async with running(Floor(store, mosquitto.url, client_id="floor-e2", repair=FAST)):

            async def all_of_them() -> bool:
                s = await _state(store)
                return s.progress.contiguous_upto is not None and s.progress.contiguous_upto >= 34

            await until_true(all_of_them)
        state = await _state(store)
        assert state.gaps == [] and state.progress.verified_upto == state.highest_seq


async def test_bad_input_is_kept_as_rejected_and_the_floor_goes_on(
    mosquitto: Mosquitto, store: Store
) -> None:
    peer = PeerTable()
    floor = Floor(store, mosquitto.url, client_id="floor-f", repair=FAST)
    async with running(floor), table_on(mosquitto, peer) as client:
        base = "tableside/cs-01"
        await client.publish(f"{base}/ruling", b"\xff\xfe not json", qos=1)
        await client.publish(f"{base}/ruling", b"[1, 2]", qos=1)
        await client.publish(f"{base}/ruling", b"x" * (300 * 1024), qos=1)
        await client.publish("tableside/nowhere", b"{}", qos=1)
        await client.publish(f"{base}/ruling", b'{"table": "cs-02", "seq": 1}', qos=1)
        await client.publish(f"{base}/ruling", b'{"table": "cs-01", "seq": "\\u0000x"}', qos=1)
        await client.publish(f"{base}/replay", b'{"table": "cs-01", "seq": -1}', qos=1)
        record = peer.event()
        properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        properties.UserProperty = [("chain-prev", "zz"), ("chain-hash", "0" * 64),
                                   ("chain-ts", "1.0")]  # fmt: skip
        await client.publish(record.topic, record.payload, qos=1, properties=properties)
        await peer.publish(client, peer.event())  # and then a good one

        async def all_kept() -> bool:
            rejected = await store.messages("cs-01", kind="rejected", limit=20)
            return len(rejected) == 7 and await store.count("cs-01") >= 8

        await until_true(all_kept)
        reasons = {m.reason for m in await store.messages("cs-01", kind="rejected", limit=20)}
        expected = [
            "not JSON", "not a JSON object", "more than 262144: only the first kept",
            "says table 'cs-02'", "no seq", "not a replayed record",
            "malformed chain entry: chain-prev is not 64 lower-case hex digits",
        ]  # fmt: skip
        for text in expected:
            assert any(text in reason for reason in reasons), (text, reasons)
        (orphan,) = await store.messages("", kind="rejected")
        assert "not a table's topic" in orphan.reason
        (good,) = await store.records("cs-01", 1, 1)
        assert good.verdict == "ok"
        big = [m for m in await store.messages("cs-01", kind="rejected", limit=20)
               if "262144" in m.reason]  # fmt: skip
        assert len(big[0].payload) == 256 * 1024


async def test_a_seq_going_backwards_is_rejected_and_a_resend_is_not(
    mosquitto: Mosquitto, store: Store
) -> None:
    """The table's journal replaced (it numbers from 0 again) after seq 5: its new seq 2 is
    rejected; the same record 3 again, unmarked (a broker's resend), is a duplicate."""
    peer = PeerTable()
    floor = Floor(store, mosquitto.url, client_id="floor-g", repair=FAST)
    async with running(floor), table_on(mosquitto, peer) as client:
        records = [peer.event() for _ in range(6)]
        for record in records:
            await peer.publish(client, record)
        replaced = PeerTable()
        reused = [replaced.event(9) for _ in range(3)]
        await replaced.publish(client, reused[2])
        await peer.publish(client, records[3])
        await peer.publish(client, peer.event())  # seq 6

        async def stored() -> bool:
            s = await store.state("cs-01")
            return s is not None and s.highest_seq == 6 and s.progress.contiguous_upto == 6

        await until_true(stored)
        (rejected,) = await store.messages("cs-01", kind="rejected")
        assert rejected.seq == 2 and rejected.hash == reused[2].hash
        assert rejected.reason.startswith("seq 2 after 5 from this table (not a redelivery")
        state = await _state(store)
        assert state.duplicates == 1 and state.conflicts == 0 and not state.progress.broken
        failed = floor.metrics.registry.get_sample_value(
            "tableside_floor_verification_failures_total", {"verdict": "seq-backwards"}
        )
        assert failed == 1
