"""The table's MQTT client against a broker of the tests' own that misbehaves on purpose
(tests/hostile.py): every limit a CONNACK can set, every refusal a PUBACK or SUBACK can say, a
broker that accepts and cuts, one that speaks before its CONNACK. The real daemon, a simulated
shuffler feeding it, and what the broker took checked against what the journal holds: nothing
refused is ever taken as delivered, nothing the broker cannot take wedges the table."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tableside.daemon.app import TableDaemon
from tableside.daemon.journal import Record

from .hil import make_config, simulator, start_simulator, stop, until
from .hostile import Got, HostileBroker, Policy, Session, connack, publish

pytestmark = pytest.mark.asyncio


@contextlib.asynccontextmanager
async def table_on(broker: HostileBroker, state: Path) -> AsyncIterator[TableDaemon]:
    """The daemon with a simulated shuffler (an event every 50 ms), on ``broker``."""
    sim_url, sim_task = await start_simulator(simulator(interval=0.05), "socket")
    daemon = TableDaemon(make_config(broker.url, sim_url, state))
    task = asyncio.create_task(daemon.run(), name="daemon")
    try:
        yield daemon
        assert not task.done(), f"the daemon ended: {task.exception()}"
    finally:
        await stop(task, sim_task)


async def journaled(daemon: TableDaemon) -> list[Record]:
    return await daemon.journal.read_from(0, daemon.journal.next_seq)


async def every_seq_taken(broker: HostileBroker, daemon: TableDaemon, at_least: int) -> None:
    """The broker took every seq the journal has, once there are ``at_least`` of them."""
    await until(lambda: daemon.journal.next_seq > at_least, 30)
    last = daemon.journal.next_seq - 1
    await until(lambda: set(range(last + 1)) <= broker.seqs_taken(), 30)


async def test_a_refused_publish_stays_unacknowledged_and_goes_again(tmp_path: Path) -> None:
    """Each odd seq is refused (0x87, as Mosquitto answers a v5 publish its ACL denies) the
    first time: it is never marked acknowledged while refused, goes again, and the status says
    which record the broker refused and why."""
    refused_once: set[int] = set()
    marks: list[tuple[int, set[int]]] = []

    def answer(session: Session, got: Got) -> int:
        seq = got.seq
        if seq is not None and seq % 2 and seq not in refused_once and "/status" not in got.topic:
            refused_once.add(seq)
            return 0x87
        return 0

    async with HostileBroker(Policy(publish=answer)) as broker, table_on(broker, tmp_path) as d:
        task = asyncio.create_task(_watch_marks(d, broker, marks))
        try:
            await every_seq_taken(broker, d, 40)
        finally:
            task.cancel()
        await until(lambda: d.journal.acked >= 40)
    for acked, taken in marks:  # the journal's mark never passed a seq the broker did not have
        assert set(range(1, acked + 1)) <= taken, f"acked {acked} with {sorted(taken)[:20]}…"
    statuses = [g.json for g in broker.took if g.topic.endswith("/status")]
    undelivered = [s["undelivered"] for s in statuses if s.get("undelivered")]
    assert undelivered, "the status never said a record was refused"
    first = undelivered[0]
    assert isinstance(first, dict) and first["reason"] == "0x87 (not authorized)"
    assert first["seq"] in refused_once and "/hil-1/" in first["topic"]
    assert d.publisher.refusals >= len(refused_once)


async def _watch_marks(
    daemon: TableDaemon, broker: HostileBroker, marks: list[tuple[int, set[int]]]
) -> None:
    while True:
        marks.append((daemon.journal.acked, broker.seqs_taken()))
        await asyncio.sleep(0.01)


async def test_receive_maximum_zero_is_the_brokers_error_not_the_tables(tmp_path: Path) -> None:
    """3.2.2.3.3: a Receive Maximum of 0 is a protocol error. The table says so with a
    DISCONNECT (0x82), backs off and tries again; it does not die (it did: ValueError, exit 1,
    a crash loop under Restart=always)."""
    policy = Policy(connack=lambda s: connack(receive_maximum=0 if s.index < 2 else 10))
    async with HostileBroker(policy) as broker, table_on(broker, tmp_path) as daemon:
        await every_seq_taken(broker, daemon, 20)
    assert [s.disconnect for s in broker.sessions[:2]] == [0x82, 0x82]
    assert not broker.sessions[0].took


async def test_every_qos1_publish_shares_the_brokers_receive_maximum(tmp_path: Path) -> None:
    """Receive Maximum 1, each PUBACK late: the records, an auditor's replay of 60 of them, and
    its command result never have more than one publish unacknowledged (they had 42)."""
    replay = {"command": "replay", "device": "table", "request_id": "r1",
              "args": {"from_seq": 0, "to_seq": 59}}  # fmt: skip
    policy = Policy(
        connack=lambda s: connack(receive_maximum=1), ack_delay_s=0.002,
        requests=[("tableside/hil-1/command/auditor", json.dumps(replay).encode())],
        cut_after_s=lambda s: 4.0 if s.index == 0 else None,
    )  # fmt: skip
    async with HostileBroker(policy) as broker:
        policy.requests = []  # the replay once it has 60 records: sent on the second connection
        async with table_on(broker, tmp_path) as daemon:
            await until(lambda: daemon.journal.next_seq > 60, 30)
            policy.requests = [("tableside/hil-1/command/auditor", json.dumps(replay).encode())]
            await until(lambda: len(broker.sessions) >= 2, 30)
            await until(lambda: len([g for g in broker.took if "/replay" in g.topic]) >= 60, 60)
            await every_seq_taken(broker, daemon, 80)
    assert max(s.most_in_flight for s in broker.sessions) == 1
    assert len(broker.sessions) == 2 and broker.sessions[0].disconnect is None
    assert not [s.reused_ids for s in broker.sessions if s.reused_ids]


async def test_a_broker_that_accepts_then_cuts_is_not_hammered(tmp_path: Path) -> None:
    """Each connection cut 50 ms after its CONNACK: the waits keep growing (a connection that
    dies young does not reset them), and "online" is journaled once, not once a connection
    (it was: ~6 connections and 6 new retained "online" records a second)."""
    policy = Policy(cut_after_s=lambda s: 0.05)
    async with HostileBroker(policy) as broker, table_on(broker, tmp_path) as daemon:
        await asyncio.sleep(6)
        sessions = len(broker.sessions)
        records = await journaled(daemon)
    assert 3 <= sessions <= 10, f"{sessions} connections in 6 s"  # 6 s < STABLE_S: all flaps
    online = [r for r in records if r.topic.endswith("/status") and b'"online"' in r.payload]
    assert len(online) == 1


async def test_a_request_before_the_connack_is_a_protocol_error_not_a_command(
    tmp_path: Path,
) -> None:
    """3.2.0-1: the broker's first packet is its CONNACK. A PUBLISH before it (a request to
    open the table) is refused with a DISCONNECT 0x82 and never carried out."""
    request = json.dumps({"command": "open_table", "device": "table", "request_id": "early"})
    early = publish("tableside/hil-1/command/floorperson", request.encode(), 7)
    policy = Policy(before_connack=lambda s: early if s.index == 0 else b"")
    async with HostileBroker(policy) as broker, table_on(broker, tmp_path) as daemon:
        await every_seq_taken(broker, daemon, 10)
        records = await journaled(daemon)
    assert broker.sessions[0].disconnect == 0x82
    assert not [r for r in records if r.topic.endswith("/command_result")]


async def test_a_refused_command_subscription_still_sends_everything(tmp_path: Path) -> None:
    """An ACL without ``command/+`` for this login: the SUBACK refuses it (0x87). The table goes
    on sending (it sent nothing: every connection ended at the SUBACK) and takes no requests."""
    policy = Policy(subscribe=lambda s, f: 0x87)
    async with HostileBroker(policy) as broker, table_on(broker, tmp_path) as daemon:
        await every_seq_taken(broker, daemon, 30)
        assert not daemon.publisher.commands_subscribed
    assert len(broker.sessions) == 1


async def test_a_refused_republish_of_retained_state_stops_nothing(tmp_path: Path) -> None:
    """After a reconnect the table sends its retained state again; a broker refusing those
    (0x87) does not end the connection (it did, every time: nothing more was sent)."""

    def answer(session: Session, got: Got) -> int:
        return 0x87 if b'"republished":true' in got.payload else 0

    policy = Policy(publish=answer, cut_after_s=lambda s: 1.0 if s.index == 0 else None)
    async with HostileBroker(policy) as broker, table_on(broker, tmp_path) as daemon:
        await until(lambda: len(broker.sessions) >= 2, 30)
        await every_seq_taken(broker, daemon, daemon.journal.next_seq + 20)
    assert broker.sessions[1].refused, "nothing was republished"
    assert len(broker.sessions) == 2


async def test_a_record_larger_than_the_brokers_packet_limit_goes_as_a_stand_in(
    tmp_path: Path,
) -> None:
    """Maximum Packet Size 900: no PUBLISH larger goes (a broker cuts the connection on one:
    it did, on the first table state, forever); the larger records go as ``withheld`` under
    their own seq and chain entry, so every seq arrives."""
    policy = Policy(connack=lambda s: connack(maximum_packet_size=900))
    async with HostileBroker(policy) as broker, table_on(broker, tmp_path) as daemon:
        await every_seq_taken(broker, daemon, 30)
        records = {r.seq: r for r in await journaled(daemon)}
    assert max(s.largest for s in broker.sessions) <= 900
    withheld = [g for g in broker.took if g.topic.endswith("/withheld")]
    assert withheld
    for got in withheld:
        body = got.json
        record = records[int(str(body["seq"]))]
        assert body["topic"] == record.topic and int(str(body["size"])) > 900
        assert got.user_properties["chain-hash"] == record.hash.hex()


async def test_a_broker_without_retained_messages_gets_none(tmp_path: Path) -> None:
    """Retain Available 0: a will marked retained is refused at CONNACK (0x9A, 3.2.2.3.5), so
    the table connects again with an unretained will, and sends retained state unretained,
    saying so in its chain entry (the hash covers the retain flag it was journaled with)."""

    def answer(session: Session) -> bytes:
        return connack(0x9A) if session.will_retain else connack(retain_available=0)

    async with HostileBroker(Policy(connack=answer)) as broker, table_on(broker, tmp_path) as d:
        await every_seq_taken(broker, d, 30)
    assert broker.sessions[0].will_retain and not broker.sessions[-1].will_retain
    assert not [g for g in broker.took if g.retain]
    states = [g for g in broker.took if g.topic.endswith("/table")]
    assert states and all(g.user_properties.get("chain-retain") == "true" for g in states)


async def test_a_broker_that_takes_qos0_only_is_given_nothing(tmp_path: Path) -> None:
    """Maximum QoS 0: the broker refuses the table's QoS 1 will at CONNACK (0x9B,
    MQTT-3.2.2-12), and the table, which marks nothing delivered it cannot see acknowledged,
    sends nothing; it says why and keeps everything in its journal. A broker that accepts the
    connection all the same is left with DISCONNECT 0x80 (0x9B is the server's to send)."""
    policy = Policy(connack=lambda s: connack(0x9B) if s.index < 2 else connack(maximum_qos=0))
    async with HostileBroker(policy) as broker, table_on(broker, tmp_path) as daemon:
        await until(lambda: len(broker.sessions) >= 3, 30)
        await until(lambda: daemon.journal.next_seq > 10)
        assert daemon.journal.acked == -1
    assert not broker.took
    assert broker.sessions[2].disconnect == 0x80


async def test_the_floors_link_is_not_hammered_and_says_what_the_broker_will_not_take() -> None:
    """The floor's link and the monitor: against a broker that cuts each connection 50 ms after
    its CONNACK the waits keep growing (they reset them on every CONNACK); against one that takes no
    wildcard subscriptions it says so rather than asking for one (3.2.2.3.11)."""
    from tableside.daemon.monitor import Monitor
    from tableside.floor.link import Link, Subscription

    subs = [Subscription("tableside/+/status")]
    async with HostileBroker(Policy(cut_after_s=lambda s: 0.05)) as broker:
        link = Link(broker.url, "floor", subs, lambda ps, g: None, 60)
        task = asyncio.create_task(link.run())
        await asyncio.sleep(6)
        await stop(task)
    assert 3 <= len(broker.sessions) <= 10, f"{len(broker.sessions)} connections in 6 s"
    async with HostileBroker(Policy(cut_after_s=lambda s: 0.05)) as broker:
        monitor = Monitor(broker.url, "hil-1")
        task = asyncio.create_task(monitor.run())
        await asyncio.sleep(6)
        await stop(task)
    assert 3 <= len(broker.sessions) <= 10, f"the monitor: {len(broker.sessions)} in 6 s"
    policy = Policy(connack=lambda s: connack(wildcard_available=0))
    async with HostileBroker(policy) as broker:
        link = Link(broker.url, "floor", subs, lambda ps, g: None, 60)
        task = asyncio.create_task(link.run())
        await until(lambda: len(broker.sessions) >= 2)
        await stop(task)
    assert not [f for s in broker.sessions for f in s.filters]


async def test_a_session_present_on_a_clean_start_is_a_protocol_error(tmp_path: Path) -> None:
    """3.2.2-2: a CONNACK accepting a clean start says no session is present; one that says
    otherwise is refused (DISCONNECT 0x82) and tried again."""
    policy = Policy(connack=lambda s: connack(session_present=s.index == 0))
    async with HostileBroker(policy) as broker, table_on(broker, tmp_path) as daemon:
        await every_seq_taken(broker, daemon, 10)
    assert broker.sessions[0].disconnect == 0x82 and not broker.sessions[0].took


async def test_a_broker_that_speaks_only_3_1_1_is_named_so() -> None:
    """A 3.1.1 broker answers a v5 CONNECT with its own CONNACK, return code 1 (unacceptable
    protocol level), as NATS and aedes do: a refusal that says to speak 3.1.1, not a malformed
    packet."""
    from tableside.mqtt.connection import ConnectRefused, Endpoint, connect

    async with HostileBroker(Policy(connack=lambda s: b"\x20\x02\x00\x01")) as broker:
        with pytest.raises(ConnectRefused, match=r'0x84 .*mqtt_version = "3\.1\.1"'):
            await connect(Endpoint(broker.url), "t")


async def test_a_message_on_no_request_topic_is_no_request(tmp_path: Path) -> None:
    """amqtt sends a client every retained message that matches any client's subscription: the
    table got its own retained state back, and answered each as a malformed request (a
    ``command_result`` nobody asked for). What is not on a command topic is not a request."""
    pushed = [("tableside/hil-1/table", b'{"seq": 1}'), ("elsewhere/x", b"{}")]
    async with HostileBroker(Policy(requests=pushed)) as broker, table_on(broker, tmp_path) as d:
        await every_seq_taken(broker, d, 10)
        records = await journaled(d)
    assert not [r for r in records if r.topic.endswith("/command_result")]


async def test_a_suback_that_miscounts_its_filters_is_a_protocol_error() -> None:
    """3.9.3: a SUBACK has one reason code per filter; one with more is the broker's protocol
    error (DISCONNECT 0x82), not a subscription taken."""
    from tableside.mqtt.client import Client
    from tableside.mqtt.connection import Endpoint, MqttError

    async with HostileBroker(Policy(suback_extra=b"\x01")) as broker:
        async with Client(Endpoint(broker.url)) as client:
            with pytest.raises(MqttError, match="2 reason codes for 1 filters"):
                await client.subscribe("t/#")
        await until(lambda: broker.sessions[0].disconnect is not None)
    assert broker.sessions[0].disconnect == 0x82


async def test_a_broker_past_the_receive_maximum_asked_for_is_counted_not_obeyed() -> None:
    """3.3.4, 4.9: the floor asks for Receive Maximum 2 and acknowledges only what it stored; a
    broker that sends a third unacknowledged message is counted and said, and the connection
    kept (4.9's DISCONNECT 0x93 would cut the floor off Mosquitto 2.0.11, which does so after
    acknowledgements: tests/test_floor_link.py); the floor bounds what it holds itself."""
    from tableside.floor.link import Link, Subscription

    pushed = [(f"tableside/t{n}/status", b"{}") for n in range(3)]
    async with HostileBroker(Policy(requests=pushed)) as broker:
        link = Link(broker.url, "floor", [Subscription("tableside/+/status")],
                    lambda ps, g: None, 60, receive_maximum=2)  # fmt: skip
        task = asyncio.create_task(link.run())
        try:
            await until(lambda: link._conn is not None and link._conn.past_receive_maximum > 0)
        finally:
            await stop(task)
    assert len(broker.sessions) == 1 and broker.sessions[0].disconnect == 0


async def test_a_broker_that_takes_next_to_nothing_is_sent_nothing_too_large(
    tmp_path: Path,
) -> None:
    """Maximum Packet Size 150: not even a record's stand-in fits. Nothing over the limit is
    sent (the broker would cut the connection, again and again); such a record is refused here
    as the broker would (0x95), stays unacknowledged and goes again."""
    policy = Policy(connack=lambda s: connack(maximum_packet_size=150))
    async with HostileBroker(policy) as broker, table_on(broker, tmp_path) as daemon:
        await until(lambda: daemon.publisher.refusals >= 3)
        assert daemon.journal.acked < 0
    assert max(s.largest for s in broker.sessions) <= 150
    assert len(broker.sessions) == 1


async def test_a_connection_the_table_gives_up_on_ends_with_a_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broker that never acknowledges: the table ends the connection after
    ``CONNECT_TIMEOUT_S`` (1 s here) with a DISCONNECT saying it is an error (0x80, which keeps
    the will), not a normal one (which would drop it, as if the table had stopped), nor none."""
    from tableside.daemon import publisher

    monkeypatch.setattr(publisher, "CONNECT_TIMEOUT_S", 1.0)
    policy = Policy(publish=lambda s, g: None if s.index == 0 else 0)
    async with HostileBroker(policy) as broker, table_on(broker, tmp_path) as daemon:
        await every_seq_taken(broker, daemon, 10)
    assert broker.sessions[0].disconnect == 0x80


@pytest.mark.parametrize(
    ("after_connack", "reason"),
    [(connack(), 0x82), (b"\x34\x06\x00\x01t\x00\x01\x00", 0x82),
     (b"\x30\x07\x00\x01t\x03\x23\x00\x01", 0x94)],
    ids=["a-second-connack", "qos2-publish", "topic-alias"],
)  # fmt: skip
async def test_what_a_broker_may_not_send_ends_the_connection_with_its_reason(
    after_connack: bytes, reason: int
) -> None:
    """A second CONNACK, a QoS 2 PUBLISH on a QoS 1 subscription, a topic alias this client
    never allowed: DISCONNECT with the reason (4.13), the connection ended."""
    from tableside.mqtt.connection import Endpoint, MqttError, connect

    policy = Policy(connack=lambda s: connack() + after_connack)
    async with HostileBroker(policy) as broker:
        with contextlib.suppress(MqttError):
            conn = await connect(Endpoint(broker.url), "t")
            with pytest.raises(MqttError):
                await conn.ended()
        await until(lambda: bool(broker.sessions) and broker.sessions[0].disconnect is not None)
    assert broker.sessions[0].disconnect == reason


async def test_the_brokers_keep_alive_is_the_one_used() -> None:
    """3.2.2.3.14: a Server Keep Alive in the CONNACK is used instead of the one asked for:
    PINGREQ every half of it, here 1 s, though the client asked for 30."""
    from tableside.mqtt.connection import Endpoint, connect

    async with HostileBroker(Policy(connack=lambda s: _with_keep_alive(2))) as broker:
        conn = await connect(Endpoint(broker.url), "t", keepalive=30)
        try:
            await until(lambda: broker.sessions[0].pings >= 2, 5)
        finally:
            conn.close()


def _with_keep_alive(seconds: int) -> bytes:
    props = b"\x13" + seconds.to_bytes(2, "big")
    return b"\x20" + bytes([2 + 1 + len(props)]) + b"\x00\x00" + bytes([len(props)]) + props


async def test_a_replay_of_a_record_over_the_packet_limit_sends_its_stand_in(
    tmp_path: Path,
) -> None:
    """An auditor's replay of a range holding a record larger than the broker takes (the
    replay carries it escaped in JSON: larger still): that record goes as its ``withheld``
    stand-in, marked redelivered, under its chain entry; the rest as replays; the result is
    ok (it was "replay: not sent", for good, and the floor's repair never ended)."""
    replay = {"command": "replay", "device": "table", "request_id": "r1",
              "args": {"from_seq": 0, "to_seq": 19}}  # fmt: skip
    policy = Policy(
        connack=lambda s: connack(maximum_packet_size=900),
        cut_after_s=lambda s: 4.0 if s.index == 0 else None,
    )
    async with HostileBroker(policy) as broker, table_on(broker, tmp_path) as daemon:
        await until(lambda: daemon.journal.next_seq > 20, 30)
        policy.requests = [("tableside/hil-1/command/auditor", json.dumps(replay).encode())]
        await until(lambda: len(broker.sessions) >= 2, 30)
        await until(lambda: any(g.topic.endswith("/command_result") for g in broker.took), 30)
        records = {r.seq: r for r in await journaled(daemon)}
    second = broker.sessions[1].took
    (result,) = [g.json for g in second if g.topic.endswith("/command_result")]
    assert result["ok"], result
    replayed = {int(str(g.json["seq"])) for g in second if g.topic.endswith("/replay")}
    stood_in = [g for g in second if g.topic.endswith("/withheld") and g.json["redelivered"]]
    assert stood_in and replayed
    assert replayed | {int(str(g.json["seq"])) for g in stood_in} >= set(range(20))
    for got in stood_in:
        assert got.user_properties["chain-hash"] == records[int(str(got.json["seq"]))].hash.hex()
    assert max(s.largest for s in broker.sessions) <= 900
