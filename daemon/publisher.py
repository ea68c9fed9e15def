"""The MQTT side: one connection at a time to the broker, its own reconnect loop, the journal
drained in order, retained state re-published after every reconnect, and a last will.

Every message is journaled first (daemon/journal.py) and sent only once the journal has
committed it. The publisher sends the journal's records in seq order, QoS 1, up to ``window``
in flight, and marks them acknowledged in the journal as the broker's PUBACKs come back (the
broker acknowledges in order on one connection). After a dropped connection or a restart it
starts again from the first unacknowledged record; a record that may already have reached the
broker goes out with ``"redelivered": true`` and its original seq, so a subscriber can drop it.

A fresh aiomqtt Client per connection: aiomqtt 2.x keeps an unacknowledged QoS 1 message inside
paho and resends it on reconnect, which would double it up, unmarked, behind our own resend.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
from collections.abc import Callable
from typing import Any, Literal, NoReturn

import aiomqtt
import structlog
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from tableside import __version__
from tableside.daemon.config import BrokerConfig
from tableside.daemon.journal import Journal
from tableside.daemon.payloads import Envelope, StatusPayload, utc_ms
from tableside.daemon.proof import marked
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


class Topics:
    """Every topic of one table, under the configured prefix (docs/mqtt.md)."""

    def __init__(self, prefix: str, table: str) -> None:
        self.base = f"{prefix}/{table}"
        self.status = f"{self.base}/status"
        self.ruling = f"{self.base}/ruling"
        self.ruling_state = f"{self.base}/ruling_state"
        self.table_state = f"{self.base}/table"
        self.command_filter = f"{self.base}/command/+"
        self.command_result = f"{self.base}/command_result"
        self.response_prefix = f"{self.base}/response/"

    def device_state(self, device: str) -> str:
        return f"{self.base}/device/{device}/state"

    def device_event(self, device: str) -> str:
        return f"{self.base}/device/{device}/event"

    def role_of_command(self, topic: str) -> str:
        """The role a request came as: the last level of ``<base>/command/<role>``."""
        return topic.removeprefix(f"{self.base}/command/")


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
        self.connected = asyncio.Event()
        self.connections = 0
        self.published = 0
        self.redelivered = 0
        self._backoff = Backoff(initial=0.2, maximum=RETRY_MAX_S)
        self._client: aiomqtt.Client | None = None

    # -- what the daemon calls -------------------------------------------------------------

    def next_seq(self) -> int:
        """The seq the next ``publish`` must carry (the journal numbers records in order)."""
        return self.journal.next_seq

    def publish(
        self, topic: str, payload: Envelope, *, retain: bool = False, key: str | None = None
    ) -> None:
        """Journal a message for sending; returns at once. ``key`` keeps it in the journal's
        ``latest`` (retained topics always are) for restoring the table after a restart."""
        data = self._stamped(payload).model_dump_json().encode()
        self.journal.append(payload.seq, topic, data, retain=retain, key=key)
        if retain:
            self._retained[topic] = (payload.seq, data)

    def _stamped(self, payload: Envelope) -> Envelope:
        """Every message from a table on a lab's test clock says so."""
        test = self.journal.test_clock
        return payload if test is None else payload.model_copy(update={"test_clock": str(test)})

    def restore_retained(self, topic: str, payload: bytes) -> None:
        """Retained state from the journal, sent again on the next connection."""
        seq = int(json.loads(payload).get("seq", -1))
        self._retained.setdefault(topic, (seq, payload))

    def respond(self, reply: tuple[str, bytes], payload: Envelope) -> None:
        """MQTT v5: send a copy of a command's result to the requester's response topic, with
        its correlation data (the result itself is journaled on command_result). Only topics
        under ``<table>/response/`` (the table's own subtree, which the ACL lets it write)."""
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
        data = self._stamped(payload).model_dump_json().encode()
        task = asyncio.ensure_future(client.publish(topic, data, qos=1, properties=properties))
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

    def _status(self, status: Literal["online", "offline"], seq: int) -> StatusPayload:
        return StatusPayload(
            table=self.table, ts=utc_ms(), seq=seq, status=status, version=__version__
        )

    def stop(self) -> None:
        """Journal the clean offline status; the daemon flushes after this."""
        self.publish(self.topics.status, self._status("offline", self.next_seq()), retain=True)

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
        will_payload = self._status("offline", max(self.journal.next_seq - 1, 0)).model_copy(
            update={"will": True}
        )
        will = aiomqtt.Will(
            self.topics.status,
            self._stamped(will_payload).model_dump_json().encode(),
            qos=1,
            retain=True,
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
                    await client.publish(topic, again, qos=1, retain=True)
            # "online" takes its place in the journal, behind anything queued while away.
            self.publish(self.topics.status, self._status("online", self.next_seq()), retain=True)
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

    async def _drain(self, client: aiomqtt.Client) -> NoReturn:
        journal = self.journal
        cursor = journal.acked + 1
        inflight: collections.deque[tuple[int, asyncio.Task[None]]] = collections.deque()
        try:
            while True:
                room = self.window - len(inflight)
                batch = await journal.read_from(cursor, room) if room > 0 else []
                for record in batch:
                    payload = record.payload
                    if record.seq <= self._attempted:
                        payload = marked(payload, redelivered=True)
                        self.redelivered += 1
                    self._attempted = max(self._attempted, record.seq)
                    # paho takes the message (in this order) when the task first runs
                    send = client.publish(record.topic, payload, qos=1, retain=record.retain)
                    inflight.append((record.seq, asyncio.ensure_future(send)))
                cursor += len(batch)
                if inflight:
                    # The broker acknowledges in order: the head first. Waited on, not awaited:
                    # a cancel of the drain must not go through aiomqtt's wait_for, which on 3.11
                    # returns normally when the PUBACK comes in the same loop iteration.
                    await asyncio.wait([inflight[0][1]])
                    while inflight and inflight[0][1].done():
                        seq, task = inflight.popleft()
                        task.result()
                        journal.mark_acked(seq)
                        self.published += 1
                    continue
                if journal.acked >= journal.next_seq - 1:
                    self._emptied.set()
                await journal.wait_durable(cursor)
        finally:
            for _, task in inflight:
                task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.gather(*(task for _, task in inflight), return_exceptions=True)
