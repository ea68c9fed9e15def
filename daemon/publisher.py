"""The MQTT side: one connection at a time to the broker, its own reconnect loop, the journal
drained in order, retained state re-published after every reconnect, and a last will.

Every message is journaled first (daemon/journal/) and sent only once the journal has
committed it. The publisher sends the journal's records in seq order, QoS 1, up to ``window``
in flight, and marks them acknowledged in the journal as the broker's PUBACKs come back (the
broker acknowledges in order on one connection). After a dropped connection or a restart it
starts again from the first unacknowledged record; a record that may already have reached the
broker goes out with ``"redelivered": true`` and its original seq, so a subscriber can drop it.

With MQTT v5 every journaled message carries its record's chain entry as user properties
(daemon/proof.py, docs/floor.md): ``chain-prev``, ``chain-hash``, ``chain-ts``. Retained state
sent again after a reconnect carries its original record's entry, read back from the journal.

On our own MQTT client (mqtt/connection.py, on public asyncio APIs only): records are sent
straight from the journal's "durable" callback and PUBACKs taken as they are read, each
connection's in-flight window kept by mqtt/window.py (no I/O). A fresh connection, clean start,
per attempt: nothing of a previous session is resent behind our own redelivery.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from typing import Any, Literal, NoReturn

import structlog
from pydantic_core import to_json

from tableside import __version__
from tableside.daemon.config import BrokerConfig
from tableside.daemon.journal import Journal, Record
from tableside.daemon.payloads import (
    PLAIN,
    Envelope,
    StatusPayload,
    TopicKind,
    parse_topic,
    utc_ms,
)
from tableside.daemon.proof import Chain, marked
from tableside.drivers.backoff import Backoff
from tableside.drivers.tasks import first_to_end
from tableside.mqtt import codec
from tableside.mqtt.connection import Connection, MqttError, connect
from tableside.mqtt.window import Window

__all__ = ["CONNECT_TIMEOUT_S", "RETRY_MAX_S", "CommandHandler", "Publisher", "Topics", "marked"]

log = structlog.get_logger("tableside.mqtt")

#: the longest wait between two connection attempts (jittered down to half of it): after an
#: outage the table tries again within this long of the broker's return (docs/mqtt.md)
RETRY_MAX_S = 5.0
#: one attempt, from the TCP connect to CONNACK (and a PUBACK or SUBACK after it), at most
CONNECT_TIMEOUT_S = 10.0

#: (topic, payload, where to send a response: (response topic, correlation data) or None)
CommandHandler = Callable[[str, bytes, "tuple[str, bytes] | None"], None]


def _said_if_failed(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("response_not_sent", error=str(task.exception()))


class Topics:
    """Every topic of one table, under the configured prefix (docs/mqtt.md)."""

    def __init__(self, prefix: str, table: str) -> None:
        self.prefix, self.table = prefix, table
        self.base = f"{prefix}/{table}"
        self.status = f"{self.base}/status"
        self.ruling = f"{self.base}/ruling"
        self.ruling_state = f"{self.base}/ruling_state"
        self.table_state = f"{self.base}/table"
        self.command_filter = f"{self.base}/command/+"
        self.command_result = f"{self.base}/command_result"
        self.response_prefix = f"{self.base}/response/"
        self.checkpoint = f"{self.base}/checkpoint"
        self.replay = f"{self.base}/replay"

    def device_state(self, device: str) -> str:
        return f"{self.base}/device/{device}/state"

    def device_event(self, device: str) -> str:
        return f"{self.base}/device/{device}/event"

    def role_of_command(self, topic: str) -> str:
        """The role a request came as: the last level of ``<base>/command/<role>`` (daemon/
        payloads.py ``parse_topic``); "" for a topic that is not this table's request."""
        where = parse_topic(self.prefix, topic)
        if where is None or where.table != self.table or where.kind is not TopicKind.COMMAND:
            return ""
        return where.name or ""


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
        # Records up to here may have reached the broker already: from the previous run
        # everything journaled but not acknowledged, then whatever this run has sent.
        self._attempted = journal.durable_seq
        #: the envelope's fields, in the models' order; ts and seq are each message's own.
        #: Every message from a table on a lab's test clock says so.
        test = journal.test_clock
        self._head: dict[str, Any] = {
            "table": table, "ts": "", "seq": 0, "republished": False, "redelivered": False,
            "test_clock": None if test is None else str(test),
        }  # fmt: skip
        self.connected = asyncio.Event()
        self.connections = 0
        self.published = 0
        self.redelivered = 0
        self._backoff = Backoff(initial=0.2, maximum=RETRY_MAX_S)
        self._conn: Connection | None = None

    # -- what the daemon calls -------------------------------------------------------------

    def enqueue(
        self,
        topic: str,
        kind: type[Envelope],
        ts: str,
        fields: Mapping[str, object],
        *,
        retain: bool = False,
        key: str | None = None,
        now: float | None = None,
    ) -> Record:
        """Journal a ``kind`` message made of ``fields`` (all but the envelope's); returns its
        record at once: the journal gives it its seq, the drain sends it once it is durable.
        ``key`` keeps it in the journal's ``latest`` (retained topics always are) for restoring
        the table after a restart; ``now``: the run's clock as read for the event."""
        head, plain = self._head, kind in PLAIN

        def payload(seq: int) -> bytes:
            message = {**head, "ts": ts, "seq": seq, **fields}
            if plain:
                # every field given as is, in the model's order: serialised straight from the
                # dict, byte for byte what the model gives (tests/test_payloads.py checks it)
                return to_json(message, inf_nan_mode="null")
            return kind(**message).model_dump_json().encode()

        record = self.journal.append(topic, payload, retain=retain, key=key, ts=now)
        if retain:
            self._retained[topic] = (record.seq, record.payload)
        return record

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
        """Journal the table's status (retained)."""
        fields = {"status": status, "version": __version__}
        return self.enqueue(self.topics.status, StatusPayload, utc_ms(), fields, retain=True)

    def stop(self) -> None:
        """Journal the clean offline status; the daemon flushes after this."""
        self._status("offline")

    async def run(self) -> NoReturn:
        while True:
            try:
                await self._connect_and_serve()
            except MqttError as exc:
                self.connected.clear()
                delay = self._backoff.next()
                log.warning("broker_unavailable", url=self.broker.url, why=str(exc),
                            retry_in_s=round(delay, 2))  # fmt: skip
                await asyncio.sleep(delay)

    def _will(self) -> codec.Will:
        """Messages go out strictly in seq order. The will cannot know when it will be sent, so
        it takes no new number: it repeats the last one journaled so far and says will=true."""
        payload = StatusPayload(**{**self._head, "ts": utc_ms(),
                                   "seq": max(self.journal.next_seq - 1, 0)},
                                status="offline", version=__version__, will=True)  # fmt: skip
        return codec.Will(self.topics.status, payload.model_dump_json().encode())

    async def _connect_and_serve(self) -> None:
        conn = await connect(
            self.broker.endpoint(), self.client_id, keepalive=self.broker.keepalive_s,
            clean_start=True, will=self._will(), on_messages=self._commands,
            within_s=CONNECT_TIMEOUT_S,
        )  # fmt: skip
        try:
            self.connections += 1
            self._backoff.reset()
            await self._republish_retained(conn)
            # "online" takes its place in the journal, behind anything queued while away.
            self._status("online")
            if self._on_command is not None:
                await conn.subscribe([(self.topics.command_filter, 1)])
            self.connected.set()
            self._conn = conn
            log.info("broker_connected", url=self.broker.url, client_id=self.client_id,
                     unsent=self.pending)  # fmt: skip
            # not a TaskGroup: run() catches MqttError, and a 3.11 TaskGroup can absorb the
            # daemon's cancellation into the broker's disconnect error (drivers/tasks.py)
            await first_to_end(
                {"mqtt.closed": _closed(conn), "mqtt.drain": _Drain(self, conn).run()}
            )
        finally:
            self._conn = None
            conn.close()  # a stop says DISCONNECT; a lost connection is closed already

    async def _republish_retained(self, conn: Connection) -> None:
        """Retained state whose latest payload is not still waiting to be sent, again: a broker
        that restarted without persistence would otherwise serve stale state."""
        for topic, (seq, payload) in list(self._retained.items()):
            if seq <= self.journal.acked and topic != self.topics.status:
                again = marked(payload, republished=True)
                chain = await self._chain_of(seq) if self._v5 else None
                await conn.publish(topic, again, retain=True, user_properties=chain)

    def _commands(self, messages: list[codec.Publish]) -> None:
        """Requests, delivered in the order they came (each acknowledged once handled)."""
        if self._on_command is None:
            return
        for message in messages:
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

    async def send_unjournaled(self, topic: str, payloads: list[bytes]) -> None:
        """Send these (QoS 1, not retained, not journaled: repeats such as replays) on the
        current connection, up to ``window`` in flight; returns when the broker has
        acknowledged them all. MqttError when there is no connection or it drops."""
        conn = self._conn
        if conn is None or not conn.is_open:
            raise MqttError("no broker connection")
        for start in range(0, len(payloads), self.window):
            chunk = payloads[start : start + self.window]
            await asyncio.gather(*(conn.publish(topic, p) for p in chunk))


async def _closed(conn: Connection) -> None:
    """Ends, raising why, when the connection does."""
    await conn.closed


class _Drain:
    """One connection's sending of the journal's durable records: in seq order, QoS 1, up to
    the window (the publisher's, or fewer when the broker's Receive Maximum says so), each
    marked acknowledged in the journal as its PUBACK comes (mqtt/window.py keeps the order).

    Records the journal holds in memory are sent from its "durable" callback and PUBACKs taken
    as the connection reads them, all on the event loop, without waking a task: the task runs
    only for what needs waiting (a read from disk, while nothing else sends), for what came
    while the window was full, and once a second, to find a message the broker left
    unacknowledged for ``CONNECT_TIMEOUT_S``, which drops the connection."""

    def __init__(self, publisher: Publisher, conn: Connection) -> None:
        self.publisher = publisher
        self.journal = journal = publisher.journal
        self.conn = conn
        self.v5 = publisher._v5
        size = min(publisher.window, conn.receive_maximum)
        self.window = Window(size, cursor=journal.acked + 1, attempted=publisher._attempted)
        self.loop = asyncio.get_running_loop()
        self.wake = asyncio.Event()
        self.failed: list[Exception] = []  # raised in a callback: the task raises it
        self.reading = False  # the task waits for records from disk: only it sends meanwhile
        self.pumping = False  # a pump is scheduled for after this read's PUBACKs
        self.ticker: asyncio.TimerHandle | None = None

    def send(self, batch: list[Record]) -> None:
        """These records, next in seq order, in one write."""
        window, conn, publisher = self.window, self.conn, self.publisher
        at = self.loop.time()
        packets = []
        for record in batch:
            pid = conn.claim_id()
            payload = record.payload
            if window.send(record.seq, pid, at):
                payload = marked(payload, redelivered=True)
                publisher.redelivered += 1
            chain = publisher.chain(record) if self.v5 else None
            packets.append(codec.publish(record.topic, payload, qos=1, packet_id=pid,
                                         retain=record.retain, user_properties=chain,
                                         v5=self.v5))  # fmt: skip
        publisher._attempted = window.attempted
        if packets:
            conn.write(b"".join(packets))

    def on_puback(self, ack: codec.PubAck) -> None:
        """(the connection's callback, once per PUBACK of one of ours)"""
        if ack.reason >= 0x80:  # the record stays in the journal; a replay can still serve it
            log.warning("publish_refused", packet_id=ack.packet_id, reason=f"0x{ack.reason:02x}")
        journal, publisher = self.journal, self.publisher
        for seq in self.window.acknowledged(ack.packet_id):
            journal.mark_acked(seq)
            publisher.published += 1
        if not self.window and journal.acked >= journal.next_seq - 1:
            publisher._emptied.set()
        if not self.pumping:  # once for all the PUBACKs of this read
            self.pumping = True
            self.loop.call_soon(self.pump)

    def _due_in_memory(self) -> list[Record] | None:
        """The durable records next in line, as many as the window has room for ([] when none
        are due); None when memory no longer holds them (the task reads them from disk)."""
        room, cursor = self.window.room, self.window.cursor
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

    def _tick(self) -> None:  # a PUBACK that never comes is looked for once a second
        self.wake.set()
        self.ticker = self.loop.call_later(1.0, self._tick)

    def _overdue(self) -> None:
        oldest = self.window.oldest()
        if oldest is not None and self.loop.time() - oldest.at > CONNECT_TIMEOUT_S:
            raise MqttError(f"no PUBACK for seq {oldest.seq} within {CONNECT_TIMEOUT_S:.0f} s")

    async def run(self) -> NoReturn:
        journal, window = self.journal, self.window
        self.conn.on_puback = self.on_puback
        journal.on_durable = self.pump
        self._tick()
        try:
            while True:
                self.wake.clear()
                if self.failed:
                    raise self.failed[0]
                self._overdue()
                batch = self._due_in_memory()
                if batch is None:
                    self.reading = True
                    try:
                        batch = await journal.read_from(window.cursor, window.room)
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
