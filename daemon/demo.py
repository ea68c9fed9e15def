"""``tableside demo``: a whole simulated table in one command.

Every device the game has (shuffler; dealing shoe; progressive or bonus wager system with its
ccTalk seat acceptors; Spanish 21's card reader on a simulated USB bus), each simulator on a
real pseudo-terminal (or the simulated USB bus), the daemon reading them as it reads real
devices, the configured broker if one answers (otherwise an embedded loopback-only broker), and
a live monitor printing what a subscriber sees, with faults injected along the way.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import tempfile
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TextIO

import structlog
from pydantic import BaseModel

from tableside.daemon.app import TableDaemon
from tableside.daemon.broker import (
    NoEmbeddedBroker,
    broker_version,
    embedded_broker,
    forget_retained,
    mosquitto_broker,
    mosquitto_program,
)
from tableside.daemon.config import BrokerConfig, Config, DeviceConfig, TableConfig
from tableside.daemon.monitor import Monitor
from tableside.drivers import usb as usb_transport
from tableside.drivers.catalog import read_event
from tableside.drivers.shuffler.events import ShuffleCompleted, ShufflerFault
from tableside.rules.model import Game
from tableside.rules.patterns import dispense_pattern
from tableside.simulators.card_reader import CardReaderSimulator
from tableside.simulators.listen import serve_pty
from tableside.simulators.progressive import progressive_table
from tableside.simulators.registry import build_simulator
from tableside.simulators.shuffler import ShufflerSimulator
from tableside.simulators.usb import SimulatedUsbBackend, SimulatedUsbDevice
from tableside.wire.payloads import DeviceEventPayload
from tableside.wire.topics import Topic, Topics

__all__ = ["DEFAULT_FAULTS", "DEVICES_BY_GAME", "Beside", "DemoTable", "run_demo"]


@dataclass(frozen=True)
class DemoTable:
    """What a service started beside the demo's table needs to know of it."""

    table: str
    broker_url: str
    mqtt_version: Literal["5", "3.1.1"]
    state_dir: Path
    out: TextIO


#: something run beside the demo's table for as long as it runs (the floor, floor/demo.py)
Beside = Callable[[DemoTable], contextlib.AbstractAsyncContextManager[None]]

log = structlog.get_logger("tableside.demo")

#: one of each shuffler fault, early enough to be seen in a short demo
DEFAULT_FAULTS = ("count=51@2", "jam@3", "noise@4", "stop@5", "incomplete@6", "disconnect=4@7")
SHOE_FAULTS = ("jam@2", "short=4@3", "faceup@4", "faceup=2@5", "extra=1@6")
READER_FAULTS = ("blackjack@1", "stall@2", "unplug=1@3", "tamper@4", "malfunction@9")
PROGRESSIVE_FAULTS = ("jam@2", "late_wager@3", "stuck_light@1", "power_cycle=2@1")

#: what each game has on the table (issue: the devices named in the rules)
DEVICES_BY_GAME: dict[Game, tuple[str, ...]] = {
    Game.CARIBBEAN_STUD: ("shuffler", "shoe", "progressive"),
    Game.FOUR_CARD_POKER: ("shuffler", "shoe"),
    Game.LET_IT_RIDE: ("shuffler", "shoe", "progressive"),
    Game.SPANISH_21: ("shuffler", "card_reader"),
}
SEATS = {1: 3, 2: 4, 3: 5}
READER_USB = (0x1209, 0x7AB1, "DEMO0001")


@dataclass
class _Device:
    name: str
    config: dict[str, object]
    serve: Callable[..., Coroutine[object, object, None]] | None  # served on a pty; None: on USB


def _devices(
    game: Game, rounds: int | None, interval: float, faults: tuple[str, ...], with_faults: bool
) -> tuple[list[_Device], ShufflerSimulator, CardReaderSimulator | None]:
    decks = 6 if game is Game.SPANISH_21 else None
    # one deck: the shuffler recognises its cards and shuffles fairly, and the table tests
    # every shuffle (docs/shuffle.md); six decks of 48 are no deck the tests know
    recognises = decks is None
    shuffler = build_simulator(
        "shuffler",
        {"interval": interval, "cards": 48 * decks if decks else 52, "max_cycles": rounds,
         "heartbeat": 0.5, **({"shuffle": "fair"} if recognises else {})},
        faults,
        silent_disconnect=True,  # a pty cannot be unplugged: it goes quiet instead
    )  # fmt: skip
    assert isinstance(shuffler, ShufflerSimulator)
    options = {"recognises_cards": True} if recognises else {}
    devices = [_Device("shuffler", {"driver": "tableside.shuffler", "heartbeat_timeout_s": 1.0,
                                    **options}, shuffler.serve)]  # fmt: skip
    reader: CardReaderSimulator | None = None
    wanted = DEVICES_BY_GAME[game]
    if "shoe" in wanted:
        shoe = build_simulator(
            "shoe",
            {"interval": interval, "plan": dispense_pattern(game, sorted(SEATS)), "heartbeat": 0.5,
             "stack_time": 0.02},
            SHOE_FAULTS if with_faults else (),
            silent_disconnect=True,
        )  # fmt: skip
        devices.append(_Device("shoe", {"driver": "tableside.shoe", "heartbeat_timeout_s": 1.0},
                               shoe.serve))  # fmt: skip
    if "progressive" in wanted:
        controller, bus = progressive_table(
            SEATS, list(PROGRESSIVE_FAULTS) if with_faults else [],
            interval=max(interval, 1.0), heartbeat=0.5, betting_time=0.4,
        )  # fmt: skip
        devices.append(
            _Device(
                "progressive",
                {"driver": "tableside.progressive_controller", "heartbeat_timeout_s": 1.5},
                controller.serve,
            )
        )
        devices.append(_Device("acceptors", {"driver": "tableside.acceptors", "seats": SEATS},
                               bus.serve))  # fmt: skip
    if "card_reader" in wanted:
        built = build_simulator(
            "card_reader",
            {"interval": interval, "heartbeat": 0.5, "read_time": 0.02},
            READER_FAULTS if with_faults else (),
        )
        assert isinstance(built, CardReaderSimulator)
        reader = built
        vid, pid, serial = READER_USB
        devices.append(_Device("card_reader", {"driver": "tableside.card_reader",
                                               "url": f"usb://{vid:04x}:{pid:04x}?serial={serial}",
                                               "heartbeat_timeout_s": 1.5}, None))  # fmt: skip
    return devices, shuffler, reader


async def _broker(
    stack: contextlib.AsyncExitStack,
    url: str,
    embedded: Literal["mosquitto", "amqtt"] | None,
    out: TextIO,
) -> tuple[str, Literal["5", "3.1.1"]]:
    """The broker the demo uses, and the MQTT version to speak to it: the configured one if it
    answers, else one of the demo's own (held open by ``stack``)."""
    version = await broker_version(url)
    if version is not None:
        print(f"-- broker: {url} answers (MQTT {version}); using it", file=out)
        return url, version
    if embedded != "amqtt" and (program := mosquitto_program()) is not None:
        url = await stack.enter_async_context(mosquitto_broker(program))
        print(f"-- broker: none at the configured URL; a Mosquitto of ours on {url}", file=out)
        return url, "5"
    if embedded == "mosquitto":
        raise NoEmbeddedBroker("no mosquitto program here: apt-get install mosquitto")
    url = await stack.enter_async_context(embedded_broker())
    print(f"-- broker: none at the configured URL; embedded broker on {url}", file=out)
    return url, "3.1.1"  # amqtt speaks nothing newer


async def _serve(
    tg: asyncio.TaskGroup, devices: list[_Device]
) -> tuple[list[asyncio.Task[None]], dict[str, str]]:
    """Each pty device's simulator served on a pty of its own: their tasks, and each's path."""
    sims: list[asyncio.Task[None]] = []
    urls: dict[str, str] = {}
    for device in devices:
        if device.serve is None:
            continue
        where: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        sims.append(tg.create_task(serve_pty(device.serve, where.set_result)))
        urls[device.name] = await where
    return sims, urls


def _plug_in(reader: CardReaderSimulator) -> SimulatedUsbDevice:
    """The card reader on the simulated USB bus, its USB faults wired to the device."""
    vid, pid, serial = READER_USB
    usb_device = SimulatedUsbDevice(
        vid, pid, serial, reader.serve, asyncio.get_running_loop(), product_name="SIM card reader"
    )
    reader.usb_hooks.update(
        unplug=lambda v: usb_device.unplug(float(v or 1)),
        stall=lambda v: usb_device.stall(int(v or 1)),
        usb_timeout=lambda v: usb_device.time_out_writes(int(v or 1)),
    )
    usb_transport.set_backend(SimulatedUsbBackend(usb_device))
    return usb_device


def _config(
    game: Game,
    broker_url: str,
    mqtt_version: Literal["5", "3.1.1"],
    state_dir: Path,
    devices: list[_Device],
    urls: dict[str, str],
) -> Config:
    """The demo table's config, as a user's TOML file would give it."""
    decks: Literal[6, 8] | None = 6 if game is Game.SPANISH_21 else None
    return Config(
        table=TableConfig(id=f"demo-{game.value.replace('_', '-')}", game=game, decks=decks,
                          state_dir=state_dir),
        broker=BrokerConfig(url=broker_url, mqtt_version=mqtt_version),
        devices={d.name: DeviceConfig.model_validate({"url": urls.get(d.name, ""), **d.config})
                 for d in devices},
    )  # fmt: skip


def _where(config: Config, urls: dict[str, str]) -> str:
    """Where each device is, for the demo's first line."""
    where = ", ".join(f"{name} on {url}" for name, url in urls.items())
    if "card_reader" in config.devices:
        where += f", card_reader on {config.devices['card_reader'].url} (simulated USB)"
    return where


def _last_outcome(
    shuffler: ShufflerSimulator, rounds: int | None
) -> tuple[asyncio.Event, Callable[[Topic, BaseModel], None]]:
    """Set once the monitor has seen the last shuffle's outcome (at once when the last shuffle
    is cut off and has none), and the monitor's callback that sets it."""
    last = asyncio.Event()
    if rounds is not None and "disconnect" in shuffler.faults_at(rounds):
        last.set()

    def seen(where: Topic, message: BaseModel) -> None:
        if not (isinstance(message, DeviceEventPayload) and where.name == "shuffler"):
            return
        outcome = _OUTCOMES.get(message.event)
        if outcome is None:
            return
        try:
            event = read_event(outcome, message.device, message.data)
        except ValueError:  # not the event's data: no outcome
            return
        if isinstance(event, ShuffleCompleted | ShufflerFault) and event.shuffle_id == rounds:
            last.set()

    return last, seen


#: a shuffle's outcome: the event that ends it
_OUTCOMES: dict[str, type[ShuffleCompleted | ShufflerFault]] = {
    cls.kind: cls for cls in (ShuffleCompleted, ShufflerFault)
}


async def run_demo(
    game: Game,
    *,
    rounds: int | None,
    broker_url: str,
    interval: float,
    faults: tuple[str, ...] = DEFAULT_FAULTS,
    out: TextIO = sys.stdout,
    beside: Beside | None = None,
    embedded: Literal["mosquitto", "amqtt"] | None = None,
) -> int:
    """Run until ``rounds`` shuffles are done (or forever); return the exit status."""
    devices, shuffler, reader = _devices(game, rounds, interval, faults, bool(faults))
    async with contextlib.AsyncExitStack() as stack:
        broker_url, mqtt_version = await _broker(stack, broker_url, embedded, out)
        state_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tableside-demo-")))
        async with asyncio.TaskGroup() as tg:
            sims, urls = await _serve(tg, devices)
            usb_device = _plug_in(reader) if reader is not None else None
            config = _config(game, broker_url, mqtt_version, state_dir, devices, urls)
            table_id = config.table.id
            print(f"-- table {table_id} ({game.value}): {_where(config, urls)}; shuffler "
                  f"faults: {', '.join(faults) or 'none'}; "
                  + (f"{rounds} shuffles" if rounds else "until Ctrl-C"), file=out)  # fmt: skip
            last_outcome, seen = _last_outcome(shuffler, rounds)
            # a persistent session (an earlier demo's ended at the start, then a new one kept
            # across the monitor's reconnects and the broker's restarts): a broker outage does
            # not cost the monitor what the table published meanwhile
            monitor = Monitor(
                broker_url,
                table_id,
                out=out,
                on_message=seen,
                endpoint=config.broker.endpoint(),
                client_id=f"tableside-demo-monitor-{table_id}",
                resume=False,
                journal_hint=str(state_dir / table_id / "journal.sqlite"),
            )
            # the demo's journal is new: what the broker retained for its table id from an
            # earlier demo is another journal's (its seqs would meet this one's on the floor)
            cleared = await forget_retained(
                config.broker.endpoint(), Topics(config.broker.topic_prefix, table_id).everything
            )
            if cleared:
                print(f"-- broker: cleared {cleared} retained messages an earlier demo left for "
                      f"{table_id}", file=out)  # fmt: skip
            watcher = tg.create_task(monitor.run(), name="demo.monitor")
            daemon = TableDaemon(config)
            if beside is not None:
                here = DemoTable(table_id, broker_url, mqtt_version, state_dir, out)
                await stack.enter_async_context(beside(here))
            running = tg.create_task(daemon.run(), name="demo.daemon")
            try:
                await shuffler.done.wait()
                # The last shuffle's outcome (if it has one) must reach the subscriber first.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(5):
                        await last_outcome.wait()
            finally:
                running.cancel()
                await asyncio.wait({running})
                await asyncio.sleep(0.3)  # let the monitor print the offline status
                watcher.cancel()
                for task in sims:
                    task.cancel()
                if usb_device is not None:
                    usb_transport.set_backend(None)
                    await usb_device.aclose()
        print(
            f"-- done: {shuffler.cycles} shuffles, {daemon.runtime.rulings} rulings, "
            f"{len(monitor.seen)} messages seen by the monitor, "
            f"{len(monitor.gaps)} seq gaps"
            + (f", {len(monitor.missed)} missed by the monitor itself" if monitor.missed else ""),
            file=out,
        )
        # only a loss at the table fails the demo; the monitor's own misses are said above
        return 1 if monitor.gaps else 0
