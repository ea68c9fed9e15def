"""The ``monitor`` command: a table's life, read from its broker."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tableside.cli.common import AddParser, run_async, table_on_broker

__all__ = ["add_parsers"]


def add_parsers(add: AddParser) -> None:
    """The ``monitor`` command."""
    mon = add("monitor", help="subscribe to a table and print its life")
    mon.set_defaults(handler=_cmd_monitor)
    mon.add_argument("--table", help="table id (default: from --config)")
    mon.add_argument("--config", type=Path, help="take table, broker and prefix from here")
    mon.add_argument("--broker", help="mqtt://host:port (default mqtt://127.0.0.1:1883)")
    mon.add_argument("--prefix", help="topic prefix (default tableside)")
    mon.add_argument(
        "--client-id",
        help="the persistent session's client id (default: tableside-monitor-TABLE-USER-HOST)",
    )
    mon.add_argument(
        "--no-session", action="store_true", help="a clean session: what comes while away is lost"
    )


def _cmd_monitor(args: argparse.Namespace) -> int:
    from tableside.daemon.monitor import Monitor, default_client_id

    where = table_on_broker(args, "monitor")
    if where is None:
        return 2
    table, broker, prefix, config = where
    # the table's own credentials and TLS, unless another broker was named
    endpoint = config.broker.endpoint() if config and not args.broker else None
    monitor = Monitor(
        broker,
        table,
        prefix,
        out=sys.stdout,
        endpoint=endpoint,
        client_id=None if args.no_session else args.client_id or default_client_id(table),
        journal_hint=f"--config {args.config}" if args.config else "--config <the table's config>",
    )

    async def go() -> int:
        await monitor.run()
        return 0

    return run_async(go())
