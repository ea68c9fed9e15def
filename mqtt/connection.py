"""One MQTT client connection on ``asyncio.Protocol`` (the packets: mqtt/codec.py), shared by
every tableside client: the table's publisher, the floor's link, the monitor, the web view and
``tableside command``.

``connect`` opens TCP (or TLS for ``mqtts://``), sends CONNECT (a will, clean start or a kept
session, v5 or v3.1.1) and returns once the broker's CONNACK accepts it; a broker that closes
the connection or refuses before its CONNACK fails the attempt at once, and the whole attempt
is bounded. Then:

- ``publish`` sends one QoS 1 message and returns once its PUBACK comes (or raises);
- ``write`` takes a PUBLISH built elsewhere with a packet id from ``claim_id``; its PUBACK goes
  to ``on_puback`` (the table's in-flight window, mqtt/window.py, works so);
- every message received in one socket read goes to ``on_messages`` in one call; it is
  acknowledged at once (``auto_ack``) or when the owner calls ``ack`` (the floor, once stored);
- PINGREQ every half keep-alive; a broker silent for 1.5 keep-alives is gone.

Whatever ends the connection (the broker, a malformed packet, a lost socket, ``close``) ends
``closed`` with an ``MqttError`` that says why, and every wait on it with the same error.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import structlog

from tableside.errors import WireError
from tableside.mqtt import codec

__all__ = [
    "REASONS",
    "BeyondLimits",
    "ConnectRefused",
    "Connection",
    "Endpoint",
    "MqttError",
    "Refused",
    "SubscriptionRefused",
    "connect",
    "describe",
]

log = structlog.get_logger("tableside.mqtt")


class MqttError(WireError):
    """The broker refused, broke protocol, did not answer in time, or the connection is gone."""


class Refused(MqttError):
    """The broker answered a PUBLISH with a reason code of 0x80 or more (3.4.2.1): it does not
    have the message. ``reason`` and its ``name``; the connection stays up."""

    def __init__(self, topic: str, reason: int, said: str | None = None) -> None:
        self.topic, self.reason = topic, reason
        self.name = said or REASONS.get(reason, "")
        super().__init__(f"the broker refused the publish to {topic}: {describe(reason, said)}")


class SubscriptionRefused(MqttError):
    """The broker refused one or more filters of a SUBSCRIBE (3.9.3: reason 0x80 or more)."""

    def __init__(self, refused: dict[str, int]) -> None:
        self.refused = refused
        said = ", ".join(f"{f} ({describe(r)})" for f, r in refused.items())
        super().__init__(f"the broker refused the subscription to {said}")


class BeyondLimits(MqttError):
    """A message this connection's broker cannot take as it is (larger than its Maximum Packet
    Size, retained where it keeps none, QoS 1 where it takes QoS 0 only): never sent."""


#: reason codes (2.4) a person may meet in a refusal, by number
REASONS: dict[int, str] = {
    0x80: "unspecified error", 0x81: "malformed packet", 0x82: "protocol error",
    0x83: "implementation specific error", 0x84: "unsupported protocol version",
    0x85: "client identifier not valid", 0x86: "bad user name or password",
    0x87: "not authorized", 0x88: "server unavailable", 0x89: "server busy", 0x8A: "banned",
    0x8B: "server shutting down", 0x8C: "bad authentication method",
    0x8D: "keep alive timeout", 0x8E: "session taken over", 0x8F: "topic filter invalid",
    0x90: "topic name invalid", 0x91: "packet identifier in use",
    0x93: "receive maximum exceeded", 0x94: "topic alias invalid", 0x95: "packet too large",
    0x97: "quota exceeded", 0x98: "administrative action", 0x99: "payload format invalid",
    0x9A: "retain not supported", 0x9B: "QoS not supported", 0x9C: "use another server",
    0x9D: "server moved", 0x9E: "shared subscriptions not supported",
    0x9F: "connection rate exceeded", 0xA1: "subscription identifiers not supported",
    0xA2: "wildcard subscriptions not supported",
}  # fmt: skip


def describe(reason: int, said: str | None = None) -> str:
    """``reason 0x87 (not authorized)``, with the broker's own words when it gave some."""
    name = said or REASONS.get(reason)
    return f"reason 0x{reason:02x}" + (f" ({name})" if name else "")


@dataclass(frozen=True)
class Endpoint:
    """Where a broker is and how to speak to it: ``mqtt://host:port`` or ``mqtts://`` (TLS,
    verified against ``ca_file`` or the system's CAs; a client certificate when given)."""

    url: str
    username: str | None = None
    password: str | None = None
    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    v5: bool = True

    @property
    def tls(self) -> bool:
        return urlsplit(self.url).scheme == "mqtts"

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or "127.0.0.1"

    @property
    def port(self) -> int:
        return urlsplit(self.url).port or (8883 if self.tls else 1883)

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        context = ssl.create_default_context(cafile=str(self.ca_file) if self.ca_file else None)
        if self.cert_file is not None:
            context.load_cert_chain(self.cert_file, self.key_file)
        return context


Messages = Callable[[list[codec.Publish]], None]

#: the v3.1.1 CONNACK refusals (3.1.1's 3.2.2.3; v5's are REASONS)
_REFUSALS_V3 = {
    0x01: "unacceptable protocol version",
    0x02: "identifier rejected",
    0x03: "server unavailable",
    0x04: "bad user name or password",
    0x05: "not authorized",
}

#: what a client may assume of a broker until its CONNACK says more (3.2.2.3)
_DEFAULTS = codec.ConnAck(False, 0)


class Connection(asyncio.Protocol):
    """One connection's packets. Made by ``connect``; its callbacks may be set before that.

    One window for every QoS 1 PUBLISH this client sends on it (4.9: at most the broker's
    Receive Maximum unacknowledged): ``publish`` waits for a place, and a PUBLISH built
    elsewhere (``write`` with ``claim_id``) takes one, so the table's records, its command
    responses and an auditor's replay share it."""

    def __init__(
        self,
        on_messages: Messages | None,
        *,
        auto_ack: bool,
        v5: bool,
        receive_maximum: int = 65_535,
    ) -> None:
        self.on_messages = on_messages
        #: the PUBACK of a message written with a packet id from ``claim_id``
        self.on_puback: Callable[[codec.PubAck], None] | None = None
        #: a PUBACK freed a place in the broker's window (whoever waits for room looks again)
        self.on_room: Callable[[], None] | None = None
        self.auto_ack = auto_ack
        self.v5 = v5
        #: what this client asked the broker to have unacknowledged to it at most (3.3.4)
        self.receive_maximum = receive_maximum
        #: received QoS 1 messages the owner has not acknowledged yet (``auto_ack`` off)
        self._held: set[int] = set()
        #: messages the broker sent past that Receive Maximum
        self.past_receive_maximum = 0
        self.reader = codec.Reader(v5=v5)
        self.transport: asyncio.Transport | None = None
        loop = asyncio.get_running_loop()
        self.connack: asyncio.Future[codec.ConnAck] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()
        # read by whoever holds the connection; one that ended first must not log it as lost
        self.closed.add_done_callback(lambda f: f.cancelled() or f.exception())
        #: the socket itself is closed (what was written has left, or was dropped)
        self._lost: asyncio.Future[None] = loop.create_future()
        self._waiting: dict[int, asyncio.Future[codec.PubAck | codec.SubAck]] = {}
        self._publishing: set[int] = set()  # packet ids of ``publish`` awaiting their PUBACK
        self._claimed: set[int] = set()
        self._places: collections.deque[asyncio.Future[None]] = collections.deque()
        self._next_id = 0
        self.heard = loop.time()
        #: not reading (the owner holds enough): the broker's silence is then this side's
        self.paused = False
        self._pinger: asyncio.Task[None] | None = None
        #: what the broker's CONNACK allows this connection (3.2.2.3): its Receive Maximum,
        #: Maximum Packet Size, Retain Available, Maximum QoS, wildcard and shared subscriptions
        self.limits = _DEFAULTS

    # -- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.heard = asyncio.get_running_loop().time()
        try:
            packets = self.reader.feed(data)
        except codec.MalformedPacket as exc:
            # malformed (0x81), or well formed against the protocol's rules (0x82, 0x94, 0x95)
            log.error("mqtt_malformed", reason=describe(exc.reason), error=str(exc))
            self.fail(MqttError(f"{describe(exc.reason)} from the broker: {exc}"), exc.reason)
            return  # the packets before it were all acknowledged or not: sent again either way
        publishes: list[codec.Publish] = []
        for packet in packets:
            if type(packet) is codec.Publish:
                if not self.connack.done():  # 3.2.0-1: the broker's first packet is CONNACK
                    self.fail(MqttError("a PUBLISH before the broker's CONNACK"), 0x82)
                    return
                if packet.qos == 2:  # subscribed at QoS 1 at most: a broker never sends 2 (3.8.4)
                    self.fail(MqttError("a QoS 2 PUBLISH on a QoS 1 subscription"), 0x82)
                    return
                if packet.packet_id is not None and not self.auto_ack:
                    self._held.add(packet.packet_id)
                    if len(self._held) > self.receive_maximum:
                        self._past_receive_maximum()
                publishes.append(packet)
            else:
                self._control(packet)
                if self.closed.done():
                    return
        if publishes:
            self._deliver(publishes)

    def _past_receive_maximum(self) -> None:
        """More unacknowledged QoS 1 messages than the Receive Maximum this client asked for
        (4.9 says to DISCONNECT with 0x93). Mosquitto 2.0.11 does so after acknowledgements, so
        the connection is kept: counted and said once; the owner bounds what it holds itself
        (the floor stops reading its socket: floor/service.py HOLD_MAX)."""
        if not self.past_receive_maximum:
            log.warning("mqtt_past_receive_maximum", receive_maximum=self.receive_maximum,
                        unacknowledged=len(self._held))  # fmt: skip
        self.past_receive_maximum += 1

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._lost.done():
            self._lost.set_result(None)
        self._end(MqttError(f"connection lost: {exc or 'closed by the broker'}"))

    # -- what comes in ---------------------------------------------------------------------

    def _deliver(self, publishes: list[codec.Publish]) -> None:
        if self.on_messages is not None:
            self.on_messages(publishes)
        if self.auto_ack:
            self.ack([p.packet_id for p in publishes if p.packet_id is not None])

    def _control(self, packet: codec.Packet) -> None:
        if isinstance(packet, codec.ConnAck):
            if self.connack.done():
                self.fail(MqttError("a second CONNACK"), 0x82)
            else:
                self.connack.set_result(packet)
            return
        if not self.connack.done():  # 3.2.0-1
            self.fail(MqttError(f"a {type(packet).__name__} before the broker's CONNACK"), 0x82)
            return
        if isinstance(packet, codec.PubAck):
            pid = packet.packet_id
            if pid in self._claimed:
                self._claimed.discard(pid)
                self._freed()
                if self.on_puback is not None:
                    self.on_puback(packet)
                return
            if pid in self._publishing:
                self._publishing.discard(pid)
                self._freed()
        if isinstance(packet, codec.PubAck | codec.SubAck):
            waiter = self._waiting.pop(packet.packet_id, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(packet)
        elif isinstance(packet, codec.Disconnect):
            self.fail(MqttError(f"the broker disconnected: "
                                f"{describe(packet.reason, packet.reason_string)}"))  # fmt: skip

    # -- the broker's window (4.9) ---------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """QoS 1 publishes sent on this connection whose PUBACK has not come."""
        return len(self._claimed) + len(self._publishing)

    @property
    def room(self) -> int:
        """How many more QoS 1 publishes may go now (the broker's Receive Maximum, less those
        in flight, less the places ``publish`` calls are waiting for)."""
        return self.limits.receive_maximum - self.in_flight - len(self._places)

    def _freed(self) -> None:
        while self._places:
            place = self._places.popleft()
            if not place.done():
                place.set_result(None)
                break
        if self.on_room is not None:
            self.on_room()

    async def _place(self) -> None:
        """Returns once a QoS 1 publish may go (4.9: the broker's Receive Maximum)."""
        while self.limits.receive_maximum - self.in_flight <= 0 or (
            self._places and not self._places[0].done()
        ):
            if self.closed.done():
                self.closed.result()
            place: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._places.append(place)
            try:
                await place
            except BaseException:
                if place.done() and not place.cancelled() and place.exception() is None:
                    self._freed()  # woken, then cancelled or timed out: the turn passes on
                raise
            finally:
                with contextlib.suppress(ValueError):
                    self._places.remove(place)
            if self.limits.receive_maximum - self.in_flight > 0:
                return

    # -- what goes out ---------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return not self.closed.done() and self.transport is not None

    def write(self, data: bytes) -> None:
        if self.transport is None or self.transport.is_closing() or self.closed.done():
            raise MqttError("not connected")
        self.transport.write(data)

    def claim_id(self) -> int:
        """A packet id for a QoS 1 PUBLISH built elsewhere and written with ``write``: one place
        of the broker's window, given back when its PUBACK comes (to ``on_puback``). Only while
        ``room`` is above 0."""
        if self.room <= 0:
            raise MqttError(f"the broker's Receive Maximum ({self.limits.receive_maximum}) "
                            "is in flight already")  # fmt: skip
        pid = self._free_id()
        self._claimed.add(pid)
        return pid

    def release(self, packet_id: int) -> None:
        """A packet id from ``claim_id`` whose PUBLISH was not written after all: its place
        in the broker's window is free again."""
        if packet_id in self._claimed:
            self._claimed.discard(packet_id)
            self._freed()

    def check(self, topic: str, packet: bytes, *, retain: bool) -> None:
        """``BeyondLimits`` when the broker cannot take this QoS 1 PUBLISH as it is."""
        limits = self.limits
        if limits.maximum_qos == 0:
            raise BeyondLimits("the broker takes QoS 0 only (its CONNACK's Maximum QoS)")
        if retain and not limits.retain_available:
            raise BeyondLimits(f"the broker keeps no retained messages ({topic})")
        if limits.maximum_packet_size is not None and len(packet) > limits.maximum_packet_size:
            limit = limits.maximum_packet_size
            raise BeyondLimits(f"a {len(packet)}-byte PUBLISH to {topic}: larger than the "
                               f"broker's Maximum Packet Size, {limit}")  # fmt: skip

    def _free_id(self) -> int:
        for _ in range(0xFFFF):
            self._next_id = self._next_id % 0xFFFF + 1
            pid = self._next_id
            if (
                pid not in self._waiting
                and pid not in self._claimed
                and pid not in self._publishing
            ):
                return pid
        raise MqttError("every packet id is in use")

    async def _answer(
        self, data: Callable[[int], bytes], within_s: float, *, publish: bool = False
    ) -> codec.PubAck | codec.SubAck:
        waiter: asyncio.Future[codec.PubAck | codec.SubAck]
        waiter = asyncio.get_running_loop().create_future()
        pid = 0
        try:
            async with asyncio.timeout(within_s):
                if publish:
                    await self._place()
                pid = self._free_id()
                self._waiting[pid] = waiter
                if publish:
                    self._publishing.add(pid)
                self.write(data(pid))
                return await waiter
        except TimeoutError as exc:
            error = MqttError(f"no answer to packet {pid} within {within_s:.0f} s")
            if pid in self._publishing:
                # written and never acknowledged: its place would be lost for good, so the
                # connection is given up on as the table's drain gives up on one (0x80)
                self.fail(error, 0x80)
            raise error from exc
        finally:
            self._waiting.pop(pid, None)

    async def publish(
        self,
        topic: str,
        payload: bytes,
        *,
        retain: bool = False,
        user_properties: list[tuple[str, str]] | None = None,
        response_topic: str | None = None,
        correlation: bytes | None = None,
        within_s: float = 10.0,
    ) -> None:
        """QoS 1; returns once the broker has it (PUBACK), waiting first for a place in the
        broker's window. ``BeyondLimits`` (nothing sent) when the broker cannot take it as it
        is; ``Refused`` when it answers no; ``MqttError`` when there is no connection, it is
        lost meanwhile or no PUBACK comes in time."""

        def packet(pid: int) -> bytes:
            return codec.publish(
                topic, payload, qos=1, packet_id=pid, retain=retain, v5=self.v5,
                user_properties=user_properties, response_topic=response_topic,
                correlation=correlation,
            )  # fmt: skip

        self.check(topic, packet(1), retain=retain)
        answer = await self._answer(packet, within_s, publish=True)
        if not isinstance(answer, codec.PubAck):
            raise MqttError("a SUBACK for a PUBLISH's packet id")
        if answer.refused:
            raise Refused(topic, answer.reason, answer.reason_string)

    async def subscribe(self, filters: list[tuple[str, int]], *, within_s: float = 10.0) -> None:
        """SUBSCRIBE, each filter with its options byte (codec.subscribe). ``BeyondLimits``
        (nothing sent) for a wildcard or shared filter the broker said it takes none of;
        ``SubscriptionRefused`` naming the filters the broker refused."""
        limits = self.limits
        for topic, _ in filters:
            if topic.startswith("$share/") and not limits.shared_available:
                raise BeyondLimits(f"the broker takes no shared subscriptions ({topic})")
            if ("+" in topic or "#" in topic) and not limits.wildcard_available:
                raise BeyondLimits(f"the broker takes no wildcard subscriptions ({topic})")
        answer = await self._answer(lambda pid: codec.subscribe(pid, filters, v5=self.v5), within_s)
        if not isinstance(answer, codec.SubAck):
            raise MqttError("a PUBACK for a SUBSCRIBE's packet id")
        if len(answer.reasons) != len(filters):  # 3.9.3: one reason code per filter
            error = MqttError(f"a SUBACK with {len(answer.reasons)} reason codes for "
                              f"{len(filters)} filters")  # fmt: skip
            self.fail(error, 0x82)
            raise error
        refused = {f: r for (f, _), r in zip(filters, answer.reasons, strict=True) if r >= 0x80}
        if refused:
            raise SubscriptionRefused(refused)

    def ack(self, packet_ids: list[int]) -> bool:
        """Acknowledge received QoS 1 messages; False (nothing sent) when the connection is gone:
        the broker sends them again on the next."""
        if not packet_ids:
            return False
        self._held.difference_update(packet_ids)
        try:
            self.write(codec.pubacks(packet_ids))
        except MqttError:
            return False
        return True

    def pause(self) -> None:
        """Stop reading the socket (the owner holds enough); ``resume`` reads again."""
        if self.transport is not None and not self.transport.is_closing():
            self.paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.paused = False
            self.transport.resume_reading()

    # -- the end ---------------------------------------------------------------------------

    def fail(self, exc: MqttError, reason: int | None = None) -> None:
        """End the connection at once, the will kept: with v5 and a ``reason`` (4.13: 0x81
        malformed packet, 0x82 protocol error …) a DISCONNECT saying it goes first (any reason
        but 0 keeps the will, 3.1.2.5); otherwise the socket is simply dropped."""
        if reason and self.v5 and self.transport is not None and not self.transport.is_closing():
            with contextlib.suppress(RuntimeError, MqttError):
                self.write(codec.disconnect(reason))
        self._end(exc)
        if self.transport is not None:
            if reason and self.v5:
                self.transport.close()  # what is buffered (the DISCONNECT) goes first (drained)
            else:
                self.transport.abort()

    def close(self) -> None:
        """A clean end: DISCONNECT (the broker drops the will), then close."""
        if self.transport is not None and not self.transport.is_closing():
            with contextlib.suppress(RuntimeError, MqttError):
                self.write(codec.disconnect(v5=self.v5))
            self.transport.close()
        self._end(MqttError("closed by this client"))

    async def ended(self) -> None:
        """Returns when the connection ends, raising why. A waiter cancelled here leaves the
        connection as it is (awaiting ``closed`` itself would cancel that future: the
        connection would read as ended, and ``close`` could not say DISCONNECT)."""
        await asyncio.shield(self.closed)

    async def drained(self, within_s: float = 2.0) -> None:
        """Returns once what was written has left (the socket closed), at most ``within_s``: a
        process about to exit waits here, or its last DISCONNECT may never leave."""
        if self.transport is None:
            return
        try:
            async with asyncio.timeout(within_s):
                await asyncio.shield(self._lost)
        except TimeoutError:
            self.transport.abort()  # a peer that does not read: the socket goes anyway

    def _end(self, exc: MqttError) -> None:
        if not self.closed.done():
            self.closed.set_exception(exc)
        if not self.connack.done():
            self.connack.set_exception(MqttError(f"before CONNACK: {exc}"))
            self.connack.exception()  # raised to whoever awaits it; no warning if nobody does
        for waiter in self._waiting.values():
            if not waiter.done():
                waiter.set_exception(exc)
        self._waiting.clear()
        for place in self._places:
            if not place.done():
                place.set_exception(exc)
        self._places.clear()
        if self._pinger is not None:
            self._pinger.cancel()

    def accepted(self, connack: codec.ConnAck, keepalive: int) -> None:
        """The broker's CONNACK took this connection: its limits kept, the keep-alive begun
        (the broker's Server Keep Alive when it set one, 3.2.2.3.14)."""
        self.limits = connack
        seconds = connack.server_keep_alive
        if seconds is None:
            seconds = keepalive
        if seconds:  # 0: no keep-alive (3.1.2.10)
            self._pinger = asyncio.create_task(self._ping(seconds), name="mqtt-ping")

    async def _ping(self, keepalive: int) -> None:
        """PINGREQ every half keep-alive; a broker silent for 1.5 keep-alives is gone."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(keepalive / 2)
            if self.paused:
                self.heard = loop.time()
            elif loop.time() - self.heard > keepalive * 1.5:
                self.fail(MqttError(f"the broker was silent for {keepalive * 1.5:.0f} s"))
                return
            with contextlib.suppress(MqttError):
                self.write(codec.pingreq())


async def connect(
    endpoint: Endpoint,
    client_id: str,
    *,
    keepalive: int = 30,
    clean_start: bool = True,
    session_expiry: int = 0,
    receive_maximum: int = 65_535,
    will: codec.Will | None = None,
    on_messages: Messages | None = None,
    auto_ack: bool = True,
    within_s: float = 10.0,
) -> Connection:
    """A connection the broker has accepted (CONNACK, reason 0), its keep-alive running and its
    limits in ``limits``. ``MqttError`` for anything else, within ``within_s`` from the TCP
    connect to the CONNACK: ``ConnectRefused`` when the broker's CONNACK says no."""
    loop = asyncio.get_running_loop()
    conn = Connection(
        on_messages, auto_ack=auto_ack, v5=endpoint.v5, receive_maximum=receive_maximum
    )
    try:
        async with asyncio.timeout(within_s):
            await loop.create_connection(
                lambda: conn, endpoint.host, endpoint.port, ssl=endpoint.ssl_context(),
                server_hostname=endpoint.host if endpoint.tls else None,
            )  # fmt: skip
            conn.write(codec.connect(
                client_id, keepalive=keepalive, clean_start=clean_start,
                session_expiry=session_expiry, receive_maximum=receive_maximum,
                username=endpoint.username, password=endpoint.password, will=will, v5=endpoint.v5,
            ))  # fmt: skip
            connack = await conn.connack
    except TimeoutError:
        conn.fail(MqttError("timed out"))
        raise MqttError(f"no connection to {endpoint.url} within {within_s:.0f} s") from None
    except OSError as exc:  # refused, unreachable, a TLS handshake that failed
        conn.fail(MqttError(str(exc)))
        raise MqttError(f"{endpoint.url}: {exc.strerror or exc}") from exc
    except MqttError:
        conn.fail(MqttError("no CONNACK"))
        raise
    if connack.reason != 0:
        conn.fail(MqttError("refused"))
        raise ConnectRefused(connack, endpoint.v5)
    # MQTT-3.2.2-4 (3.1.1: 3.2.2-4 too): a clean start finds no session. The floor's link asks
    # for a kept session with no state of its own on its first connection, on purpose: what
    # the broker kept for it is what it came for
    if clean_start and connack.session_present:
        conn.fail(MqttError("session present"), 0x82)
        raise MqttError("the broker said a session was present for a clean start (a protocol "
                        "error)")  # fmt: skip
    conn.accepted(connack, keepalive)
    return conn


class ConnectRefused(MqttError):
    """The broker's CONNACK refused the connection (3.2.2.2): ``reason`` says why."""

    def __init__(self, connack: codec.ConnAck, v5: bool) -> None:
        self.reason = connack.reason
        if v5:
            said = describe(connack.reason, connack.reason_string)
            if connack.reason == 0x84:
                said += ': it speaks MQTT 3.1.1 only ([broker] mqtt_version = "3.1.1")'
        else:
            name = _REFUSALS_V3.get(connack.reason)
            said = f"reason 0x{connack.reason:02x}" + (f" ({name})" if name else "")
        super().__init__(f"the broker refused the connection: {said}")
