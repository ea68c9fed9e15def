"""Latency, throughput and start-up: tableside against a bare forwarder, side by side.

Runs, in one launch, the same device traffic through
  * ``tableside run`` (the real daemon, as a user starts it, in its own process),
  * ``bench/forwarder.py`` (a bare pty → aiomqtt forwarder with its own minimal framing: the
    baseline),
  * the same forwarder made durable (``--durable``: each read's frames appended to a file with one
    ``fdatasync`` before any is ACKed or published: the honest limit for a daemon that journals
    before it sends), and
  * with ``--before COMMIT``, ``tableside run`` of that commit (``git archive`` into a
    temporary folder, run from there),
alternating (``--rounds``), so drift on a shared machine hits each.

The device side (this process) speaks the shuffler protocol over a real pty with the shipped
link layer: a frame's ACK is what lets the device send the next (tableside ACKs after the
journal's durable commit). Each ShuffleComplete's write time and its arrival at an MQTT
subscriber (also in this process) are read from CLOCK_MONOTONIC, which every process on the
machine shares. CPU is the process's user + system time from /proc.

Modes:

* latency (default): one device, an event every ``--interval`` s: p50 / p90 / p99 / p99.9 /
  max, the slowest events, CPU per event::

    .venv/bin/python bench/latency.py --events 5000 --before a715e1c

* ``--throughput S``: ``--devices`` devices sending back to back (each frame waits for its
  ACK) for S seconds: events/s a subscriber received, and the backlog (written, not yet
  received) at the first and last second, which must not grow::

    .venv/bin/python bench/latency.py --throughput 30 --devices 8 --before a715e1c

* ``--idle``: cold start to ``online`` on the broker, RSS after 5 s idle with the device
  connected, and the import time of ``tableside.daemon.app`` (``python -X importtime``)::

    .venv/bin/python bench/latency.py --idle --rounds 5 --before a715e1c

* ``--flood``: a second device floods (the shipped simulator's "flood" fault); the figures are
  the first device's (tableside only)::

    .venv/bin/python bench/latency.py --flood --events 1000 --interval 0.02 --rounds 1

Starts its own Mosquitto on a free loopback port (or use --broker URL). At the end it prints each
tableside variant's medians over the rounds as ratios to the baseline and the durable twin.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiomqtt
from provenance import commit, compiled

from tableside.daemon.broker import free_port
from tableside.drivers.framing import NakReason
from tableside.drivers.link import ArqPolicy, FramedLink, Notice
from tableside.drivers.shuffler import protocol as p
from tableside.shuffle.deck import new_deck
from tableside.shuffle.models import Model, parse_shuffle
from tableside.simulators.listen import PtyEndpoint

HERE = Path(__file__).resolve().parent
SIM_IDENTITY = p.Identity("bench", "BENCH-1", "B0001", "1.0", bytes(32))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Device:
    """The device end: answers the host's queries, sends ShuffleComplete frames."""

    def __init__(self, endpoint: PtyEndpoint, number: int) -> None:
        self.endpoint = endpoint
        self.number = number
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

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[FramedLink]:
        async with self.endpoint.streams() as (reader, writer):
            self.link = FramedLink(reader, writer, p.PROTOCOL, self.on_message,
                                   name=f"bench-device-{self.number}",
                                   policy=ArqPolicy(ack_timeout=1.0, retries=3))  # fmt: skip
            tasks = [asyncio.create_task(self.link.run()),
                     asyncio.create_task(self.answer_queries())]  # fmt: skip
            try:
                yield self.link
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)


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


class Variant:
    """A process under test: how to start it on some ptys, and where its messages appear."""

    def __init__(
        self, name: str, argv: Callable[[list[str]], list[str]], topic: str, ready: str,
        env: dict[str, str] | None = None, shuffle: Model | None = None,
    ) -> None:  # fmt: skip
        self.name, self.argv, self.topic, self.ready, self.env = name, argv, topic, ready, env
        #: the device recognises cards: after each ShuffleComplete, a ShuffleOrder of this model
        self.shuffle = shuffle

    async def start(self, ptys: list[str]) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            *self.argv(ptys), stdout=subprocess.DEVNULL, env=self.env
        )


def shuffle_id_of(payload: bytes) -> int | None:
    data = json.loads(payload)
    found = data.get("shuffle_id", data.get("data", {}).get("shuffle_id"))
    return found if isinstance(found, int) else None


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def pct(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    found = {f"p{q * 100:g}_ms": round(pct(q), 3) for q in (0.5, 0.9, 0.99, 0.999)}
    return {
        **found,
        "max_ms": round(ordered[-1], 3),
        "mean_ms": round(statistics.fmean(ordered), 3),
    }


async def run_latency(
    variant: Variant, broker: str, events: int, warmup: int, interval: float,
    flooding: bool = False,
) -> dict[str, Any]:  # fmt: skip
    endpoint = PtyEndpoint()
    flooder = await start_flooder() if flooding else None
    device = Device(endpoint, 0)
    parts = urlsplit(broker)
    sent: dict[int, int] = {}
    received: dict[int, int] = {}
    all_in = asyncio.Event()
    total = warmup + events
    async with (
        device.running() as link,
        aiomqtt.Client(parts.hostname or "", parts.port or 1883) as sub,
    ):
        await sub.subscribe(variant.topic, qos=1)

        async def collect() -> None:
            async for message in sub.messages:
                now = time.monotonic_ns()
                assert isinstance(message.payload, bytes)
                shuffle_id = shuffle_id_of(message.payload)
                if shuffle_id in sent and shuffle_id not in received:
                    received[shuffle_id] = now
                    if len(received) == total:
                        all_in.set()

        collector = asyncio.create_task(collect())
        proc = await variant.start([endpoint.path] + ([flooder[1]] if flooder else []))
        try:
            await asyncio.sleep(2.0)  # the process opens the pty and its broker link
            cpu_before = cpu_seconds(proc.pid)
            started = time.monotonic()
            deck, rng = new_deck(), random.Random(1)
            for i in range(1, total + 1):
                if i == warmup + 1:
                    cpu_before = cpu_seconds(proc.pid)
                    started = time.monotonic()
                sent[i] = time.monotonic_ns()
                await link.send(p.ShuffleComplete(i, 52))
                if variant.shuffle is not None:  # what a recognising shuffler sends next
                    made = variant.shuffle.shuffle(deck, rng)
                    await link.send(p.ShuffleOrder(i, made, deck))
                    deck = made
                await asyncio.sleep(interval)
            await asyncio.wait_for(all_in.wait(), 120)
            elapsed = time.monotonic() - started
            cpu = cpu_seconds(proc.pid) - cpu_before
        finally:
            proc.terminate()
            await proc.wait()
            collector.cancel()
    if flooder is not None:
        flooder[0].terminate()
        await flooder[0].wait()
    measured = range(warmup + 1, total + 1)
    worst = sorted(measured, key=lambda i: sent[i] - received[i])[:10]
    return {
        "variant": variant.name,
        "mode": "flood" if flooding else "latency",
        "events": len(measured),
        **percentiles([(received[i] - sent[i]) / 1e6 for i in measured]),
        "cpu_s": round(cpu, 3),
        "cpu_per_event_us": round(cpu / len(measured) * 1e6, 1),
        "cpu_share_of_one_core": round(cpu / elapsed, 3),
        "rate_per_s": round(len(measured) / elapsed, 1),
        "load": round(os.getloadavg()[0], 2),
        # the slowest events: when each was written (CLOCK_MONOTONIC ns) and its latency
        "worst": [[sent[i], round((received[i] - sent[i]) / 1e6, 3)] for i in worst],
    }


async def run_throughput(
    variant: Variant, broker: str, devices: int, seconds: float, warmup: float
) -> dict[str, Any]:
    """Every device sends back to back for ``warmup`` + ``seconds``; counted over ``seconds``."""
    endpoints = [PtyEndpoint() for _ in range(devices)]
    parts = urlsplit(broker)
    sent: dict[int, int] = {}
    received: dict[int, int] = {}
    written = 0
    stop = asyncio.Event()
    async with contextlib.AsyncExitStack() as stack:
        links = [await stack.enter_async_context(Device(e, n).running())
                 for n, e in enumerate(endpoints)]  # fmt: skip
        sub = await stack.enter_async_context(
            aiomqtt.Client(parts.hostname or "", parts.port or 1883, max_queued_incoming_messages=0)
        )
        await sub.subscribe(variant.topic, qos=1)

        async def collect() -> None:
            async for message in sub.messages:
                now = time.monotonic_ns()
                assert isinstance(message.payload, bytes)
                shuffle_id = shuffle_id_of(message.payload)
                if shuffle_id in sent and shuffle_id not in received:
                    received[shuffle_id] = now

        async def send(n: int, link: FramedLink) -> None:
            nonlocal written
            k = 0
            while not stop.is_set():
                k += 1
                shuffle_id = n * 10_000_000 + k
                sent[shuffle_id] = time.monotonic_ns()
                await link.send(p.ShuffleComplete(shuffle_id, 52))
                written += 1

        collector = asyncio.create_task(collect())
        proc = await variant.start([e.path for e in endpoints])
        try:
            await asyncio.sleep(2.0 + devices * 0.2)  # the process opens the ptys and its broker
            senders = [asyncio.create_task(send(n, link)) for n, link in enumerate(links)]
            await asyncio.sleep(warmup)
            samples = []  # (time, written, received, cpu)
            started = time.monotonic()
            while (now := time.monotonic()) < started + seconds + 0.5:
                samples.append((now, written, len(received), cpu_seconds(proc.pid)))
                await asyncio.sleep(1.0)
            stop.set()
            await asyncio.gather(*senders, return_exceptions=True)
        finally:
            proc.terminate()
            await proc.wait()
            collector.cancel()
    (t0, w0, r0, c0), (t1, w1, r1, c1) = samples[0], samples[-1]
    window = [(received[i] - sent[i]) / 1e6 for i in received
              if t0 * 1e9 <= sent[i] <= t1 * 1e9]  # fmt: skip
    return {
        "variant": variant.name,
        "mode": "throughput",
        "devices": devices,
        "seconds": round(t1 - t0, 1),
        "events_per_s": round((r1 - r0) / (t1 - t0)),
        "written_per_s": round((w1 - w0) / (t1 - t0)),
        "backlog_first": w0 - r0,
        "backlog_last": w1 - r1,
        "backlog_max": max(w - r for _, w, r, _ in samples),
        "cpu_per_event_us": round((c1 - c0) / max(1, r1 - r0) * 1e6, 1),
        "cpu_share_of_one_core": round((c1 - c0) / (t1 - t0), 3),
        "load": round(os.getloadavg()[0], 2),
        **(percentiles(window) if window else {}),
    }


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def run_idle(variant: Variant, broker: str) -> dict[str, Any]:
    """Spawn → ``online`` on the broker; RSS after 5 s idle with the device connected."""
    endpoint = PtyEndpoint()
    parts = urlsplit(broker)
    async with (
        Device(endpoint, 0).running(),
        aiomqtt.Client(parts.hostname or "", parts.port or 1883) as sub,
    ):
        online = asyncio.Event()

        async def collect() -> None:
            async for message in sub.messages:
                if isinstance(message.payload, bytes) and b"online" in message.payload:
                    online.set()

        collector = asyncio.create_task(collect())
        await sub.subscribe(variant.ready, qos=1)
        await asyncio.sleep(0.2)  # no retained "online" left from an earlier run (cleared)
        online.clear()
        spawned = time.monotonic()
        proc = await variant.start([endpoint.path])
        try:
            await asyncio.wait_for(online.wait(), 30)
            cold = time.monotonic() - spawned
            await asyncio.sleep(5.0)
            cpu0 = cpu_seconds(proc.pid)
            await asyncio.sleep(5.0)
            idle_cpu = (cpu_seconds(proc.pid) - cpu0) / 5.0
            rss = rss_mib(proc.pid)
        finally:
            proc.terminate()
            await proc.wait()
            collector.cancel()
            # the retained "online"/"offline" goes, so the next start is seen afresh
            await sub.publish(variant.ready, b"", qos=1, retain=True)
    return {
        "variant": variant.name,
        "mode": "idle",
        "cold_start_s": round(cold, 3),
        "idle_rss_mib": round(rss, 1),
        "idle_cpu_share": round(idle_cpu, 4),
        "load": round(os.getloadavg()[0], 2),
    }


RICH = re.compile(r"\|\s+rich\.console$", re.M)  # an import of rich that loaded its parts


def import_time(env: dict[str, str] | None) -> dict[str, float]:
    """``python -X importtime -c 'import tableside.daemon.app'``: its cumulative µs, and the
    wall time of that process against ``python -c pass``."""

    def wall(code: str, *flags: str) -> tuple[float, str]:
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, *flags, "-c", code], env=env, check=True,
                              capture_output=True, text=True)  # fmt: skip
        return time.perf_counter() - t0, done.stderr

    _, trace = wall("import tableside.daemon.app", "-X", "importtime")
    cumulative = [int(m.group(1)) for m in re.finditer(
        r"^import time:\s+\d+ \|\s+(\d+) \| tableside\.daemon\.app$", trace, re.M)]  # fmt: skip
    walls = [wall("import tableside.daemon.app")[0] - wall("pass")[0] for _ in range(3)]
    return {"import_app_s": round(cumulative[0] / 1e6, 3) if cumulative else -1.0,
            "import_app_wall_s": round(statistics.median(walls), 3),
            "imports_rich": float(bool(RICH.search(trace)))}  # fmt: skip


def daemon_config(
    directory: Path, broker: str, devices: int, flooding: bool = False, recognises: bool = False
) -> Path:
    path = directory / f"bench-{devices}{'-recognising' if recognises else ''}.toml"
    text = f"""
[table]
id = "bench"
game = "caribbean_stud"
state_dir = "{directory / "state"}"

[broker]
url = "{broker}"
"""
    for n in range(devices):
        text += f"""
[devices.shuffler{n}]
driver = "tableside.shuffler"
url = "/dev/null"
heartbeat_timeout_s = 30
max_frames_per_s = 100000  # the bench measures the daemon, not its flood limit
"""
        if recognises:
            text += "recognises_cards = true\n"
    if flooding:
        text += """
[devices.flooder]
driver = "tableside.shuffler"
url = "/dev/null"
heartbeat_timeout_s = 30
"""
    path.write_text(text)
    return path


def before_tree(rev: str, directory: Path) -> dict[str, str]:
    """``rev`` unpacked into ``directory``; the environment that runs it instead of this
    tree (its ``src`` first on the path)."""
    root = Path(__file__).resolve().parent.parent
    archive = subprocess.run(["git", "-C", str(root), "archive", rev], check=True,
                             capture_output=True).stdout  # fmt: skip
    directory.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(directory)], input=archive, check=True)
    compiled(directory)
    return {**os.environ, "PYTHONPATH": str(directory / "src")}


#: the figures whose ratios to the baseline and the durable twin are printed at the end
RATIO_KEYS = (
    "p50_ms", "p99_ms", "cpu_per_event_us", "events_per_s", "cold_start_s", "idle_rss_mib",
)  # fmt: skip
TWINS = ("baseline", "durable", "journal")


def summarise(results: list[dict[str, Any]]) -> list[str]:
    """Each variant's median over the rounds of each RATIO_KEYS figure, and every tableside
    variant's as a ratio to the baseline's and the durable twin's."""
    medians: dict[str, dict[str, float]] = {}
    for name in dict.fromkeys(r["variant"] for r in results):
        rows = [r for r in results if r["variant"] == name]
        medians[name] = {k: statistics.median(r[k] for r in rows) for k in RATIO_KEYS
                         if all(isinstance(r.get(k), int | float) for r in rows)}  # fmt: skip
    lines = []
    for name, figures in medians.items():
        shown = []
        for key, value in figures.items():
            versus = [f"{value / medians[b][key]:.2f}x {b}" for b in TWINS
                      if name not in TWINS and medians.get(b, {}).get(key)]  # fmt: skip
            shown.append(f"{key} {value:g}" + (f" ({', '.join(versus)})" if versus else ""))
        lines.append(f"median {name:<20} " + "; ".join(shown))
    return lines


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
    parser.add_argument("--before", metavar="COMMIT", help="also run tableside at this commit")
    parser.add_argument("--no-baseline", action="store_true", help="tableside only")
    parser.add_argument(
        "--journal-twin",
        action="store_true",
        help="also the forwarder with tableside's journal in place of the file",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--flood", action="store_true", help="a second device floods")
    mode.add_argument("--throughput", type=float, metavar="S", help="back to back for S s")
    mode.add_argument("--idle", action="store_true", help="cold start, idle RSS, import time")
    parser.add_argument("--devices", type=int, default=1, help="--throughput: devices at once")
    parser.add_argument("--shuffle", metavar="MODEL",
                        help="latency: also tableside with card recognition, the device sending "
                        "a ShuffleOrder of MODEL (fair, shelf:10…) after each ShuffleComplete, "
                        "the table testing each (docs/shuffle.md)")  # fmt: skip
    args = parser.parse_args()

    mosquitto = None
    with tempfile.TemporaryDirectory(prefix="tableside-bench-") as tmp:
        directory = Path(tmp)
        broker = args.broker
        if broker is None:
            exe = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
            port = free_port()
            conf = directory / "mosquitto.conf"
            conf.write_text(
                f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
                "max_queued_messages 0\n"
            )
            mosquitto = await asyncio.create_subprocess_exec(
                exe, "-c", str(conf), stderr=subprocess.DEVNULL
            )
            broker = f"mqtt://127.0.0.1:{port}"
            await asyncio.sleep(0.5)
        try:
            devices = args.devices if args.throughput else 1
            config = daemon_config(directory, broker, devices, args.flood)
            variants = []
            if not (args.flood or args.no_baseline):

                def forwarder(*extra: str) -> Callable[[list[str]], list[str]]:
                    return lambda ptys: [
                        sys.executable, str(HERE / "forwarder.py"), "--broker", broker,
                        "--ready-topic", "bench/raw-status", *extra,
                        *(x for pty in ptys for x in ("--pty", pty)),
                    ]  # fmt: skip

                durable_log = str(directory / "state" / "durable.log")
                variants.append(Variant("baseline", forwarder(), "bench/raw/+", "bench/raw-status"))
                variants.append(Variant("durable", forwarder("--durable", durable_log),
                                        "bench/raw/+", "bench/raw-status"))  # fmt: skip
                if args.journal_twin:
                    journal_dir = str(directory / "state")
                    variants.append(Variant("journal", forwarder("--journal", journal_dir),
                                            "bench/raw/+", "bench/raw-status"))  # fmt: skip

            def tableside_on(conf: Path) -> Callable[[list[str]], list[str]]:
                def argv(ptys: list[str]) -> list[str]:
                    if args.flood:
                        named = [f"shuffler0={ptys[0]}", f"flooder={ptys[1]}"]
                    else:
                        named = [f"shuffler{n}={pty}" for n, pty in enumerate(ptys)]
                    flags = [x for d in named for x in ("--device", d)]
                    return [sys.executable, "-m", "tableside", "--log-level", "warning", "run",
                            "--config", str(conf), *flags]  # fmt: skip

                return argv

            tableside = tableside_on(config)
            compiled(HERE.parent)

            variants.append(Variant("tableside", tableside, "tableside/bench/device/+/event",
                                    "tableside/bench/status"))  # fmt: skip
            if args.shuffle:  # the same daemon testing every shuffle (issue 19's cost)
                recognising = daemon_config(directory, broker, devices, recognises=True)
                variants.append(Variant(f"tableside+{args.shuffle}", tableside_on(recognising),
                                        "tableside/bench/device/+/event",
                                        "tableside/bench/status",
                                        shuffle=parse_shuffle(args.shuffle)))  # fmt: skip
            if args.before:
                env = before_tree(args.before, directory / "before")
                variants.append(Variant(f"tableside@{args.before}", tableside,
                                        "tableside/bench/device/+/event",
                                        "tableside/bench/status", env))  # fmt: skip
            results: list[dict[str, Any]] = []
            for round_ in range(args.rounds):
                for variant in variants:
                    # a fresh journal each time: every variant starts from the same state
                    shutil.rmtree(directory / "state", ignore_errors=True)
                    (directory / "state").mkdir()
                    if args.idle:
                        r = await run_idle(variant, broker)
                        if variant.name not in ("baseline", "durable"):
                            r.update(import_time(variant.env))
                    elif args.throughput:
                        r = await run_throughput(variant, broker, devices, args.throughput, 3.0)
                    else:
                        r = await run_latency(variant, broker, args.events, args.warmup,
                                              args.interval, args.flood)  # fmt: skip
                    r["round"] = round_ + 1
                    results.append(r)
                    shown = {k: v for k, v in r.items() if k not in ("worst", "variant")}
                    print(f"{variant.name:<20} {shown}", flush=True)
        finally:
            if mosquitto is not None:
                mosquitto.terminate()
                await mosquitto.wait()
    ratios = summarise(results)
    for line in ratios:
        print(line)
    meta = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "commit": commit(),
        "before": args.before,
        "argv": sys.argv[1:],
        "load_at_end": os.getloadavg(),
    }
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
