"""Issue 11's zero-loss outages: a fleet through the shipped Mosquitto bridge into one floor,
four outages one after the other, every table's every seq checked in the store after each.

* tables: ``--tables`` simulated tables (bench/fleet.py: real payloads and chain entries, each
  answering the floor's ``replay`` from its journal in memory) and ``--daemons`` real table
  daemons (daemon/app.py, a simulated shuffler each; they answer ``replay`` from their journal
  on disk), all on a **pit broker**;
* the pit broker bridges to a **floor broker** with ``systemd/mosquitto-bridge.conf`` as shipped
  (its address, password put in); both brokers run the shipped broker config and ACL
  (``systemd/mosquitto-tableside.conf``, ``mosquitto-acl.conf``: 1,000 queued messages a
  session at most, so a long outage overflows every queue and only repair can close the gaps);
  the bridge reaches the floor broker through a TCP relay in this process, which the bench cuts;
* one ``tableside floor run`` process (SQLite, or PostgreSQL on its own server) on the floor
  broker, with the shipped defaults (repair every 2 s, again after 10 s doubling, 5 requests/s).

The outages, in order, each after the store has caught up with the last:

(a) ``bridge``: the relay closes the bridge's connection and refuses new ones for ``--cut-s``;
(b) ``floor-down``: the floor stopped (SIGTERM) for ``--down-s``, then started again;
(c) ``floor-kill``: the floor SIGKILLed, started again ``--kill-gap-s`` later;
(d) ``broker-restart``: the floor broker stopped (SIGTERM: it saves its sessions) and started
    again ``--broker-down-s`` later.

For each: the messages the tables had published (acknowledged by the pit broker) from the
outage's start to its end; how many of those the store first got from a replay (their live copy
had not arrived, or never would: lost before repair); how many are still missing once the store
has every one (lost after repair: 0) or after ``--settle`` s; and the time from the outage's
end until the store held every seq every table had published by then. At the end the tables
stop and the whole run is checked the same way.

    PYTHONPATH=. .venv/bin/python bench/floor_outage.py --tables 100 --daemons 2 \\
        --cut-s 60 --down-s 300 --out bench/results/floor-outage.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import signal
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fleet import Link, SimulatedTable, start_daemon
from provenance import commit, machine

from tableside.daemon.app import TableDaemon
from tableside.floor.store import open_store
from tableside.wire import proof
from tests.conftest import SYSTEMD, Mosquitto
from tests.postgres import Postgres

BIN = Path(sys.executable).parent
BRIDGE = "pit-01-bridge"
FLOOR_USER = "floor"
PASSWORD = "pw"
SCENARIOS = ("bridge", "floor-down", "floor-kill", "broker-restart")


# -- the bridge's link, cut when asked ------------------------------------------------------------


class Relay:
    """A TCP relay between the pit broker's bridge and the floor broker: ``cut()`` closes every
    connection through it and refuses new ones (the bridge sees its link go) until ``mend()``."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()

    async def start(self, port: int = 0) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._open |= {writer, up_w}
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(_pipe(reader, up_w))
                group.create_task(_pipe(up_r, writer))
        except* OSError:
            pass
        finally:
            for w in (writer, up_w):
                self._open.discard(w)
                w.close()

    async def cut(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for writer in list(self._open):  # both ends see the link go at once
            writer.transport.abort()

    async def mend(self) -> None:
        await self.start(self.port)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.close()


# -- the brokers, the floor, the store ------------------------------------------------------------


def brokers(
    directory: Path, users: list[str], relay_port: int, max_queued: int
) -> tuple[Mosquitto, Mosquitto]:
    """The pit and the floor broker as shipped (``max_queued``: another queue limit); the pit's
    bridge (as shipped) to the relay."""
    (directory / "floor").mkdir()
    (directory / "pit").mkdir()
    floor = Mosquitto.shipped(directory / "floor", users, PASSWORD)
    pit = Mosquitto.shipped(directory / "pit", users, PASSWORD)
    if max_queued:
        for broker in (floor, pit):
            limited, n = re.subn(r"^max_queued_messages \d+$", f"max_queued_messages {max_queued}",
                                 broker.conf.read_text(encoding="utf-8"), flags=re.M)  # fmt: skip
            if n != 1:
                raise SystemExit("the shipped broker config no longer sets max_queued_messages")
            broker.conf.write_text(limited, encoding="utf-8")
    text = (SYSTEMD / "mosquitto-bridge.conf").read_text(encoding="utf-8")
    for pattern, replacement in (
        (r"^address floor-broker\.casino\.internal:1883$", f"address 127.0.0.1:{relay_port}"),
        (r"^remote_password change-me$", f"remote_password {PASSWORD}"),
    ):
        text, n = re.subn(pattern, replacement, text, flags=re.M)
        if n != 1:
            raise SystemExit(f"systemd/mosquitto-bridge.conf no longer has {pattern!r}")
    with pit.conf.open("a", encoding="utf-8") as conf:
        conf.write("\n" + text)
    return pit, floor


@dataclass
class FloorProcess:
    cmd: list[str]
    log: Path
    proc: asyncio.subprocess.Process | None = None
    starts: int = 0

    async def start(self, within: float = 60) -> None:
        mark = self.log.stat().st_size if self.log.exists() else 0
        out = self.log.open("ab")
        self.proc = await asyncio.create_subprocess_exec(*self.cmd, stdout=out, stderr=out)
        out.close()
        self.starts += 1

        def subscribed() -> bool:
            with self.log.open("rb") as f:
                f.seek(mark)
                return b"floor_subscribed" in f.read()

        await until("the floor to subscribe", subscribed, within)

    async def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(sig)
            try:
                await asyncio.wait_for(self.proc.wait(), 30)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        self.proc = None


class Seen:
    """Every record the store holds, read a little at a time (by row id: one floor writes)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.last_id = 0
        self.seqs: dict[str, set[int]] = {}
        #: rows stored from a replay, in the order read
        self.replayed = 0
        self._pg: Any = None

    def _rows(self) -> list[tuple[int, str, int, int]]:
        sql = (
            "SELECT id, table_id, record_seq, replayed FROM messages WHERE id > %s "
            "AND kind = 'record' ORDER BY id LIMIT 50000"
        )
        if self.url.startswith("postgresql"):
            import psycopg

            if self._pg is None or self._pg.closed:
                self._pg = psycopg.connect(self.url, autocommit=True)
            return [tuple(r) for r in self._pg.execute(sql, (self.last_id,)).fetchall()]
        with sqlite3.connect(self.url.removeprefix("sqlite://"), timeout=30) as conn:
            return [tuple(r) for r in conn.execute(sql.replace("%s", "?"), (self.last_id,))]

    async def read(self) -> None:
        while True:
            try:
                rows = await asyncio.to_thread(self._rows)
            except sqlite3.OperationalError:  # the file not made yet, or busy
                return
            for id_, table, seq, replayed in rows:
                self.seqs.setdefault(table, set()).add(int(seq))
                self.replayed += int(replayed)
                self.last_id = max(self.last_id, int(id_))
            if len(rows) < 50000:
                return

    def missing(self, upto: dict[str, tuple[int, int]]) -> int:
        """Seqs ``first..last`` of each table the store does not hold."""
        gone = 0
        for table, (first, last) in upto.items():
            have = self.seqs.get(table, set())
            gone += sum(1 for s in range(first, last + 1) if s not in have)
        return gone


async def until(what: str, ok: Callable[[], bool], within: float) -> None:
    deadline = time.monotonic() + within
    while not ok():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


# -- the tables ------------------------------------------------------------------------------------


async def run_table(
    table: SimulatedTable, link: Link, rate: float, stop: asyncio.Event, checkpoint_s: float
) -> None:
    """Rounds at ``rate`` messages/s until ``stop``; then a checkpoint and ``offline``. The link
    stays up after (answering replays) until the bench closes it."""
    loop = asyncio.get_running_loop()
    table.opening()
    due = loop.time()
    next_checkpoint = due + checkpoint_s
    rounds = table.rounds()
    while not stop.is_set():
        next(rounds)
        if loop.time() >= next_checkpoint:
            table.checkpoint()
            next_checkpoint += checkpoint_s
        group = len(table.outbox)
        await link.flush()
        due += group / rate
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), max(0.0, due - loop.time()))
    table.checkpoint()
    table.status("offline")
    await link.flush()


@dataclass
class Daemon:
    """A real TableDaemon with a simulated shuffler (as bench/fleet.py's)."""

    name: str
    daemon: TableDaemon
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)

    @classmethod
    async def start(cls, name: str, broker: str, state_dir: Path) -> Daemon:
        daemon, sim_task, task = await start_daemon(name, broker, state_dir, PASSWORD)
        return cls(name, daemon, [sim_task, task])

    def published(self) -> int:
        return int(self.daemon.journal.acked)

    async def quiet(self) -> None:
        """Its shuffler gone: a few messages more, then nothing (an idle table signs nothing)."""
        self.tasks[0].cancel()
        await asyncio.gather(self.tasks[0], return_exceptions=True)

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


# -- the run ------------------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="tableside-outage-"))
    names = [f"{args.name}-{i + 1:04d}" for i in range(args.tables)]
    daemon_names = [f"{args.name}-d{i + 1:02d}" for i in range(args.daemons)]
    users = [*names, *daemon_names, BRIDGE, FLOOR_USER]
    relay = Relay(0)
    await relay.start()
    pit, floor_broker = brokers(work, users, relay.port, args.max_queued)
    relay.target_port = floor_broker.port
    pg: Postgres | None = None
    floor: FloorProcess | None = None
    links: list[Link] = []
    daemons: list[Daemon] = []
    jobs: list[asyncio.Task[None]] = []
    stop = asyncio.Event()
    try:
        await asyncio.to_thread(floor_broker.start)
        await asyncio.to_thread(pit.start)
        if args.store == "postgresql":
            pg = Postgres()
            await asyncio.to_thread(pg.start)
            url = await asyncio.to_thread(pg.new_database)
        else:
            url = f"sqlite://{work}/floor.db"  # sqlite:///tmp/x.db is /tmp/x.db
        tables = []
        keys: dict[str, str] = {}
        for name in names:
            table = SimulatedTable(name, "tableside", Ed25519PrivateKey.generate(),
                                   bad_deck_every=5)  # fmt: skip
            tables.append(table)
            keys[name] = table.public
        for name in daemon_names:
            keys[name] = proof.public_key_hex(proof.load_or_create_key(work / "daemons" / name))
        async with open_store(url) as store:  # the floor trusts each table's key, as enrolled
            for name, key in keys.items():
                await store.enrol(name, key)
        floor = FloorProcess(
            [str(BIN / "tableside"), "floor", "run", "--broker", floor_broker.url,
             "--store", url, "--username", FLOOR_USER, "--password", PASSWORD,
             "--client-id", FLOOR_USER],
            work / "floor.log",
        )  # fmt: skip
        await floor.start()
        load_start = os.getloadavg()
        started = time.time()
        rng = random.Random(1)
        for table in tables:
            link = Link(table, "127.0.0.1", pit.port, PASSWORD)
            links.append(link)

            async def go(t: SimulatedTable = table, lk: Link = link) -> None:
                await asyncio.sleep(rng.uniform(0, args.ramp))
                await run_table(t, lk, args.rate, stop, args.checkpoint_interval)

            jobs.append(asyncio.create_task(go(), name=f"table.{table.table}"))
        for name in daemon_names:
            daemons.append(await Daemon.start(name, pit.url, work / "daemons"))

        def published() -> dict[str, int]:
            out = {t.table: t.stats.last_seq for t in tables}
            out.update({d.name: d.published() for d in daemons})
            return out

        seen = Seen(url)

        async def converge(upto: dict[str, int], within: float) -> tuple[float | None, int]:
            """Seconds until the store holds 0..upto of every table; or None, and how many not."""
            t0 = time.monotonic()
            want = {t: (0, s) for t, s in upto.items()}
            while True:
                await seen.read()
                gone = seen.missing(want)
                if gone == 0:
                    return round(time.monotonic() - t0, 1), 0
                if time.monotonic() - t0 > within:
                    return None, gone
                await asyncio.sleep(0.5)

        await asyncio.sleep(args.warmup)
        results: list[dict[str, Any]] = []
        for scenario in args.scenarios:
            before = published()
            await seen.read()
            replayed_before = seen.replayed
            load = os.getloadavg()
            t_start = time.time()
            if scenario == "bridge":
                await relay.cut()
                await asyncio.sleep(args.cut_s)
                await relay.mend()
            elif scenario == "floor-down":
                await floor.stop(signal.SIGTERM)
                await asyncio.sleep(args.down_s)
                await floor.start()
            elif scenario == "floor-kill":
                await floor.stop(signal.SIGKILL)
                await asyncio.sleep(args.kill_gap_s)
                await floor.start()
            elif scenario == "broker-restart":
                await asyncio.to_thread(floor_broker.stop)
                await asyncio.sleep(args.broker_down_s)
                await asyncio.to_thread(floor_broker.start)
            outage_s = round(time.time() - t_start, 1)
            after = published()
            converged_s, still = await converge(after, args.settle)
            results.append({
                "scenario": scenario,
                "outage_s": outage_s,
                "published_during": sum(after[t] - before[t] for t in after),
                "published_total": sum(s + 1 for s in after.values()),
                "lost_before_repair": seen.replayed - replayed_before,
                "lost_after_repair": still,
                "converged_s_after_outage": converged_s,
                "load_average": [round(x, 2) for x in load],
            })  # fmt: skip
            print(json.dumps(results[-1]), flush=True)
            await asyncio.sleep(args.between)
        stop.set()
        await asyncio.gather(*jobs)
        for d in daemons:
            await d.quiet()
        await asyncio.sleep(2)  # the daemons' last messages (device lost, table state)
        final = published()
        converged_s, still = await converge(final, args.settle)
        return {
            "what": "bench/floor_outage.py",
            "machine": machine(),
            "commit": await asyncio.to_thread(commit),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
            "command": " ".join(sys.argv),
            "store": args.store,
            "tables": args.tables,
            "daemons": args.daemons,
            "rate_per_table": args.rate,
            "max_queued_messages": args.max_queued or "as shipped (1000)",
            "load_average_at_start": [round(x, 2) for x in load_start],
            "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
            "scenarios": results,
            "end": {
                "messages": sum(s + 1 for s in final.values()),
                "stored_from_replay": seen.replayed,
                "lost_after_repair": still,
                "converged_s_after_stop": converged_s,
                "floor_starts": floor.starts,
                "replay_requests_answered_by_simulated_tables": sum(
                    t.stats.replay_requests for t in tables
                ),
            },
        }
    finally:
        stop.set()
        for job in jobs:
            job.cancel()
        await asyncio.gather(*jobs, return_exceptions=True)
        for link in links:
            await link.close()
        for d in daemons:
            await d.stop()
        if floor is not None:
            await floor.stop()
        await relay.cut()
        pit.stop()
        floor_broker.stop()
        if pg is not None:
            pg.stop()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--store", choices=("sqlite", "postgresql"), default="sqlite")
    ap.add_argument("--tables", type=int, default=100, help="simulated tables")
    ap.add_argument("--daemons", type=int, default=2, help="real table daemons")
    ap.add_argument("--rate", type=float, default=2, help="messages/s per simulated table")
    ap.add_argument("--cut-s", type=float, default=60, help="(a) the bridge cut this long")
    ap.add_argument("--down-s", type=float, default=300, help="(b) the floor down this long")
    ap.add_argument("--kill-gap-s", type=float, default=2, help="(c) SIGKILL to restart")
    ap.add_argument("--broker-down-s", type=float, default=10, help="(d) the broker down")
    ap.add_argument("--warmup", type=float, default=10, help="s of traffic before the first")
    ap.add_argument("--between", type=float, default=5, help="s between outages")
    ap.add_argument("--settle", type=float, default=600, help="s to wait for the store, at most")
    ap.add_argument("--ramp", type=float, default=5, help="tables start over this many s")
    ap.add_argument("--checkpoint-interval", type=float, default=10)
    ap.add_argument(
        "--max-queued", type=int, default=0,
        help="max_queued_messages on both brokers (default: as shipped, 1000)",
    )  # fmt: skip
    ap.add_argument("--scenarios", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    ap.add_argument("--name", default=f"out{os.getpid()}")
    ap.add_argument("--out", type=Path)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = asyncio.run(run(args))
    text = json.dumps(report, indent=1)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)
    lost = report["end"]["lost_after_repair"] + sum(
        s["lost_after_repair"] for s in report["scenarios"]
    )
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
