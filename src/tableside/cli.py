"""The ``tableside`` command: run, simulate, check-config, monitor, demo, journal, schemas."""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import signal
import sys
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tableside import __version__

__all__ = ["main"]


def _device_override(text: str) -> tuple[str, str]:
    name, sep, url = text.partition("=")
    if not sep or not name or not url:
        raise argparse.ArgumentTypeError(f"expected NAME=URL, got {text!r}")
    return name, url


#: where a packaged install keeps its manifest (daemon/integrity.py's default_manifest_path)
_DEFAULT_MANIFEST = Path(sys.prefix) / "share" / "tableside" / "manifest.json"

#: a subparsers' ``add_parser``: each part of the command line adds its own
AddParser = Callable[..., argparse.ArgumentParser]


def _add_run(add: AddParser) -> None:
    """The ``run`` and ``check-config`` commands."""
    run = add("run", help="run the daemon for one table")
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
    check.add_argument("files", nargs="+", type=Path)


def _add_simulate(add: AddParser) -> None:
    """The ``simulate`` command."""
    sim = add("simulate", help="run a device simulator")
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


def _add_record(add: AddParser) -> None:
    """The ``record`` command."""
    rec = add("record", help="sit between the daemon and a device and write what the link carries")
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


def _add_monitor(add: AddParser) -> None:
    """The ``monitor`` command."""
    mon = add("monitor", help="subscribe to a table and print its life")
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


def _add_demo(add: AddParser) -> None:
    """The ``demo`` command."""
    demo = add("demo", help="a whole simulated table, live, in one command")
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


def _add_journal(add: AddParser) -> None:
    """The ``verify-install``, ``journal`` and ``key`` commands."""
    verify = add("verify-install", help="hash the installed software (self-check)")
    verify.add_argument("--files", action="store_true", help="list every file and its hash")
    verify.add_argument("--expect", help="exit 1 unless the overall SHA-256 is this one")
    verify.add_argument(
        "--manifest",
        nargs="?",
        type=Path,
        const=_DEFAULT_MANIFEST,
        metavar="PATH",
        help="hold every installed file to the release manifest (default: the install's own, "
        f"{_DEFAULT_MANIFEST}); exit 1 naming changed, missing and added files",
    )
    verify.add_argument(
        "--write-manifest",
        type=Path,
        metavar="PATH",
        help="write the release manifest of this install (or of --from-wheels) to PATH",
    )
    verify.add_argument(
        "--from-wheels",
        type=Path,
        metavar="DIR",
        help="with --write-manifest: the manifest of the install these wheels will make",
    )

    journal = add("journal", help="check, export, back up or recover a table's journal")
    jsub = journal.add_subparsers(dest="journal_command", required=True, metavar="ACTION")
    for name, text in (
        ("verify", "check the hash chain: finds an edited, inserted or removed record"),
        ("export", "write records as JSON lines, for auditors"),
        ("recover", "set a journal that fails its checks aside and start a new one after it"),
        ("backup", "copy a journal, live or not, consistently (SQLite's backup API)"),
    ):
        action = jsub.add_parser(name, help=text)
        where = action.add_mutually_exclusive_group(required=True)
        where.add_argument("path", nargs="?", type=Path, help="the journal.sqlite file")
        where.add_argument("--config", type=Path, help="the table's config: its journal")
        if name == "recover":
            action.add_argument("--table", help="the table id, when the journal cannot say")
            action.add_argument(
                "--after-seq",
                type=int,
                help="the last seq the table used, when the journal cannot say (take it from a "
                "subscriber's record); the new journal starts after it",
            )
        if name == "backup":
            action.add_argument("--output", "-o", type=Path, required=True,
                                help="the copy (a new file; never overwritten)")  # fmt: skip
        if name == "export":
            action.add_argument("--from-seq", type=int, help="first seq to export")
            action.add_argument("--to-seq", type=int, help="last seq to export")
            action.add_argument("--output", "-o", type=Path, help="file (default: stdout)")

    key = add(
        "key", help="print the table's public key (what the floor enrols) and where its key is"
    )
    key.add_argument("--config", type=Path, required=True, help="the table's config")
    key.add_argument(
        "--create",
        action="store_true",
        help="make the key now if the table has none yet (else it is made at its first start); "
        "run as the daemon's user, so that the daemon can read it",
    )


def _add_command(add: AddParser) -> None:
    """The ``command`` command."""
    command = add("command", help="ask a table to do something, as a role, and wait for its answer")
    command.add_argument("role", help="dealer, floorperson or technician")
    command.add_argument("device", help='a device of the table, or "table"')
    command.add_argument("name", metavar="COMMAND", help="e.g. open_table, start_shuffle")
    command.add_argument("args", nargs="*", metavar="KEY=VALUE", help="arguments (TOML values)")
    command.add_argument("--config", type=Path, help="take table id, broker and prefix from here")
    command.add_argument("--table", help="table id (default: from --config)")
    command.add_argument("--broker", help="mqtt://host:port (default: from --config)")
    command.add_argument("--prefix", help="topic prefix (default tableside)")
    command.add_argument("--username", help="your broker user (the ACL gives it its role)")
    command.add_argument("--password", help="or TABLESIDE_PASSWORD in the environment")
    command.add_argument("--ca-file", type=Path, help="mqtts: the broker's CA")
    command.add_argument("--timeout", type=float, default=10.0, help="seconds to wait")


def _add_docs(add: AddParser) -> None:
    """The ``rules``, ``commands`` and ``schemas`` commands (the generated docs)."""
    rules = add("rules", help="write docs/rules.md from the rule rows")
    rules.add_argument("output", type=Path, help="the markdown file to write")
    rules.add_argument("--tests", type=Path, default=Path("tests"), help="where the tests are")

    commands = add(
        "commands", help="rewrite the command table in docs/commands.md from rules/commands.py"
    )
    commands.add_argument("page", type=Path, help="the markdown page holding the table")

    schemas = add("schemas", help="write the MQTT payload JSON Schemas")
    schemas.add_argument("directory", type=Path)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tableside", description="Open table-side controller for casino table games."
    )
    parser.add_argument("--version", action="version", version=f"tableside {__version__}")
    parser.add_argument("--log-level", default="info", help="debug, info, warning, error")
    parser.add_argument("--log-json", action="store_true", help="log JSON lines to stderr")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_run(sub.add_parser)
    _add_simulate(sub.add_parser)
    _add_record(sub.add_parser)
    _add_monitor(sub.add_parser)
    _add_demo(sub.add_parser)
    _add_journal(sub.add_parser)
    _add_command(sub.add_parser)
    _add_docs(sub.add_parser)

    from tableside.floor.cli import add_parser as add_floor

    add_floor(sub.add_parser)
    from tableside.shuffle_lab import add_parsers as add_shuffle

    add_shuffle(sub.add_parser)
    return parser


#: a stop that has not finished this long after SIGTERM/SIGINT is forced; below the unit's
#: TimeoutStopSec (15 s, systemd/tableside@.service), after which systemd would SIGKILL
STOP_DEADLINE_S = 10.0


def _run_async(coro: Coroutine[object, object, int], stop_deadline: float = STOP_DEADLINE_S) -> int:
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

    return _run_async(go())


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


def _settings_from_flags(args: argparse.Namespace) -> dict[str, object]:
    flags = {
        "interval": args.interval, "seed": args.seed, "heartbeat": args.heartbeat,
        "max_cycles": args.cycles, "cards": args.cards, "plan": args.plan,
        "deck_size": args.deck_size, "identifies_cards": args.identifies_cards,
        "two_deck": args.two_deck, "reads_cards": args.reads_cards, "shuffle": args.shuffle,
    }  # fmt: skip
    settings = {k: v for k, v in flags.items() if v is not None}
    return settings | _key_values(args.set, "--set")


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
    from tableside.simulators.scenario import load_scenario

    scenario: dict[str, Any] = {}
    serves: list[tuple[str, Any]] = []  # (label, serve) per endpoint
    done_event: asyncio.Event
    try:
        if args.scenario:
            scenario = load_scenario(args.scenario)
        settings = {k: v for k, v in scenario.items() if k not in ("faults", "identity")}
        settings.update(_settings_from_flags(args))
        faults = [*scenario.get("faults", []), *args.fault]
        if args.device_class == "progressive":
            seats = _seat_addresses(args.seats)
            controller, bus = progressive_table(seats, faults, **settings)
            if not args.pty and not args.bus_listen:
                raise ValueError("progressive: give --pty, or --listen and --bus-listen")
            serves = [("controller", controller.serve), ("acceptors", bus.serve)]
            done_event = controller.done
        else:
            sim = build_simulator(
                args.device_class, settings, faults, scenario.get("identity"),
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

    return _run_async(go())


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

    return _run_async(go())


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

    return _run_async(go())


def _table_on_broker(args: argparse.Namespace, tool: str) -> tuple[str, str, str, Any] | None:
    """(table, broker URL, topic prefix, the config or None) from --table/--broker/--prefix,
    filled in from --config; None, having said why, when they name no table."""
    from tableside.daemon.config import ConfigError, load_config

    table, broker, prefix, config = args.table, args.broker, args.prefix, None
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


def _toml_or_text(text: str) -> object:
    """A TOML value, or the text itself where it is none (a bare word is a string)."""
    import tomllib

    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _field_types(prop: Mapping[str, object], defs: Mapping[str, object]) -> set[str]:
    """The JSON types a field of a JSON Schema takes (``$ref`` and ``anyOf`` followed, null
    left out); ``enum`` alone: "enum"."""
    ref = prop.get("$ref")
    if isinstance(ref, str):
        target = defs.get(ref.rsplit("/", 1)[1])
        return _field_types(target, defs) if isinstance(target, Mapping) else set()
    branches = prop.get("anyOf")
    if isinstance(branches, list):
        return set().union(*(_field_types(b, defs) for b in branches if isinstance(b, Mapping)))
    kind = prop.get("type")
    if isinstance(kind, str):
        return set() if kind == "null" else {kind}
    return {"enum"} if "enum" in prop else set()


def _command_args(name: str, items: Sequence[str]) -> dict[str, object]:
    """``KEY=VALUE`` arguments of a command, read as its arguments' types say: a string
    argument is the text as typed (``note=30`` is the note "30", ``by=Ann Lee``); a list
    argument may be written without brackets (``positions=1,3``, ``player=7,K``); anything else
    is a TOML value (``count=52``, ``misdealt=false``, ``rank=7``, ``rank=K``). The table checks
    the values (a command it does not know: every value a TOML value)."""
    from tableside.rules.commands import COMMANDS

    command = COMMANDS.get(name)
    schema = command.args.model_json_schema() if command is not None else {}
    props, defs = schema.get("properties", {}), schema.get("$defs", {})
    values: dict[str, object] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ValueError(f"argument {item!r}: expected KEY=VALUE")
        kinds = _field_types(props.get(key, {}), defs)
        value = _toml_or_text(text)
        if kinds == {"string"} and not isinstance(value, str):
            value = text
        elif "array" in kinds and not text.lstrip().startswith("["):
            value = [_toml_or_text(part.strip()) for part in text.split(",")]
        values[key] = value
    return values


def _nearest(word: str, words: Iterable[str]) -> str:
    """``: did you mean 'x'?`` for the nearest spelling, or the whole list when none is near."""
    import difflib

    known = sorted(words)
    near = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    return f": did you mean {near[0]!r}?" if near else f" (one of: {', '.join(known)})"


def _check_request(role: str, name: str, values: Mapping[str, object]) -> None:
    """What the table would refuse of a request it can judge without its state (an unknown
    role, command or argument, an argument of the wrong type, a role that may not give it),
    refused before anything is sent: ``ValueError`` with the nearest spelling."""
    from tableside.rules.commands import COMMANDS, Role, authorise

    if role not in {r.value for r in Role}:
        raise ValueError(f"unknown role {role!r}{_nearest(role, (r.value for r in Role))}")
    if name not in COMMANDS:
        raise ValueError(f"unknown command {name!r}{_nearest(name, COMMANDS)}")
    command = authorise(name, role)
    fields = command.args.model_fields
    for key in values:
        if key not in fields and not fields:
            raise ValueError(f"{name} takes no arguments ({key!r} given)")
        if key not in fields:
            raise ValueError(f"{name}: unknown argument {key!r}{_nearest(key, fields)}")
    command.parse(values)


def _cmd_monitor(args: argparse.Namespace) -> int:
    from tableside.daemon.monitor import Monitor, default_client_id

    where = _table_on_broker(args, "monitor")
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

    return _run_async(go())


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
        return _run_async(coro)
    except NoEmbeddedBroker as exc:
        print(f"tableside demo: {exc}", file=sys.stderr)
        return 2


def _cmd_schemas(args: argparse.Namespace) -> int:
    from tableside.wire.payloads import PAYLOAD_MODELS

    args.directory.mkdir(parents=True, exist_ok=True)
    from tableside.rules.commands import request_schema

    schemas = {name: model.model_json_schema() for name, model in PAYLOAD_MODELS.items()}
    # one branch per declared command, with its args, in the request's envelope
    schemas["command"] = request_schema(schemas["command"])
    # each device event's data, from its type: <device class>.<kind>, any_device.<kind>
    from tableside.daemon.runtime import TableActionFailed
    from tableside.drivers.catalog import ANY_DEVICE, EVENTS, event_schema
    from tableside.drivers.events import DeviceEvent
    from tableside.wire.events import FirmwareChanged, ShuffleAlert, ShuffleStatistics

    events = {f"{device_class}.{cls.kind}": cls
              for device_class, own in EVENTS.items() for cls in own}  # fmt: skip
    anywhere: tuple[type[DeviceEvent], ...] = (*ANY_DEVICE, FirmwareChanged, TableActionFailed)
    for cls in anywhere:
        events[f"any_device.{cls.kind}"] = cls
    for cls in (ShuffleStatistics, ShuffleAlert):  # the table's, on a shuffler's topic
        events[f"shuffler.{cls.kind}"] = cls
    (args.directory / "events").mkdir(exist_ok=True)
    for name, cls in sorted(events.items()):
        schemas[f"events/{name}"] = event_schema(name, cls)
    for name, schema in schemas.items():
        path = args.directory / f"{name}.schema.json"
        path.write_text(json.dumps(schema, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(path)
    return 0


def _cmd_verify_install(args: argparse.Namespace) -> int:
    from tableside.daemon import integrity

    if args.from_wheels is not None and args.write_manifest is None:
        print("--from-wheels goes with --write-manifest", file=sys.stderr)
        return 2
    if args.write_manifest is not None:
        try:
            if args.from_wheels is not None:
                manifest = integrity.manifest_from_wheels(args.from_wheels)
            else:
                manifest = integrity.manifest_from_install()
        except integrity.ManifestError as exc:
            print(f"cannot make the manifest: {exc}", file=sys.stderr)
            return 1
        digest = integrity.write_manifest(manifest, args.write_manifest)
        print(f"manifest: {args.write_manifest} ({len(manifest.files)} files)")
        print(f"manifest sha256: {digest}")
        print(f"version: {manifest.version}")
        return 0
    if args.manifest is not None:
        check = integrity.check_manifest(args.manifest)
        print(f"manifest: {check.manifest}")
        print(f"manifest sha256: {check.manifest_sha256 or '-'}")
        print(f"version: {check.version or '-'}  (running: {__version__})")
        for label, names in (("changed", check.changed), ("missing", check.missing),
                             ("added", check.added)):  # fmt: skip
            for name in names:
                print(f"{label}: {name}")
        if check.problem is not None:
            print(check.problem)
        print(f"MANIFEST: all {check.files} files match" if check.ok else "MANIFEST: MISMATCH")
        return 0 if check.ok else 1

    report = integrity.verify_install()
    if args.files:
        for path, digest in sorted(report.files.items()):
            print(f"{digest}  {path}")
    print(f"tableside {__version__} at {report.root}")
    print(f"files: {len(report.files)}  sha256: {report.digest}")
    if report.checked_against_record:
        for label, paths in (("changed", report.changed), ("missing", report.missing),
                             ("not in RECORD", report.unrecorded)):  # fmt: skip
            for path in paths:
                print(f"{label}: {path}")
        print("RECORD: every file matches" if report.ok else "RECORD: MISMATCH")
    else:
        print("RECORD: none (an editable install); compare the sha256 with the release's")
    if args.expect and args.expect != report.digest:
        print(f"EXPECTED {args.expect}: MISMATCH")
        return 1
    return 0 if report.ok else 1


def _journal_path(args: argparse.Namespace) -> tuple[Path, str | None]:
    from tableside.daemon.config import load_config

    if args.config is None:
        return args.path, None
    config = load_config(args.config, use_env=False)
    return config.table.state_dir / config.table.id / "journal.sqlite", config.table.id


def _cmd_journal(args: argparse.Namespace) -> int:
    import sqlite3

    from tableside.daemon import journal
    from tableside.daemon.config import ConfigError

    try:
        path, table = _journal_path(args)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    from tableside.daemon.journal.mark import legacy_mark_path

    left = journal.RedoLog.beside(path).exists() or legacy_mark_path(path).exists()
    lost = not path.is_file() and left
    if not path.is_file() and not (args.journal_command == "recover" and lost):
        print(f"tableside journal: no journal at {path}", file=sys.stderr)
        return 2
    if args.journal_command == "backup":
        try:
            summary = journal.backup(path, args.output)
        except (journal.JournalError, sqlite3.Error) as exc:
            print(f"tableside journal: {exc}", file=sys.stderr)
            return 2
        print(json.dumps({"path": str(args.output), **summary}))
        return 0
    if args.journal_command == "verify":
        summary, problems = journal.verify_file(path, table=table)
        print(json.dumps({"path": str(path), **summary, "problems": len(problems)}))
        for problem in problems:
            print(f"PROBLEM {problem}")
        print("journal: OK" if not problems else f"journal: {len(problems)} PROBLEM(S)")
        return 0 if not problems else 1
    if args.journal_command == "export":
        out = args.output.open("w", encoding="utf-8") if args.output else sys.stdout
        try:
            for record in journal.export_records(path, args.from_seq, args.to_seq):
                out.write(json.dumps(record, separators=(",", ":")) + "\n")
        finally:
            if args.output:
                out.close()
        return 0
    summary, problems = ({}, []) if lost else journal.verify_file(path, table=table)
    if not problems and not lost:
        print(f"tableside journal: {path} passes its checks; nothing to recover", file=sys.stderr)
        return 1
    table = table or args.table or summary.get("table")
    if not table:
        print("tableside journal: the journal does not say its table: give --config or --table",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        done = journal.recover(path, table, after_seq=args.after_seq)
    except journal.JournalError as exc:
        print(f"tableside journal: {exc}", file=sys.stderr)
        return 2
    print(f"set aside: {done.aside or '(no journal: only its log file)'}")
    if done.never_numbered:
        print(f"new journal: {path} starts at seq 0 (its log says nothing was ever numbered: "
              "a first start cut short)")  # fmt: skip
    else:
        print(f"new journal: {path}, numbering carries on after seq {done.after_seq}")
    print(f"restated: {done.restated} retained topics and device events (the table as it was); "
          "the acceptors stay locked out until betting is opened")  # fmt: skip
    return 0


def _cmd_key(args: argparse.Namespace) -> int:
    from tableside.daemon.config import ConfigError, load_config
    from tableside.wire import proof

    try:
        config = load_config(args.config, use_env=False)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    directory = config.table.state_dir / config.table.id
    path = directory / proof.KEY_FILE
    if not path.exists() and not args.create:
        print(f"tableside key: table {config.table.id} has no key yet at {path}: it is made at "
              "the table's first start (or give --create)", file=sys.stderr)  # fmt: skip
        return 2
    try:
        key = proof.load_or_create_key(directory)
    except (OSError, ValueError) as exc:
        print(f"tableside key: {path}: {exc}", file=sys.stderr)
        return 2
    key_hex = proof.public_key_hex(key)
    print(key_hex)  # for scripts: `tableside floor enroll --key`
    groups = proof.fingerprint(key_hex)  # for a person comparing it with the floor's page
    print(f"table {config.table.id}: {path}\nfingerprint, group by group:", file=sys.stderr)
    for row in range(0, len(groups), 4):
        print("  " + "   ".join(f"{n + 1:>2}: {groups[n]}" for n in range(row, row + 4)),
              file=sys.stderr)  # fmt: skip
    return 0


def _cmd_command(args: argparse.Namespace) -> int:
    import os
    import uuid

    from tableside.errors import Refused
    from tableside.mqtt.client import Client
    from tableside.mqtt.connection import Endpoint, MqttError
    from tableside.wire.payloads import CommandRequest
    from tableside.wire.topics import Topics

    try:
        values = _command_args(args.name, args.args)
        _check_request(args.role, args.name, values)
    except (ValueError, Refused) as exc:  # refused here at once, as the table would refuse it
        print(f"tableside command: {exc}", file=sys.stderr)
        return 2
    where = _table_on_broker(args, "command")
    if where is None:
        return 2
    table, broker, prefix, config = where
    topics = Topics(prefix, table)
    request_id = f"cli-{uuid.uuid4().hex[:12]}"
    request = CommandRequest(command=args.name, device=args.device, args=values,
                             request_id=request_id)  # fmt: skip
    password = args.password or os.environ.get("TABLESIDE_PASSWORD")
    # the table's MQTT version when its config is named (a 3.1.1 broker takes no v5 CONNECT)
    v5 = config is None or config.broker.mqtt_version == "5"
    endpoint = Endpoint(broker, args.username, password, ca_file=args.ca_file, v5=v5)

    async def go() -> int:
        async with Client(endpoint) as client:
            await client.subscribe(topics.command_result)
            await client.publish(topics.command(args.role), request.model_dump_json())
            try:
                async with asyncio.timeout(args.timeout):
                    async for message in client.messages():
                        answer = json.loads(message.payload or b"{}")
                        if answer.get("request_id") == request_id:
                            print(json.dumps(answer))
                            if answer.get("status") == "internal_error":  # not the person's
                                print(f"the table failed: {answer.get('error')}", file=sys.stderr)
                                return 4
                            if not answer.get("ok"):
                                print(f"refused: {answer.get('error')}", file=sys.stderr)
                            return 0 if answer.get("ok") else 1
            except TimeoutError:
                pass
        why = "is its daemon running, and may this user publish there?"
        print(f"tableside command: no answer from table {table} in {args.timeout} s ({why})",
              file=sys.stderr)  # fmt: skip
        return 3

    try:
        return asyncio.run(go())
    except MqttError as exc:
        print(f"tableside command: broker {broker}: {exc}", file=sys.stderr)
        return 3


def _cmd_rules(args: argparse.Namespace) -> int:
    from tableside.rules.report import render, tests_naming

    args.output.write_text(render(tests=tests_naming(args.tests)), encoding="utf-8")
    print(args.output)
    return 0


def _cmd_commands(args: argparse.Namespace) -> int:
    from tableside.rules.commands import BEGIN, END, render_table

    text = args.page.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        print(f"tableside commands: {args.page} has no generated table ({BEGIN} … {END})",
              file=sys.stderr)  # fmt: skip
        return 2
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    args.page.write_text(head + render_table() + tail, encoding="utf-8")
    print(args.page)
    return 0


def _cmd_shuffle_test(args: argparse.Namespace) -> int:
    from tableside.shuffle_lab import shuffle_test

    return shuffle_test(args)


def _cmd_shuffle_decks(args: argparse.Namespace) -> int:
    from tableside.shuffle_lab import shuffle_decks

    return shuffle_decks(args)


def _cmd_floor(args: argparse.Namespace) -> int:
    from tableside.floor.cli import command

    return command(args, _run_async)


_COMMANDS = {
    "command": _cmd_command,
    "key": _cmd_key,
    "floor": _cmd_floor,
    "commands": _cmd_commands,
    "rules": _cmd_rules,
    "journal": _cmd_journal,
    "run": _cmd_run,
    "check-config": _cmd_check,
    "simulate": _cmd_simulate,
    "record": _cmd_record,
    "monitor": _cmd_monitor,
    "demo": _cmd_demo,
    "schemas": _cmd_schemas,
    "verify-install": _cmd_verify_install,
    "shuffle-test": _cmd_shuffle_test,
    "shuffle-decks": _cmd_shuffle_decks,
}


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
        return _COMMANDS[args.command](args)
    finally:
        gc.enable()
