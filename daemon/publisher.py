"""The MQTT side: one connection at a time to the broker, its own reconnect loop, the journal
drained in order, retained state re-published after every reconnect, and a last will.

Every message is journaled first (daemon/journal.py) and sent only once the journal has
committed it. The publisher sends the journal's records in seq order, QoS 1, up to ``window``
in flight, and marks them acknowledged in the journal as the broker's PUBACKs come back (the
broker acknowledges in order on one connection). After a dropped connection or a restart it
starts again from the first unacknowledged record; a record that may already have reached the
broker goes out with ``"redelivered": true`` and its original seq, so a subscriber can drop it.

With MQTT v5 every journaled message carries its record's chain entry as user properties
(daemon/proof.py, docs/floor.md): ``chain-prev``, ``chain-hash``, ``chain-ts``. Retained state
sent again after a reconnect carries its original record's entry, read back from the journal.

A fresh aiomqtt Client per connection: aiomqtt 2.x keeps an unacknowledged QoS 1 message inside
paho and resends it on reconnect, which would double it up, unmarked, behind our own resend.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import threading
from collections.abc import Callable, Mapping
from typing import Any, Literal, NoReturn

import aiomqtt
import paho.mqtt.client as mqtt
import structlog
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
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


def _fail_fast_before_connack(client: aiomqtt.Client) -> None:
    """A connection the broker closes before its CONNACK (a broker starting or stopping, one
    at its connection limit) fails the attempt at once. aiomqtt ignores a disconnect before
    CONNACK and waits out its whole timeout instead: every such attempt cost the table 10 s
    on top of the retry delay. (aiomqtt 2.x internals: its paho client and its connect
    future; tests/test_reconnect.py checks this still works.)"""
    paho = client._client
    ignored = paho.on_disconnect
    loop = asyncio.get_running_loop()

    def refuse(error: aiomqtt.MqttError) -> None:
        connected = client._connected
        if not connected.done():
            connected.set_exception(error)
            connected.exception()  # raised to whoever awaits it; no warning if nobody does

    def on_disconnect(*args: Any) -> None:
        # paho calls this from the connecting thread or from the event loop
        error = aiomqtt.MqttError("the broker closed the connection before CONNACK")
        loop.call_soon_threadsafe(refuse, error)
        if ignored is not None:
            ignored(*args)

    paho.on_disconnect = on_disconnect


def _write_from_the_loop(client: aiomqtt.Client) -> None:
    """paho asks to have its socket watched for writing each time it queues a packet, and
    aiomqtt does it by ``call_soon_threadsafe`` (paho may ask from the thread that connects):
    a write to the loop's self-pipe and a wake-up more per message. Asked on the loop's own
    thread, the socket is watched at once here; the drain then writes what it queued itself
    (``loop_write``), and paho stops the watch. (aiomqtt 2.x internals: its paho client and
    its disconnect future; tests/test_reconnect.py checks this still works.)"""
    paho = client._client
    threadsafe = paho.on_socket_register_write
    loop = asyncio.get_running_loop()
    here = threading.get_ident()

    def write() -> None:
        try:
            paho.loop_write()
        except Exception as exc:  # a broken connection: as aiomqtt says it
            if not client._disconnected.done():
                client._disconnected.set_exception(exc)

    def register(c: Any, userdata: Any, sock: Any) -> None:
        if threading.get_ident() == here:
            loop.add_writer(sock.fileno(), write)
        elif threadsafe is not None:
            threadsafe(c, userdata, sock)

    paho.on_socket_register_write = register


def _utf8(text: str) -> bytes:
    data = text.encode()
    return len(data).to_bytes(2, "big") + data


class _ChainProperties(Properties):
    """PUBLISH properties holding only user properties, encoded once here (MQTT 5.0 §2.2.2:
    a variable byte integer length, then per pair 0x26 and two length-prefixed UTF-8
    strings). paho's generic code (validating each attribute set, packing each property)
    costs some 20 µs a message, a third of a backlog's drain rate."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        object.__setattr__(self, "packetType", PacketTypes.PUBLISH)
        body = b"".join(b"\x26" + _utf8(key) + _utf8(value) for key, value in pairs)
        length, size = bytearray(), len(body)
        while True:  # the variable byte integer (§1.5.5)
            size, digit = divmod(size, 128)
            length.append(digit | (0x80 if size else 0))
            if not size:
                break
        object.__setattr__(self, "_packed", bytes(length) + body)
        object.__setattr__(self, "UserProperty", pairs)

    def pack(self) -> bytes:
        packed: bytes = object.__getattribute__(self, "_packed")
        return packed


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
        self._client: aiomqtt.Client | None = None

    # -- what the daemon calls -------------------------------------------------------------

    def enqueue(
        self,
        topic: str,
        kind: type[Envelope],
        ts: str,
        fields: Mapping[str, Any],
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
        client = self._client
        if not topic.startswith(self.topics.response_prefix):
            log.warning("response_topic_refused", topic=topic,
                        allowed=self.topics.response_prefix + "…")  # fmt: skip
            return
        if client is None:
            log.warning("response_not_sent", topic=topic, why="no broker connection")
            return
        properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        properties.CorrelationData = correlation
        task = asyncio.ensure_future(client.publish(topic, payload, qos=1, properties=properties))
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
            except aiomqtt.MqttError as exc:
                why = str(exc)
                self.connected.clear()
                delay = self._backoff.next()
                log.warning(
                    "broker_unavailable", url=self.broker.url, why=why, retry_in_s=round(delay, 2)
                )
                await asyncio.sleep(delay)

    async def _connect_and_serve(self) -> None:
        # Messages go out strictly in seq order. The will cannot know when it will be sent, so
        # it takes no new number: it repeats the last one journaled so far and says will=true.
        will_payload = StatusPayload(**{**self._head, "ts": utc_ms(),
                                        "seq": max(self.journal.next_seq - 1, 0)},
                                     status="offline", version=__version__, will=True)  # fmt: skip
        will = aiomqtt.Will(
            self.topics.status, will_payload.model_dump_json().encode(), qos=1, retain=True
        )
        kwargs = self.broker.client_kwargs()
        if kwargs["protocol"] == aiomqtt.ProtocolVersion.V5:
            kwargs["clean_start"] = True
        else:
            kwargs["clean_session"] = True
        client = aiomqtt.Client(
            self.broker.host,
            self.broker.port,
            identifier=self.client_id,
            will=will,
            keepalive=self.broker.keepalive_s,
            timeout=CONNECT_TIMEOUT_S,
            max_inflight_messages=self.window,
            **kwargs,
        )
        _fail_fast_before_connack(client)
        _write_from_the_loop(client)
        async with contextlib.AsyncExitStack() as stack:
            # aiomqtt bounds the wait for CONNACK, not the TCP connect before it (in a thread
            # of the default executor, shared with the journal's reads): bound the whole attempt
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT_S + 2):
                    await stack.enter_async_context(client)
            except TimeoutError:
                raise aiomqtt.MqttError(
                    f"no connection within {CONNECT_TIMEOUT_S + 2:.0f} s"
                ) from None
            client.pending_calls_threshold = self.window + 10  # a full window is normal here
            self.connections += 1
            self._backoff.reset()
            # Re-publish retained state whose latest payload is not still waiting to be sent:
            # a broker that restarted without persistence would otherwise serve stale state.
            for topic, (seq, payload) in list(self._retained.items()):
                if seq <= self.journal.acked and topic != self.topics.status:
                    again = marked(payload, republished=True)
                    chain = await self._chain_of(seq) if self._v5 else None
                    await client.publish(topic, again, qos=1, retain=True, properties=chain)
            # "online" takes its place in the journal, behind anything queued while away.
            self._status("online")
            if self._on_command is not None:
                await client.subscribe(self.topics.command_filter, qos=1)
            self.connected.set()
            self._client = client
            log.info("broker_connected", url=self.broker.url, client_id=self.client_id,
                     unsent=self.pending)  # fmt: skip
            try:
                # not a TaskGroup: run() catches MqttError, and a 3.11 TaskGroup can absorb the
                # daemon's cancellation into the broker's disconnect error (drivers/tasks.py)
                await first_to_end(
                    {
                        "mqtt.incoming": self._watch_incoming(client),
                        "mqtt.drain": self._drain(client),
                    }
                )
            finally:
                self._client = None

    async def _watch_incoming(self, client: aiomqtt.Client) -> NoReturn:
        """Deliver commands; raises MqttError as soon as the connection drops."""
        async for message in client.messages:
            if self._on_command is None or not isinstance(message.payload, bytes):
                continue
            reply = None
            properties = message.properties
            response_topic = getattr(properties, "ResponseTopic", None) if properties else None
            if response_topic:
                correlation = getattr(properties, "CorrelationData", b"") or b""
                reply = (str(response_topic), bytes(correlation))
            try:
                self._on_command(str(message.topic), message.payload, reply)
            except Exception:
                # Whatever a request contains, it must not take the broker link down.
                log.exception("command_handling_failed", topic=str(message.topic))
        raise aiomqtt.MqttError("message stream ended")

    @property
    def _v5(self) -> bool:
        return self.broker.mqtt_version == "5"

    @staticmethod
    def _chain(record: Record) -> Properties:
        """The record's chain entry as MQTT v5 user properties (docs/floor.md)."""
        return _ChainProperties(Chain(record.prev_hash, record.hash, record.ts).properties())

    async def _chain_of(self, seq: int) -> Properties | None:
        """The chain entry of record ``seq``, read back from the journal (retained state is
        kept as its payload only); None, said in the log, when retention has deleted it."""
        found = await self.journal.read_from(seq, 1)
        if not found or found[0].seq != seq:
            log.warning("republished_without_chain", seq=seq, why="the journal no longer has it")
            return None
        return self._chain(found[0])

    async def send_unjournaled(self, topic: str, payloads: list[bytes]) -> None:
        """Send these (QoS 1, not retained, not journaled: repeats such as replays) on the
        current connection, up to ``window`` in flight; returns when the broker has
        acknowledged them all. aiomqtt.MqttError when there is no connection or it drops."""
        client = self._client
        if client is None:
            raise aiomqtt.MqttError("no broker connection")
        for start in range(0, len(payloads), self.window):
            chunk = payloads[start : start + self.window]
            await asyncio.gather(*(client.publish(topic, p, qos=1) for p in chunk))

    async def _drain(self, client: aiomqtt.Client) -> NoReturn:
        """Send the journal's durable records in seq order, QoS 1, up to ``window`` in flight,
        and mark them acknowledged as their PUBACKs come back (in order, on one connection).

        Straight to paho, not through aiomqtt's ``publish``: that makes a task, an event and a
        ``wait_for`` (another task and a timer) per message, some ten callbacks of the event
        loop each (measured, docs/benchmarks.md). Records the journal has in memory are sent
        from its "durable" callback and PUBACKs taken in paho's, without waking this task: it
        runs to send what came while the window was full, for what needs waiting (a read from
        disk), and once a second, to find a message
        the broker left unacknowledged for ``CONNECT_TIMEOUT_S``, which drops the connection
        as aiomqtt's timeout did. (aiomqtt 2.x internals: its paho client, whose
        ``on_publish`` is taken here for our own messages and handed back after.)"""
        journal = self.journal
        v5 = self._v5
        paho = client._client
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()
        inflight: collections.deque[tuple[int, int, float]] = collections.deque()  # seq, mid, at
        ours: set[int] = set()  # paho's message ids of what is in flight
        acked: set[int] = set()  # of those, acknowledged (popped in order from ``inflight``)
        failed: list[Exception] = []  # raised in a callback: the task raises it
        cursor = journal.acked + 1  # the next seq to send
        reading = False  # the task waits for records from disk: only it sends meanwhile
        # aiomqtt's, for the other messages (responses, replays, …): paho's VERSION2 signature
        theirs: Callable[..., None] | None = paho.on_publish

        def send(batch: list[Record]) -> None:
            nonlocal cursor
            at = loop.time()
            for record in batch:
                payload = record.payload
                if record.seq <= self._attempted:
                    payload = marked(payload, redelivered=True)
                    self.redelivered += 1
                self._attempted = max(self._attempted, record.seq)
                chain = self._chain(record) if v5 else None
                info = paho.publish(record.topic, payload, 1, record.retain, chain)
                if info.rc != mqtt.MQTT_ERR_SUCCESS:
                    raise aiomqtt.MqttCodeError(info.rc, "Could not publish message")
                ours.add(info.mid)
                inflight.append((record.seq, info.mid, at))
                cursor = record.seq + 1
            if batch:
                paho.loop_write()  # now, not in another pass of the loop

        def take_acks() -> None:
            while inflight and inflight[0][1] in acked:
                seq, mid, _ = inflight.popleft()
                ours.discard(mid)
                acked.discard(mid)
                journal.mark_acked(seq)
                self.published += 1
            if not inflight and journal.acked >= journal.next_seq - 1:
                self._emptied.set()

        def pump() -> None:
            """(a callback) The acknowledged taken, what memory holds sent; the rest woken."""
            if reading:
                wake.set()
                return
            try:
                take_acks()
                room = self.window - len(inflight)
                if room > 0 and journal.durable_seq >= cursor:
                    batch = journal.read_cached(cursor, room)
                    if batch is None:
                        wake.set()
                    else:
                        send(batch)
            except Exception as exc:  # raised by the task, not lost in a callback
                failed.append(exc)
                wake.set()

        def on_publish(c: Any, userdata: Any, mid: int, reason: Any, properties: Any) -> None:
            if mid in ours:
                # Inside paho's callback: nothing here may call paho (it holds a lock it takes
                # again if a write fails: the loop would hang). What waits for room is woken.
                acked.add(mid)
                take_acks()
                if journal.durable_seq >= cursor:
                    wake.set()
            elif theirs is not None:
                theirs(c, userdata, mid, reason, properties)

        ticker: asyncio.TimerHandle | None = None

        def tick() -> None:  # a PUBACK that never comes is looked for once a second
            nonlocal ticker
            wake.set()
            ticker = loop.call_later(1.0, tick)

        paho.on_publish = on_publish
        journal.on_durable = pump
        tick()
        try:
            while True:
                wake.clear()
                if failed:
                    raise failed[0]
                take_acks()
                if inflight and loop.time() - inflight[0][2] > CONNECT_TIMEOUT_S:
                    raise aiomqtt.MqttError(
                        f"no PUBACK for seq {inflight[0][0]} within {CONNECT_TIMEOUT_S:.0f} s"
                    )
                room = self.window - len(inflight)
                if room > 0 and journal.durable_seq >= cursor:
                    batch = journal.read_cached(cursor, room)
                    if batch is None:
                        reading = True
                        try:
                            batch = await journal.read_from(cursor, room)
                        finally:
                            reading = False
                    send(batch)
                    continue  # and look again: more may have come meanwhile
                await wake.wait()
        finally:
            if ticker is not None:
                ticker.cancel()
            journal.on_durable = None
            paho.on_publish = theirs
