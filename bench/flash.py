"""Bytes written to storage, per record and per idle hour, at the block device: tableside
against its durable twin.

What a controller on eMMC or an SD card pays for is what reaches the device, so the state lives
on a file system of its own (a loop-mounted ext4 holding nothing else) and every figure is the
device's own count of sectors written (``/sys/block/DEV/stat``), the file system's journal and
metadata included. Each run, side by side in one launch:

* the **durable twin** (``bench/forwarder.py --durable FILE``): each read's frames appended to
  one file with one ``fdatasync`` before any is ACKed or published;
* **tableside** (``tableside run``, as a user starts it), and with ``--before COMMIT`` also an
  earlier commit's (unpacked by ``git archive``).

Phases, each process on a fresh state folder:

* ``records``: one device (a pty, the shipped link layer, a heartbeat a second as a shuffler
  sends) sends ``--warmup`` ShuffleCompletes, then, ``--settle`` s later, ``--records`` more
  every ``--interval`` s. The window starts after a ``syncfs`` and ends a second after the last
  record reached an MQTT subscriber, with a ``syncfs``: everything the window dirtied is then
  on the device, whenever the kernel would have written it. Per record: bytes at the device,
  cache flushes asked of it, and what ``/proc/PID/io`` charges the process (``write_bytes``:
  pages it dirtied) and carries in its write calls (``wchar``); and per frame the device sent
  (records and heartbeats: the twin appends both).
* ``after``: the ``--after`` s that follow, counted once: tableside's checkpoint after 30 s of
  quiet, and its signed checkpoint of the journal's head (a record, every 60 s when anything
  was journaled) and that record's checkpoint fall in it.
* ``idle``: the same process, then ``--idle`` s with the device connected and quiet
  (heartbeats only): bytes an hour.
* ``retrying`` (tableside only), from ``--after`` s after its start: a new process with the
  device connected and two more that never answer: one refuses every connection
  (``socket://`` to a closed port), one is a serial port that opens with nothing behind it (a
  pty nobody answers: a device switched off), so their drivers retry their links all along;
  ``--idle`` s: bytes an hour.

``--attribute`` (root: a tracefs instance of ``block:block_bio_queue``) says which file each
written sector belongs to (the state's files by ``filefrag``, the file system's journal by
``debugfs``, the rest: inodes, bitmaps and directories).

The state file system: ``--state-fs DIR --blockdev DEV`` (made beforehand: docs/benchmarks.md),
or ``--make-fs`` (root: a 512 MiB ext4 image under the temp folder, loop-mounted, unmounted and
detached at the end)::

    sudo .venv/bin/python bench/flash.py --make-fs --attribute --rounds 2 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiomqtt
from latency import Device, before_tree, shuffle_id_of
from provenance import commit, compiled

from tableside.daemon.broker import free_port
from tableside.daemon.discipline import DISCIPLINE_FILE_ENV
from tableside.drivers.shuffler import protocol as p
from tableside.simulators.listen import PtyEndpoint

HERE = Path(__file__).resolve().parent
BLOCK = 4096


@dataclass
class Disk:
    """A file system of its own (``directory``, its mount point) on block device ``device``
    (its name under /sys/block)."""

    directory: Path
    device: str

    def written(self) -> int:
        """Bytes written to the device so far (field 7 of its stat: 512-byte sectors)."""
        return int(Path(f"/sys/block/{self.device}/stat").read_text().split()[6]) * 512

    def flushes(self) -> int:
        """Cache flushes the device has been asked for (field 16), 0 where not counted."""
        fields = Path(f"/sys/block/{self.device}/stat").read_text().split()
        return int(fields[15]) if len(fields) > 15 else 0

    def sync(self) -> None:
        """Everything dirty on this file system onto the device (``syncfs``)."""
        subprocess.run(["sync", "-f", str(self.directory)], check=True)


@contextlib.contextmanager
def scratch_disk(size_mib: int) -> Iterator[Disk]:
    """A new ext4 on a loop device, mounted under the temp folder; gone afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="tableside-flash-"))
    image, mount = folder / "state.img", folder / "state"
    mount.mkdir()
    with image.open("wb") as f:
        f.truncate(size_mib << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
    dev = subprocess.run(["losetup", "--find", "--show", str(image)], check=True,
                         capture_output=True, text=True).stdout.strip()  # fmt: skip
    try:
        subprocess.run(["mount", dev, str(mount)], check=True)
        try:
            yield Disk(mount, Path(dev).name)
        finally:
            subprocess.run(["umount", str(mount)], check=True)
    finally:
        subprocess.run(["losetup", "-d", dev], check=True)
        shutil.rmtree(folder, ignore_errors=True)


# -- which file each write went to --------------------------------------------------------

TRACEFS = Path("/sys/kernel/tracing")
BIO = re.compile(r"block_bio_queue: \d+,\d+ (\S+) (\d+) \+ (\d+) ")


class Trace:
    """The device's writes (sector, sectors, flags), from a tracefs instance of its own."""

    def __init__(self, disk: Disk) -> None:
        self.disk = disk
        self.root = TRACEFS / "instances" / f"tableside-flash-{os.getpid()}"

    def __enter__(self) -> Trace:
        self.root.mkdir()
        major, minor = map(int, Path(f"/sys/block/{self.disk.device}/dev").read_text().split(":"))
        (self.root / "buffer_size_kb").write_text("16384")
        event = self.root / "events" / "block" / "block_bio_queue"
        (event / "filter").write_text(f"dev == {major << 20 | minor}")
        (event / "enable").write_text("1")
        self.take()
        return self

    def take(self) -> list[tuple[int, int, str]]:
        """The writes since the last take."""
        text = (self.root / "trace").read_text()
        (self.root / "trace").write_text("")
        return [(int(m[2]), int(m[3]), m[1]) for m in BIO.finditer(text)]

    def __exit__(self, *exc: object) -> None:
        (self.root / "events" / "block" / "block_bio_queue" / "enable").write_text("0")
        self.root.rmdir()


def extents(path: Path) -> list[tuple[int, int]]:
    """The file's blocks on the device, as (first, last) ranges (``filefrag``)."""
    out = subprocess.run(["filefrag", "-v", str(path)], capture_output=True, text=True).stdout
    extent = re.compile(r"^\s*\d+:\s+\d+\.\.\s*\d+:\s+(\d+)\.\.\s*(\d+):", re.M)
    return [(int(m[1]), int(m[2])) for m in extent.finditer(out)]


def fs_journal(disk: Disk) -> list[tuple[int, int]]:
    """The ext4 journal's blocks (inode 8, fixed since mkfs)."""
    out = subprocess.run(["debugfs", "-R", "stat <8>", f"/dev/{disk.device}"],
                         capture_output=True, text=True).stdout  # fmt: skip
    ranges = []
    for m in re.finditer(r"\(\d+(?:-\d+)?\):(\d+)(?:-(\d+))?", out):
        ranges.append((int(m[1]), int(m[2] or m[1])))
    return ranges


def attribute(writes: list[tuple[int, int, str]], disk: Disk, state: Path) -> dict[str, Any]:
    """Bytes and writes by file: the state's files, the file system's journal, the rest."""
    owners: list[tuple[int, int, str]] = [(a, b, "(file system journal)")
                                          for a, b in fs_journal(disk)]  # fmt: skip
    for path in state.rglob("*"):
        if path.is_file():
            owners += [(a, b, path.name) for a, b in extents(path)]
    by: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    for sector, sectors, _flags in writes:
        if not sectors:
            continue  # a flush on its own
        block = sector * 512 // BLOCK
        name = next((n for a, b, n in owners if a <= block <= b),
                    "(inodes, bitmaps, directories)")  # fmt: skip
        by[name] += sectors * 512
        count[name] += 1
    return {name: {"bytes": by[name], "writes": count[name]} for name, _ in by.most_common()}


# -- the processes ------------------------------------------------------------------------


@dataclass
class Variant:
    name: str
    env: dict[str, str] | None = None
    twin: bool = False


def config(path: Path, state: Path, broker: str, retrying: tuple[int, str] | None) -> Path:
    text = f"""
[table]
id = "flash"
game = "caribbean_stud"
state_dir = "{state}"

[broker]
url = "{broker}"

[devices.shuffler0]
driver = "tableside.shuffler"
url = "/dev/null"
heartbeat_timeout_s = 30
max_frames_per_s = 100000
"""
    if retrying is not None:
        port, silent = retrying
        text += f"""
[devices.refused]  # nothing listens there: every connection is refused
driver = "tableside.shuffler"
url = "socket://127.0.0.1:{port}"

[devices.silent]  # a serial port with nothing behind it
driver = "tableside.shuffler"
url = "{silent}"
"""
    path.write_text(text)
    return path


async def spawn(variant: Variant, pty: str, broker: str, state: Path, work: Path,
                retrying: tuple[int, str] | None = None) -> asyncio.subprocess.Process:  # fmt: skip
    if variant.twin:
        argv = [sys.executable, str(HERE / "forwarder.py"), "--broker", broker,
                "--durable", str(state / "durable.log"), "--pty", pty]  # fmt: skip
    else:
        conf = config(work / f"{state.name}.toml", state, broker, retrying)
        argv = [sys.executable, "-m", "tableside", "--log-level", "warning", "run",
                "--config", str(conf), "--device", f"shuffler0={pty}"]  # fmt: skip
    return await asyncio.create_subprocess_exec(*argv, stdout=subprocess.DEVNULL, env=variant.env)


def process_io(pid: int) -> dict[str, int]:
    rows = Path(f"/proc/{pid}/io").read_text().splitlines()
    return {k: int(v) for k, v in (row.split(": ") for row in rows)}


@dataclass
class Seen:
    """What a subscriber received: each ShuffleComplete's id (→ arrival), and every message
    by topic (what the process journaled and sent)."""

    ids: dict[int, int] = field(default_factory=dict)
    topics: collections.Counter[str] = field(default_factory=collections.Counter)


@dataclass
class Window:
    """Device bytes, flushes and the process's I/O over a stretch of time, the messages it
    sent meanwhile, and where the bytes went (with ``--attribute``)."""

    disk: Disk
    pid: int
    trace: Trace | None
    state: Path
    seen: Seen
    started: float = 0.0
    before: tuple[int, int, dict[str, int]] = (0, 0, {})
    topics: collections.Counter[str] = field(default_factory=collections.Counter)
    figures: dict[str, Any] = field(default_factory=dict)

    def open(self) -> None:
        self.disk.sync()
        if self.trace is not None:
            self.trace.take()
        self.before = (self.disk.written(), self.disk.flushes(), process_io(self.pid))
        self.topics = self.seen.topics.copy()
        self.started = time.monotonic()

    def close(self) -> dict[str, Any]:
        io = process_io(self.pid)  # before the sync: what the process did, not the sync
        self.disk.sync()
        written, flushes, io0 = self.before
        self.figures = {
            "seconds": round(time.monotonic() - self.started, 2),
            "device_bytes": self.disk.written() - written,
            "device_flushes": self.disk.flushes() - flushes,
            "write_bytes": io["write_bytes"] - io0["write_bytes"],
            "wchar": io["wchar"] - io0["wchar"],
            "write_calls": io["syscw"] - io0["syscw"],
            "messages": dict(self.seen.topics - self.topics),
        }
        if self.trace is not None:
            self.figures["by_file"] = attribute(self.trace.take(), self.disk, self.state)
        return self.figures


class Beating(Device):
    """The bench's device, with a heartbeat a second as a shuffler sends
    (docs/protocols/shuffler.md), counted: the twin appends each one as a frame."""

    beats = 0

    async def heartbeats(self) -> None:
        started = time.monotonic()
        while True:
            await asyncio.sleep(1.0)
            assert self.link is not None
            await self.link.send(p.Heartbeat(int((time.monotonic() - started) * 1000)))
            self.beats += 1


@contextlib.asynccontextmanager
async def connected(
    variant: Variant,
    broker: str,
    state: Path,
    work: Path,
    retrying: tuple[int, str] | None = None,
) -> AsyncIterator[tuple[asyncio.subprocess.Process, Beating, Seen]]:
    """The process running with one device connected (sending heartbeats), and what a
    subscriber receives from it."""
    endpoint = PtyEndpoint()
    device = Beating(endpoint, 0)
    seen = Seen()
    parts = urlsplit(broker)
    topic = "bench/raw/+" if variant.twin else "tableside/flash/#"
    async with (
        device.running(),
        aiomqtt.Client(parts.hostname or "", parts.port or 1883) as sub,
    ):
        await sub.subscribe(topic, qos=1)

        async def collect() -> None:
            async for message in sub.messages:
                assert isinstance(message.payload, bytes)
                name = str(message.topic)
                seen.topics[name.removeprefix("tableside/flash/")] += 1
                if name.endswith("/event") or name.startswith("bench/raw/"):
                    found = shuffle_id_of(message.payload)
                    if found is not None:
                        seen.ids.setdefault(found, time.monotonic_ns())

        tasks = [asyncio.create_task(collect()), asyncio.create_task(device.heartbeats())]
        proc = await spawn(variant, endpoint.path, broker, state, work, retrying)
        try:
            await asyncio.sleep(3.0)  # the process opens its journal, the pty and the broker
            yield proc, device, seen
        finally:
            proc.terminate()
            await proc.wait()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            endpoint.close()


async def wait_for(received: dict[int, int], ids: range, within: float) -> None:
    end = time.monotonic() + within
    while not all(i in received for i in ids):
        if time.monotonic() > end:
            raise RuntimeError(f"{sum(i in received for i in ids)} of {len(ids)} received")
        await asyncio.sleep(0.05)


def per(figures: dict[str, Any], n: float, unit: str) -> dict[str, Any]:
    """The window's figures divided by ``n`` (records, or hours)."""
    out: dict[str, Any] = {"seconds": figures["seconds"], "messages": figures["messages"]}
    for key in ("device_bytes", "device_flushes", "write_bytes", "wchar", "write_calls"):
        out[f"{key}_{unit}"] = round(figures[key] / n, 1)
    if "by_file" in figures:
        out[f"by_file_{unit}"] = {name: round(v["bytes"] / n, 1)
                                  for name, v in figures["by_file"].items()}  # fmt: skip
    return out


async def run_records_and_idle(variant: Variant, args: argparse.Namespace, disk: Disk,
                               trace: Trace | None, broker: str, work: Path,
                               state: Path) -> dict[str, Any]:  # fmt: skip
    os.makedirs(state)
    async with connected(variant, broker, state, work) as (proc, device, seen):
        assert device.link is not None
        for i in range(1, args.warmup + 1):
            await device.link.send(p.ShuffleComplete(i, 52))
            await asyncio.sleep(args.interval)
        await wait_for(seen.ids, range(1, args.warmup + 1), 30)
        await asyncio.sleep(args.settle)  # the warm-up's own quiet-time work (a checkpoint)
        window = Window(disk, proc.pid, trace, state, seen)
        window.open()
        beats = device.beats
        first = args.warmup + 1
        ids = range(first, first + args.records)
        for i in ids:
            await device.link.send(p.ShuffleComplete(i, 52))
            await asyncio.sleep(args.interval)
        await wait_for(seen.ids, ids, 60)
        await asyncio.sleep(1.0)  # the records' own syncs, done
        records = per(window.close(), args.records, "per_record")
        # the twin appends heartbeats too: per frame it appended (tableside journals none)
        frames = args.records + device.beats - beats
        records["frames"] = frames
        records["device_bytes_per_frame"] = round(window.figures["device_bytes"] / frames, 1)
        window.open()
        await asyncio.sleep(args.after)
        after = per(window.close(), 1, "once")
        window.open()
        await asyncio.sleep(args.idle)
        idle = per(window.close(), window.figures["seconds"] / 3600, "per_hour")
    return {"records": records, "after": after, "idle": idle}


async def run_retrying(variant: Variant, args: argparse.Namespace, disk: Disk,
                       trace: Trace | None, broker: str, work: Path,
                       state: Path) -> dict[str, Any]:  # fmt: skip
    os.makedirs(state)
    master, slave = os.openpty()  # what the driver writes is read and dropped: no answer
    loop = asyncio.get_running_loop()
    loop.add_reader(master, os.read, master, 4096)
    retrying = (free_port(), os.ttyname(slave))
    try:
        async with connected(variant, broker, state, work, retrying) as (proc, _, seen):
            # past the start's own writes (its records' checkpoint after 30 s of quiet, the
            # signed checkpoint a minute on and its own): what retrying costs, hour after hour
            await asyncio.sleep(args.after)
            window = Window(disk, proc.pid, trace, state, seen)
            window.open()
            await asyncio.sleep(args.idle)
            return per(window.close(), window.figures["seconds"] / 3600, "per_hour")
    finally:
        loop.remove_reader(master)
        os.close(master)
        os.close(slave)


UNITS = {"records": "per_record", "after": "once"}


def show(name: str, phase: str, figures: dict[str, Any]) -> None:
    unit = UNITS.get(phase, "per_hour")
    line = ", ".join(f"{k.removesuffix('_' + unit)} {v:,.0f}" for k, v in figures.items()
                     if k.endswith(unit) and isinstance(v, int | float))  # fmt: skip
    print(f"{name:<22} {phase:<9} {unit.replace('_', ' ')}: {line}", flush=True)
    if figures.get("messages"):
        print(f"{'':<33} messages sent: {figures['messages']}", flush=True)
    for file, value in figures.get(f"by_file_{unit}", {}).items():
        print(f"{'':<33} {value:>12,.0f}  {file}", flush=True)


def tree_commit() -> str:
    """The commit of the tableside this runs (``PYTHONPATH`` may name another checkout), with
    ``+changes`` when its journal differs from it."""
    import tableside

    root = Path(tableside.__file__).resolve().parents[2]
    changed = subprocess.run(["git", "status", "--porcelain", "daemon/journal"], cwd=root,
                             capture_output=True, text=True, check=False).stdout  # fmt: skip
    changed = changed.strip()
    return commit(root) + ("+changes" if changed else "")


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--state-fs", type=Path, help="a folder on a file system of its own")
    where.add_argument("--make-fs", action="store_true", help="make one (root: a loop device)")
    parser.add_argument("--blockdev", help="with --state-fs: its device under /sys/block")
    parser.add_argument("--records", type=int, default=600)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--interval", type=float, default=0.010, help="seconds between records")
    parser.add_argument("--idle", type=float, default=120.0, help="seconds of each idle phase")
    parser.add_argument(
        "--settle",
        type=float,
        default=40.0,
        help="seconds after the warm-up, for what it leaves to a quiet moment",
    )
    parser.add_argument("--after", type=float, default=100.0,
                        help="seconds after the records for what they leave to a quiet moment "
                        "(tableside: checkpoints, a signed one), counted apart")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--variants", default="durable,tableside")
    parser.add_argument("--before", metavar="COMMIT", help="also tableside at this commit")
    parser.add_argument("--no-retrying", action="store_true", help="skip the retrying phase")
    parser.add_argument("--attribute", action="store_true", help="bytes by file (root)")
    parser.add_argument("--broker", help="use this broker instead of starting a Mosquitto")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.state_fs and not args.blockdev:
        parser.error("--state-fs needs --blockdev")

    variants = [Variant("durable", twin=True) if v == "durable" else Variant(v)
                for v in args.variants.split(",")]  # fmt: skip
    compiled(HERE.parent)
    results: list[dict[str, Any]] = []
    async with contextlib.AsyncExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tableside-flash-")))
        # A controller's clock is kept by NTP; this machine's kernel clock is not synchronised,
        # which opens a clock ruling at each start (and its escalation, its records): the
        # daemons read a synchronised clock through the lab's hook (docs/journal.md, "Trusted
        # time"), as on a table whose NTP works
        synced = work / "clock.json"
        synced.write_text('{"synchronised": true, "esterror_us": 1000, "maxerror_us": 20000}')
        os.environ[DISCIPLINE_FILE_ENV] = str(synced)
        if args.before:
            variants.append(Variant(f"tableside@{args.before}",
                                    env=before_tree(args.before, work / "before")))  # fmt: skip
        if args.make_fs:
            disk = stack.enter_context(scratch_disk(512))
        else:
            disk = Disk(args.state_fs, args.blockdev)
        trace = stack.enter_context(Trace(disk)) if args.attribute else None
        broker = args.broker
        if broker is None:
            port = free_port()
            (work / "mosquitto.conf").write_text(
                f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
            )
            mosquitto = await asyncio.create_subprocess_exec(
                shutil.which("mosquitto") or "/usr/sbin/mosquitto",
                "-c", str(work / "mosquitto.conf"), stderr=subprocess.DEVNULL,
            )  # fmt: skip
            stack.push_async_callback(mosquitto.wait)
            stack.callback(mosquitto.terminate)
            broker = f"mqtt://127.0.0.1:{port}"
            await asyncio.sleep(0.5)
        run = 0
        for round_ in range(1, args.rounds + 1):
            for variant in variants:
                run += 1
                state = disk.directory / f"run{os.getpid()}-{run}"
                found = await run_records_and_idle(variant, args, disk, trace, broker, work,
                                                   state)  # fmt: skip
                for phase, figures in found.items():
                    show(variant.name, phase, figures)
                    results.append({"variant": variant.name, "round": round_, "phase": phase,
                                    **figures, "load": round(os.getloadavg()[0], 2)})  # fmt: skip
                shutil.rmtree(state)
                if variant.twin or args.no_retrying:
                    continue
                state = disk.directory / f"run{os.getpid()}-{run}-retrying"
                figures = await run_retrying(variant, args, disk, trace, broker, work, state)
                show(variant.name, "retrying", figures)
                results.append({"variant": variant.name, "round": round_, "phase": "retrying",
                                **figures, "load": round(os.getloadavg()[0], 2)})  # fmt: skip
                shutil.rmtree(state)
    summary = collections.defaultdict(list)
    for r in results:
        unit = UNITS.get(r["phase"], "per_hour")
        summary[(r["variant"], r["phase"])].append(r[f"device_bytes_{unit}"])
    for (name, phase), values in summary.items():
        unit = {"records": "a record", "after": "once"}.get(phase, "an hour")
        print(
            f"device bytes {unit:<8} {name:<22} {phase:<9} "
            + " / ".join(f"{v:,.0f}" for v in values)
        )
    if args.json:
        meta = {
            "commit": tree_commit(),
            "bench_commit": commit(),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}, Linux {platform.release()}",
            "file_system": "ext4 (mkfs.ext4 defaults: 4 KiB blocks, ordered data, journal), "
            "loop device",
            "argv": sys.argv[1:],
            "load_at_end": os.getloadavg(),
            "time": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        }
        args.json.write_text(json.dumps({"meta": meta, "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
