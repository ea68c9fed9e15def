"""What the commands share: the process's asyncio run with its stop deadline, and a table
found on its broker."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the config loads with a command that reads one, not with the parser
    from tableside.daemon.config import Config

__all__ = ["STOP_DEADLINE_S", "AddParser", "run_async", "table_on_broker"]

#: a subparsers' ``add_parser``: each part of the command line adds its own
AddParser = Callable[..., argparse.ArgumentParser]


#: a stop that has not finished this long after SIGTERM/SIGINT is forced; below the unit's
#: TimeoutStopSec (15 s, systemd/tableside@.service), after which systemd would SIGKILL
STOP_DEADLINE_S = 10.0


def run_async(coro: Coroutine[object, object, int], stop_deadline: float = STOP_DEADLINE_S) -> int:
    """Run until done, SIGINT or SIGTERM (both stop cleanly: the main task is cancelled). A
    stop still running ``stop_deadline`` seconds later is a bug somewhere (a cancellation
    swallowed): it is logged with the tasks still running, every task is cancelled again, once
    a second, and the exit status is 1."""
    overdue: list[str] = []
    stopping: list[bool] = []

    async def wrapper() -> int:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()

        def force() -> None:
            if task.done():
                return
            stuck = sorted(t.get_name() for t in asyncio.all_tasks() if not t.done())
            if not overdue:
                import structlog

                structlog.get_logger("tableside").error(
                    "stop_overdue", after_s=stop_deadline, tasks=stuck
                )
            overdue.extend(stuck)
            for each in asyncio.all_tasks():
                each.cancel()
            loop.call_later(1.0, force)

        def stop() -> None:
            if not stopping:
                stopping.append(True)
                loop.call_later(stop_deadline, force)
            task.cancel()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop)
        try:
            status = await coro
        except asyncio.CancelledError:
            status = 0
        return 1 if overdue else status

    return asyncio.run(wrapper())


def table_on_broker(
    args: argparse.Namespace, tool: str
) -> tuple[str, str, str, Config | None] | None:
    """(table, broker URL, topic prefix, the config or None) from --table/--broker/--prefix,
    filled in from --config; None, having said why, when they name no table."""
    from tableside.daemon.config import ConfigError, load_config

    table, broker, prefix = args.table, args.broker, args.prefix
    config: Config | None = None
    if args.config:
        try:
            config = load_config(args.config)
        except ConfigError as exc:
            print(exc, file=sys.stderr)
            return None
        table = table or config.table.id
        broker = broker or config.broker.url
        prefix = prefix or config.broker.topic_prefix
    if not table:
        print(f"tableside {tool}: give --table or --config", file=sys.stderr)
        return None
    return table, broker or "mqtt://127.0.0.1:1883", prefix or "tableside", config
