"""The floor's own MQTT v5 client (floor/link.py) against a real Mosquitto the test starts, and
against a broker that breaks protocol; and the point of it: a ``tableside floor run`` SIGKILLed
mid-stream loses nothing, with no replay to repair it (it acknowledges only what it stored)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
import structlog

from tableside.floor.link import Link, Subscription
from tableside.floor.store import open_store
from tableside.mqtt import codec as mqtt
from tests.conftest import Mosquitto
from tests.floorpeer import PeerTable
from tests.test_floor import until_true
from tests.test_security import pki  # noqa: F401  (registers the fixture: a test CA, certificates)

RAWPUB = Path(__file__).parent.parent / "bench" / "rawpub.py"


async def publish_all(broker: Mosquitto, lines: list[str]) -> None:
    """Every ``[topic, payload, props]`` line, QoS 1, as fast as the broker takes them; returns
    once the broker has acknowledged each."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(RAWPUB), str(broker.port), f"pub-{os.getpid()}",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await proc.communicate("\n".join(lines).encode())
    assert proc.returncode == 0 and b"done" in out, out


@contextlib.asynccontextmanager
async def linked(link: Link) -> AsyncIterator[Link]:
    task = asyncio.create_task(link.run(), name="test-link")
    try:
        async with asyncio.timeout(10):
            await link.subscribed.wait()
        yield link
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_unacknowledged_messages_in_flight_are_bounded_by_receive_maximum_not_twenty(
    tmp_path: Path,
) -> None:
    """Mosquitto's ``max_inflight_messages`` (20 by default) bounds what it has out to an MQTT
    v3 client; for a v5 client the client's Receive Maximum does: 300 messages reach a client
    that asks for 1,000 with none acknowledged, and a client that asks for 50 gets 50 until it
    acknowledges them, then more."""
    broker = Mosquitto(tmp_path, "max_queued_messages 0\n")
    broker.start()
    try:
        wide: list[mqtt.Publish] = []
        narrow: list[tuple[mqtt.Publish, int]] = []
        url = broker.url
        subs = [Subscription("t/#")]
        big = Link(url, "wide", subs, lambda ps, _: wide.extend(ps), 60, receive_maximum=1000)
        small = Link(url, "narrow", subs, lambda ps, g: narrow.extend((p, g) for p in ps), 60,
                     receive_maximum=50)  # fmt: skip
        async with linked(big), linked(small):
            await publish_all(broker, [json.dumps([f"t/{n}", str(n), []]) for n in range(300)])

            async def wide_has_all() -> bool:
                return len(wide) == 300

            await until_true(wide_has_all, within=20)
            assert [p.topic for p in wide] == [f"t/{n}" for n in range(300)]
            # every message was with the broker before this round trip; whatever it would
            # send the narrow client, it has written before it answers it
            await small.publish("elsewhere", b"")
            assert len(narrow) == 50
            small.ack(narrow[0][1], [p.packet_id or 0 for p, _ in narrow])

            async def more() -> bool:
                return len(narrow) >= 100

            await until_true(more, within=20)
            # (Mosquitto 2.0.11 then sends the rest at once, past the Receive Maximum: the floor
            # also stops reading its socket when it holds too much, floor/service.py HOLD_MAX)
            assert [p.topic for p, _ in narrow[:100]] == [f"t/{n}" for n in range(100)]
    finally:
        broker.stop()


async def test_a_malformed_packet_drops_the_connection_with_a_log_line_and_it_comes_back(
    tmp_path: Path,
) -> None:
    """A broker that sends a PUBLISH with QoS 3: the link says what and where, closes the
    connection without acknowledging, and connects again; the task never fails."""
    connections: list[int] = []
    bad = mqtt.publish("t/1", b"fine", qos=1, packet_id=1)
    bad = bytes([bad[0] | 0x06]) + bad[1:]  # QoS bits 11

    async def broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        await reader.readexactly(2)  # CONNECT (its length fits one byte)
        await reader.read(4096)
        writer.write(b"\x20\x03\x00\x00\x00")  # CONNACK
        head = await reader.readexactly(2)  # SUBSCRIBE
        body = await reader.readexactly(head[1])
        writer.write(b"\x90\x04" + body[:2] + b"\x00\x01")  # SUBACK, QoS 1 granted
        writer.write(bad)
        await writer.drain()
        await reader.read()  # until the link closes it
        writer.close()

    server = await asyncio.start_server(broker, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    taken: list[mqtt.Publish] = []
    link = Link(f"mqtt://127.0.0.1:{port}", "c", [Subscription("t/#")],
                lambda ps, _: taken.extend(ps), 60)  # fmt: skip
    with structlog.testing.capture_logs() as logs:
        task = asyncio.create_task(link.run(), name="test-link")
        try:

            async def twice() -> bool:
                return len(connections) >= 2

            await until_true(twice, within=20)
            assert not task.done()
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            server.close()
            await server.wait_closed()
    malformed = [e for e in logs if e["event"] == "mqtt_malformed"]
    assert malformed and "QoS 3" in malformed[0]["error"]
    assert "stream byte 11" in malformed[0]["error"]  # after a 5-byte CONNACK, 6-byte SUBACK
    assert taken == []


async def test_a_floor_killed_mid_stream_loses_nothing_without_repair(tmp_path: Path) -> None:
    """30,000 records flooded to a floor (SQLite), SIGKILLed once it has stored some and before
    it has stored them all; started again with the same session, it stores every one. No table
    answers replays here: what it did not store, the broker kept, because it was not
    acknowledged yet (a floor that acknowledged on receipt loses what it held)."""
    broker = Mosquitto(tmp_path, "max_queued_messages 0\n")
    broker.start()
    db = tmp_path / "floor.db"
    url = f"sqlite:///{db}"
    peers = [PeerTable(table=f"t{i:02}") for i in range(10)]
    lines = []
    for n in range(30_000):
        peer = peers[n % 10]
        record = peer.event(n)
        topic, payload, _, props = peer.wire(record)
        lines.append(json.dumps([topic, payload.decode(), props]))
    total = len(lines)

    async def floor() -> asyncio.subprocess.Process:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tableside", "floor", "run", "--broker", broker.url,
            "--store", url, "--client-id", "floor-killed", "--repair-interval", "3600",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        assert proc.stdout is not None
        async with asyncio.timeout(20):
            while b"floor_subscribed" not in (line := await proc.stdout.readline()):
                assert line, "the floor ended before it subscribed"
        return proc

    try:
        async with open_store(url) as store:
            first = await floor()
            publishing = asyncio.create_task(publish_all(broker, lines), name="test-publish")

            async def some_stored() -> bool:
                return await store.count() > 0

            await until_true(some_stored, within=60)
            os.kill(first.pid, signal.SIGKILL)
            await first.wait()
            at_kill = await store.count()
            assert at_kill < total, "stored everything before the kill: nothing tested"
            await publishing
            second = await floor()
            try:

                async def all_stored() -> bool:
                    return await store.count() >= total

                await until_true(all_stored, within=60)
            finally:
                second.send_signal(signal.SIGTERM)
                await second.wait()
            for peer in peers:
                records = await store.records(peer.table, limit=10_000)
                assert [m.seq for m in records] == list(range(len(peer.records)))
                assert all(m.hash == peer.records[m.seq or 0].hash for m in records)
    finally:
        broker.stop()


async def test_a_floor_whose_store_is_stuck_stops_reading_and_loses_nothing(
    tmp_path: Path,
) -> None:
    """While the store takes nothing, the floor holds a bounded number of messages (it stops
    reading its socket past ``hold_max``; the rest waits at the broker, unacknowledged), and
    once the store is back every one is stored."""
    from tableside.floor.service import Floor, RepairPolicy
    from tableside.floor.store import Message, Written

    broker = Mosquitto(tmp_path, "max_queued_messages 0\n")
    broker.start()
    peer = PeerTable()
    lines = []
    for n in range(5_000):
        topic, payload, _, props = peer.wire(peer.event(n))
        lines.append(json.dumps([topic, payload.decode(), props]))
    try:
        async with open_store(f"sqlite:///{tmp_path}/floor.db") as store:
            back = asyncio.Event()
            write = store.write

            async def stuck(batch: Sequence[Message]) -> Written:
                await back.wait()
                return await write(batch)

            store.write = stuck  # type: ignore[method-assign]
            floor = Floor(store, broker.url, client_id="floor-stuck", hold_max=200,
                          repair=RepairPolicy(interval_s=3600, tail=False))  # fmt: skip
            task = asyncio.create_task(floor.run(), name="test-floor")
            try:
                async with asyncio.timeout(10):
                    await floor.subscribed.wait()
                publishing = asyncio.create_task(publish_all(broker, lines), name="test-pub")

                async def paused() -> bool:
                    conn = floor._link._conn if floor._link else None
                    return conn is not None and conn.paused

                await until_true(paused, within=30)
                await publishing  # every message is with the broker
                # what it holds: past 200, at most one socket read more (256 KiB at most)
                held = len(floor._held)
                assert 200 < held < 200 + 256 * 1024 // len(lines[0]) + 1 < 5_000
                back.set()

                async def all_stored() -> bool:
                    return await store.count() >= 5_000

                await until_true(all_stored, within=60)
                assert [m.seq for m in await store.records("cs-01", limit=10_000)] == list(
                    range(5_000)
                )
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    finally:
        broker.stop()


async def test_mqtts_with_the_system_trust_store(
    tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``mqtts://``: TLS, the broker's certificate checked against the trusted CAs (here the
    test's CA, named by ``SSL_CERT_FILE`` as an operator's system store would hold it) and its
    address; a message goes out and comes back over it. A CA not trusted: no connection."""
    files: Path = request.getfixturevalue("pki")
    broker = Mosquitto(
        tmp_path,
        f"cafile {files / 'ca.crt'}\ncertfile {files / 'server.crt'}\n"
        f"keyfile {files / 'server.key'}\n",
        scheme="mqtts",
    )
    broker.start()
    try:
        got: list[mqtt.Publish] = []
        link = Link(broker.url, "tls", [Subscription("t/#")], lambda ps, _: got.extend(ps), 60)
        with structlog.testing.capture_logs() as logs:
            task = asyncio.create_task(link.run(), name="test-untrusted")

            async def refused() -> bool:
                return any(e["event"] == "floor_broker_lost" for e in logs)

            try:
                await until_true(refused, within=20)
                assert not link.subscribed.is_set()
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        assert "CERTIFICATE_VERIFY_FAILED" in next(
            e["error"] for e in logs if e["event"] == "floor_broker_lost"
        )
        monkeypatch.setenv("SSL_CERT_FILE", str(files / "ca.crt"))
        async with linked(link):
            await link.publish("t/1", b"over tls")

            async def back() -> bool:
                return bool(got)

            await until_true(back, within=20)
        assert (got[0].topic, got[0].payload) == ("t/1", b"over tls")
    finally:
        broker.stop()
