"""Issue 11's headline figure: a fleet of tables through bridged Mosquitto into one floor.

``bench/fleet.py`` publishes on a pit broker, which bridges (``systemd/mosquitto-bridge.conf``,
only its address put in) to a floor broker; one ``tableside floor run`` process stores what the
floor broker delivers, into PostgreSQL (its own server, tests/postgres.py) or SQLite. After the
fleet stops, waits (up to ``--settle`` s) until the store holds every seq the fleet's report says
the pit broker acknowledged, then reports:

* the lag from the table to the store: the floor's ``tableside_floor_lag_seconds`` histogram
  (observed once the batch is stored: store time minus the record's ``chain-ts``), and, exact per
  record from the store, arrival at the floor minus ``chain-ts`` (the record's journal time);
* what is missing: every seq from each table's ``first_seq`` to ``last_seq`` (fleet.json),
  counted in the store, and what ``tableside floor gaps --json`` says.

    PYTHONPATH=. .venv/bin/python bench/floor_lag.py --store postgresql --tables 1000 \
        --rate 2 --duration 60 --out bench/results/floor-lag-pg.json

Both brokers: Mosquitto on free loopback ports, anonymous, persistence on, ``max_connections
-1`` on the pit broker, Mosquitto's default queue limits unless ``--max-queued N``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from provenance import ROOT, commit, machine

from tableside.daemon.broker import free_port
from tests.conftest import SYSTEMD, Mosquitto
from tests.postgres import Postgres

BIN = Path(sys.executable).parent


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    s = sorted(values)

    def at(q: float) -> float:
        return round(s[min(len(s) - 1, int(q * len(s)))] * 1000, 1)

    return {"n": len(s), "p50_ms": at(0.50), "p99_ms": at(0.99), "max_ms": round(s[-1] * 1000, 1)}


def histogram(text: str) -> dict[str, Any]:
    """tableside_floor_lag_seconds from a /metrics page: its buckets, and the bucket bounds that
    hold the median and the 99th percentile."""
    buckets: list[tuple[float, float]] = []
    count = total = 0.0
    for line in text.splitlines():
        m = re.match(r'tableside_floor_lag_seconds_bucket\{le="([^"]+)"\} (\S+)', line)
        if m:
            buckets.append((float(m.group(1)), float(m.group(2))))
        elif line.startswith("tableside_floor_lag_seconds_count "):
            count = float(line.split()[1])
        elif line.startswith("tableside_floor_lag_seconds_sum "):
            total = float(line.split()[1])

    def bound(q: float) -> float | None:
        for le, n in buckets:
            if n >= q * count:
                return le
        return None

    return {
        "count": int(count),
        "mean_ms": round(total / count * 1000, 1) if count else None,
        "p50_at_most_s": bound(0.5),
        "p99_at_most_s": bound(0.99),
        "buckets": {str(le): int(n) for le, n in buckets},
    }


def brokers(directory: Path, max_queued: int) -> tuple[Mosquitto, Mosquitto]:
    (directory / "floor").mkdir()
    (directory / "pit").mkdir()
    queue = f"max_queued_messages {max_queued}\n" if max_queued else ""
    floor = Mosquitto(directory / "floor", queue, persistent=True)
    pit = Mosquitto(directory / "pit", f"max_connections -1\n{queue}", persistent=True)
    text = (SYSTEMD / "mosquitto-bridge.conf").read_text(encoding="utf-8")
    text, n = re.subn(
        r"^address floor-broker\.casino\.internal:1883$",
        f"address 127.0.0.1:{floor.port}", text, flags=re.M,
    )  # fmt: skip
    if n != 1:
        raise SystemExit("systemd/mosquitto-bridge.conf no longer has its address line")
    with pit.conf.open("a", encoding="utf-8") as conf:
        conf.write("\n" + text)
    return pit, floor


def wait_for(what: str, ok: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.2)


def stored_rows(url: str) -> list[tuple[str, int, float, float | None, str | None]]:
    """Every record as first sent (not retained, republished, redelivered or replayed: the
    records the floor's lag histogram counts): table, seq, arrival, chain_ts, envelope ts."""
    sql = (
        "SELECT table_id, seq, arrival, chain_ts, ts FROM messages WHERE kind = 'record' "
        "AND replayed = 0 AND retain = 0 AND republished = 0 AND redelivered = 0"
    )
    if url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(url) as conn:
            return [tuple(r) for r in conn.execute(sql).fetchall()]
    import sqlite3

    with sqlite3.connect(url.removeprefix("sqlite://")) as conn:
        return [tuple(r) for r in conn.execute(sql).fetchall()]


def all_seqs(url: str) -> list[tuple[str, int]]:
    """Every record stored, however it came."""
    sql = "SELECT table_id, seq FROM messages WHERE kind = 'record'"
    if url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(url) as conn:
            return [(str(t), int(q)) for t, q in conn.execute(sql).fetchall()]
    import sqlite3

    with sqlite3.connect(url.removeprefix("sqlite://"), timeout=30) as conn:
        return [(str(t), int(q)) for t, q in conn.execute(sql).fetchall()]


def record_count(url: str) -> int:
    sql = "SELECT count(*) FROM messages WHERE kind = 'record'"
    if url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(url) as conn:
            row = conn.execute(sql).fetchone()
    else:
        import sqlite3

        with sqlite3.connect(url.removeprefix("sqlite://"), timeout=30) as conn:
            row = conn.execute(sql).fetchone()
    return int(row[0]) if row else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", choices=("postgresql", "sqlite"), default="postgresql")
    ap.add_argument("--tables", type=int, default=1000)
    ap.add_argument("--rate", type=float, default=2)
    ap.add_argument("--duration", type=float, default=60)
    ap.add_argument("--settle", type=float, default=180, help="s to wait for the store after")
    ap.add_argument(
        "--max-queued", type=int, default=0,
        help="max_queued_messages on both brokers (default: Mosquitto's, 1000)",
    )  # fmt: skip
    ap.add_argument("--name", default=f"lag{os.getpid()}")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="tableside-floorlag-"))
    pit, floor_broker = brokers(work, args.max_queued)
    pg: Postgres | None = None
    floor: subprocess.Popen[bytes] | None = None
    try:
        floor_broker.start()
        pit.start()
        if args.store == "postgresql":
            pg = Postgres()
            pg.start()
            url = pg.new_database()
        else:
            url = f"sqlite://{work}/floor.db"  # sqlite:///tmp/x.db is /tmp/x.db
        metrics = free_port()
        log = work / "floor.log"
        floor_cmd = [
            str(BIN / "tableside"), "floor", "run", "--broker", floor_broker.url, "--store", url,
            "--metrics", f"127.0.0.1:{metrics}", "--client-id", f"bench-{args.name}",
        ]  # fmt: skip
        with log.open("wb") as out:
            floor = subprocess.Popen(floor_cmd, stdout=out, stderr=subprocess.STDOUT)
        wait_for("the floor to subscribe", lambda: b"floor_subscribed" in log.read_bytes(), 60)
        load = os.getloadavg()
        fleet_out = work / "fleet"
        fleet_cmd = [
            sys.executable, str(ROOT / "bench" / "fleet.py"), "--tables", str(args.tables),
            "--rate", str(args.rate), "--duration", str(args.duration),
            "--broker", pit.url, "--name", args.name, "--out", str(fleet_out),
        ]  # fmt: skip
        started = time.time()
        subprocess.run(fleet_cmd, check=False, timeout=args.duration + 300)
        fleet_end = time.time()
        fleet = json.loads((fleet_out / "fleet.json").read_text(encoding="utf-8"))
        tables: dict[str, dict[str, Any]] = fleet["tables"]
        expected = sum(int(t["last_seq"]) - int(t["first_seq"]) + 1 for t in tables.values())
        settle_end = time.monotonic() + args.settle
        while record_count(url) < expected and time.monotonic() < settle_end:
            time.sleep(0.5)
        drained = round(time.time() - fleet_end, 1)
        page = urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=10).read()
        rows = stored_rows(url)
        seen: dict[str, set[int]] = {}
        every = all_seqs(url)
        for table, seq in every:
            seen.setdefault(table, set()).add(seq)
        missing: dict[str, int] = {}
        for name, t in tables.items():
            want = set(range(int(t["first_seq"]), int(t["last_seq"]) + 1))
            gone = len(want - seen.get(name, set()))
            if gone:
                missing[name] = gone
        lags = [arr - cts for _, _, arr, cts, _ in rows if cts is not None]
        gaps = subprocess.run(
            [str(BIN / "tableside"), "floor", "gaps", "--json", "--store", url],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        gap_tables = [json.loads(line) for line in gaps.stdout.splitlines() if line.strip()]
        report = {
            "what": "bench/floor_lag.py",
            "machine": machine(),
            "commit": commit(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
            "command": " ".join(sys.argv),
            "store": args.store,
            "max_queued_messages": args.max_queued or "Mosquitto's default (1000)",
            "load_average_at_start": [round(x, 2) for x in load],
            "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
            "fleet_command": " ".join(fleet_cmd),
            "floor_command": " ".join(floor_cmd),
            "fleet": {
                k: fleet.get(k)
                for k in ("messages", "elapsed_s", "messages_per_s", "schedule_lag_ms")
            },
            "fleet_unsent": sum(int(t.get("unsent", 0)) for t in tables.values()),
            "expected_records": expected,
            "stored_records": len(every),
            "stored_first_sent": len(rows),
            "store_caught_up_s_after_fleet_end": drained,
            "missing": sum(missing.values()),
            "tables_missing_some": missing,
            "floor_gaps_json": {
                "tables": len(gap_tables),
                "exit": gaps.returncode,
                "stderr": gaps.stderr[-500:],
                "sample": gap_tables[:1],
            },
            "lag_stored_histogram": histogram(page.decode()),
            "lag_arrival_minus_chain_ts": percentiles(lags),
        }
        args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        print(json.dumps({k: v for k, v in report.items() if k != "tables_missing_some"},
                         indent=1))  # fmt: skip
    finally:
        if floor is not None and floor.poll() is None:
            floor.send_signal(signal.SIGTERM)
            try:
                floor.wait(timeout=20)
            except subprocess.TimeoutExpired:
                floor.kill()
        pit.stop()
        floor_broker.stop()
        if pg is not None:
            pg.stop()


if __name__ == "__main__":
    main()
