"""Hardware-in-the-loop harness: the real daemon, a simulator over a real pty or socket, and a
plain MQTT subscriber on the test's own Mosquitto."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiomqtt

from tableside.daemon.app import TableDaemon
from tableside.daemon.config import BrokerConfig, Config, DeviceConfig, TableConfig
from tableside.drivers.base import DriverOptions
from tableside.drivers.registry import get_driver
from tableside.drivers.shuffler.driver import ShufflerOptions
from tableside.rules.model import Game
from tableside.simulators.base import FramedSimulator
from tableside.simulators.faults import parse_fault
from tableside.simulators.listen import serve_pty, serve_socket
from tableside.simulators.shuffler import FAULTS, ShufflerSimulator

Predicate = Callable[["Received"], bool]


@dataclass(frozen=True)
class Received:
    topic: str
    payload: dict[str, Any]
    retained: bool
    #: the MQTT DUP flag: the broker sent this again after its own delivery went unacknowledged
    dup: bool = False
    #: when the subscriber had it (time.monotonic())
    at: float = field(default_factory=time.monotonic)

    @property
    def kind(self) -> str:
        return self.topic.rsplit("/", 1)[-1]


@dataclass
class Subscriber:
    """A plain MQTT subscriber (no tableside code) that records everything under a prefix."""

    url: str
    topic: str
    #: a persistent session (clean_session false): the broker keeps what comes while we are away
    client_id: str | None = None
    messages: list[Received] = field(default_factory=list)
    connected: asyncio.Event = field(default_factory=asyncio.Event)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        parts = urlsplit(self.url)
        while True:
            try:
                client = aiomqtt.Client(
                    parts.hostname or "",
                    parts.port or 1883,
                    identifier=self.client_id,
                    clean_session=self.client_id is None,
                )
                # before connecting: a persistent session's messages come straight after CONNACK
                dups = record_dup_flags(client)
                async with client:
                    await client.subscribe(self.topic, qos=1)
                    self.connected.set()
                    async for m in client.messages:
                        dup = dups.popleft()
                        if "/command/" in str(m.topic):
                            continue  # requests to the table, not its own messages
                        assert isinstance(m.payload, bytes)
                        self.messages.append(
                            Received(str(m.topic), json.loads(m.payload), m.retain, dup)
                        )
                        self._changed.set()
            except aiomqtt.MqttError:
                self.connected.clear()
                await asyncio.sleep(0.1)

    def matching(self, predicate: Predicate) -> list[Received]:
        return [m for m in self.messages if predicate(m)]

    async def wait_for(
        self, predicate: Predicate, count: int = 1, within: float = 20
    ) -> list[Received]:
        try:
            async with asyncio.timeout(within):
                while len(found := self.matching(predicate)) < count:
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            seen = "\n".join(f"  {m.topic} {m.payload}" for m in self.messages[-30:])
            raise AssertionError(
                f"waited {within} s for {count} matching; last seen:\n{seen}"
            ) from None
        return found

    def fresh(self) -> list[Received]:
        """Live messages with a new seq (not retained replays, republished state, the will, or
        records sent again after a lost acknowledgement, which say ``redelivered``)."""
        return [m for m in self.messages if live(m) and not m.payload.get("redelivered")]


def record_dup_flags(client: aiomqtt.Client) -> collections.deque[bool]:
    """aiomqtt leaves out the DUP flag; paho has it. One flag per message, in arrival order."""
    paho = client._client
    deliver = paho.on_message
    flags: collections.deque[bool] = collections.deque()

    def on_message(c: Any, userdata: Any, message: Any) -> None:
        flags.append(bool(message.dup))
        assert deliver is not None
        deliver(c, userdata, message)

    paho.on_message = on_message
    return flags


def live(m: Received) -> bool:
    """Not a repeat by design: retained replays, republished state, the will and the auditor's
    replays from the journal repeat a seq."""
    repeat = m.payload.get("republished") or m.payload.get("will") or m.payload.get("replayed")
    return not m.retained and not repeat


async def until(condition: Callable[[], bool], within: float = 30) -> None:
    """Until ``condition()`` holds; TimeoutError after ``within`` seconds."""
    async with asyncio.timeout(within):
        while not condition():
            await asyncio.sleep(0.02)


def event(name: str) -> Predicate:
    return lambda m: m.kind == "event" and m.payload["event"] == name


def ruling(clause: str | None = None) -> Predicate:
    return lambda m: m.kind == "ruling" and (clause is None or m.payload["clause"] == clause)


def state(connection: str) -> Predicate:
    return lambda m: m.kind == "state" and m.payload["connection"] == connection


def device_state(device: str, connection: str) -> Predicate:
    """``device``'s retained state, saying ``connection``."""
    return lambda m: (
        m.kind == "state"
        and m.payload["device"] == device
        and (m.payload["connection"] == connection)
    )


@dataclass
class SimulatedTable:
    sim: FramedSimulator
    daemon: TableDaemon
    subscriber: Subscriber
    device_url: str
    tasks: dict[str, asyncio.Task[Any]]


def _options(device_class: str, *, counts_cards: bool) -> DriverOptions:
    """The built-in driver's options, as a config without its own keys gives them; the
    shuffler's ``counts_cards`` as the test asks."""
    if device_class == "shuffler":
        return ShufflerOptions(counts_cards=counts_cards)
    return get_driver(f"tableside.{device_class}").Options()


def make_config(
    broker_url: str,
    device_url: str | Mapping[str, str],
    state_dir: Path,
    game: Game = Game.CARIBBEAN_STUD,
    *,
    table_id: str = "hil-1",
    publish_cards: bool = False,
    heartbeat_timeout: float = 1.0,
    counts_cards: bool = True,
) -> Config:
    return Config(
        table=TableConfig(
            id=table_id,
            game=game,
            decks=6 if game is Game.SPANISH_21 else None,
            state_dir=state_dir,
            publish_card_identities=publish_cards,
        ),
        broker=BrokerConfig(url=broker_url, keepalive_s=5),
        devices={
            # In these tests a device is named after its class, and uses the built-in driver.
            name: DeviceConfig(
                driver=f"tableside.{name}",
                url=url,
                heartbeat_timeout_s=heartbeat_timeout,
                ack_timeout_s=0.2,
                options=_options(name, counts_cards=counts_cards),
            )
            for name, url in (
                {"shuffler": device_url} if isinstance(device_url, str) else device_url
            ).items()
        },
    )


async def start_simulator(
    sim: FramedSimulator, mode: str, port: int = 0
) -> tuple[str, asyncio.Task[None]]:
    where: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    if mode == "pty":
        task = asyncio.create_task(serve_pty(sim.serve, where.set_result), name="sim.pty")
    else:
        task = asyncio.create_task(
            serve_socket(f"socket://127.0.0.1:{port}", sim.serve, where.set_result),
            name="sim.socket",
        )
    return await asyncio.wait_for(where, 5), task


def simulator(*faults: str, interval: float | None = 0.15, **kwargs: Any) -> ShufflerSimulator:
    return ShufflerSimulator(
        interval=interval,
        faults=[parse_fault(f, FAULTS) for f in faults],
        shuffle_time=0.05,
        fault_clear_time=0.05,
        heartbeat=0.2,
        **kwargs,
    )


async def stop(*tasks: asyncio.Task[Any]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.wait(tasks)
    for task in tasks:
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]


async def _until_connected(
    subscriber: Subscriber, devices: Iterable[str], daemon: asyncio.Task[Any]
) -> None:
    """Every device's state saying it is connected, or the daemon's end (a test of a daemon
    that stops at start awaits it)."""

    async def every_device() -> None:
        for name in devices:
            await subscriber.wait_for(device_state(name, "connected"))

    waiting = asyncio.create_task(every_device())
    await asyncio.wait([waiting, daemon], return_when=asyncio.FIRST_COMPLETED)
    if not waiting.done():
        await stop(waiting)
    elif waiting.exception() is not None:
        raise waiting.exception()  # type: ignore[misc]


@contextlib.asynccontextmanager
async def simulated_table(
    broker_url: str,
    state_dir: Path,
    sim: FramedSimulator,
    *,
    others: Mapping[str, FramedSimulator] | None = None,
    mode: str = "socket",
    game: Game = Game.CARIBBEAN_STUD,
    publish_cards: bool = False,
    heartbeat_timeout: float = 1.0,
    counts_cards: bool = True,
    adjust: Callable[[Config], Config] | None = None,
    connected: bool = True,
) -> AsyncIterator[SimulatedTable]:
    """The daemon on ``sim`` (and ``others``) and a subscriber to everything it publishes,
    yielded, unless ``connected`` is false (a
    test of a device that never answers), once every device has answered: a framed device
    counts as connected only then, and a command to it before that is refused."""
    sims = {sim.protocol.name: sim, **(others or {})}
    subscriber = Subscriber(broker_url, "tableside/#")
    sub_task = asyncio.create_task(subscriber.run(), name="subscriber")
    await asyncio.wait_for(subscriber.connected.wait(), 10)
    urls: dict[str, str] = {}
    tasks: dict[str, asyncio.Task[Any]] = {"subscriber": sub_task}
    for name, each in sims.items():
        each.silent_disconnect = mode == "pty"
        urls[name], tasks["sim" if each is sim else f"sim.{name}"] = await start_simulator(
            each, mode
        )
    device_url = urls[sim.protocol.name]
    config = make_config(
        broker_url,
        urls,
        state_dir,
        game,
        publish_cards=publish_cards,
        heartbeat_timeout=heartbeat_timeout,
        counts_cards=counts_cards,
    )
    daemon = TableDaemon(adjust(config) if adjust else config)
    tasks["daemon"] = asyncio.create_task(daemon.run(), name="daemon")
    try:
        if connected:
            await _until_connected(subscriber, sims, tasks["daemon"])
        yield SimulatedTable(sim, daemon, subscriber, device_url, tasks)
    finally:
        await stop(*[t for name, t in tasks.items() if name != "subscriber" and not t.done()])
        # The daemon's last word, its "offline" status, on its way to the subscriber (a test
        # may check it came last); a daemon that could not say it (no broker) is not waited on
        # for long.
        with contextlib.suppress(AssertionError):
            await subscriber.wait_for(
                lambda m: m.kind == "status" and m.payload["status"] == "offline"
                and not m.payload["will"], within=5,
            )  # fmt: skip
        await stop(tasks["subscriber"])


def assert_seq_sound(messages: list[Received]) -> None:
    """Fresh messages: each seq once, in increasing order."""
    seqs = [m.payload["seq"] for m in messages]
    assert len(seqs) == len(set(seqs)), f"repeated seq: {seqs}"
    assert seqs == sorted(seqs), f"out of order: {seqs}"


def assert_every_seq_once(
    messages: list[Received], first: int, last: int, *, may_miss: Collection[int] = ()
) -> dict[str, int]:
    """Every seq from ``first`` to ``last`` arrived, but those in ``may_miss``; one that came
    more than once came marked every time but once — ``redelivered`` (the table sent it again)
    or the MQTT DUP flag (the broker did); the unmarked ones came in increasing order.
    Retained replays, republished state and the will are left out (they repeat a seq by
    design)."""
    live_ones = [m for m in messages if live(m)]
    seen = collections.Counter(m.payload["seq"] for m in live_ones)
    missing = [s for s in range(first, last + 1) if s not in seen and s not in may_miss]
    unmarked = [m.payload["seq"] for m in live_ones
                if not m.payload.get("redelivered") and not m.dup]  # fmt: skip
    twice = sorted(s for s, n in collections.Counter(unmarked).items() if n > 1)
    assert not missing, f"{len(missing)} seq lost, first {missing[:10]}"
    assert not twice, f"unmarked duplicates: {twice[:10]}"
    assert unmarked == sorted(unmarked), "unmarked messages out of order"
    return {
        "messages": len(live_ones),
        "redelivered": sum(bool(m.payload.get("redelivered")) for m in live_ones),
        "broker_dup": sum(m.dup for m in live_ones),
        "seqs": len(seen),
        "missed_as_allowed": sum(1 for s in may_miss if first <= s <= last and s not in seen),
    }


async def ask(
    table: SimulatedTable, port: int, role: str, command: str, rid: str, *,
    device: str = "table", **args: Any,
) -> dict[str, Any]:  # fmt: skip
    """Send a request to the simulated table as ``role`` and wait for its command result."""
    body = {"command": command, "device": device, "args": args, "request_id": rid}
    async with aiomqtt.Client("127.0.0.1", port) as client:
        await client.publish(f"tableside/hil-1/command/{role}", json.dumps(body), qos=1)
    found = await table.subscriber.wait_for(
        lambda m: m.kind == "command_result" and m.payload["request_id"] == rid
    )
    return dict(found[0].payload)
