"""The ``simulate`` and ``record`` commands: device simulators, a capture replayed, and a
live link recorded."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tableside import __version__
from tableside.cli.common import AddParser, run_async

if TYPE_CHECKING:  # the simulators load with a command that runs one, not with the parser
    from tableside.simulators.listen import Connection

__all__ = ["add_parsers"]


def add_parsers(add: AddParser) -> None:
    """The ``simulate`` and ``record`` commands."""
    sim = add("simulate", help="run a device simulator")
    sim.set_defaults(handler=_cmd_simulate)
    sim.add_argument(
        "device_class", choices=["shuffler", "shoe", "card_reader", "progressive", "replay"]
    )
    sim.add_argument("capture", nargs="?", type=Path, help="replay: the capture file to play")
    where = sim.add_mutually_exclusive_group(required=True)
    where.add_argument("--listen", help="socket://host:port to listen on")
    where.add_argument("--pty", action="store_true", help="create a pty and print its path")
    sim.add_argument("--scenario", type=Path, help="TOML scenario file (docs/simulators.md)")
    sim.add_argument("--interval", type=float, help="seconds between shuffles (default 5)")
    sim.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="NAME[=VALUE]@N",
        help="inject a fault on the Nth shuffle (repeatable)",
    )
    sim.add_argument("--seed", type=int, help="seed for noise and card choices")
    sim.add_argument("--cycles", "--shuffles", type=int, help="stop after this many cycles")
    sim.add_argument("--cards", type=int, help="shuffler: cards in a full deck (default 52)")
    sim.add_argument("--identifies-cards", action="store_true", default=None, help="shuffler")
    sim.add_argument("--two-deck", action="store_true", default=None, help="shuffler")
    sim.add_argument(
        "--shuffle",
        metavar="MODEL",
        help="shuffler: recognise cards and shuffle as MODEL does (fair, riffle:K, shelf:M, "
        "shelf:MxP, rig:steer=AS@5,keep=K/N,fixed/N; docs/shuffle.md)",
    )
    sim.add_argument("--plan", help="shoe: stacks dealt on its own, e.g. 1:5,2:5,D:5")
    sim.add_argument("--deck-size", type=int, help="shoe: cards loaded per round (default 52)")
    sim.add_argument("--reads-cards", action="store_true", default=None, help="shoe")
    sim.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any simulator setting (a TOML value), e.g. --set reveals_hole_card=true",
    )
    sim.add_argument(
        "--seats", default="1=3,2=4,3=5", help="progressive: SEAT=ccTalk address, comma-separated"
    )
    sim.add_argument("--bus-listen", help="progressive: socket://host:port for the acceptor bus")
    sim.add_argument("--heartbeat", type=float, help="seconds between heartbeats (default 1)")
    sim.add_argument("--speed", type=float, default=1.0, help="replay: N times as fast")
    sim.add_argument(
        "--patience", type=float, default=5.0, help="replay: seconds to wait for a host frame"
    )
    sim.add_argument("--keep-going", action="store_true", help="replay: go on after a divergence")

    rec = add("record", help="sit between the daemon and a device and write what the link carries")
    rec.set_defaults(handler=_cmd_record)
    rec.add_argument(
        "--device", action="append", required=True, metavar="[NAME=]URL",
        help="the real device, as the driver would open it (repeatable, one per link)",
    )  # fmt: skip
    rec.add_argument(
        "--listen", action="append", required=True, metavar="[NAME=]pty|socket://HOST:PORT",
        help="where the daemon connects instead (repeatable, one per link)",
    )  # fmt: skip
    rec.add_argument(
        "--framing", action="append", default=[], metavar="[NAME=]tableside|cctalk|raw",
        help="how replay compares the host's bytes (default tableside)",
    )  # fmt: skip
    rec.add_argument(
        "--driver", action="append", default=[], metavar="[NAME=]DRIVER",
        help="the driver the table uses for the link, for the header (e.g. tableside.shuffler)",
    )  # fmt: skip
    rec.add_argument("--baudrate", type=int, default=9600, help="serial devices (default 9600)")
    rec.add_argument("--comment", default="", help="a free comment for the capture's header")
    rec.add_argument("--output", "-o", required=True, type=Path, help="the capture file")


def _settings_from_flags(args: argparse.Namespace) -> dict[str, object]:
    flags = {
        "interval": args.interval, "seed": args.seed, "heartbeat": args.heartbeat,
        "max_cycles": args.cycles, "cards": args.cards, "plan": args.plan,
        "deck_size": args.deck_size, "identifies_cards": args.identifies_cards,
        "two_deck": args.two_deck, "reads_cards": args.reads_cards, "shuffle": args.shuffle,
    }  # fmt: skip
    settings = {k: v for k, v in flags.items() if v is not None}
    return settings | _key_values(args.set, "--set")


def _key_values(items: Sequence[str], what: str) -> dict[str, object]:
    """``KEY=VALUE`` items, each VALUE a TOML value (a bare word is a string)."""
    import tomllib

    values: dict[str, object] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{what} {item!r}: expected KEY=VALUE")
        try:
            values[key] = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            values[key] = text
    return values


def _seat_addresses(text: str) -> dict[int, int]:
    """``--seats 1=3,2=4``: betting position → ccTalk address; ValueError says which is wrong."""
    seats: dict[int, int] = {}
    for item in text.split(","):
        seat, sep, address = (part.strip() for part in item.partition("="))
        if not (sep and seat.isdigit() and address.isdigit()) or int(seat) in seats:
            raise ValueError(f"--seats {item!r}: expected SEAT=ADDRESS, each seat once, "
                             "comma-separated (e.g. 1=3,2=4)")  # fmt: skip
        seats[int(seat)] = int(address)
    return seats


def _cmd_simulate(args: argparse.Namespace) -> int:
    if args.device_class == "replay" or args.capture is not None:
        return _cmd_replay(args)
    from tableside.simulators.listen import serve_pty, serve_socket
    from tableside.simulators.progressive import progressive_table
    from tableside.simulators.registry import build_simulator
    from tableside.simulators.scenario import Scenario, load_scenario

    scenario = Scenario()
    serves: list[tuple[str, Connection]] = []  # (label, serve) per endpoint
    done_event: asyncio.Event
    try:
        if args.scenario:
            scenario = load_scenario(args.scenario)
        # checked against the simulator's fields when it is built (registry.check_settings)
        settings: dict[str, Any] = {**scenario.settings, **_settings_from_flags(args)}
        faults = [*scenario.faults, *args.fault]
        if args.device_class == "progressive":
            seats = _seat_addresses(args.seats)
            controller, bus = progressive_table(seats, faults, **settings)
            if not args.pty and not args.bus_listen:
                raise ValueError("progressive: give --pty, or --listen and --bus-listen")
            serves = [("controller", controller.serve), ("acceptors", bus.serve)]
            done_event = controller.done
        else:
            sim = build_simulator(
                args.device_class, settings, faults, scenario.identity,
                silent_disconnect=args.pty,
            )  # fmt: skip
            serves = [("", sim.serve)]
            done_event = sim.done
    except ValueError as exc:
        print(f"tableside simulate: {exc}", file=sys.stderr)
        return 2

    async def go() -> int:
        tasks = []
        for label, serve in serves:

            def ready(where: str, label: str = label) -> None:
                print(f"{label}={where}" if label else where, flush=True)

            if args.pty:
                tasks.append(asyncio.create_task(serve_pty(serve, ready)))
            else:
                url = args.bus_listen if label == "acceptors" else args.listen
                tasks.append(asyncio.create_task(serve_socket(url, serve, ready)))
        done = asyncio.create_task(done_event.wait())
        try:
            await asyncio.wait({*tasks, done}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (*tasks, done):
                task.cancel()
            await asyncio.wait({*tasks, done})
        for task in tasks:
            if not task.cancelled() and task.exception() is not None:
                print(f"tableside simulate: {task.exception()}", file=sys.stderr)
                return 1
        return 0

    return run_async(go())


def _by_link(items: Sequence[str], what: str) -> dict[str, str]:
    """``[NAME=]VALUE`` items by link name ("device" when a single one has none)."""
    from tableside.simulators.capture import link_and_value

    out: dict[str, str] = {}
    for item in items:
        name, value = link_and_value(item)
        if name in out:
            raise ValueError(f"{what}: link {name!r} given twice")
        out[name] = value
    return out


def _cmd_record(args: argparse.Namespace) -> int:
    from tableside.simulators.capture import Framing, LinkInfo
    from tableside.simulators.record import RecordedLink, Recorder

    try:
        devices = _by_link(args.device, "--device")
        listens = _by_link(args.listen, "--listen")
        framings = _by_link(args.framing, "--framing")
        drivers = _by_link(args.driver, "--driver")
        if set(listens) != set(devices) or not set(framings) | set(drivers) <= set(devices):
            raise ValueError(
                f"name each link the same in --device, --listen, --framing and --driver "
                f"(--device: {sorted(devices)}, --listen: {sorted(listens)})"
            )
        links = []
        for name, url in devices.items():
            framing = framings.get(name, "tableside")
            if framing not in {f.value for f in Framing}:
                raise ValueError(f"--framing {name}={framing}: use tableside, cctalk or raw")
            where = listens[name]
            if where != "pty" and not where.startswith("socket://"):
                raise ValueError(f"--listen {name}={where}: use pty or socket://HOST:PORT")
            extra = (("driver", drivers[name]),) if name in drivers else ()
            info = LinkInfo(name, url, Framing(framing), args.baudrate, extra)
            links.append(RecordedLink(info, where))
        out = args.output.open("w", encoding="utf-8")
    except (ValueError, OSError) as exc:
        print(f"tableside record: {exc}", file=sys.stderr)
        return 2
    recorder = Recorder(links, out, comment=args.comment, version=__version__)
    single = len(links) == 1

    def ready(name: str, where: str) -> None:
        print(where if single else f"{name}={where}", flush=True)

    async def go() -> int:
        try:
            await recorder.run(ready)
        finally:
            out.close()
            counts = ", ".join(f"{n}: {c}" for n, c in recorder.counts.items())
            print(f"tableside record: {args.output} ({counts} records)", file=sys.stderr)
        return 0

    return run_async(go())


def _cmd_replay(args: argparse.Namespace) -> int:
    from tableside.simulators.capture import CaptureError, read_capture
    from tableside.simulators.replay import Replay

    try:
        if args.device_class != "replay" or args.capture is None:
            raise ValueError("give a capture only to replay: tableside simulate replay FILE")
        if args.fault or args.scenario or args.set:
            raise ValueError("a capture plays what was recorded: no --fault, --scenario or --set")
        capture = read_capture(args.capture)
        replay = Replay(
            capture, speed=args.speed, patience=args.patience, keep_going=args.keep_going
        )
        if args.pty:
            listen = dict.fromkeys(capture.links, "pty")
        elif "=" in args.listen:
            listen = _by_link(args.listen.split(","), "--listen")
        else:
            listen = dict.fromkeys(capture.links, args.listen)
        if set(listen) != set(capture.links):
            raise ValueError(f"--listen: the capture's links are {sorted(capture.links)}")
    except (ValueError, CaptureError) as exc:
        print(f"tableside simulate replay: {exc}", file=sys.stderr)
        return 2
    single = len(listen) == 1

    def ready(name: str, where: str) -> None:
        print(where if single else f"{name}={where}", flush=True)

    async def go() -> int:
        serving = asyncio.create_task(replay.serve(listen, ready), name="replay")
        done = asyncio.create_task(replay.done.wait())
        try:
            await asyncio.wait({serving, done}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (serving, done):
                task.cancel()
            await asyncio.wait({serving, done})
        if not serving.cancelled() and serving.exception() is not None:
            print(f"tableside simulate replay: {serving.exception()}", file=sys.stderr)
            return 1
        for divergence in replay.divergences:
            print(f"divergence: {divergence}", file=sys.stderr)
        how = "stopped at a divergence" if replay.stopped else "played to the end"
        print(
            f"tableside simulate replay: {args.capture}: {how}, "
            f"{len(replay.divergences)} divergence(s), "
            f"{replay.retransmissions} host retransmission(s)",
            file=sys.stderr,
        )
        return 1 if replay.divergences else 0

    return run_async(go())
