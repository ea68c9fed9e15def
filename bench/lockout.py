"""Lock-out timing: the dealer presses "no more bets" → every seat's acceptor is inhibited.

The real daemon (in this process) with the simulated control device and a ccTalk bus of seat
acceptors that keeps 9600-baud line timing (10 bit times per byte, echo on the single wire, a
2 ms response delay). For each round it records:

* **broadcast**: button sent by the control device → the broadcast master inhibit has crossed
  the wire (every acceptor that is there and not busy is inhibited at that moment);
* **confirmed**: button sent → the host has each seat's ACK and read-back of its own inhibit
  (or has given up on a seat after the lock-out budget) and has published ``lockout_applied``
  (seen by an MQTT subscriber).

    .venv/bin/python bench/lockout.py --rounds 100 --seats 7
    .venv/bin/python bench/lockout.py --rounds 100 --seats 7 --fault absent@2 --fault absent@5
    .venv/bin/python bench/lockout.py --rounds 100 --seats 7 --fault busy@3

Starts its own Mosquitto on a free loopback port (or use --broker URL).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiomqtt
import structlog

from tableside.daemon.app import TableDaemon
from tableside.daemon.broker import free_port
from tableside.daemon.config import BrokerConfig, Config, DeviceConfig, TableConfig
from tableside.daemon.logging import configure_logging
from tableside.drivers.cctalk.driver import AcceptorBusOptions
from tableside.rules.model import Game
from tableside.simulators.listen import serve_socket
from tableside.simulators.progressive import progressive_table


async def serve(sim: Any) -> tuple[str, asyncio.Task[None]]:
    where: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(serve_socket("socket://127.0.0.1:0", sim.serve, where.set_result))
    return await where, task


def summary(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    return {
        "p50_ms": round(values[len(values) // 2], 2),
        "p99_ms": round(values[min(len(values) - 1, int(0.99 * len(values)))], 2),
        "max_ms": round(values[-1], 2),
        "mean_ms": round(statistics.fmean(values), 2),
    }


async def run(
    rounds: int, seats: int, baud: int, broker: str, faults: list[str], poll_interval: float
) -> dict[str, Any]:
    seat_map = {seat: seat + 1 for seat in range(1, seats + 1)}
    # A seat that never confirms holds the confirmation for the whole lock-out budget (1 s):
    # rounds long enough that the next "bets open" does not overtake it.
    interval = 1.8 if faults else 0.8
    controller, bus = progressive_table(
        seat_map, faults, baud=baud, interval=interval, heartbeat=0.5, betting_time=0.3,
        players=tuple(seat_map), max_cycles=rounds + 5,
    )  # fmt: skip
    controller_url, controller_task = await serve(controller)
    bus_url, bus_task = await serve(bus)
    state = Path(tempfile.mkdtemp(prefix="tableside-lockout-"))
    config = Config(
        table=TableConfig(id="bench-lockout", game=Game.CARIBBEAN_STUD, state_dir=state),
        broker=BrokerConfig(url=broker),
        devices={
            "progressive": DeviceConfig(
                driver="tableside.progressive_controller", url=controller_url
            ),
            "acceptors": DeviceConfig(
                driver="tableside.acceptors", url=bus_url,
                options=AcceptorBusOptions(seats=seat_map, poll_interval_s=poll_interval)),
        },
    )  # fmt: skip
    skipped = 0
    effective: list[float] = []
    confirmed: list[float] = []
    host_side: list[float] = []
    unconfirmed: set[int] = set()
    driver_broadcast: list[float] = []
    parts = urlsplit(broker)
    daemon = TableDaemon(config)
    daemon_task = asyncio.create_task(daemon.run())
    try:
        async with (
            aiomqtt.Client(parts.hostname or "", parts.port or 1883) as client,
            asyncio.timeout(rounds * interval + 60),
        ):
            await client.subscribe("tableside/bench-lockout/device/acceptors/event", qos=1)
            async for message in client.messages:
                now = time.monotonic()
                assert isinstance(message.payload, bytes)
                payload = json.loads(message.payload)
                if payload["event"] != "lockout_applied" or controller.no_more_bets_at is None:
                    continue
                pressed = controller.no_more_bets_at
                if bus.broadcast_at is not None and bus.broadcast_at > pressed:
                    effective.append((bus.broadcast_at - pressed) * 1000)
                    confirmed.append((now - pressed) * 1000)
                    host_side.append(payload["data"]["confirmed_ms"])
                    driver_broadcast.append(payload["data"]["broadcast_ms"])
                    unconfirmed.update(payload["data"]["unconfirmed"])
                else:
                    skipped += 1  # e.g. the first round, before every seat was identified
                if len(confirmed) >= rounds:
                    break
    finally:
        for task in (daemon_task, controller_task, bus_task):
            task.cancel()
        await asyncio.gather(daemon_task, controller_task, bus_task, return_exceptions=True)
        shutil.rmtree(state, ignore_errors=True)
    return {
        "rounds": len(confirmed),
        "rounds_not_measured": skipped,
        "seats": seats,
        "baud": baud,
        "faults": faults,
        "poll_interval_s": poll_interval,
        "seats_unconfirmed": sorted(unconfirmed),
        "broadcast": summary(effective),
        "confirmed_and_published": summary(confirmed),
        "driver_lockout_call": summary(host_side),
        # from the driver's lock-out call to its broadcast on the wire (the driver's own figure)
        "driver_broadcast": summary(driver_broadcast),
        "broadcast_samples_ms": [round(v, 2) for v in effective],
    }


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--seats", type=int, default=7)
    parser.add_argument("--baud", type=int, default=9600)
    parser.add_argument("--broker")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--fault",
        action="append",
        default=[],
        help="a seat fault, e.g. absent@2 or busy@3 (repeatable)",
    )
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=0.05,
        help="routine polling interval, s (the simulated acceptors ask 0.2)",
    )
    args = parser.parse_args()
    configure_logging("error")
    structlog.get_logger().debug("quiet")
    broker, mosquitto = args.broker, None
    if broker is None:
        port = free_port()
        conf = Path(tempfile.mkdtemp()) / "mosquitto.conf"
        conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n")
        exe = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
        mosquitto = await asyncio.create_subprocess_exec(
            exe, "-c", str(conf), stderr=subprocess.DEVNULL
        )
        broker = f"mqtt://127.0.0.1:{port}"
        await asyncio.sleep(0.5)
    try:
        result = await run(
            args.rounds, args.seats, args.baud, broker, args.fault, args.poll_interval
        )
    finally:
        if mosquitto is not None:
            mosquitto.terminate()
            await mosquitto.wait()
    print(f"{result['rounds']} rounds, {result['seats']} seats, {result['baud']} baud, "
          f"faults {args.fault or 'none'}, unconfirmed {result['seats_unconfirmed']}")  # fmt: skip
    for key in ("broadcast", "confirmed_and_published", "driver_lockout_call", "driver_broadcast"):
        r = result[key]
        print(
            f"{key:<24} p50 {r['p50_ms']:>7.2f} ms  p99 {r['p99_ms']:>7.2f} ms  "
            f"max {r['max_ms']:>7.2f} ms"
        )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
