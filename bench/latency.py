"""Latency: a frame written by the device → the message in a subscriber's hands.

Runs, in one launch, the same device traffic through
  * ``tableside run`` (the real daemon, as a user starts it, in its own process), and
  * ``bench/forwarder.py`` (a bare pty → aiomqtt forwarder: the baseline),
and prints p50/p90/p99/max for each, plus the daemon's CPU time per event.

The device side (this process) speaks the shuffler protocol over a real pty with the shipped
link layer; each ShuffleComplete's write time and its arrival at an MQTT subscriber (also in
this process) are read from CLOCK_MONOTONIC, which every process on the machine shares.

    .venv/bin/python bench/latency.py --events 5000

``--flood`` measures fairness instead: the daemon gets a second shuffler ("flooder"), the
shipped simulator in its own process on a second pty, sending valid Status frames back to back
without waiting for their ACKs for the whole run (its "flood" fault); the figures are those of
the first device's events, sent every ``--interval`` s meanwhile (the baseline is not run).

    .venv/bin/python bench/latency.py --flood --events 1000 --interval 0.02 --rounds 1

Starts its own Mosquitto on a free loopback port (or use --broker URL).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiomqtt

from tableside.daemon.broker import free_port
from tableside.drivers.framing import NakReason
from tableside.drivers.link import ArqPolicy, FramedLink, Notice
from tableside.drivers.shuffler import protocol as p
from tableside.simulators.listen import PtyEndpoint

HERE = Path(__file__).resolve().parent
SIM_IDENTITY = p.Identity("bench", "BENCH-1", "B0001", "1.0", bytes(32))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Device:
    """The device end: answers the host's queries, sends timed ShuffleComplete frames."""

    def __init__(self, endpoint: PtyEndpoint) -> None:
        self.endpoint = endpoint
        self.link: FramedLink | None = None
        self.queries: asyncio.Queue[p.Identity | p.Status] = asyncio.Queue()

    def on_message(self, message: Notice) -> NakReason | None:
        if isinstance(message, p.QueryIdentity):
            self.queries.put_nowait(SIM_IDENTITY)
        elif isinstance(message, p.QueryStatus):
            self.queries.put_nowait(p.Status(p.ShufflerState.IDLE, None, 0))
        return None

    async def answer_queries(self) -> None:
        while True:
            reply = await self.queries.get()
            assert self.link is not None
            await self.link.send(reply)


async def start_flooder() -> tuple[asyncio.subprocess.Process, str]:
    """The shipped shuffler simulator in its own process (so its writing does not slow this
    one's clock readings), on a pty, flooding from its first cycle: valid Status frames back to
    back, none waiting for its ACK (simulators/base.py, fault "flood")."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tableside", "--log-level", "warning", "simulate", "shuffler",
        "--pty", "--interval", "0.5", "--fault", "flood=100000@1",
        stdout=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    path = (await asyncio.wait_for(proc.stdout.readline(), 10)).decode().strip()
    return proc, path


async def run_variant(
    name: str,
    command: Callable[..., list[str]],
    topic: str,
    broker: str,
    events: int,
    warmup: int,
    interval: float,
    ready_topic: str | None,
    flooding: bool = False,
) -> dict[str, Any]:
    endpoint = PtyEndpoint()
    flooder = await start_flooder() if flooding else None
    device = Device(endpoint)
    parts = urlsplit(broker)
    sent: dict[int, int] = {}
    received: dict[int, int] = {}
    all_in = asyncio.Event()
    total = warmup + events
    async with endpoint.streams() as (reader, writer):
        link = FramedLink(
            reader,
            writer,
            p.PROTOCOL,
            device.on_message,
            name="bench-device",
            policy=ArqPolicy(ack_timeout=1.0, retries=3),
        )
        device.link = link
        async with aiomqtt.Client(parts.hostname or "", parts.port or 1883) as sub:
            await sub.subscribe(topic, qos=1)
            if ready_topic:
                await sub.subscribe(ready_topic, qos=1)

            async def collect() -> None:
                async for message in sub.messages:
                    now = time.monotonic_ns()
                    assert isinstance(message.payload, bytes)
                    data = json.loads(message.payload)
                    if ready_topic and message.topic.matches(ready_topic):
                        continue
                    shuffle_id = data.get("shuffle_id", data.get("data", {}).get("shuffle_id"))
                    if shuffle_id in sent and shuffle_id not in received:
                        received[shuffle_id] = now
                        if len(received) == total:
                            all_in.set()

            async with asyncio.TaskGroup() as tg:
                tasks = [
                    tg.create_task(link.run()),
                    tg.create_task(device.answer_queries()),
                    tg.create_task(collect()),
                ]
                ptys = [endpoint.path] + ([flooder[1]] if flooder else [])
                proc = await asyncio.create_subprocess_exec(
                    *command(*ptys), stdout=subprocess.DEVNULL
                )
                try:
                    await asyncio.sleep(2.0)  # the process opens the pty and its broker link
                    cpu_before = cpu_seconds(proc.pid)
                    started = time.monotonic()
                    for i in range(1, total + 1):
                        if i == warmup + 1:
                            cpu_before = cpu_seconds(proc.pid)
                            started = time.monotonic()
                        sent[i] = time.monotonic_ns()
                        await link.send(p.ShuffleComplete(i, 52))
                        await asyncio.sleep(interval)
                    await asyncio.wait_for(all_in.wait(), 120)
                    elapsed = time.monotonic() - started
                    cpu = cpu_seconds(proc.pid) - cpu_before
                finally:
                    proc.terminate()
                    await proc.wait()
                    for task in tasks:
                        task.cancel()
    if flooder is not None:
        flooder[0].terminate()
        await flooder[0].wait()
    measured = range(warmup + 1, total + 1)
    worst = sorted(measured, key=lambda i: sent[i] - received[i])[:10]
    latencies = sorted((received[i] - sent[i]) / 1e6 for i in measured)

    def pct(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))]

    return {
        "variant": name,
        "events": len(latencies),
        "p50_ms": round(pct(0.50), 3),
        "p90_ms": round(pct(0.90), 3),
        "p99_ms": round(pct(0.99), 3),
        "max_ms": round(latencies[-1], 3),
        "mean_ms": round(statistics.fmean(latencies), 3),
        "cpu_s": round(cpu, 3),
        "cpu_per_event_us": round(cpu / len(latencies) * 1e6, 1),
        "cpu_share_of_one_core": round(cpu / elapsed, 3),
        "rate_per_s": round(len(latencies) / elapsed, 1),
        "flooded": flooding,
        # the slowest events: when each was written (CLOCK_MONOTONIC ns) and its latency
        "worst": [[sent[i], round((received[i] - sent[i]) / 1e6, 3)] for i in worst],
    }


def daemon_config(directory: Path, broker: str, flooding: bool = False) -> Path:
    path = directory / "bench.toml"
    path.write_text(
        f"""
[table]
id = "bench"
game = "caribbean_stud"
state_dir = "{directory / "state"}"

[broker]
url = "{broker}"

[devices.shuffler]
driver = "tableside.shuffler"
url = "/dev/null"
heartbeat_timeout_s = 30
max_frames_per_s = 100000  # the bench measures the daemon, not its flood limit
"""
    )
    if flooding:
        with path.open("a") as f:
            f.write(
                '\n[devices.flooder]\ndriver = "tableside.shuffler"\nurl = "/dev/null"\n'
                "heartbeat_timeout_s = 30\n"
            )
    return path


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--interval", type=float, default=0.002, help="seconds between events")
    parser.add_argument("--broker", help="use this broker instead of starting a Mosquitto")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each variant, alternating")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--flood", action="store_true", help="a second device floods; tableside only"
    )
    args = parser.parse_args()

    mosquitto = None
    with tempfile.TemporaryDirectory(prefix="tableside-bench-") as tmp:
        directory = Path(tmp)
        broker = args.broker
        if broker is None:
            exe = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
            port = free_port()
            conf = directory / "mosquitto.conf"
            conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n")
            mosquitto = await asyncio.create_subprocess_exec(
                exe, "-c", str(conf), stderr=subprocess.DEVNULL
            )
            broker = f"mqtt://127.0.0.1:{port}"
            await asyncio.sleep(0.5)
        try:
            config = daemon_config(directory, broker, args.flood)

            def tableside(pty: str, flooder: str | None = None) -> list[str]:
                extra = ["--device", f"flooder={flooder}"] if flooder else []
                return [sys.executable, "-m", "tableside", "--log-level", "warning", "run",
                        "--config", str(config), "--device", f"shuffler={pty}",
                        *extra]  # fmt: skip

            def baseline(pty: str) -> list[str]:
                return [
                    sys.executable,
                    str(HERE / "forwarder.py"),
                    "--broker",
                    broker,
                    "--pty",
                    pty,
                ]

            results = []
            for _ in range(args.rounds):  # alternate, so drift on a shared machine hits both
                if args.flood:
                    results.append(await run_variant(
                        "flooded", tableside, "tableside/bench/device/shuffler/event", broker,
                        args.events, args.warmup, args.interval, None, flooding=True))  # fmt: skip
                    continue
                results.append(
                    await run_variant(
                        "baseline",
                        baseline,
                        "bench/raw",
                        broker,
                        args.events,
                        args.warmup,
                        args.interval,
                        None,
                    )
                )
                results.append(await run_variant(
                    "tableside", tableside, "tableside/bench/device/shuffler/event", broker,
                    args.events, args.warmup, args.interval, None))  # fmt: skip
        finally:
            if mosquitto is not None:
                mosquitto.terminate()
                await mosquitto.wait()
    header = (
        f"{'variant':<10} {'events':>6} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} "
        f"{'max ms':>8} {'CPU µs/ev':>10} {'core':>6}"
    )
    print(header)
    for r in results:
        print(
            f"{r['variant']:<10} {r['events']:>6} {r['p50_ms']:>8.3f} {r['p90_ms']:>8.3f} "
            f"{r['p99_ms']:>8.3f} {r['max_ms']:>8.3f} {r['cpu_per_event_us']:>10.1f} "
            f"{r['cpu_share_of_one_core']:>6.3f}"
        )

    if args.flood:
        print(f"p99 of the other device's events under flood: {results[-1]['p99_ms']} ms")

    def median(variant: str, key: str) -> float:
        return float(statistics.median(r[key] for r in results if r["variant"] == variant))

    for key in ("p50_ms", "p99_ms", "cpu_per_event_us") if not args.flood else ():
        base, ours = median("baseline", key), median("tableside", key)
        print(f"median {key}: baseline {base:.3f}, tableside {ours:.3f}, added {ours - base:+.3f}")
    meta = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "interval_s": args.interval,
        "warmup": args.warmup,
        "rounds": args.rounds,
        "events": args.events,
        "flood": args.flood,
    }
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
