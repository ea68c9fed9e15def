"""The floor's ingest rate: how many table messages a second the floor stores and verifies.

1. **Store**: judged, chained device-event records of ``--tables`` tables, written in batches of
   ``--batch`` straight into the store (no broker): the store's own rate, the chain walk after
   each batch included (as ``tableside floor run`` does).
2. **End to end**: ``--records`` records with their chain entries, encoded before the clock
   starts, sent to a Mosquitto by bench/rawpub.py (QoS 1, as many in flight as the broker
   allows: tens of thousands a second, so not what is measured); one ``tableside floor run``
   process, or two sharing the subscription (``--share``), store them. Messages/s from the
   first publish until the last is in the store; then every table's chain is checked whole.

    PYTHONPATH=. .venv/bin/python bench/floor_ingest.py --records 100000 [--store sqlite|both]
        [--floor-python /work/main/.venv/bin/python]   # the floor of another checkout: a baseline

Starts its own Mosquitto (and PostgreSQL, tests/postgres.py, ``fsync=off``) on free loopback
ports.
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
from collections.abc import Callable
from pathlib import Path

import structlog
from provenance import commit, machine

from tableside.daemon.logging import configure_logging
from tableside.floor.service import Floor
from tableside.floor.store import Message, Store, open_store
from tests.conftest import Mosquitto
from tests.floorpeer import PeerTable
from tests.postgres import Postgres

RAWPUB = Path(__file__).parent / "rawpub.py"


def commit_of(python: str) -> str:
    """The commit of the checkout whose ``.venv/bin/python`` this is."""
    return commit(Path(python).absolute().parents[2])


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


async def floor_process(
    python: str, broker: Mosquitto, url: str, name: str, share: str | None
) -> asyncio.subprocess.Process:
    """``tableside floor run``, started and subscribed (its log says so). Its session ends
    with it, and a shared group is new each run: a session left from an earlier run would
    take its share of this run's messages (docs/floor.md, gap repair)."""
    proc = await asyncio.create_subprocess_exec(
        python, "-m", "tableside", "floor", "run", "--broker", broker.url, "--store", url,
        "--client-id", name, "--repair-interval", "3600", "--session-expiry", "0",
        *(["--share", f"bench-{share}"] if share else []),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": ""},
    )  # fmt: skip
    assert proc.stdout is not None
    async with asyncio.timeout(30):
        while b"floor_subscribed" not in (line := await proc.stdout.readline()):
            if not line:
                raise RuntimeError(f"{name} ended before it subscribed")
    return proc


async def end_to_end(
    url: str, broker: Mosquitto, tables: int, records: int, floors: int, python: str
) -> float:
    made = streams(tables, records)
    by_table = {p.table: p for p, _ in made}
    lines = []
    for group in zip(*(ms for _, ms in made), strict=False):
        for m in group:
            peer = by_table[m.table]
            topic, payload, _, props = peer.wire(peer.records[m.seq or 0])
            lines.append(json.dumps([topic, payload.decode(), props]))
    async with open_store(url) as store:  # the schema, before the floors race for it
        pass
    run = time.monotonic_ns()
    share = f"g{run}" if floors > 1 else None
    procs = [
        await floor_process(python, broker, url, f"bench-floor-{n}-{run}", share)
        for n in range(floors)
    ]
    drains = [asyncio.create_task(_drain(p), name=f"drain-{n}") for n, p in enumerate(procs)]
    try:
        async with open_store(url) as store:
            pub = await asyncio.create_subprocess_exec(
                sys.executable, str(RAWPUB), str(broker.port), stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )  # fmt: skip
            assert pub.stdin is not None and pub.stdout is not None
            pub.stdin.write("\n".join(lines).encode())
            pub.stdin.close()
            await pub.stdout.readline()  # ready: connected, every packet encoded
            start = time.perf_counter()
            total = len(lines)
            # the store is other processes': polled
            async with asyncio.timeout(300):
                while await store.count() < total:  # noqa: ASYNC110
                    await asyncio.sleep(0.02)
            elapsed = time.perf_counter() - start
            await pub.wait()
            floor = Floor(store, "mqtt://127.0.0.1:1")  # never connects: only its walk is used
            for peer, _ in made:  # the walk of the last batch (and, shared, of both floors')
                await floor.walk(peer.table)
            await check(store, made)
    finally:
        for p in procs:
            if p.returncode is None:
                p.terminate()
            await p.wait()
        await asyncio.gather(*drains)
    return total / elapsed


async def _drain(proc: asyncio.subprocess.Process) -> None:
    assert proc.stdout is not None
    while await proc.stdout.readline():
        pass


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--tables", type=int, default=100)
    parser.add_argument("--batch", type=int, default=2_000)
    parser.add_argument("--store", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--floors", default="1,2", help="end to end with 1, 2 or both (1,2)")
    parser.add_argument("--floor-python", default=sys.executable,
                        help="the Python whose `tableside` runs the floor (another checkout's "
                        "venv: a baseline)")  # fmt: skip
    parser.add_argument("--no-store-rate", action="store_true", help="end to end only")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "floor_ingest.json"
    )
    args = parser.parse_args()
    configure_logging("warning")
    structlog.get_logger().info("bench")
    floors = [int(n) for n in args.floors.split(",")]
    commit = await asyncio.to_thread(commit_of, args.floor_python)
    results: dict[str, object] = {"machine": machine(), "records": args.records,
                                  "tables": args.tables, "floor_python": args.floor_python,
                                  "floor_commit": commit,
                                  "load_average_start": os.getloadavg()}  # fmt: skip
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
                if not args.no_store_rate:
                    rate = await store_rate(url("store"), args.tables, args.records, args.batch)
                    print(f"{name}: store {rate:,.0f} messages/s", flush=True)
                    results[f"{name}_store_per_s"] = round(rate)
                for n in floors:
                    rate = await end_to_end(url(f"e2e{n}"), broker, args.tables, args.records, n,
                                            args.floor_python)  # fmt: skip
                    load = os.getloadavg()[0]
                    print(f"{name}: end to end, {n} floor(s): {rate:,.0f} messages/s "
                          f"(load {load:.2f})", flush=True)  # fmt: skip
                    results[f"{name}_end_to_end_{n}_floors_per_s"] = round(rate)
        finally:
            broker.stop()
            if pg is not None:
                pg.stop()
    results["load_average_end"] = os.getloadavg()
    args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(args.out)


if __name__ == "__main__":
    asyncio.run(main())
