"""The ``run`` and ``check-config`` commands: a table's daemon and its config files."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tableside.cli.common import AddParser, run_async

__all__ = ["add_parsers"]


def add_parsers(add: AddParser) -> None:
    """The ``run`` and ``check-config`` commands."""
    run = add("run", help="run the daemon for one table")
    run.set_defaults(handler=_cmd_run)
    run.add_argument("--config", required=True, type=Path, help="the table's TOML file")
    run.add_argument("--broker", help="override the broker URL (mqtt://host:port)")
    run.add_argument(
        "--clock-speed",
        type=float,
        metavar="N",
        help="lab tables only: the table's time runs N times as fast ([test_clock])",
    )
    run.add_argument(
        "--clock-offset",
        type=float,
        metavar="S",
        help="lab tables only: the table's time starts S seconds from the wall clock",
    )
    run.add_argument(
        "--device",
        action="append",
        type=_device_override,
        default=[],
        metavar="NAME=URL",
        help="override a device's URL (repeatable)",
    )
    run.add_argument(
        "--metrics",
        metavar="HOST:PORT",
        help="serve Prometheus metrics on http://HOST:PORT/metrics (overrides [metrics] listen)",
    )

    check = add("check-config", help="validate table config files")
    check.set_defaults(handler=_cmd_check)
    check.add_argument("files", nargs="+", type=Path)


def _device_override(text: str) -> tuple[str, str]:
    name, sep, url = text.partition("=")
    if not sep or not name or not url:
        raise argparse.ArgumentTypeError(f"expected NAME=URL, got {text!r}")
    return name, url


def _cmd_run(args: argparse.Namespace) -> int:
    from tableside.daemon.app import TableDaemon
    from tableside.daemon.config import ConfigError, load_config, locate

    try:
        config = load_config(
            args.config, broker=args.broker, devices=dict(args.device), writable=True
        )
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.clock_speed is not None or args.clock_offset is not None:
        from tableside.daemon.config import LabClockConfig

        if not config.table.lab:
            print(f"{args.config}: --clock-speed/--clock-offset are for a lab table "
                  "([table] lab = true); a table on the casino floor keeps real time",
                  file=sys.stderr)  # fmt: skip
            return 2
        clock = config.test_clock or LabClockConfig()
        clock = clock.model_copy(update={
            k: v for k, v in (("speed", args.clock_speed), ("offset_s", args.clock_offset))
            if v is not None
        })  # fmt: skip
        if clock.speed <= 0:
            print("tableside run: --clock-speed must be more than 0", file=sys.stderr)
            return 2
        config = config.model_copy(update={"test_clock": clock})
    if args.metrics is not None:
        from tableside.daemon.config import MetricsConfig, parse_listen

        try:
            parse_listen(args.metrics)
        except ValueError as exc:
            print(f"tableside run: --metrics: {exc}", file=sys.stderr)
            return 2
        config = config.model_copy(update={"metrics": MetricsConfig(listen=args.metrics)})
    try:
        daemon = TableDaemon(config)
    except RuntimeError as exc:  # a journal that fails its checks, or an unreadable key, says
        # how to recover
        print(f"tableside: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # the state directory went bad after the check (or the disk did)
        where = locate(args.config, ["table", "state_dir"])
        print(f"{where}: table.state_dir: cannot use {config.table.state_dir}: {exc}",
              file=sys.stderr)  # fmt: skip
        return 2

    async def go() -> int:
        from tableside.daemon.journal import JournalError

        # JournalError: the disk is full or failing, nothing can be sent; MetricsUnavailable
        # (e.g. the port is taken): said, before starting. The metrics module (and
        # prometheus_client) is imported only by a table that serves them.
        stops: tuple[type[Exception], ...] = (JournalError,)
        if config.metrics is not None:
            from tableside.daemon.metrics import MetricsUnavailable

            stops += (MetricsUnavailable,)
        failed: list[BaseException] = []
        try:
            await daemon.run()
        except* stops as group:
            failed.extend(group.exceptions)
        for exc in failed:
            print(f"tableside: {exc}", file=sys.stderr)
        return 1 if failed else 0

    return run_async(go())


def _cmd_check(args: argparse.Namespace) -> int:
    from tableside.daemon.config import ConfigError, load_config

    status = 0
    for path in args.files:
        try:
            config = load_config(path, use_env=False, writable=True)
        except ConfigError as exc:
            status = 1
            for problem in exc.problems:
                print(problem)
        else:
            print(
                f"{path}: ok (table {config.table.id}, {config.table.game.value}, "
                f"devices: {', '.join(config.devices)})"
            )
    return status
