"""The MQTT side: one connection at a time to the broker, its own reconnect loop, the journal
drained in order, retained state re-published after every reconnect, and a last will.

Every message is journaled first (daemon/journal/) and sent only once the journal has
committed it. The publisher sends the journal's records in seq order, QoS 1, up to ``window``
in flight, and marks them acknowledged in the journal as the broker's PUBACKs come back (the
broker acknowledges in order on one connection). After a dropped connection or a restart it
starts again from the first unacknowledged record; a record that may already have reached the
broker goes out with ``"redelivered": true`` and its original seq, so a subscriber can drop it.

With MQTT v5 every journaled message carries its record's chain entry as user properties
(wire/proof.py, docs/floor.md): ``chain-prev``, ``chain-hash``, ``chain-ts``. Retained state
sent again after a reconnect carries its original record's entry, read back from the journal.

On our own MQTT client (mqtt/connection.py, on public asyncio APIs only): records are sent
straight from the journal's "durable" callback and PUBACKs taken as they are read, each
connection's in-flight window kept by mqtt/window.py (no I/O). A fresh connection, clean start,
per attempt: nothing of a previous session is resent behind our own redelivery.

What the broker's CONNACK allows is kept (docs/mqtt.md, "What each broker allows"): every QoS 1
publish of the connection (records, responses, replays, republished state) shares its Receive
Maximum; a record larger than its Maximum Packet Size goes as a ``withheld`` stand-in under
its own seq and chain entry; retained state goes unretained to a broker that keeps none; a
broker that takes QoS 0 only is not used (it could never say what it has). A record the broker
refuses stays unacknowledged and goes again, and the table's status says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Iterator
from typing import Literal, NoReturn

import structlog
from pydantic_core import to_json

from tableside import __version__
from tableside.daemon.config import BrokerConfig
from tableside.daemon.journal import Journal, Record
from tableside.drivers.backoff import STABLE_S, Backoff
from tableside.drivers.tasks import first_to_end
from tableside.mqtt import codec
from tableside.mqtt.connection import (
    REASONS,
    BeyondLimits,
    Connection,
    ConnectRefused,
    MqttError,
    Refused,
    SubscriptionRefused,
    connect,
    describe,
)
from tableside.mqtt.window import Sent, Window
from tableside.wire.payloads import (
    Message,
    ReplayPayload,
    StatusBody,
    Undelivered,
    WithheldPayload,
    utc_ms,
)
from tableside.wire.proof import CHAIN_RETAIN, Chain, marked
from tableside.wire.topics import Topics

__all__ = [
    "CONNECT_TIMEOUT_S",
    "RESUBSCRIBE_S",
    "RETRY_MAX_S",
    "STABLE_S",
    "CommandHandler",
    "Publisher",
    "marked",
]

log = structlog.get_logger("tableside.mqtt")

#: the longest wait between two connection attempts (jittered down to half of it): after an
#: outage the table tries again within this long of the broker's return (docs/mqtt.md)
RETRY_MAX_S = 5.0
#: one attempt, from the TCP connect to CONNACK (and a PUBACK or SUBACK after it), at most
CONNECT_TIMEOUT_S = 10.0
#: a refused command subscription is asked for again after this long (an ACL being mended)
RESUBSCRIBE_S = 60.0

#: (topic, payload, where to send a response: (response topic, correlation data) or None)
CommandHandler = Callable[[str, bytes, "tuple[str, bytes] | None"], None]


def _said_if_failed(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("response_not_sent", error=str(task.exception()))


class Publisher:
    def __init__(
        self,
        broker: BrokerConfig,
        table: str,
        client_id: str,
        journal: Journal,
        *,
        on_command: CommandHandler | None = None,
        window: int = 100,
    ) -> None:
        self.broker = broker
        self.table = table
        self.client_id = client_id
        self.topics = Topics(broker.topic_prefix, table)
        self.journal = journal
        self.window = window
        self._on_command = on_command
        self._emptied = asyncio.Event()
        # Latest retained payload per topic and its seq, to send again after a reconnect.
        self._retained: dict[str, tuple[int, bytes]] = {}
        # Records up to here may have reached the broker already: what the previous run sent
        # (kept by its clean close; after a crash, everything it journaled), then whatever
        # this run has sent.
        self._attempted = journal.sent
        #: every message from a table on a lab's test clock says so
        self._test_clock = None if journal.test_clock is None else str(journal.test_clock)
        #: the envelope as JSON, in the models' order (``Envelope``), around each message's own
        #: ts and seq; its flags false as journaled (a resend sets them: ``marked``)
        self._lead = b'{"table":' + to_json(table) + b',"ts":'
        self._untrusted: int | None = None
        self._tail = self._envelope_tail()
        self.connected = asyncio.Event()
        self.connections = 0
        self.published = 0
        self.redelivered = 0
        #: PUBACKs that refused a record (each refusal; the record goes again)
        self.refusals = 0
        #: records sent as a ``withheld`` stand-in (larger than the broker's Maximum Packet Size)
        self.withheld = 0
        #: the oldest record the broker refuses now, as the status says it
        self.undelivered: Undelivered | None = None
        #: whether the command subscription stands on the current connection
        self.commands_subscribed = False
        # a connection that lived STABLE_S with something acknowledged was a working one: the
        # next outage's waits start small again and the next connection journals a new
        # "online"; after a flap (a broker that accepts, then cuts or never answers) the waits
        # grow on and the same "online" goes again
        self._backoff = Backoff(initial=0.2, maximum=RETRY_MAX_S)
        self._conn: Connection | None = None
        #: the will's retain flag: off once a broker said it keeps no retained messages (0x9A)
        self._will_retain = True
        #: "online" journaled and no working connection ended since: a reconnect sends the
        #: same one again rather than a new one (STABLE_S)
        self._online = False
        #: the status last journaled (a refusal's status repeats it), and the clean offline's seq
        self._said: Literal["online", "offline"] = "online"
        self._offline_seq: int | None = None
        #: the broker acknowledged something on the current connection (STABLE_S)
        self._worked = False

    # -- what the daemon calls -------------------------------------------------------------

    def enqueue(
        self,
        topic: str,
        message: Message,
        ts: str,
        *,
        retain: bool = False,
        key: str | None = None,
        now: float | None = None,
    ) -> Record:
        """Journal ``message`` (a payload's own fields, built where it was made) behind the
        envelope, stamped ``ts``; returns its record at once: the journal gives it its seq,
        the drain sends it once it is durable. ``key`` keeps it in the journal's ``latest``
        (retained topics always are) for restoring the table after a restart; ``now``: the
        run's clock as read for the event."""
        record = self.journal.append(topic, self._framed(message, ts), retain=retain, key=key,
                                     ts=now)  # fmt: skip
        if retain:
            self._retained[topic] = (record.seq, record.payload)
        return record

    def _framed(self, message: Message, ts: str) -> Callable[[int], bytes]:
        """The message's payload once it has its seq: the message as JSON, made once, behind
        the envelope, byte for byte what its payload model dumps (tests/test_payloads.py)."""
        own = message.to_json()
        lead = self._lead + to_json(ts) + b',"seq":'
        tail = self._tail + (b"," + own[1:] if len(own) > 2 else b"}")

        def payload(seq: int) -> bytes:
            return b"%b%d%b" % (lead, seq, tail)

        return payload

    def untrusted_time(self, clock_seq: int | None) -> None:
        """Every record enqueued from now on says the table does not trust its clock, naming
        the ``clock`` record that said so (``clock_seq``), or (None) nothing: trusted. A record
        already enqueued keeps the envelope it was made with."""
        self._untrusted = clock_seq
        self._tail = self._envelope_tail()

    def _envelope_tail(self) -> bytes:
        """The envelope's fields after ``seq``, as JSON (``untrusted_time`` last, and only when
        set, as ``Envelope`` dumps it)."""
        tail = b',"republished":false,"redelivered":false,"test_clock":' + to_json(self._test_clock)
        if self._untrusted is not None:
            tail += b',"untrusted_time":%d' % self._untrusted
        return tail

    @contextlib.contextmanager
    def atomic(self) -> Iterator[None]:
        """What is enqueued inside is journaled together, or none of it is (an exception
        inside: the journal takes it back, and the retained state to send again is as it
        was). ``Journal.atomic``."""
        retained = dict(self._retained)
        try:
            with self.journal.atomic():
                yield
        except BaseException:
            self._retained = retained
            raise

    def restore_retained(self, topic: str, payload: bytes) -> None:
        """Retained state from the journal, sent again on the next connection."""
        seq = int(json.loads(payload).get("seq", -1))
        self._retained.setdefault(topic, (seq, payload))

    def respond(self, reply: tuple[str, bytes], payload: bytes) -> None:
        """MQTT v5: send a copy of a command's result (as journaled on command_result) to the
        requester's response topic, with its correlation data. Only topics under
        ``<table>/response/`` (the table's own subtree, which the ACL lets it write)."""
        topic, correlation = reply
        conn = self._conn
        if not topic.startswith(self.topics.response_prefix):
            log.warning("response_topic_refused", topic=topic,
                        allowed=self.topics.response_prefix + "…")  # fmt: skip
            return
        if conn is None or not conn.is_open:
            log.warning("response_not_sent", topic=topic, why="no broker connection")
            return
        task = asyncio.ensure_future(conn.publish(topic, payload, correlation=correlation))
        task.add_done_callback(_said_if_failed)

    @property
    def pending(self) -> int:
        """Journaled and not yet acknowledged by the broker."""
        return self.journal.next_seq - 1 - self.journal.acked

    async def flush(self) -> None:
        """Wait until the broker has acknowledged everything journaled so far."""
        target = self.journal.next_seq - 1
        while self.journal.acked < target:
            self._emptied.clear()
            await self._emptied.wait()

    # -- the connection loop ---------------------------------------------------------------

    def _status(self, status: Literal["online", "offline"]) -> Record:
        """Journal the table's status (retained), with the record the broker refuses if any."""
        self._said = status
        message = StatusBody(status=status, version=__version__, undelivered=self.undelivered)
        return self.enqueue(self.topics.status, message, utc_ms(), retain=True)

    def stop(self) -> None:
        """Journal the clean offline status; the daemon flushes after this."""
        self._offline_seq = self._status("offline").seq

    async def run(self) -> NoReturn:
        loop = asyncio.get_running_loop()
        while True:
            try:
                await self._connect_and_serve()
            except MqttError as exc:
                self.connected.clear()
                if isinstance(exc, ConnectRefused) and exc.reason == 0x9A and self._will_retain:
                    self._will_retain = False  # retain not supported: the will goes unretained
                    log.warning("broker_keeps_no_retained", url=self.broker.url)
                if isinstance(exc, ConnectRefused) and exc.reason == 0x9B:
                    why = "QoS 0 has no acknowledgement: the table sends nothing unseen"
                    log.error("broker_takes_qos0_only", url=self.broker.url, why=why)
                if self._backoff.ended(loop.time(), worked=self._worked):  # a working one ended:
                    self._online = False  # say "online" anew when back
                delay = self._backoff.next()
                log.warning("broker_unavailable", url=self.broker.url, why=str(exc),
                            retry_in_s=round(delay, 2))  # fmt: skip
                await asyncio.sleep(delay)

    def _will(self) -> codec.Will:
        """Messages go out strictly in seq order. The will cannot know when it will be sent, so
        it takes no new number: it repeats the last one journaled so far and says will=true."""
        will = StatusBody(status="offline", version=__version__, will=True)
        payload = self._framed(will, utc_ms())(max(self.journal.next_seq - 1, 0))
        return codec.Will(self.topics.status, payload, retain=self._will_retain)

    async def _connect_and_serve(self) -> None:
        conn = await connect(
            self.broker.endpoint(), self.client_id, keepalive=self.broker.keepalive_s,
            clean_start=True, will=self._will(), on_messages=self._commands,
            within_s=CONNECT_TIMEOUT_S,
        )  # fmt: skip
        self._backoff.connected(asyncio.get_running_loop().time())
        self._worked = False
        try:
            if conn.limits.maximum_qos == 0:
                # QoS 0 has no PUBACK: the table could never know what the broker has (a broker
                # that says so refuses the table's QoS 1 will at CONNACK, 0x9B, already)
                conn.fail(MqttError("QoS 0 only"), 0x80)
                raise MqttError("the broker takes QoS 0 only (its CONNACK's Maximum QoS): "
                                "the table sends nothing it cannot see acknowledged")  # fmt: skip
            self.connections += 1
            await self._republish_retained(conn)
            if not self._online:
                # "online" takes its place in the journal, behind anything queued while away;
                # once per run: a reconnect sends the same one again (_republish_retained)
                self._status("online")
                self._online = True
            self.connected.set()
            self._conn = conn
            log.info("broker_connected", url=self.broker.url, client_id=self.client_id,
                     unsent=self.pending, limits=_limits(conn))  # fmt: skip
            # not a TaskGroup: run() catches MqttError, and a 3.11 TaskGroup can absorb the
            # daemon's cancellation into the broker's disconnect error (drivers/tasks.py)
            await first_to_end({
                "mqtt.closed": _closed(conn),
                "mqtt.drain": _Drain(self, conn).run(),
                "mqtt.commands": self._subscribe_commands(conn),
            })  # fmt: skip
        except MqttError as exc:
            # the table ends a connection it cannot use (a PUBACK that never came …) saying so:
            # DISCONNECT 0x80 (unspecified error), which keeps the will; a lost one is gone
            conn.fail(exc, 0x80)
            raise
        finally:
            self._conn = None
            self.commands_subscribed = False
            if self._offline_seq is not None and self.journal.acked < self._offline_seq:
                # stopping, and the broker never had the clean "offline": the will stands in
                conn.fail(MqttError("stopped before the broker had offline"), 0x04)
            conn.close()  # a stop says DISCONNECT (normal: no will); a failed one is closed
            # the DISCONNECT leaves before a stopping process does (or the broker sends the will)
            await conn.drained()

    async def _subscribe_commands(self, conn: Connection) -> None:
        """The request topics, subscribed (each role's own where the broker takes no wildcard);
        a refusal is said and asked again every ``RESUBSCRIBE_S``: the table goes on sending
        meanwhile, taking no requests."""
        if self._on_command is None:
            return await _closed(conn)
        topics = [self.topics.command_filter]
        if not conn.limits.wildcard_available:
            topics = self.topics.command_topics
        while True:
            try:
                await conn.subscribe([(t, 1) for t in topics], within_s=CONNECT_TIMEOUT_S)
            except SubscriptionRefused as exc:
                log.error("command_subscription_refused", url=self.broker.url, why=str(exc),
                          retry_in_s=RESUBSCRIBE_S)  # fmt: skip
                await asyncio.sleep(RESUBSCRIBE_S)
                continue
            self.commands_subscribed = True
            return await _closed(conn)

    async def _republish_retained(self, conn: Connection) -> None:
        """Retained state whose latest payload is not still waiting to be sent, again: a broker
        that restarted without persistence would otherwise serve stale state, and the will a
        broken connection left would stand for a table that is back. What the broker refuses
        or cannot take is said and left: the record itself went when it was new."""
        for topic, (seq, payload) in list(self._retained.items()):
            if seq > self.journal.acked or (topic == self.topics.status and not self._online):
                continue
            again = marked(payload, republished=True)
            chain = await self._chain_of(seq) if self._v5 else None
            keep = conn.limits.retain_available
            try:
                await conn.publish(topic, again, retain=keep, within_s=CONNECT_TIMEOUT_S,
                                   user_properties=_retained_as(chain, keep))  # fmt: skip
            except (Refused, BeyondLimits) as exc:
                log.warning("republish_refused", seq=seq, topic=topic, why=str(exc))

    def _commands(self, messages: list[codec.Publish]) -> None:
        """Requests, delivered in the order they came (each acknowledged once handled); a
        message on any other topic is no request, whatever the broker sends."""
        if self._on_command is None:
            return
        for message in messages:
            if not self.topics.role_of_command(message.topic):
                # not a request: a broker that pushes what it retains for others (amqtt)
                log.warning("unrequested_message", topic=message.topic, retain=message.retain)
                continue
            reply = None
            if message.response_topic:
                reply = (message.response_topic, message.correlation or b"")
            try:
                self._on_command(message.topic, message.payload, reply)
            except Exception:
                # Whatever a request contains, it must not take the broker link down.
                log.exception("command_handling_failed", topic=message.topic)

    @property
    def _v5(self) -> bool:
        return self.broker.mqtt_version == "5"

    @staticmethod
    def chain(record: Record) -> list[tuple[str, str]]:
        """The record's chain entry as MQTT v5 user properties (docs/floor.md)."""
        return Chain(record.prev_hash, record.hash, record.ts).properties()

    async def _chain_of(self, seq: int) -> list[tuple[str, str]] | None:
        """The chain entry of record ``seq``, read back from the journal (retained state is
        kept as its payload only); None, said in the log, when retention has deleted it."""
        found = await self.journal.read_from(seq, 1)
        if not found or found[0].seq != seq:
            log.warning("republished_without_chain", seq=seq, why="the journal no longer has it")
            return None
        return self.chain(found[0])

    async def replay(self, records: list[Record]) -> None:
        """Send these journal records again on ``replay`` (QoS 1, not retained, not journaled),
        each as journaled with its hashes, in the broker's window with everything else; one
        whose replay is larger than the broker's Maximum Packet Size goes as its ``withheld``
        stand-in instead, marked redelivered, under its chain entry (what the floor takes for
        the seq). Returns when the broker has them all; MqttError when there is no
        connection, it drops, or the broker refuses one."""
        conn = self._conn
        if conn is None or not conn.is_open:
            raise MqttError("no broker connection")

        async def again(record: Record) -> None:
            payload = ReplayPayload(
                table=self.table, seq=record.seq, topic=record.topic, retain=record.retain,
                ts=record.ts, prev=record.prev_hash.hex(), hash=record.hash.hex(),
                payload=record.payload.decode(),
            ).model_dump_json().encode()  # fmt: skip
            limit = conn.limits.maximum_packet_size
            size = len(codec.publish(self.topics.replay, payload, qos=1, packet_id=1))
            if limit is None or size <= limit:
                return await conn.publish(self.topics.replay, payload)
            stand_in = self.stand_in(record, size, limit, redelivered=True)
            chain = self.chain(record) if self._v5 else None
            await conn.publish(self.topics.withheld, stand_in, user_properties=chain)

        for start in range(0, len(records), self.window):
            await asyncio.gather(*(again(r) for r in records[start : start + self.window]))

    def stand_in(self, record: Record, size: int, limit: int, *, redelivered: bool) -> bytes:
        """The ``withheld`` payload in place of ``record``, whose PUBLISH of ``size`` bytes is
        larger than the broker's ``limit``."""
        ts, untrusted = _stamp(record.payload)  # the record's own time and its quality
        return WithheldPayload(
            table=self.table, ts=ts, seq=record.seq, redelivered=redelivered,
            test_clock=self._test_clock, untrusted_time=untrusted,
            topic=record.topic, retain=record.retain, size=size, limit=limit,
        ).model_dump_json().encode()  # fmt: skip

    def _refused(self, sent: Sent, topic: str) -> None:
        """A PUBACK refused record ``sent``: said in the log each time."""
        self.refusals += 1
        log.error("publish_refused", seq=sent.seq, topic=topic,
                  reason=describe(sent.reason, sent.said), refusals=sent.refusals,
                  retry_in_s=round(sent.due_at - sent.at, 1))  # fmt: skip

    def _refusing(self, oldest: Sent | None, topic: str) -> None:
        """The oldest record the broker refuses now (None: none): the status says it whenever
        it changes, repeating the status last said."""
        now = None
        if oldest is not None:
            reason = f"0x{oldest.reason:02x}"
            name = oldest.said or REASONS.get(oldest.reason)
            now = Undelivered(seq=oldest.seq, topic=topic,
                              reason=f"{reason} ({name})" if name else reason)  # fmt: skip
        if now == self.undelivered:
            return
        if now is None and self.undelivered is not None:
            log.info("publish_taken", seq=self.undelivered.seq, topic=self.undelivered.topic)
        self.undelivered = now
        self._status(self._said)


def _limits(conn: Connection) -> dict[str, object]:
    """What the broker's CONNACK allows, for the log."""
    limits = conn.limits
    return {"receive_maximum": limits.receive_maximum,
            "maximum_packet_size": limits.maximum_packet_size,
            "retain_available": limits.retain_available, "maximum_qos": limits.maximum_qos,
            "wildcard_available": limits.wildcard_available}  # fmt: skip


def _retained_as(chain: list[tuple[str, str]] | None, kept: bool) -> list[tuple[str, str]] | None:
    """A retained record sent unretained (the broker keeps none) says in its chain entry that
    it was journaled retained, which its hash covers (docs/floor.md)."""
    if chain is None or kept:
        return chain
    return [*chain, (CHAIN_RETAIN, "true")]


async def _closed(conn: Connection) -> None:
    """Ends, raising why, when the connection does."""
    await conn.ended()


class _Drain:
    """One connection's sending of the journal's durable records: in seq order, QoS 1, up to
    the publisher's window and within the room the broker's Receive Maximum leaves (shared
    with every other publish on the connection), each marked acknowledged in the journal as
    its PUBACK comes (mqtt/window.py keeps the order and the refused).

    Records the journal holds in memory are sent from its "durable" callback and PUBACKs taken
    as the connection reads them, all on the event loop, without waking a task: the task runs
    only for what needs waiting (a read from disk, while nothing else sends), for what came
    while the window was full, and once a second, to send again what the broker refused and
    is due, and to find a message the broker left unacknowledged for ``CONNECT_TIMEOUT_S``,
    which drops the connection."""

    def __init__(self, publisher: Publisher, conn: Connection) -> None:
        self.publisher = publisher
        self.journal = journal = publisher.journal
        self.conn = conn
        self.v5 = publisher._v5
        self.window = Window(publisher.window, cursor=journal.acked + 1,
                             attempted=publisher._attempted)  # fmt: skip
        self.loop = asyncio.get_running_loop()
        self.wake = asyncio.Event()
        self.failed: list[Exception] = []  # raised in a callback: the task raises it
        self.reading = False  # the task waits for records from disk: only it sends meanwhile
        self.pumping = False  # a pump is scheduled for after this read's PUBACKs
        self.ticker: asyncio.TimerHandle | None = None
        #: every record in the window, by seq: a refused one goes again without a disk read
        self.held: dict[int, Record] = {}

    def _packet(self, record: Record, pid: int, again: bool, first: bool) -> bytes | None:
        """The record's PUBLISH as this broker can take it: unretained where it keeps nothing
        retained; a ``withheld`` stand-in where it is larger than its Maximum Packet Size;
        None where even the stand-in is (a broker that takes next to nothing)."""
        publisher, conn = self.publisher, self.conn
        payload = marked(record.payload, redelivered=True) if again else record.payload
        chain = publisher.chain(record) if self.v5 else None
        retain = record.retain and conn.limits.retain_available
        if record.retain and not retain:
            chain = _retained_as(chain, False)
        packet = codec.publish(record.topic, payload, qos=1, packet_id=pid, retain=retain,
                               user_properties=chain, v5=self.v5)  # fmt: skip
        limit = conn.limits.maximum_packet_size
        if limit is None or len(packet) <= limit:
            return packet
        if first:  # counted once, not at each resend
            publisher.withheld += 1
            log.warning("record_withheld", seq=record.seq, topic=record.topic, size=len(packet),
                        limit=limit)  # fmt: skip
        stand_in = publisher.stand_in(record, len(packet), limit, redelivered=again)
        packet = codec.publish(publisher.topics.withheld, stand_in, qos=1, packet_id=pid,
                               user_properties=chain, v5=self.v5)  # fmt: skip
        return packet if len(packet) <= limit else None

    def _take(self, record: Record, pid: int, again: bool, at: float, first: bool) -> bytes:
        """The record's packet, or b"" when the broker can take nothing of it: then its place
        is given back and it is refused here as the broker would (0x95, packet too large), so
        it stays unacknowledged, goes again, and the status says so."""
        packet = self._packet(record, pid, again, first)
        if packet is not None:
            return packet
        self.conn.release(pid)
        sent = self.window.refused(pid, 0x95, at, "larger than the broker's Maximum Packet Size")
        if sent is not None:
            self.publisher._refused(sent, record.topic)
            self._said_refusing()
        return b""

    def _said_refusing(self) -> None:
        oldest = self.window.refusing()
        topic = "" if oldest is None else self.held[oldest.seq].topic
        self.publisher._refusing(oldest, topic)

    def send(self, batch: list[Record]) -> None:
        """These records, next in seq order, in one write: as many as the window and the
        broker's have room for now (another publish may have taken a place while the batch
        was read from disk); the rest stay due."""
        window, conn, publisher = self.window, self.conn, self.publisher
        at = self.loop.time()
        packets = []
        for record in batch[: max(0, min(window.room, conn.room))]:
            pid = conn.claim_id()
            again = window.send(record.seq, pid, at)
            if again:
                publisher.redelivered += 1
            self.held[record.seq] = record
            packets.append(self._take(record, pid, again, at, first=True))
        publisher._attempted = self.journal.sent = window.attempted
        if packets:
            conn.write(b"".join(packets))

    def resend_due(self) -> None:
        """What the broker refused and is due again, while the broker's window has room."""
        conn, at = self.conn, self.loop.time()
        packets = []
        for sent in self.window.due(at):
            if conn.room <= 0:
                break
            pid = conn.claim_id()
            self.window.resend(sent.seq, pid, at)
            packets.append(self._take(self.held[sent.seq], pid, sent.again, at, first=False))
        if packets:
            conn.write(b"".join(packets))

    def on_puback(self, ack: codec.PubAck) -> None:
        """(the connection's callback, once per PUBACK of one of ours)"""
        journal, publisher = self.journal, self.publisher
        if ack.refused:  # not delivered: it stays in its place and goes again
            now = self.loop.time()
            sent = self.window.refused(ack.packet_id, ack.reason, now, ack.reason_string)
            if sent is not None:
                publisher._refused(sent, self.held[sent.seq].topic)
                self._said_refusing()
            return
        publisher._worked = True
        for seq in self.window.acknowledged(ack.packet_id):
            journal.mark_acked(seq)
            publisher.published += 1
            self.held.pop(seq, None)
        if publisher.undelivered is not None:
            self._said_refusing()
        if not self.window and journal.acked >= journal.next_seq - 1:
            publisher._emptied.set()

    def on_room(self) -> None:
        """(the connection's callback) A place in the broker's window is free."""
        if not self.pumping:  # once for all the PUBACKs of this read
            self.pumping = True
            self.loop.call_soon(self.pump)

    def _due_in_memory(self) -> list[Record] | None:
        """The durable records next in line, as many as the window and the broker's have room
        for ([] when none are due); None when memory no longer holds them (the task reads them
        from disk)."""
        room, cursor = min(self.window.room, self.conn.room), self.window.cursor
        if room <= 0 or self.journal.durable_seq < cursor:
            return []
        return self.journal.read_cached(cursor, room)

    def pump(self) -> None:
        """(a callback) What memory holds, sent while there is room; the task woken for the
        rest."""
        self.pumping = False
        if self.reading:
            self.wake.set()
            return
        try:
            batch = self._due_in_memory()
            if batch is None:
                self.wake.set()
            elif batch:
                self.send(batch)
        except Exception as exc:  # raised by the task, not lost in a callback
            self.failed.append(exc)
            self.wake.set()

    def _tick(self) -> None:  # refusals due, and a PUBACK that never comes, once a second
        self.wake.set()
        self.ticker = self.loop.call_later(1.0, self._tick)

    def _overdue(self) -> None:
        oldest = self.window.oldest()
        if oldest is not None and self.loop.time() - oldest.at > CONNECT_TIMEOUT_S:
            raise MqttError(f"no PUBACK for seq {oldest.seq} within {CONNECT_TIMEOUT_S:.0f} s")

    async def run(self) -> NoReturn:
        journal, window = self.journal, self.window
        self.conn.on_puback = self.on_puback
        self.conn.on_room = self.on_room
        journal.on_durable = self.pump
        self._tick()
        try:
            while True:
                self.wake.clear()
                if self.failed:
                    raise self.failed[0]
                self._overdue()
                self.resend_due()
                batch = self._due_in_memory()
                if batch is None:
                    self.reading = True
                    try:
                        room = min(window.room, self.conn.room)
                        batch = await journal.read_from(window.cursor, room)
                    finally:
                        self.reading = False
                if batch:
                    self.send(batch)
                    continue  # and look again: more may have come meanwhile
                await self.wake.wait()
        finally:
            if self.ticker is not None:
                self.ticker.cancel()
            journal.on_durable = None
            self.conn.on_puback = None
            self.conn.on_room = None


def _stamp(payload: bytes) -> tuple[str, int | None]:
    """The ``ts`` a journaled payload carries (its envelope's) and its ``untrusted_time``, for
    its stand-in."""
    try:
        body: object = json.loads(payload)
    except ValueError:
        return utc_ms(), None
    if not isinstance(body, dict):
        return utc_ms(), None
    ts, untrusted = body.get("ts"), body.get("untrusted_time")
    return (ts if isinstance(ts, str) else utc_ms(),
            untrusted if isinstance(untrusted, int) else None)  # fmt: skip
