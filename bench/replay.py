"""The journal's write rate, and how fast a backlog goes out after a broker outage.

1. **Commit rate**: device-event-sized records (~400 bytes) into a fresh journal, WAL with
   synchronous=FULL, (a) one transaction per record, as a naive "write then publish" would do,
   and (b) the daemon's writer thread, which commits whatever has queued up in one
   transaction (group commit). Records/s until the last one is durable. And (c) the writer
   thread one record at a time, each waited for until durable: a quiet table's case, where
   every commit pays its fsyncs (SQLite's, and the mark file's fdatasync, docs/journal.md).
2. **Replay**: the broker is down while N events are journaled (the daemon's own Publisher and
   Journal); then a Mosquitto starts and the time is taken until the broker has acknowledged
   every record and a subscriber has received every one.

    .venv/bin/python bench/replay.py --records 50000

Starts its own Mosquitto on a free loopback port. Writes bench/results/replay.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiomqtt
import structlog
from provenance import machine

from tableside.daemon.broker import free_port
from tableside.daemon.config import BrokerConfig
from tableside.daemon.journal import Journal, record_hash
from tableside.daemon.logging import configure_logging
from tableside.daemon.publisher import Publisher
from tableside.wire.payloads import DeviceEventBody, DeviceEventPayload, utc_ms

TABLE = "replay-1"

EVENT: dict[str, Any] = {"device": "shoe", "device_class": "shoe", "event": "stack_dispensed"}


def data(seq: int) -> dict[str, Any]:
    return {"round": seq // 9, "position": "3", "count": 5, "expected": 5, "face_up": 0,
            "stack_id": seq, "detail": "bench"}  # fmt: skip


def event(seq: int) -> DeviceEventPayload:
    return DeviceEventPayload(table=TABLE, ts=utc_ms(), seq=seq, data=data(seq), **EVENT)


def naive_rate(path: Path, count: int) -> float:
    """One transaction (one fsync) per record."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute(
        "CREATE TABLE records (seq INTEGER PRIMARY KEY, ts REAL, topic TEXT, retain INTEGER, "
        "payload BLOB, prev_hash BLOB, hash BLOB)"
    )
    prev = b"\0" * 32
    started = time.perf_counter()
    for seq in range(count):
        payload = event(seq).model_dump_json().encode()
        ts = time.time()
        digest = record_hash(prev, seq, ts, "t", False, payload)
        conn.execute("BEGIN")
        conn.execute(
            "INSERT INTO records VALUES (?, ?, ?, ?, ?, ?, ?)",
            (seq, ts, "t", 0, payload, prev, digest),
        )
        conn.execute("COMMIT")
        prev = digest
    elapsed = time.perf_counter() - started
    conn.close()
    return count / elapsed


async def group_rate(path: Path, count: int) -> tuple[float, int]:
    journal = Journal(path, TABLE)
    journal.open()
    journal.start()
    started = time.perf_counter()
    for seq in range(count):
        journal.append("t", lambda n: event(n).model_dump_json().encode())
        if seq % 100 == 0:
            await asyncio.sleep(0)  # the event loop goes on, as in the daemon
    await journal.wait_durable(count - 1)
    elapsed = time.perf_counter() - started
    commits = journal.commits
    journal.close()
    return count / elapsed, commits


async def one_at_a_time_rate(path: Path, count: int) -> float:
    """Each record appended and waited for until it is durable before the next."""
    journal = Journal(path, TABLE)
    journal.open()
    journal.start()
    started = time.perf_counter()
    for seq in range(count):
        journal.append("t", lambda n: event(n).model_dump_json().encode())
        await journal.wait_durable(seq)
    elapsed = time.perf_counter() - started
    journal.close()
    return count / elapsed


async def replay(work: Path, count: int) -> dict[str, Any]:
    port = free_port()
    broker = BrokerConfig(url=f"mqtt://127.0.0.1:{port}")
    journal = Journal(work / "replay.sqlite", TABLE)
    journal.open()
    journal.start()
    publisher = Publisher(broker, TABLE, "replay-bench", journal)
    topic = publisher.topics.device_event("shoe")
    pub_task = asyncio.create_task(publisher.run())  # the broker is not there yet
    for n in range(count):
        publisher.enqueue(
            topic, DeviceEventBody("shoe", "shoe", "stack_dispensed", data(n)), utc_ms()
        )
    await journal.wait_durable(count - 1)
    conf = work / "mosquitto.conf"
    conf.write_text(
        f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\nlog_dest none\n"
        "user root\nmax_queued_messages 0\n"
    )
    mosquitto = subprocess.Popen(  # noqa: ASYNC220  # started once, not awaited
        [shutil.which("mosquitto") or "/usr/sbin/mosquitto", "-c", str(conf)]
    )
    try:
        return await _replayed(publisher, journal, pub_task, topic, port, count)
    finally:  # a run that fails or times out leaves no broker behind
        mosquitto.terminate()
        mosquitto.wait(10)


async def _replayed(
    publisher: Publisher,
    journal: Journal,
    pub_task: asyncio.Task[None],
    topic: str,
    port: int,
    count: int,
) -> dict[str, Any]:
    seen: set[int] = set()
    done = asyncio.Event()

    async def subscribe(ready: asyncio.Event) -> None:
        # a kept session (clean_session False): a reconnect under load misses nothing, where a
        # clean one lost what came meanwhile and the run then waited out its timeout
        while True:
            try:
                async with aiomqtt.Client("127.0.0.1", port, identifier="replay-sub",
                                          clean_session=False) as client:  # fmt: skip
                    await client.subscribe(topic, qos=1)
                    ready.set()
                    async for message in client.messages:
                        assert isinstance(message.payload, bytes)
                        seen.add(json.loads(message.payload)["seq"])
                        if len(seen) >= count:
                            done.set()
            except aiomqtt.MqttError:
                await asyncio.sleep(0.01)

    ready = asyncio.Event()
    # The subscriber connects first (it would miss nothing either way: the broker starts empty).
    sub_task = asyncio.create_task(subscribe(ready))
    await asyncio.wait_for(ready.wait(), 30)
    started = time.perf_counter()
    # Publisher reconnect backoff has grown while the broker was away: start its clock at its
    # connection, which is what the replay rate is about.
    await publisher.connected.wait()
    connected = time.perf_counter()
    await publisher.flush()
    acked = time.perf_counter()
    await asyncio.wait_for(done.wait(), 120)
    all_received = time.perf_counter()
    for task in (pub_task, sub_task):
        task.cancel()
    await asyncio.gather(pub_task, sub_task, return_exceptions=True)
    journal.close()
    return {
        "records": count,
        "waited_for_reconnect_s": round(connected - started, 2),
        "acked_per_s": round(count / (acked - connected)),
        "received_per_s": round(count / (all_received - connected)),
        "redelivered": publisher.redelivered,
        "window": publisher.window,
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tableside-replay-") as directory:
        work = Path(directory)
        naive = naive_rate(work / "naive.sqlite", args.naive_records)
        group, commits = await group_rate(work / "group.sqlite", args.records)
        single = await one_at_a_time_rate(work / "single.sqlite", args.naive_records)
        return {
            "bench": "replay",
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": machine(),
            "filesystem_of": str(work),
            "commit_per_record_per_s": round(naive),
            "group_commit_per_s": round(group),
            "group_commits": commits,
            "durable_one_at_a_time_per_s": round(single),
            "replay": await replay(work, args.records),
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--naive-records", type=int, default=5_000)
    parser.add_argument("--output", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    configure_logging("warning")
    structlog.get_logger().info("bench_replay")
    result = asyncio.run(main_async(args))
    args.output.mkdir(parents=True, exist_ok=True)
    out = args.output / "replay.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
