"""The floor's ingest rate: how many table messages a second one floor stores and verifies.

1. **Store**: judged, chained device-event records of ``--tables`` tables, written in batches of
   ``--batch`` straight into the store (no broker): the store's own rate, the chain walk after
   each batch included (as ``tableside floor run`` does).
2. **End to end**: a publisher process sends the same records, with their chain entries, to a
   Mosquitto as fast as the broker takes them (QoS 1); one floor stores them. Messages/s from
   the first publish until the last is stored.

    PYTHONPATH=. .venv/bin/python bench/floor_ingest.py --records 50000 [--store sqlite|both]

Starts its own Mosquitto (and PostgreSQL, tests/postgres.py) on free loopback ports.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import structlog

from tableside.daemon.logging import configure_logging
from tableside.floor.service import Floor, RepairPolicy
from tableside.floor.store import Message, Store, open_store
from tests.conftest import Mosquitto
from tests.floorpeer import PeerTable
from tests.postgres import Postgres

_PUBLISHER = r"""
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
        for i in range(0, len(lines), 500):  # 500 in flight: not one round trip each
            await asyncio.gather(*(one(*line) for line in lines[i:i + 500]))
asyncio.run(main())
"""


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def streams(tables: int, records: int) -> list[tuple[PeerTable, list[Message]]]:
    peers = [PeerTable(table=f"t{i:04}") for i in range(tables)]
    out: list[tuple[PeerTable, list[Message]]] = [(p, []) for p in peers]
    for n in range(records):
        peer, messages = out[n % tables]
        messages.append(peer.judged(peer.event()))
    return out


async def store_rate(url: str, tables: int, records: int, batch: int) -> float:
    made = streams(tables, records)
    interleaved = [m for group in zip(*(ms for _, ms in made), strict=False) for m in group]
    async with open_store(url) as store:
        floor = Floor(store, "mqtt://127.0.0.1:1")  # never connects: only its walk is used
        start = time.perf_counter()
        for i in range(0, len(interleaved), batch):
            written = await store.write(interleaved[i : i + batch])
            for table in written.tables:
                await floor.walk(table)
        elapsed = time.perf_counter() - start
        await check(store, made)
    return len(interleaved) / elapsed


async def check(store: Store, made: list[tuple[PeerTable, list[Message]]]) -> None:
    for peer, messages in made:
        state = await store.state(peer.table)
        assert state is not None and state.gaps == [], peer.table
        assert state.progress.verified_upto == len(messages) - 1, (peer.table, state.progress)


async def end_to_end(url: str, broker: Mosquitto, tables: int, records: int) -> float:
    made = streams(tables, records)
    lines = []
    for group in zip(*(ms for _, ms in made), strict=False):
        for m in group:
            peer = next(p for p, _ in made if p.table == m.table)
            record = peer.records[m.seq or 0]
            topic, payload, _, props = peer.wire(record)
            lines.append(json.dumps([topic, payload.decode(), props]))
    async with open_store(url) as store:
        floor = Floor(store, broker.url, client_id="bench-floor",
                      repair=RepairPolicy(interval_s=3600, tail=False))  # fmt: skip
        task = asyncio.create_task(floor.run(), name="bench-floor")
        await floor.subscribed.wait()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _PUBLISHER, str(broker.port), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )  # fmt: skip
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("\n".join(lines).encode())
        proc.stdin.close()
        await proc.stdout.readline()
        start = time.perf_counter()
        total = len(lines)
        # the store is another component's: polled
        while await store.count() < total:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        elapsed = time.perf_counter() - start
        await proc.wait()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        for peer, _ in made:  # the walk of the last batch
            await floor.walk(peer.table)
        await check(store, made)
    return total / elapsed


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--tables", type=int, default=100)
    parser.add_argument("--batch", type=int, default=2_000)
    parser.add_argument("--store", choices=["sqlite", "postgresql", "both"], default="both")
    args = parser.parse_args()
    configure_logging("warning")
    structlog.get_logger().info("bench")
    results: dict[str, object] = {"machine": machine(), "records": args.records,
                                  "tables": args.tables}  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        pg = None
        urls: dict[str, Callable[[str], str]] = {}
        if args.store in ("sqlite", "both"):
            urls["sqlite"] = lambda n: f"sqlite:///{tmp}/floor-{n}.db"
        if args.store in ("postgresql", "both"):
            pg = Postgres()
            pg.start()
            server = pg
            urls["postgresql"] = lambda n: server.new_database()
        broker = Mosquitto(Path(tmp), "max_queued_messages 0\n")
        broker.start()
        try:
            for name, url in urls.items():
                rate = await store_rate(url("store"), args.tables, args.records, args.batch)
                print(f"{name}: store {rate:,.0f} messages/s", flush=True)
                results[f"{name}_store_per_s"] = round(rate)
                rate = await end_to_end(url("e2e"), broker, args.tables, args.records)
                print(f"{name}: end to end {rate:,.0f} messages/s", flush=True)
                results[f"{name}_end_to_end_per_s"] = round(rate)
        finally:
            broker.stop()
            if pg is not None:
                pg.stop()
    out = Path(__file__).parent / "results" / "floor_ingest.json"
    out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(out)


if __name__ == "__main__":
    asyncio.run(main())
