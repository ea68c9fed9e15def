"""``tableside demo``: a whole simulated table in one command.

A shuffler simulator on a real pseudo-terminal, the daemon reading it as a serial port, the
configured broker if one answers (otherwise an embedded loopback-only broker), and a live
monitor printing what a subscriber sees, with faults injected along the way.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import tempfile
from pathlib import Path
from typing import Any, Literal, TextIO

import structlog

from tableside.daemon.app import TableDaemon
from tableside.daemon.broker import broker_answers, embedded_broker
from tableside.daemon.config import BrokerConfig, Config, DeviceConfig, TableConfig
from tableside.daemon.monitor import Monitor
from tableside.rules.model import Game
from tableside.simulators.faults import parse_fault
from tableside.simulators.listen import serve_pty
from tableside.simulators.shuffler import FAULTS, ShufflerSimulator

__all__ = ["DEFAULT_FAULTS", "run_demo"]

log = structlog.get_logger("tableside.demo")

#: one of each shuffler fault, early enough to be seen in a short demo
DEFAULT_FAULTS = ("count=51@2", "jam@3", "noise@4", "stop@5", "incomplete@6", "disconnect=4@7")


async def run_demo(
    game: Game,
    *,
    rounds: int | None,
    broker_url: str,
    interval: float,
    faults: tuple[str, ...] = DEFAULT_FAULTS,
    out: TextIO = sys.stdout,
) -> int:
    """Run until ``rounds`` shuffles are done (or forever); return the exit status."""
    specs = [parse_fault(f, FAULTS) for f in faults]
    decks: Literal[6, 8] | None = 6 if game is Game.SPANISH_21 else None
    sim = ShufflerSimulator(
        interval=interval,
        faults=specs,
        cards=48 * decks if decks else 52,
        silent_disconnect=True,  # a pty cannot be unplugged: it goes quiet instead
        max_cycles=rounds,
        heartbeat=0.5,
    )
    async with contextlib.AsyncExitStack() as stack:
        if await broker_answers(broker_url):
            print(f"-- broker: {broker_url} answers; using it", file=out)
        else:
            broker_url = await stack.enter_async_context(embedded_broker())
            print(
                f"-- broker: none at the configured URL; embedded broker on {broker_url}", file=out
            )
        state_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tableside-demo-")))
        async with asyncio.TaskGroup() as tg:
            pty_path: asyncio.Future[str] = asyncio.get_running_loop().create_future()
            simulator = tg.create_task(serve_pty(sim.serve, pty_path.set_result), name="demo.sim")
            path = await pty_path
            table_id = f"demo-{game.value.replace('_', '-')}"
            config = Config(
                table=TableConfig(id=table_id, game=game, decks=decks, state_dir=state_dir),
                broker=BrokerConfig(url=broker_url),
                devices={
                    "shuffler": DeviceConfig(
                        driver="tableside.shuffler", url=path, heartbeat_timeout_s=1.0
                    )
                },
            )
            print(
                f"-- table {table_id} ({game.value}); shuffler simulator on {path}; faults: "
                f"{', '.join(faults) or 'none'}; "
                + (f"{rounds} shuffles" if rounds else "until Ctrl-C"),
                file=out,
            )
            last_outcome = asyncio.Event()
            if rounds is not None and "disconnect" in sim.faults_at(rounds):
                last_outcome.set()  # the last shuffle is cut off: it has no outcome to wait for

            def seen(topic: str, msg: dict[str, Any]) -> None:
                if (
                    topic.endswith("/event")
                    and msg.get("event") in ("shuffle_complete", "fault")
                    and msg["data"].get("shuffle_id") == rounds
                ):
                    last_outcome.set()

            monitor = Monitor(broker_url, table_id, out=out, on_message=seen)
            watcher = tg.create_task(monitor.run(), name="demo.monitor")
            daemon = TableDaemon(config)
            running = tg.create_task(daemon.run(), name="demo.daemon")
            await sim.done.wait()
            # The last shuffle's outcome (if it has one) must reach the subscriber first.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5):
                    await last_outcome.wait()
            running.cancel()
            await asyncio.wait({running})
            await asyncio.sleep(0.3)  # let the monitor print the offline status
            watcher.cancel()
            simulator.cancel()
        print(
            f"-- done: {sim.shuffles} shuffles, {daemon.rulings} rulings, "
            f"{len(monitor.seen)} messages seen by the monitor, "
            f"{len(monitor.gaps)} seq gaps",
            file=out,
        )
        return 1 if monitor.gaps else 0
