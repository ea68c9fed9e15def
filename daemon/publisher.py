"""The MQTT side: one connection at a time to the broker, its own reconnect loop, an ordered
outbox, retained state re-published after every reconnect, and a last will.

Messages are published in the order they were queued, QoS 1, and taken off the outbox only
when the broker has acknowledged them. A fresh aiomqtt Client per connection: aiomqtt 2.x
keeps an unacknowledged QoS 1 message inside paho and resends it on reconnect, which would
double it up behind our own resend. While the broker is away the outbox keeps messages in
memory (bounded, see ``max_outbox``); the durable journal of issue 5 replaces that bound.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, NoReturn

import aiomqtt
import structlog

from tableside import __version__
from tableside.daemon.config import BrokerConfig
from tableside.daemon.payloads import Envelope, StatusPayload, utc_ms
from tableside.daemon.seq import SeqCounter
from tableside.drivers.backoff import Backoff

__all__ = ["CommandHandler", "OutMessage", "Publisher", "Topics"]

log = structlog.get_logger("tableside.mqtt")

CommandHandler = Callable[[str, bytes], None]


class Topics:
    """Every topic of one table, under the configured prefix (docs/mqtt.md)."""

    def __init__(self, prefix: str, table: str) -> None:
        self.base = f"{prefix}/{table}"
        self.status = f"{self.base}/status"
        self.ruling = f"{self.base}/ruling"
        self.command_filter = f"{self.base}/device/+/command"

    def device_state(self, device: str) -> str:
        return f"{self.base}/device/{device}/state"

    def device_event(self, device: str) -> str:
        return f"{self.base}/device/{device}/event"

    def command_result(self, device: str) -> str:
        return f"{self.base}/device/{device}/command/result"

    def device_of_command(self, topic: str) -> str | None:
        prefix, suffix = f"{self.base}/device/", "/command"
        if topic.startswith(prefix) and topic.endswith(suffix):
            device = topic[len(prefix) : -len(suffix)]
            return device if device and "/" not in device else None
        return None


@dataclass(frozen=True, slots=True)
class OutMessage:
    topic: str
    payload: bytes
    retain: bool


class Publisher:
    def __init__(
        self,
        broker: BrokerConfig,
        table: str,
        client_id: str,
        seq: SeqCounter,
        *,
        on_command: CommandHandler | None = None,
        max_outbox: int = 100_000,
    ) -> None:
        self.broker = broker
        self.table = table
        self.client_id = client_id
        self.topics = Topics(broker.topic_prefix, table)
        self._seq = seq
        self._on_command = on_command
        self._outbox: collections.deque[OutMessage] = collections.deque()
        self._max_outbox = max_outbox
        self._wakeup = asyncio.Event()
        self._emptied = asyncio.Event()
        # Latest retained payload per topic, as the model (so it can be marked republished).
        self._retained: dict[str, Envelope] = {}
        self.connected = asyncio.Event()
        self.connections = 0
        self.published = 0
        self.dropped = 0
        self._backoff = Backoff(initial=0.2, maximum=15.0)

    # -- what the daemon calls -------------------------------------------------------------

    def next_seq(self) -> int:
        return self._seq.next()

    def publish(self, topic: str, payload: Envelope, *, retain: bool = False) -> None:
        """Queue a message; returns at once. Retained payloads are remembered for reconnects."""
        if retain:
            self._retained[topic] = payload
        if len(self._outbox) >= self._max_outbox:
            lost = self._outbox.popleft()
            self.dropped += 1
            log.error(
                "outbox_full_dropped_oldest",
                topic=lost.topic,
                dropped_total=self.dropped,
                limit=self._max_outbox,
            )
        self._outbox.append(OutMessage(topic, payload.model_dump_json().encode(), retain))
        self._wakeup.set()

    @property
    def pending(self) -> int:
        return len(self._outbox)

    async def flush(self) -> None:
        """Wait until the outbox is empty (used at shutdown and by tests)."""
        while self._outbox:
            self._emptied.clear()
            await self._emptied.wait()

    # -- the connection loop ---------------------------------------------------------------

    def _status(self, status: Literal["online", "offline"], seq: int) -> StatusPayload:
        return StatusPayload(
            table=self.table, ts=utc_ms(), seq=seq, status=status, version=__version__
        )

    def stop(self) -> None:
        """Queue the clean offline status; the daemon flushes the outbox after this."""
        self.publish(self.topics.status, self._status("offline", self._seq.next()), retain=True)

    async def run(self) -> NoReturn:
        while True:
            try:
                await self._connect_and_serve()
            except* aiomqtt.MqttError as group:
                why = "; ".join(str(e) for e in group.exceptions)
                self.connected.clear()
                delay = self._backoff.next()
                log.warning(
                    "broker_unavailable", url=self.broker.url, why=why, retry_in_s=round(delay, 2)
                )
                await asyncio.sleep(delay)

    async def _connect_and_serve(self) -> None:
        # Messages go out strictly in seq order. The will cannot know when it will be sent, so
        # it takes no new number: it repeats the last one queued so far and says will=true.
        will_payload = self._status("offline", max(self._seq.last, 0)).model_copy(
            update={"will": True}
        )
        will = aiomqtt.Will(
            self.topics.status, will_payload.model_dump_json().encode(), qos=1, retain=True
        )
        async with aiomqtt.Client(
            self.broker.host,
            self.broker.port,
            identifier=self.client_id,
            will=will,
            clean_session=True,
            keepalive=self.broker.keepalive_s,
            timeout=10,
            **self.broker.client_kwargs(),
        ) as client:
            self.connections += 1
            self._backoff.reset()
            # Re-publish retained state whose latest payload is not still waiting in the outbox:
            # a broker that restarted without persistence would otherwise serve stale state.
            waiting = {m.topic for m in self._outbox if m.retain}
            for topic, payload in list(self._retained.items()):
                if topic not in waiting and topic != self.topics.status:
                    again = payload.model_copy(update={"republished": True})
                    await client.publish(topic, again.model_dump_json(), qos=1, retain=True)
            # "online" takes its place in the outbox, behind anything queued while away.
            self.publish(self.topics.status, self._status("online", self._seq.next()), retain=True)
            if self._on_command is not None:
                await client.subscribe(self.topics.command_filter, qos=1)
            self.connected.set()
            log.info("broker_connected", url=self.broker.url, client_id=self.client_id)
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._watch_incoming(client), name="mqtt.incoming")
                tg.create_task(self._drain(client), name="mqtt.drain")

    async def _watch_incoming(self, client: aiomqtt.Client) -> NoReturn:
        """Deliver commands; raises MqttError as soon as the connection drops."""
        async for message in client.messages:
            if self._on_command is None or not isinstance(message.payload, bytes):
                continue
            try:
                self._on_command(str(message.topic), message.payload)
            except Exception:
                # Whatever a request contains, it must not take the broker link down.
                log.exception("command_handling_failed", topic=str(message.topic))
        raise aiomqtt.MqttError("message stream ended")

    async def _drain(self, client: aiomqtt.Client) -> NoReturn:
        while True:
            while self._outbox:
                message = self._outbox[0]
                await client.publish(message.topic, message.payload, qos=1, retain=message.retain)
                # Only now: a publish that failed stays at the head and is sent again.
                self._outbox.popleft()
                self.published += 1
            self._emptied.set()
            self._wakeup.clear()
            await self._wakeup.wait()
