"""The journal's commit path as a device sees it: append a record, wait for what the device's ACK
waits for, then the next (one frame in flight per device, as on the link).

For each journal (this tree's ``daemon/journal/`` and, with ``--before COMMIT``, the file of
that commit loaded beside it), in turn, ``--rounds`` times:

* **one device**: ``--records`` records one after the other, each waited for;
* **8 devices**: eight tasks doing the same at once (group commit across devices);

and prints records/s and the wait's p50 / p99 / p99.9 / max, and where the writer thread's time
went: the SQLite transaction (its fsync where it has one, and any checkpoint SQLite runs inside
it), the sync outside SQLite (the mark file's write and ``fdatasync`` up to issue 20; since, the
redo log's append and ``fdatasync``, the batch's one sync), and how many commits ran a
checkpoint (the WAL started over after them).

    .venv/bin/python bench/commit.py --records 5000 --before a715e1c

Journals go in a temporary folder under ``--dir`` (default /tmp).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import inspect
import json
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import structlog
from forwarder import append_durably
from provenance import commit, machine

from tableside.daemon import journal as current

ROOT = Path(__file__).resolve().parent.parent
PAYLOAD = b'{"event":"stack_dispensed","data":{' + b'"x":1,' * 55 + b'"end":0}}'  # ~400 bytes


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True,
                          text=True).stdout  # fmt: skip


def _exec(name: str, source: str, where: str) -> ModuleType:
    spec = importlib.util.spec_from_loader(name, loader=None, is_package="." not in name)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    exec(compile(source, where, "exec"), module.__dict__)
    return module


def load_before(commit: str) -> ModuleType:
    """The journal as it was at ``commit``, as a module of its own: ``daemon/journal.py``, or
    the ``daemon/journal/`` package (its parts loaded under the module's own name)."""
    name = f"journal_{commit}"
    parts = _git("ls-tree", "--name-only", commit, "daemon/journal/").split()
    if not parts:  # before the split: one file
        return _exec(
            name, _git("show", f"{commit}:daemon/journal.py"), f"{commit}:daemon/journal.py"
        )
    package = _exec(name, "", f"{commit}:daemon/journal/")  # its parts import from it
    sources = {
        path.removeprefix("daemon/journal/").removesuffix(".py"): _git("show", f"{commit}:{path}")
        for path in parts
        if path.endswith(".py")
    }
    for part in _in_import_order(sources):
        path = f"daemon/journal/{part}.py"
        source = sources[part].replace("tableside.daemon.journal.", f"{name}.")
        if part == "__init__":
            exec(compile(source, f"{commit}:{path}", "exec"), package.__dict__)
        else:
            setattr(package, part, _exec(f"{name}.{part}", source, f"{commit}:{path}"))
    return package


def _in_import_order(sources: dict[str, str]) -> list[str]:
    """The journal package's parts, each after the parts it imports (``__init__`` last)."""
    needs = {
        part: set(re.findall(r"tableside\.daemon\.journal\.(\w+)", text)) & sources.keys()
        for part, text in sources.items()
    }
    order: list[str] = []
    while len(order) < len(needs):
        ready = sorted(p for p, n in needs.items() if p not in order and n <= set(order))
        if not ready:
            raise RuntimeError(f"the journal's parts import each other in a circle: {needs}")
        order += [p for p in ready if p != "__init__"] or ready
    return order


class Phases:
    """Times the writer thread's transaction and its sync outside SQLite (the mark file's
    ``write``, or the redo log's ``append``), by wrapping them."""

    def __init__(self, module: ModuleType) -> None:
        self.txn: list[float] = []
        self.mark: list[float] = []
        journal_cls = module.Journal
        transaction = journal_cls._commit_locked
        if hasattr(module, "RedoLog"):  # issue 20: the log is the mark and the one sync
            sync_cls, name = module.RedoLog, "append"
        else:
            sync_cls, name = module.Mark, "write"
        sync = getattr(sync_cls, name)

        def timed_commit(j: Any, conn: Any, batch: Any, latest: Any) -> None:
            t0 = time.perf_counter()
            transaction(j, conn, batch, latest)
            self.txn.append((time.perf_counter() - t0) * 1e3)

        def timed_sync(m: Any, *args: Any) -> None:
            t0 = time.perf_counter()
            sync(m, *args)
            self.mark.append((time.perf_counter() - t0) * 1e3)

        journal_cls._commit_locked = timed_commit
        setattr(sync_cls, name, timed_sync)


class Twin:
    """The durable twin's file (bench/forwarder.py ``--durable``: records appended, one
    ``fdatasync``) behind the journal's own interface, and grouped as the journal groups: a
    writer thread appends whatever has queued up, from every device, and syncs it once (the
    forwarder syncs once per read of each device). No database, no index, no checkpoint: the
    limit for a journal that syncs once per batch."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.next_seq = 1
        self.durable_seq = 0
        self.commits = 0
        self.checkpoints = None
        self._queue: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._waiting: dict[int, asyncio.Future[None]] = {}
        self._thread: threading.Thread | None = None
        self._fd = -1

    def open(self) -> None:
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, args=(loop,), daemon=True)
        self._thread.start()

    def append(self, topic: str, payload: Any, *, retain: bool, key: str | None) -> int:
        seq = self.next_seq
        self.next_seq += 1
        self._queue.put(b"%d %s " % (seq, topic.encode()) + payload(seq) + b"\n")
        return seq

    async def wait_durable(self, seq: int) -> None:
        if seq > self.durable_seq:
            await self._waiting.setdefault(seq, asyncio.get_running_loop().create_future())

    def mark_acked(self, seq: int) -> None:
        pass

    def close(self) -> None:
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join()
        os.close(self._fd)

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        done = 0
        while True:
            items = [self._queue.get()]
            with contextlib.suppress(queue.Empty):
                while True:
                    items.append(self._queue.get_nowait())
            lines = [item for item in items if item is not None]
            if lines:
                append_durably(self._fd, b"".join(lines))
                self.commits += 1
                done += len(lines)
                loop.call_soon_threadsafe(self._durable, done)
            if len(lines) < len(items):
                return

    def _durable(self, seq: int) -> None:
        self.durable_seq = seq
        for waited in [s for s in self._waiting if s <= seq]:
            self._waiting.pop(waited).set_result(None)


QUANTILES = (("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999), ("max", 1.0))


def _phase(times: list[float]) -> dict[str, float]:
    return {k: round(pct(times, q), 3) for k, q in (("p50", 0.5), ("max", 1.0))}


def wal_header(wal: Path) -> bytes:
    with wal.open("rb") as f:
        return f.read(32)


def wal_size(wal: Path) -> int:
    return wal.stat().st_size


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


#: makes the journal a variant measures, in the folder given
Make = Callable[[Path], Any]


def journal_of(module: ModuleType, checkpoints: bool = True) -> Make:
    def make(folder: Path) -> Any:
        journal = module.Journal(folder / "journal.sqlite", "bench")
        if not checkpoints:  # none during the run: the WAL grows instead (not as shipped)
            checkpointer = journal._checkpointer
            checkpointer.idle_bytes = checkpointer.busy_bytes = 1 << 40
            checkpointer.quiet = lambda: None  # nor after half a second with nothing queued
        return journal

    return make


async def run(
    make: Make, phases: Phases | None, work: Path, records: int, devices: int
) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(dir=work))
    journal = make(folder)
    journal.open()
    journal.start()
    # what the driver's ACK waits for (daemon/app.py ``_settle``)
    settle = getattr(journal, "wait_committed", journal.wait_durable)
    numbers = "seq" not in inspect.signature(journal.append).parameters
    wal = folder / "journal.sqlite-wal"
    txn: list[float] = phases.txn if phases else []
    mark: list[float] = phases.mark if phases else []
    txn.clear()
    mark.clear()
    waits: list[float] = []
    restarts = 0
    header = b""
    lock = asyncio.Lock()

    async def device(name: str) -> None:
        nonlocal restarts, header
        for _ in range(records // devices):
            t0 = time.perf_counter()
            async with lock:  # numbering is the event loop's (one append at a time anyway)
                seq = journal.next_seq
                topic, key = f"tableside/bench/device/{name}/event", f"d/{name}#e"
                if numbers:  # the journal numbers (since issue 10's outbox numbering)
                    journal.append(topic, lambda _: PAYLOAD, retain=False, key=key)
                else:
                    journal.append(seq, topic, PAYLOAD, retain=False, key=key)
            await settle(seq)
            waits.append((time.perf_counter() - t0) * 1e3)
            if devices == 1 and wal.exists():  # the WAL's salt changes when it starts over
                now = wal_header(wal)
                restarts += now != header and header != b""
                header = now
            journal.mark_acked(journal.durable_seq)

    started = time.perf_counter()
    await asyncio.gather(*(device(f"d{i}") for i in range(devices)))
    elapsed = time.perf_counter() - started
    await journal.wait_durable(journal.next_seq - 1)
    wal_mib = wal_size(wal) / 2**20 if wal.exists() else 0.0
    journal.close()  # SQLite takes the last batch after its log sync: counted once closed
    commits = journal.commits
    return {
        "devices": devices,
        "records": len(waits),
        "per_s": round(len(waits) / elapsed),
        "wait_ms": {k: round(pct(waits, q), 3) for k, q in QUANTILES},
        "commits": commits,
        # SQLite transactions (behind the log since issue 30; one a commit before)
        "stores": getattr(journal, "stores", commits),
        # None where there is no such phase (the twin's file)
        "txn_ms": _phase(txn) if phases else None,
        "mark_ms": _phase(mark) if phases else None,
        "wal_restarts": restarts if devices == 1 else None,
        "wal_mib": round(wal_mib, 1),
        "checkpoints_off_path": getattr(journal, "checkpoints", None),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--before", help="also measure the journal of this commit")
    parser.add_argument(
        "--twin",
        action="store_true",
        help="also measure this tree's "
        "journal with no checkpoint during the run, and the durable twin's file",
    )
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    variants: list[tuple[str, Make, Phases | None]] = []
    if args.before:
        before = load_before(args.before)
        variants.append((args.before, journal_of(before), Phases(before)))
    this_tree = Phases(current)
    variants.append(("this tree", journal_of(current), this_tree))
    if args.twin:
        variants.append(("no ckpt", journal_of(current, checkpoints=False), this_tree))
        variants.append(("twin", lambda folder: Twin(folder / "twin.log"), None))
    results = []
    print(f"load average {os.getloadavg()[0]:.2f}", file=sys.stderr)
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="tableside-commit-") as tmp:
        for round_ in range(args.rounds):
            for devices in (1, 8):
                for name, make, phases in variants:  # alternate, so drift hits each alike
                    r = await run(make, phases, Path(tmp), args.records, devices)
                    r.update(journal=name, round=round_ + 1, load=round(os.getloadavg()[0], 2))
                    results.append(r)
                    w, t, m = r["wait_ms"], r["txn_ms"], r["mark_ms"]
                    phased = (
                        (
                            f"  txn p50/max {t['p50']:.2f}/{t['max']:.2f}"
                            f"  mark/log p50/max {m['p50']:.2f}/{m['max']:.2f}"
                        )
                        if t
                        else ""
                    )
                    print(
                        f"{name:<10} devices {devices}  {r['per_s']:>6}/s  wait p50 {w['p50']:.2f}"
                        f"  p99 {w['p99']:.2f}  p99.9 {w['p99.9']:.2f}  max {w['max']:.2f} ms"
                        f"  commits {r['commits']}{phased}"
                        f"  WAL restarts {r['wal_restarts']}, {r['wal_mib']} MiB  load {r['load']}"
                    )  # fmt: skip
    if args.json:
        where = {"command": " ".join(["bench/commit.py", *sys.argv[1:]]), "commit": commit(),
                 "machine": machine(), "load": round(os.getloadavg()[0], 2)}  # fmt: skip
        args.json.write_text(json.dumps({**where, "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
