"""The ``tableside`` command: run, simulate, check-config, monitor, demo, journal, schemas.

One module per group of commands, each declaring its parsers beside their handlers (a parser's
``handler`` default): ``table`` (run, check-config), ``simulate`` (simulate, record),
``monitor``, ``demo``, ``journal`` (verify-install, journal, key), ``command``, ``docs`` (rules,
commands, schemas); the floor's in floor/cli.py, the shuffle lab's in shuffle_lab.py. Each
module imports only the standard library at its top: a command's own imports wait for it."""

from __future__ import annotations

import argparse
import gc
from collections.abc import Callable, Sequence

from tableside import __version__
from tableside.cli import command, demo, docs, journal, monitor, simulate, table
from tableside.cli.common import run_async

__all__ = ["main"]

#: what a parsed command line runs: its exit status
Handler = Callable[[argparse.Namespace], int]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tableside", description="Open table-side controller for casino table games."
    )
    parser.add_argument("--version", action="version", version=f"tableside {__version__}")
    parser.add_argument("--log-level", default="info", help="debug, info, warning, error")
    parser.add_argument("--log-json", action="store_true", help="log JSON lines to stderr")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in (table, simulate, monitor, demo, journal, command, docs):
        group.add_parsers(sub.add_parser)

    from tableside.floor.cli import add_parser as add_floor

    add_floor(sub.add_parser)
    sub.choices["floor"].set_defaults(handler=_cmd_floor)
    from tableside.shuffle_lab import add_parsers as add_shuffle

    add_shuffle(sub.add_parser)
    sub.choices["shuffle-test"].set_defaults(handler=_cmd_shuffle_test)
    sub.choices["shuffle-decks"].set_defaults(handler=_cmd_shuffle_decks)
    return parser


def _cmd_shuffle_test(args: argparse.Namespace) -> int:
    from tableside.shuffle_lab import shuffle_test

    return shuffle_test(args)


def _cmd_shuffle_decks(args: argparse.Namespace) -> int:
    from tableside.shuffle_lab import shuffle_decks

    return shuffle_decks(args)


def _cmd_floor(args: argparse.Namespace) -> int:
    from tableside.floor.cli import command

    return command(args, run_async)


def main(argv: Sequence[str] | None = None) -> int:
    # A table's start-up (the daemon's imports, the config, the journal's opening) makes
    # objects that live as long as the process and no garbage worth a collection: from here the
    # collector stays off until the daemon has started (it collects once, freezes what start-up
    # made and turns it back on: daemon/app.py, ``_freeze_start_up``). docs/benchmarks.md,
    # "Where the time, the CPU and the memory go".
    gc.disable()
    try:
        args = _parser().parse_args(argv)
        from tableside.daemon.logging import configure_logging

        default_level = (
            "warning" if args.command == "demo" and args.log_level == "info" else args.log_level
        )
        configure_logging(default_level, json=args.log_json)
        if args.command != "run":
            gc.enable()
        handler: Handler = args.handler
        return handler(args)
    finally:
        gc.enable()
