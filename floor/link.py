"""The floor's connection to its broker: a small MQTT v5 client on ``asyncio.Protocol``
(the packets: floor/mqtt.py), made for taking a flood of QoS 1 messages.

Why not aiomqtt here (docs/floor.md, "The receiving client"): paho's per-message work and
aiomqtt's queue hop capped one floor near 4,000 messages/s; this client parses every packet
in a socket read at once and hands them to the floor in one call. And it does not acknowledge
a message on receipt: the floor calls ``ack`` once the batch holding it is committed to the
store, so a floor killed at any moment loses nothing its broker delivered (the broker sends the
unacknowledged ones again, to this session when it is back, or to another member of a shared
group). The Receive Maximum it asks for bounds how many the broker has out to it meanwhile.

``Link.run`` connects, subscribes and stays connected until cancelled: a broker that goes away
or breaks protocol (a malformed packet: logged with what and where) is connected to again after
a jittered, capped pause (drivers/backoff.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import structlog

from tableside.drivers.backoff import Backoff
from tableside.floor import mqtt

__all__ = ["RETAIN_AS_PUBLISHED", "Link", "LinkError", "Subscription"]

log = structlog.get_logger("tableside.floor.link")

#: SUBSCRIBE options (3.8.3.1): QoS 1, Retain As Published
RETAIN_AS_PUBLISHED = 0x01 | 0x08

#: what the floor is given: the messages of one socket read, and the connection they came on
Take = Callable[[list[mqtt.Publish], int], None]


class LinkError(Exception):
    """The broker refused, broke protocol, or the connection is gone."""


@dataclass(frozen=True)
class Subscription:
    topic: str
    options: int = RETAIN_AS_PUBLISHED


class _Connection(asyncio.Protocol):
    """One TCP (or TLS) connection's packets; the floor's messages go to ``take``."""

    def __init__(self, take: Take, generation: int) -> None:
        self.take = take
        self.generation = generation
        self.reader = mqtt.Reader()
        self.transport: asyncio.Transport | None = None
        loop = asyncio.get_running_loop()
        self.connack: asyncio.Future[mqtt.ConnAck] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()
        # read by the session while it lasts; one that ended first must not log it as lost
        self.closed.add_done_callback(lambda f: f.cancelled() or f.exception())
        self.waiting: dict[int, asyncio.Future[mqtt.PubAck | mqtt.SubAck]] = {}
        self.heard = loop.time()
        #: not reading (the floor holds enough): the broker's silence is then this side's
        self.paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.heard = asyncio.get_running_loop().time()
        try:
            packets = self.reader.feed(data)
        except mqtt.MalformedPacket as exc:
            log.error("floor_mqtt_malformed", error=str(exc))
            self.fail(LinkError(f"malformed packet from the broker: {exc}"))
            return  # the packets before it were all acknowledged or not: sent again either way
        publishes: list[mqtt.Publish] = []
        for packet in packets:
            if type(packet) is mqtt.Publish:
                if packet.qos == 2:  # subscribed at QoS 1: a broker never sends 2 (3.8.4)
                    self.fail(LinkError("a QoS 2 PUBLISH on a QoS 1 subscription"))
                    return
                publishes.append(packet)
            else:
                self._control(packet)
        if publishes:
            self.take(publishes, self.generation)

    def _control(self, packet: mqtt.Packet) -> None:
        if isinstance(packet, mqtt.PubAck | mqtt.SubAck):
            waiter = self.waiting.pop(packet.packet_id, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(packet)
        elif isinstance(packet, mqtt.ConnAck):
            if self.connack.done():
                self.fail(LinkError("a second CONNACK"))
            else:
                self.connack.set_result(packet)
        elif isinstance(packet, mqtt.Disconnect):
            self.fail(LinkError(f"the broker disconnected: reason 0x{packet.reason:02x} "
                                f"{packet.reason_string or ''}".rstrip()))  # fmt: skip

    def write(self, data: bytes) -> None:
        if self.transport is None or self.transport.is_closing():
            raise LinkError("not connected")
        self.transport.write(data)

    def fail(self, exc: Exception) -> None:
        if not self.closed.done():
            self.closed.set_exception(exc)
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_exception(
                LinkError(f"connection lost: {exc or 'closed by the broker'}")
            )
        if not self.connack.done():
            self.connack.set_exception(LinkError("connection lost before CONNACK"))
        for waiter in self.waiting.values():
            if not waiter.done():
                waiter.set_exception(LinkError("connection lost"))
        self.waiting.clear()


@dataclass
class Link:
    """A persistent MQTT v5 session (clean start off) that subscribes to ``subscriptions`` at
    QoS 1 and hands every message to ``take``; the floor acknowledges them with ``ack``."""

    url: str
    client_id: str
    subscriptions: list[Subscription]
    take: Take
    session_expiry: int
    username: str | None = None
    password: str | None = None
    #: how many unacknowledged QoS 1 messages the broker may have out to this client (3.1.2.11.3)
    receive_maximum: int = 65_535
    keepalive: int = 30
    #: set while connected and subscribed
    subscribed: asyncio.Event = field(default_factory=asyncio.Event)
    #: called each time the subscription is made
    on_subscribed: Callable[[], None] | None = None
    generation: int = 0
    _conn: _Connection | None = None
    _next_id: int = 0

    async def run(self) -> None:
        backoff = Backoff(initial=0.2, maximum=5.0)
        while True:
            try:
                await self._session(backoff)
            except (LinkError, OSError, TimeoutError) as exc:
                log.warning("floor_broker_lost", broker=self.url, error=str(exc) or repr(exc))
            finally:
                self.subscribed.clear()
                conn, self._conn = self._conn, None
                if conn is not None and conn.transport is not None:
                    if not conn.transport.is_closing():  # a stop: say so, keep the session
                        with contextlib.suppress(RuntimeError):
                            conn.transport.write(mqtt.disconnect())
                    conn.transport.close()
            await asyncio.sleep(backoff.next())

    async def _session(self, backoff: Backoff) -> None:
        parts = urlsplit(self.url)
        tls = parts.scheme == "mqtts"
        context = ssl.create_default_context() if tls else None
        host = parts.hostname or "127.0.0.1"
        loop = asyncio.get_running_loop()
        self.generation += 1
        conn = _Connection(self.take, self.generation)
        async with asyncio.timeout(10):
            await loop.create_connection(lambda: conn, host, parts.port or (8883 if tls else 1883),
                                         ssl=context)  # fmt: skip
        self._conn = conn
        conn.write(mqtt.connect(
            self.client_id, keepalive=self.keepalive, clean_start=False,
            session_expiry=self.session_expiry, receive_maximum=self.receive_maximum,
            username=self.username, password=self.password,
        ))  # fmt: skip
        async with asyncio.timeout(10):
            connack = await conn.connack
        if connack.reason != 0:
            raise LinkError(f"the broker refused the connection: reason 0x{connack.reason:02x} "
                            f"{connack.reason_string or ''}".rstrip())  # fmt: skip
        keepalive = connack.server_keep_alive or self.keepalive
        pid = self._packet_id(conn)
        waiter: asyncio.Future[mqtt.PubAck | mqtt.SubAck] = loop.create_future()
        conn.waiting[pid] = waiter
        conn.write(mqtt.subscribe(pid, [(s.topic, s.options) for s in self.subscriptions]))
        async with asyncio.timeout(10):
            suback = await waiter
        if not isinstance(suback, mqtt.SubAck):
            raise LinkError(f"a PUBACK for the SUBSCRIBE's packet id {pid}")
        reasons = suback.reasons
        refused = [s.topic for s, r in zip(self.subscriptions, reasons, strict=False) if r >= 0x80]
        if refused:
            raise LinkError(f"the broker refused the subscription to {refused}: {reasons}")
        backoff.reset()
        self.subscribed.set()
        if self.on_subscribed is not None:
            self.on_subscribed()
        pinger = asyncio.create_task(self._ping(conn, keepalive), name="floor-link-ping")
        try:
            await conn.closed
        finally:
            pinger.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pinger

    async def _ping(self, conn: _Connection, keepalive: int) -> None:
        """PINGREQ every half keep-alive; a broker silent for 1.5 keep-alives is gone."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(keepalive / 2)
            if conn.paused:
                conn.heard = loop.time()
            elif loop.time() - conn.heard > keepalive * 1.5:
                conn.fail(LinkError(f"the broker was silent for {keepalive * 1.5:.0f} s"))
                return
            with contextlib.suppress(LinkError):
                conn.write(mqtt.pingreq())

    def _packet_id(self, conn: _Connection) -> int:
        for _ in range(0xFFFF):
            self._next_id = self._next_id % 0xFFFF + 1
            if self._next_id not in conn.waiting:
                return self._next_id
        raise LinkError("every packet id is in use")

    def ack(self, generation: int, packet_ids: list[int]) -> bool:
        """Acknowledge messages received on connection ``generation``; False (and nothing sent)
        when that connection is gone: the broker sends them again on the next."""
        conn = self._conn
        if conn is None or conn.generation != generation or not packet_ids:
            return False
        try:
            conn.write(mqtt.pubacks(packet_ids))
        except LinkError:
            return False
        return True

    def pause(self) -> None:
        """Stop reading the socket (the floor holds enough); ``resume`` reads again."""
        conn = self._conn
        if conn is not None and conn.transport is not None and not conn.transport.is_closing():
            conn.paused = True
            conn.transport.pause_reading()

    def resume(self) -> None:
        conn = self._conn
        if conn is not None and conn.transport is not None and not conn.transport.is_closing():
            conn.paused = False
            conn.transport.resume_reading()

    async def publish(self, topic: str, payload: bytes, *, within_s: float = 10.0) -> None:
        """QoS 1, not retained; returns once the broker has it (PUBACK), raises ``LinkError``
        when there is no connection, it is lost meanwhile, or the broker refuses it."""
        conn = self._conn
        if conn is None or not self.subscribed.is_set():
            raise LinkError("not connected")
        pid = self._packet_id(conn)
        waiter: asyncio.Future[mqtt.PubAck | mqtt.SubAck]
        waiter = asyncio.get_running_loop().create_future()
        conn.waiting[pid] = waiter
        try:
            conn.write(mqtt.publish(topic, payload, qos=1, packet_id=pid))
            async with asyncio.timeout(within_s):
                answer = await waiter
        except TimeoutError as exc:
            raise LinkError(f"no PUBACK within {within_s} s") from exc
        finally:
            conn.waiting.pop(pid, None)
        if not isinstance(answer, mqtt.PubAck):
            raise LinkError(f"a SUBACK for the PUBLISH's packet id {pid}")
        if answer.reason >= 0x80:
            raise LinkError(f"the broker refused the publish: reason 0x{answer.reason:02x}")
