"""The floor's connection to its broker: a persistent MQTT v5 session on the one connection every
tableside client uses (mqtt/connection.py), made for taking a flood of QoS 1 messages.

Why not a library here (docs/floor.md, "The receiving client"): paho's per-message work and
aiomqtt's queue hop capped one floor near 4,000 messages/s; this client parses every packet
in a socket read at once and hands them to the floor in one call. And it does not acknowledge
a message on receipt: the floor calls ``ack`` once the batch holding it is committed to the
store, so a floor killed at any moment loses nothing its broker delivered (the broker sends the
unacknowledged ones again, to this session when it is back, or to another member of a shared
group). The Receive Maximum it asks for bounds how many the broker has out to it meanwhile.

``Link.run`` connects, subscribes and stays connected until cancelled: a broker that goes away
or breaks protocol (a malformed packet: logged with what and where) is connected to again after
a jittered, capped pause (drivers/backoff.py), which starts small again only after a connection
that lived ``STABLE_S`` and took the subscriptions (one that accepts and cuts is not
hammered: drivers/backoff.py). A broker that refuses the
subscriptions, or takes no wildcard or shared ones, is said as an error each time. A session
the broker did not keep (CONNACK's Session Present 0 on a reconnect) is said: what came while
the floor was away is then missing at the broker, and the floor's gaps show it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from tableside.drivers.backoff import Backoff
from tableside.mqtt import codec as mqtt
from tableside.mqtt.connection import (
    BeyondLimits,
    Connection,
    Endpoint,
    MqttError,
    SubscriptionRefused,
    connect,
)

__all__ = ["RETAIN_AS_PUBLISHED", "Link", "Subscription"]

log = structlog.get_logger("tableside.floor.link")

#: SUBSCRIBE options (3.8.3.1): QoS 1, Retain As Published
RETAIN_AS_PUBLISHED = 0x01 | 0x08

#: what the floor is given: the messages of one socket read, and the connection they came on
Take = Callable[[list[mqtt.Publish], int], None]


@dataclass(frozen=True)
class Subscription:
    topic: str
    options: int = RETAIN_AS_PUBLISHED


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
    _conn: Connection | None = None

    async def run(self) -> None:
        backoff = Backoff(initial=0.2, maximum=5.0)
        loop = asyncio.get_running_loop()
        while True:
            subscribed = False
            try:
                await self._session(backoff)
            except (SubscriptionRefused, BeyondLimits) as exc:
                log.error("floor_subscription_refused", broker=self.url, error=str(exc))
            except MqttError as exc:
                log.warning("floor_broker_lost", broker=self.url, error=str(exc) or repr(exc))
            finally:
                subscribed = self.subscribed.is_set()
                self.subscribed.clear()
                conn, self._conn = self._conn, None
                if conn is not None:
                    conn.close()  # a stop says DISCONNECT and keeps the session
                    await conn.drained()
            backoff.ended(loop.time(), worked=subscribed)
            await asyncio.sleep(backoff.next())

    async def _session(self, backoff: Backoff) -> None:
        self.generation += 1
        generation, take = self.generation, self.take
        self._conn = conn = await connect(
            Endpoint(self.url, self.username, self.password), self.client_id,
            keepalive=self.keepalive, clean_start=False, session_expiry=self.session_expiry,
            receive_maximum=self.receive_maximum, auto_ack=False,
            on_messages=lambda publishes: take(publishes, generation),
        )  # fmt: skip
        backoff.connected(asyncio.get_running_loop().time())
        limits = conn.limits
        if generation > 1 and not limits.session_present and self.session_expiry:
            log.warning("floor_session_not_kept", broker=self.url, client_id=self.client_id)
        if limits.session_expiry is not None and limits.session_expiry < self.session_expiry:
            # 3.2.2.3.2: the broker keeps the session for less than asked
            log.warning("floor_session_expiry_shortened", broker=self.url,
                        asked_s=self.session_expiry, kept_s=limits.session_expiry)  # fmt: skip
        await conn.subscribe([(s.topic, s.options) for s in self.subscriptions])
        self.subscribed.set()
        if self.on_subscribed is not None:
            self.on_subscribed()
        await conn.ended()

    def ack(self, generation: int, packet_ids: list[int]) -> bool:
        """Acknowledge messages received on connection ``generation``; False (and nothing sent)
        when that connection is gone: the broker sends them again on the next."""
        conn = self._conn
        if conn is None or self.generation != generation:
            return False
        return conn.ack(packet_ids)

    def pause(self) -> None:
        """Stop reading the socket (the floor holds enough); ``resume`` reads again."""
        if self._conn is not None:
            self._conn.pause()

    def resume(self) -> None:
        if self._conn is not None:
            self._conn.resume()

    async def publish(self, topic: str, payload: bytes, *, within_s: float = 10.0) -> None:
        """QoS 1, not retained; returns once the broker has it (PUBACK), raises ``MqttError``
        when there is no connection, it is lost meanwhile, or the broker refuses it."""
        conn = self._conn
        if conn is None or not self.subscribed.is_set():
            raise MqttError("not connected")
        await conn.publish(topic, payload, within_s=within_s)
