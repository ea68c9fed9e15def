"""Soak: the real daemon, as a separate process, against every simulated device of a table for
a long time, at many times a busy table's event rate. Reports the daemon's RSS and CPU over
time, the journal's size, and whether any seq was lost.

    .venv/bin/python bench/soak.py --duration 3600            # the hour-long run
    .venv/bin/python bench/soak.py --duration 20 --output /tmp  # the suite's short version

A busy Caribbean Stud table: about 100 rounds an hour, each ~30 events with seven players (a
shuffle ~3, the shoe's stacks ~10, the progressive system's buttons, lock-out, wagers and
status ~17): ~0.8 events/s. Ten times that is ~8 events/s; the default intervals here give
more than that, and the report says the rate measured.

Everything runs on this machine: its own Mosquitto on a free loopback port, the simulators
(`tableside simulate`) and the daemon (`tableside run`) as processes, a subscriber in this one.
The journal keeps 0.005 days (7.2 minutes) so that retention runs during the soak.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiomqtt
from provenance import machine

from tableside.daemon.broker import free_port

TABLE = "soak-1"
SEATS = {1: 3, 2: 4, 3: 5, 4: 6, 5: 7, 6: 8, 7: 9}
CLK_TCK = os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def journal_mib(state: Path) -> float:
    files = (state / TABLE).glob("journal.sqlite*")
    return sum(f.stat().st_size for f in files) / 2**20


def config_text(state: Path, broker: str, ports: dict[str, int]) -> str:
    seats = ", ".join(f"{s} = {a}" for s, a in SEATS.items())
    return f"""
[table]
id = "{TABLE}"
game = "caribbean_stud"
state_dir = "{state}"

[broker]
url = "{broker}"

[journal]
retain_days = 0.005
max_mb = 200

[devices.shuffler]
driver = "tableside.shuffler"
url = "socket://127.0.0.1:{ports["shuffler"]}"

[devices.shoe]
driver = "tableside.shoe"
url = "socket://127.0.0.1:{ports["shoe"]}"

[devices.progressive]
driver = "tableside.progressive_controller"
url = "socket://127.0.0.1:{ports["progressive"]}"

[devices.acceptors]
driver = "tableside.acceptors"
url = "socket://127.0.0.1:{ports["acceptors"]}"
seats = {{ {seats} }}
"""


class Counter:
    """A plain subscriber: every live seq it sees, and how many repeats came marked."""

    def __init__(self) -> None:
        self.seqs: set[int] = set()
        self.messages = 0
        self.unmarked_repeats = 0
        self.offline_seq: int | None = None
        self.offline = asyncio.Event()

    async def run(self, port: int, ready: asyncio.Event) -> None:
        while True:
            try:
                async with aiomqtt.Client(
                    "127.0.0.1", port, identifier="soak-auditor", clean_session=False
                ) as client:
                    await client.subscribe(f"tableside/{TABLE}/#", qos=1)
                    ready.set()
                    async for m in client.messages:
                        if m.retain or not isinstance(m.payload, bytes):
                            continue
                        body = json.loads(m.payload)
                        if body.get("republished") or body.get("will"):
                            continue
                        seq = body["seq"]
                        self.messages += 1
                        if seq in self.seqs and not body.get("redelivered"):
                            self.unmarked_repeats += 1
                        self.seqs.add(seq)
                        if body.get("status") == "offline":
                            self.offline_seq = seq
                            self.offline.set()
            except aiomqtt.MqttError:
                await asyncio.sleep(0.2)


async def soak(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="tableside-soak-"))
    procs: list[subprocess.Popen[bytes]] = []
    logs = (work / "processes.log").open("wb")

    def start(*cmd: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(cmd, stdout=logs, stderr=subprocess.STDOUT)
        procs.append(proc)
        return proc

    broker_port = free_port()
    (work / "mosquitto.conf").write_text(
        f"listener {broker_port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
        "log_dest none\nuser root\n"
    )
    mosquitto = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    start(mosquitto, "-c", str(work / "mosquitto.conf"))
    ports = {name: free_port() for name in ("shuffler", "shoe", "progressive", "acceptors")}
    tableside = [sys.executable, "-m", "tableside", "--log-level", "warning"]
    sim = [*tableside, "simulate"]
    start(*sim, "shuffler", "--listen", f"socket://127.0.0.1:{ports['shuffler']}",
          "--interval", str(args.shuffle_interval))  # fmt: skip
    plan = "1:5,2:5,3:5,4:5,5:5,6:5,7:5,D:5"  # seven players and the dealer
    start(*sim, "shoe", "--listen", f"socket://127.0.0.1:{ports['shoe']}",
          "--interval", str(args.deal_interval), "--plan", plan)  # fmt: skip
    seats = ",".join(f"{s}={a}" for s, a in SEATS.items())
    start(*sim, "progressive", "--listen", f"socket://127.0.0.1:{ports['progressive']}",
          "--bus-listen", f"socket://127.0.0.1:{ports['acceptors']}", "--seats", seats,
          "--interval", str(args.round_interval), "--set", "players=[1,2,3,4,5,6,7]")  # fmt: skip
    config = work / "soak.toml"
    config.write_text(config_text(work / "state", f"mqtt://127.0.0.1:{broker_port}", ports))

    counter = Counter()
    ready = asyncio.Event()
    await asyncio.sleep(1.0)  # broker and simulators listening
    sub_task = asyncio.create_task(counter.run(broker_port, ready))
    await asyncio.wait_for(ready.wait(), 20)
    daemon = start(*tableside, "run", "--config", str(config))
    started = time.monotonic()
    samples: list[dict[str, float]] = []
    try:
        while (elapsed := time.monotonic() - started) < args.duration:
            await asyncio.sleep(min(args.sample, max(0.0, args.duration - elapsed)))
            if daemon.poll() is not None:
                raise RuntimeError(f"the daemon exited ({daemon.returncode}); see {logs.name}")
            samples.append({
                "t_s": round(time.monotonic() - started, 1),
                "rss_mib": round(rss_mib(daemon.pid), 1),
                "cpu_s": round(cpu_s(daemon.pid), 2),
                "journal_mib": round(journal_mib(work / "state"), 2),
                "received": counter.messages,
            })  # fmt: skip
            if args.verbose:
                print(json.dumps(samples[-1]), flush=True)
        daemon.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(daemon.wait, 30)
        await asyncio.wait_for(counter.offline.wait(), 30)
    finally:
        sub_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sub_task
        for proc in reversed(procs):
            if proc.poll() is None:
                proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
        logs.close()
    last = counter.offline_seq
    assert last is not None
    lost = sorted(set(range(0, last + 1)) - counter.seqs)
    duration = samples[-1]["t_s"] if samples else 0.0
    cpu_rate = [
        (b["cpu_s"] - a["cpu_s"]) / (b["t_s"] - a["t_s"]) * 100
        for a, b in itertools.pairwise(samples)
        if b["t_s"] > a["t_s"]
    ]
    quarter = max(1, len(samples) // 4)
    return {
        "bench": "soak",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "duration_s": duration,
        "daemon_exit": code,
        "messages": counter.messages,
        "seqs": len(counter.seqs),
        "last_seq": last,
        "lost": len(lost),
        "lost_first": lost[:10],
        "unmarked_repeats": counter.unmarked_repeats,
        "events_per_s": round(counter.messages / duration, 1) if duration else 0.0,
        "rss_mib": {
            "first": samples[0]["rss_mib"] if samples else None,
            "max": max(s["rss_mib"] for s in samples) if samples else None,
            "last": samples[-1]["rss_mib"] if samples else None,
            "first_quarter_mean": round(sum(s["rss_mib"] for s in samples[:quarter]) / quarter, 1),
            "last_quarter_mean": round(sum(s["rss_mib"] for s in samples[-quarter:]) / quarter, 1),
        },
        "cpu_percent": {
            "mean": round(sum(cpu_rate) / len(cpu_rate), 1) if cpu_rate else None,
            "max": round(max(cpu_rate), 1) if cpu_rate else None,
        },
        "journal_mib_max": max((s["journal_mib"] for s in samples), default=0.0),
        "intervals_s": {
            "shuffle": args.shuffle_interval,
            "deal": args.deal_interval,
            "round": args.round_interval,
        },
        "samples": samples,
        "work": str(work),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=3600, help="seconds (default 3600)")
    parser.add_argument("--sample", type=float, default=10, help="seconds between samples")
    parser.add_argument("--shuffle-interval", type=float, default=0.5)
    parser.add_argument("--deal-interval", type=float, default=0.5)
    parser.add_argument("--round-interval", type=float, default=1.0)
    parser.add_argument("--output", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--verbose", action="store_true", help="print each sample")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = parser.parse_args()
    args.sample = min(args.sample, max(1.0, args.duration / 5))
    result = asyncio.run(soak(args))
    if not args.keep:
        shutil.rmtree(result.pop("work"), ignore_errors=True)
    else:
        print(f"kept: {result['work']}")
    args.output.mkdir(parents=True, exist_ok=True)
    out = args.output / f"soak-{int(args.duration)}s.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    brief = {k: v for k, v in result.items() if k != "samples"}
    print(json.dumps(brief, indent=1))
    print(f"written: {out}")
    return 0 if result["lost"] == 0 and result["unmarked_repeats"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
