"""Where the floor's ingest was bounded: the MQTT publisher and subscriber alone, no store.

Through one Mosquitto, ``--records`` chained records of 100 tables (QoS 1, their chain entries
as user properties), messages/s from the first publish until the subscriber has them all:

* the publisher alone: bench/floor_ingest.py's old aiomqtt publisher (500 in flight), and
  bench/rawpub.py (pre-encoded, raw socket);
* a subscriber that only counts: aiomqtt (what the floor used), and floor/link.py's ``Link``
  (what it uses now; acknowledging each socket read's messages at once).

    PYTHONPATH=. .venv/bin/python bench/mqtt_receive.py [--records 50000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiomqtt
from paho.mqtt.subscribeoptions import SubscribeOptions

from tableside.floor.link import Link, Subscription
from tableside.mqtt import codec as mqtt
from tests.conftest import Mosquitto
from tests.floorpeer import PeerTable

RAWPUB = Path(__file__).parent / "rawpub.py"

#: the publisher bench/floor_ingest.py used before (commit e7306df)
AIOMQTT_PUBLISHER = r"""
import asyncio, json, sys
import aiomqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
port = int(sys.argv[1])
async def main():
    lines = [json.loads(l) for l in sys.stdin]
    async with aiomqtt.Client("127.0.0.1", port, protocol=aiomqtt.ProtocolVersion.V5,
                              max_inflight_messages=1000) as c:
        print("ready", flush=True)
        async def one(topic, payload, props):
            p = Properties(PacketTypes.PUBLISH)
            p.UserProperty = [tuple(x) for x in props]
            await c.publish(topic, payload.encode(), qos=1, properties=p)
        for i in range(0, len(lines), 500):
            await asyncio.gather(*(one(*line) for line in lines[i:i + 500]))
asyncio.run(main())
"""


def lines(records: int) -> bytes:
    peers = [PeerTable(table=f"t{i:04}") for i in range(100)]
    out = []
    for n in range(records):
        peer = peers[n % 100]
        topic, payload, _, props = peer.wire(peer.event(n))
        out.append(json.dumps([topic, payload.decode(), props]))
    return "\n".join(out).encode()


async def publisher(port: int, data: bytes, raw: bool) -> tuple[asyncio.subprocess.Process, float]:
    """Started, connected (its ``ready`` line); the clock's start."""
    args = [str(RAWPUB), str(port)] if raw else ["-c", AIOMQTT_PUBLISHER, str(port)]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(data)
    proc.stdin.close()
    await proc.stdout.readline()
    return proc, time.perf_counter()


async def alone(port: int, data: bytes, n: int, raw: bool) -> float:
    proc, start = await publisher(port, data, raw)
    await proc.wait()
    return n / (time.perf_counter() - start)


async def aiomqtt_subscriber(port: int, data: bytes, n: int, raw: bool) -> float:
    async with aiomqtt.Client("127.0.0.1", port, protocol=aiomqtt.ProtocolVersion.V5,
                              identifier="bench-sub-aiomqtt",
                              max_queued_incoming_messages=200_000) as client:  # fmt: skip
        await client.subscribe("tableside/+/#", options=SubscribeOptions(qos=1))
        proc, start = await publisher(port, data, raw)
        got = 0
        async for _ in client.messages:
            got += 1
            if got == n:
                break
        rate = n / (time.perf_counter() - start)
        await proc.wait()
    return rate


async def link_subscriber(port: int, data: bytes, n: int, raw: bool) -> float:
    got = 0
    done = asyncio.Event()
    links: list[Link] = []

    def take(publishes: list[mqtt.Publish], connection: int) -> None:
        nonlocal got
        got += len(publishes)
        links[0].ack(connection, [p.packet_id for p in publishes if p.packet_id])
        if got >= n:
            done.set()

    link = Link(f"mqtt://127.0.0.1:{port}", "bench-sub-link", [Subscription("tableside/+/#")],
                take, 0)  # fmt: skip
    links.append(link)
    task = asyncio.create_task(link.run(), name="bench-link")
    try:
        await link.subscribed.wait()
        proc, start = await publisher(port, data, raw)
        await done.wait()
        rate = n / (time.perf_counter() - start)
        await proc.wait()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return rate


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=50_000)
    args = parser.parse_args()
    data = lines(args.records)
    n = args.records
    with tempfile.TemporaryDirectory() as tmp:
        broker = Mosquitto(Path(tmp), "max_queued_messages 0\n")
        broker.start()
        try:
            for name, run, raw in [
                ("aiomqtt publisher alone", alone, False),
                ("raw publisher alone", alone, True),
                ("aiomqtt publisher -> aiomqtt subscriber", aiomqtt_subscriber, False),
                ("raw publisher -> aiomqtt subscriber", aiomqtt_subscriber, True),
                ("raw publisher -> Link subscriber", link_subscriber, True),
            ]:
                rate = await run(broker.port, data, n, raw)
                print(f"{name}: {rate:,.0f} messages/s (load {os.getloadavg()[0]:.2f})",
                      flush=True)  # fmt: skip
        finally:
            broker.stop()


if __name__ == "__main__":
    asyncio.run(main())
