"""Issue 27: the brokers people run, in the tests. Through each broker that installs here
(tests/brokers.py: Mosquitto 2 with MQTT 5 and with 3.1.1, RabbitMQ's MQTT plugin, NATS's
MQTT with JetStream, aedes, amqtt), started once per module on free loopback ports:

* a simulated table with faults on its device, and one whose broker connection is cut twice,
  deliver every seq to an independent subscriber (aiomqtt), each once or marked as a repeat;
* ``tableside demo`` (``run_demo``, ``--broker`` pointed at it, two rounds) delivers every seq
  with no gap;
* what each broker supports, measured with paho and bytes by hand (not our client): MQTT 5,
  QoS 1, retained messages, wills, shared subscriptions, the largest message; each broker
  class in tests/brokers.py is held to what it declares.

A broker that is not installed is skipped with the command that installs it; one that is
installed and does not start is an error with its log. A test that fails prints what the
broker logged meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
import io
import queue
import re
import socket
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.reasoncodes import ReasonCode

from tableside.daemon.config import Config
from tableside.daemon.demo import run_demo
from tableside.daemon.journal import export_records
from tableside.rules.model import Game

from .brokers import BROKERS, Broker, BrokerFailed, MqttVersion, raw_connect
from .hil import (
    Received,
    Subscriber,
    assert_every_seq_once,
    ruling,
    simulated_table,
    simulator,
    stop,
    until,
)
from .ports import free_port

pytestmark = pytest.mark.hil


@dataclass(frozen=True)
class Target:
    """A broker, and the MQTT version the table speaks to it."""

    broker: str
    mqtt_version: MqttVersion

    @property
    def id(self) -> str:
        return f"{self.broker}-{self.mqtt_version}"


def _param(target: Target) -> Any:
    # one pytest-xdist worker per broker (./dev.sh runs --dist loadgroup): one instance of it
    return pytest.param(target, id=target.id, marks=pytest.mark.xdist_group(target.id))


#: each broker with each version it speaks
TARGETS = [
    _param(Target(name, version)) for name, kind in BROKERS.items() for version in kind.versions
]
#: each broker once, with the newest version it speaks (the probes, the demo)
EACH_BROKER = [_param(Target(name, kind.versions[0])) for name, kind in BROKERS.items()]


class Pool:
    """The module's brokers, each started when a test first needs it and stopped after the
    module: RabbitMQ takes seconds to start, the others a fraction of one."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.running: dict[str, Broker] = {}
        self.failed: dict[str, BrokerFailed] = {}

    def get(self, target: Target) -> Broker:
        kind = BROKERS[target.broker]
        reason = kind.missing()
        if reason is not None:
            pytest.skip(reason)
        if target.id in self.failed:
            raise self.failed[target.id]
        broker = self.running.get(target.id)
        if broker is None or broker.proc is None or broker.proc.poll() is not None:
            broker = kind(self.directory / target.id)
            try:
                broker.start()
            except BrokerFailed as exc:
                self.failed[target.id] = exc
                raise
            print(f"-- {broker.name} {broker.version()} on {broker.url}: answered a CONNECT "
                  f"{broker.started_in:.2f} s after its start")  # fmt: skip
            self.running[target.id] = broker
        return broker

    def stop(self) -> None:
        for broker in self.running.values():
            broker.stop()
        self.running.clear()


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    brokers = Pool(tmp_path_factory.mktemp("brokers"))
    try:
        yield brokers
    finally:
        brokers.stop()


@pytest.fixture
def broker(pool: Pool, target: Target) -> Iterator[Broker]:
    """The target's broker, holding nothing retained under ``tableside/`` (an earlier test's
    clean ``offline`` would end the harness's wait for this one's); after the test, what the
    broker logged meanwhile (shown when it failed)."""
    running = pool.get(target)
    clear_retained(running, "tableside/#")
    start = running.log_file.stat().st_size if running.log_file.exists() else 0
    yield running
    lines: list[str] = []
    with contextlib.suppress(OSError), running.log_file.open("rb") as log:
        log.seek(start)
        lines = log.read().decode(errors="replace").splitlines()
    print(f"-- what {running.name} logged during the test (last 80 lines):")
    print("\n".join(lines[-80:]))


def speaking(version: MqttVersion, url: str | None = None) -> Callable[[Config], Config]:
    """The table's config with ``[broker] mqtt_version`` (and its url, when given) set."""

    def adjust(config: Config) -> Config:
        update: dict[str, Any] = {"mqtt_version": version}
        if url is not None:
            update["url"] = url
        return config.model_copy(update={"broker": config.broker.model_copy(update=update)})

    return adjust


def journaled(state_dir: Path, table: str = "hil-1") -> int:
    """The last seq the table journaled."""
    return max(int(r["seq"]) for r in export_records(state_dir / table / "journal.sqlite"))


def clean_offline(m: Received) -> bool:
    """The table's own last word on a clean stop, live (not a retained one from before)."""
    return (
        m.kind == "status"
        and m.payload["status"] == "offline"
        and not m.payload["will"]
        and not m.retained
    )


def shuffled(shuffle_id: int) -> Callable[[Received], bool]:
    return lambda m: (
        m.kind == "event"
        and m.payload["event"] in ("shuffle_complete", "fault")
        and m.payload["data"].get("shuffle_id") == shuffle_id
    )


# -- (a) a simulated table through each broker ------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
async def test_a_table_with_faults_delivers_every_seq(
    target: Target, broker: Broker, tmp_path: Path
) -> None:
    """Each shuffler fault (counts, jam, stop, incomplete, line noise, a dropped device link)
    through the broker: every journaled seq reaches the subscriber once, in order."""
    sim = simulator("count=51@1", "jam@2", "stop@3", "incomplete@4", "noise=80@5", "count=53@6",
                    "disconnect=1@7")  # fmt: skip
    adjust = speaking(target.mqtt_version)
    async with simulated_table(broker.url, tmp_path, sim, adjust=adjust) as table:
        sub = table.subscriber
        await sub.wait_for(ruling(), count=5, within=60)
        await sub.wait_for(shuffled(9), within=60)
        connections = table.daemon.publisher.connections
    last = journaled(tmp_path)
    counts = assert_every_seq_once(sub.messages, 0, last)
    print(f"-- {target.id}: {counts}")
    assert sub.matching(clean_offline), "the table's clean offline never came"
    assert connections == 1, f"the broker's connection to the table dropped {connections - 1}x"
    assert_no_answer_unasked(sub)


def assert_no_answer_unasked(sub: Subscriber) -> None:
    """Nobody sent the table a request: it published no command result (a broker that sends
    it messages on topics it never subscribed to must not make it answer them)."""
    answers = [m.payload.get("error") for m in sub.matching(lambda m: m.kind == "command_result")]
    assert not answers, f"{len(answers)} answers to requests nobody sent, first: {answers[0]!r}"


class LinkCutter:
    """A TCP relay from a free loopback port to the broker's; ``cut`` ends every connection
    through it at once, both sides, with no DISCONNECT (as a pulled cable ends them)."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.port = free_port()
        self.url = f"mqtt://127.0.0.1:{self.port}"
        self.writers: set[asyncio.StreamWriter] = set()
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> LinkCutter:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cut()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            writer.transport.abort()
            return
        self.writers |= {writer, up_writer}

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            sink.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def cut(self) -> None:
        for writer in self.writers:
            writer.transport.abort()
        self.writers.clear()


@pytest.mark.parametrize("target", TARGETS)
async def test_a_table_whose_broker_link_is_cut_loses_nothing(
    target: Target, broker: Broker, tmp_path: Path
) -> None:
    """The table's connection to the broker cut twice mid-run (the subscriber's is not): what
    was in flight goes again marked ``redelivered``, the rest waits in the journal, and the
    subscriber has every seq."""
    async with LinkCutter(broker.port) as cutter:
        adjust = speaking(target.mqtt_version, cutter.url)
        async with simulated_table(broker.url, tmp_path, simulator(), adjust=adjust) as table:
            sub, publisher = table.subscriber, table.daemon.publisher

            async def cut_after(shuffle_id: int) -> None:
                await sub.wait_for(shuffled(shuffle_id), within=60)
                before = publisher.connections
                cutter.cut()
                await until(lambda: publisher.connections > before, within=30)

            await cut_after(2)
            await cut_after(4)
            await sub.wait_for(shuffled(7), within=60)
    last = journaled(tmp_path)
    counts = assert_every_seq_once(sub.messages, 0, last)
    print(f"-- {target.id}: {counts}, connections {publisher.connections}")
    assert sub.matching(clean_offline), "the table's clean offline never came"
    wills = sub.matching(lambda m: m.kind == "status" and bool(m.payload.get("will")))
    if BROKERS[target.broker].wills:
        assert wills, "no will after a cut connection"
    assert_no_answer_unasked(sub)


# -- (b) the demo through each broker ----------------------------------------------------------


@pytest.mark.parametrize("target", EACH_BROKER)
async def test_the_demo_delivers_every_seq(target: Target, broker: Broker) -> None:
    """``tableside demo --broker <it> --rounds 2``: the demo picks the broker (it answers) and
    exits 0 with no gap, and an independent subscriber has every seq once."""
    table = "demo-caribbean-stud"
    sub = Subscriber(broker.url, f"tableside/{table}/#")
    watching = asyncio.create_task(sub.run(), name="subscriber")
    out = io.StringIO()
    try:
        await asyncio.wait_for(sub.connected.wait(), 10)
        async with asyncio.timeout(90):
            status = await run_demo(
                Game.CARIBBEAN_STUD, rounds=2, broker_url=broker.url, interval=0.3, out=out
            )
        # the table's last word (its clean offline) on its way to this subscriber too
        await sub.wait_for(clean_offline, within=10)
    finally:
        await stop(watching)
        print(out.getvalue())
    printed = out.getvalue()
    assert f"-- broker: {broker.url} answers (MQTT {target.mqtt_version}); using it" in printed
    assert status == 0, "the demo's monitor saw a gap"
    assert re.search(r"^-- done: .*, 0 seq gaps", printed, re.M), printed[-2000:]
    (offline,) = sub.matching(clean_offline)
    counts = assert_every_seq_once(sub.messages, 0, offline.payload["seq"])
    print(f"-- {target.id}: {counts}")


# -- (c) what each broker supports, measured with paho and bytes by hand ------------------------


class Probe:
    """A paho client, connected, its messages in a queue (its network loop on a thread)."""

    def __init__(self, broker: Broker, *, v5: bool = False, client_id: str = "") -> None:
        protocol = paho.MQTTv5 if v5 else paho.MQTTv311
        self.client = paho.Client(CallbackAPIVersion.VERSION2, client_id=client_id,
                                  protocol=protocol)  # fmt: skip
        self.messages: queue.Queue[paho.MQTTMessage] = queue.Queue()
        self.acks: queue.Queue[tuple[int, list[ReasonCode]]] = queue.Queue()
        self.connack: queue.Queue[tuple[ReasonCode, Any]] = queue.Queue()
        self.client.on_connect = lambda c, u, f, rc, props: self.connack.put((rc, props))
        # a broker that closes the connection instead of answering (RabbitMQ 3.10 to MQTT 5)
        self.client.on_disconnect = lambda c, u, f, rc, props: self.connack.put(
            (rc, "the broker closed the connection before its CONNACK")
        )
        self.client.on_message = lambda c, u, m: self.messages.put(m)
        self.client.on_subscribe = lambda c, u, mid, rcs, props: self.acks.put((mid, rcs))
        self.client.connect("127.0.0.1", broker.port, keepalive=30)
        self.client.loop_start()
        #: the CONNACK's reason code and (MQTT 5) its properties
        self.reason, self.properties = self.connack.get(timeout=10)

    def subscribe(self, topic: str, qos: int = 1) -> list[ReasonCode]:
        _, mid = self.client.subscribe(topic, qos)
        while True:
            got, codes = self.acks.get(timeout=10)
            if got == mid:
                return codes

    def publish(self, topic: str, payload: bytes, *, retain: bool = False, qos: int = 1) -> bool:
        """True once the broker acknowledged it (PUBACK) within 10 s."""
        info = self.client.publish(topic, payload, qos=qos, retain=retain)
        info.wait_for_publish(timeout=10)
        return info.is_published()

    def received(self, within: float = 5.0) -> paho.MQTTMessage | None:
        try:
            return self.messages.get(timeout=within)
        except queue.Empty:
            return None

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


@contextlib.contextmanager
def probe(broker: Broker, **kwargs: Any) -> Iterator[Probe]:
    client = Probe(broker, **kwargs)
    try:
        yield client
    finally:
        client.close()


def clear_retained(broker: Broker, topics: str) -> int:
    """Replace each message the broker retains under ``topics`` with an empty retained one
    (which clears it); how many there were."""
    with probe(broker) as client:
        client.subscribe(topics)
        stale: set[str] = set()
        while (message := client.received(within=0.3)) is not None:
            if message.retain and message.payload:
                stale.add(message.topic)
        for topic in stale:
            client.publish(topic, b"", retain=True)
    return len(stale)


def speaks_v5(broker: Broker) -> tuple[bool, str]:
    """Whether the broker accepts an MQTT 5 CONNECT, and what its CONNACK said."""
    try:
        with probe(broker, v5=True) as client:
            if client.reason.is_failure:
                return False, f"{client.reason}: {client.properties}"
            return True, f"CONNACK {client.reason}, properties {client.properties}"
    except (OSError, queue.Empty) as exc:
        return False, f"no CONNACK: {exc!r}"


@pytest.mark.parametrize("target", EACH_BROKER)
def test_what_it_speaks(target: Target, broker: Broker) -> None:
    """MQTT 5 where the broker class says so (with what its CONNACK declares), 3.1.1 always."""
    v5, said = speaks_v5(broker)
    print(f"CAPABILITY {broker.name} {broker.version()}: MQTT 5 {'yes' if v5 else 'no'} ({said})")
    assert v5 == ("5" in type(broker).versions), said
    with probe(broker) as client:
        assert not client.reason.is_failure


@pytest.mark.parametrize("target", EACH_BROKER)
def test_qos_1(target: Target, broker: Broker) -> None:
    """A QoS 1 subscription is granted QoS 1, a QoS 1 publish is acknowledged, and the message
    arrives with QoS 1: what the table and the floor rely on."""
    with probe(broker) as sub, probe(broker) as pub:
        (granted,) = sub.subscribe("probe/qos1", qos=1)
        assert pub.publish("probe/qos1", b"one")
        message = sub.received()
    print(f"CAPABILITY {broker.name}: QoS 1 granted {granted}, delivered "
          f"{None if message is None else message.qos}")  # fmt: skip
    assert granted.value == 1
    assert message is not None and message.qos == 1 and message.payload == b"one"


@pytest.mark.parametrize("target", EACH_BROKER)
def test_retained_messages(target: Target, broker: Broker) -> None:
    """A retained message goes to a later subscriber, flagged retained; an empty one clears it."""
    with probe(broker) as pub:
        assert pub.publish("probe/retained", b"kept", retain=True)
        with probe(broker) as late:
            late.subscribe("probe/retained")
            message = late.received(within=3)
        assert pub.publish("probe/retained", b"", retain=True)
    with probe(broker) as later:
        later.subscribe("probe/retained")
        after_clear = later.received(within=1)
    kept = message is not None and message.retain and message.payload == b"kept"
    print(f"CAPABILITY {broker.name}: retained {'yes' if kept else 'no'} "
          f"({message and (message.payload, message.retain)}); "
          f"cleared by an empty one: {after_clear is None}")  # fmt: skip
    assert kept == type(broker).retains
    if kept:
        assert after_clear is None, "an empty retained message did not clear it"


@pytest.mark.parametrize("target", EACH_BROKER)
def test_wills(target: Target, broker: Broker) -> None:
    """A client that vanishes (its socket reset, no DISCONNECT) has its will sent."""
    with probe(broker) as sub:
        sub.subscribe("probe/will")
        sock = raw_connect(broker.port, "probe-will", will=("probe/will", b"gone", 1, False))
        # SO_LINGER 0: the close resets the connection, as a crash or a pulled cable ends it
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
        message = sub.received(within=10)
    sent = message is not None and message.payload == b"gone"
    print(f"CAPABILITY {broker.name}: will {'yes' if sent else 'no'}")
    assert sent == type(broker).wills


@pytest.mark.parametrize("target", EACH_BROKER)
def test_shared_subscriptions(target: Target, broker: Broker) -> None:
    """``$share/<group>/<filter>``: each message to one member of the group (MQTT 5 4.8.2; many
    brokers take it from 3.1.1 clients too). Two members, twenty messages."""
    sent = [f"m{i}".encode() for i in range(20)]
    got: list[bytes] = []
    with probe(broker) as a, probe(broker) as b, probe(broker) as pub:
        codes = [a.subscribe("$share/g/probe/shared")[0], b.subscribe("$share/g/probe/shared")[0]]
        for payload in sent:
            pub.publish("probe/shared", payload)
        deadline = time.monotonic() + 3
        for member in (a, b):
            while (m := member.received(within=max(deadline - time.monotonic(), 0.05))) is not None:
                got.append(bytes(m.payload))
    shared = sorted(got) == sorted(sent)
    subacks = [c.value for c in codes]
    print(f"CAPABILITY {broker.name}: shared subscriptions {'yes' if shared else 'no'} (SUBACK "
          f"{subacks}, {len(got)} of {len(sent)} delivered to the group)")  # fmt: skip
    assert shared == type(broker).shared_subscriptions


#: payload sizes tried, each on a fresh publisher
PROBE_SIZES = (64 * 1024, 512 * 1024, 2 * 1024 * 1024, 16 * 1024 * 1024)


@pytest.mark.parametrize("target", EACH_BROKER)
def test_the_largest_message(target: Target, broker: Broker) -> None:
    """The largest of PROBE_SIZES a subscriber receives; what the broker does with one larger
    (said in the output)."""
    largest = 0
    said: list[str] = []
    with probe(broker) as sub:
        sub.subscribe("probe/size")
        for size in PROBE_SIZES:
            with probe(broker) as pub:
                acked = pub.publish("probe/size", b"x" * size)
                message = sub.received(within=10)
                connected = pub.client.is_connected()
            delivered = message is not None and len(message.payload) == size
            said.append(f"{size}: PUBACK {acked}, delivered {delivered}, "
                        f"publisher still connected {connected}")  # fmt: skip
            if not delivered:
                break
            largest = size
    v5, connack = speaks_v5(broker)
    print(f"CAPABILITY {broker.name}: largest payload delivered {largest} ({'; '.join(said)})"
          + (f"; MQTT 5 {connack}" if v5 else ""))  # fmt: skip
    assert largest == type(broker).largest_payload


def test_each_broker_is_known() -> None:
    """The matrix has every broker of tests/brokers.py, and each declares its versions."""
    assert {t.values[0].broker for t in EACH_BROKER} == set(BROKERS)
    assert all(kind.versions for kind in BROKERS.values())
