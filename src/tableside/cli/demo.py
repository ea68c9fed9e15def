"""The ``demo`` command: a whole simulated table, live."""

from __future__ import annotations

import argparse
import sys

from tableside.cli.common import AddParser, run_async

__all__ = ["add_parsers"]


def add_parsers(add: AddParser) -> None:
    """The ``demo`` command."""
    demo = add("demo", help="a whole simulated table, live, in one command")
    demo.set_defaults(handler=_cmd_demo)
    demo.add_argument(
        "--game",
        default="caribbean_stud",
        choices=["caribbean_stud", "four_card_poker", "let_it_ride", "spanish_21"],
    )
    demo.add_argument(
        "--rounds", type=int, default=0, help="exit after N shuffles (0, the default: run on)"
    )
    demo.add_argument("--broker", default="mqtt://127.0.0.1:1883", help="broker to try first")
    demo.add_argument("--interval", type=float, default=1.0, help="seconds between shuffles")
    demo.add_argument(
        "--fault",
        action="append",
        metavar="NAME[=VALUE]@N",
        help="faults to inject (default: one of each)",
    )
    demo.add_argument("--no-faults", action="store_true")
    demo.add_argument("--floor-http", default="127.0.0.1:8080", metavar="HOST:PORT",
                      help="the floor's web view beside the table (another free port when this "
                      "one is taken; default 127.0.0.1:8080)")  # fmt: skip
    demo.add_argument("--no-floor", action="store_true", help="no floor beside the table")
    demo.add_argument("--embedded", choices=["mosquitto", "amqtt"],
                      help="the broker to start when none answers (default: a Mosquitto of "
                      "the demo's own when the program is installed, else amqtt)")  # fmt: skip


def _cmd_demo(args: argparse.Namespace) -> int:
    from tableside.daemon.broker import NoEmbeddedBroker
    from tableside.daemon.demo import DEFAULT_FAULTS, run_demo
    from tableside.rules.model import Game

    faults: tuple[str, ...] = () if args.no_faults else tuple(args.fault or DEFAULT_FAULTS)
    beside = None
    if not args.no_floor:
        host, sep, port = args.floor_http.rpartition(":")
        if not sep or not port.isdigit():
            print(f"tableside demo: --floor-http {args.floor_http!r}: expected HOST:PORT",
                  file=sys.stderr)  # fmt: skip
            return 2
        try:
            from tableside.floor.demo import floor_beside
        except ImportError as exc:  # the floor's web view needs the floor extra (aiohttp)
            print(f"tableside demo: no floor beside the table ({exc}): "
                  "pip install 'tableside[floor]'", file=sys.stderr)  # fmt: skip
        else:
            beside = floor_beside(host, int(port))
    try:
        coro = run_demo(
            Game(args.game),
            rounds=args.rounds or None,
            broker_url=args.broker,
            interval=args.interval,
            faults=faults,
            beside=beside,
            embedded=args.embedded,
        )
    except ValueError as exc:
        print(f"tableside demo: {exc}", file=sys.stderr)
        return 2
    try:
        return run_async(coro)
    except NoEmbeddedBroker as exc:
        print(f"tableside demo: {exc}", file=sys.stderr)
        return 2
