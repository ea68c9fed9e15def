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
import contextlib
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import structlog

from tableside.mqtt import codec

__all__ = ["Connection", "Endpoint", "MqttError", "connect"]

log = structlog.get_logger("tableside.mqtt")


class MqttError(Exception):
    """The broker refused, broke protocol, did not answer in time, or the connection is gone."""


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

#: the CONNACK refusals a person can act on, by (v5, reason code): 3.2.2.2, and 3.1.1's 3.2.2.3
_REFUSALS = {
    (True, 0x84): "(unsupported protocol version)",
    (True, 0x85): "(client identifier not valid)",
    (True, 0x86): "(bad user name or password)",
    (True, 0x87): "(not authorized)",
    (True, 0x8A): "(banned)",
    (False, 0x01): "(unacceptable protocol version)",
    (False, 0x02): "(identifier rejected)",
    (False, 0x04): "(bad user name or password)",
    (False, 0x05): "(not authorized)",
}


class Connection(asyncio.Protocol):
    """One connection's packets. Made by ``connect``; its callbacks may be set before that."""

    def __init__(self, on_messages: Messages | None, *, auto_ack: bool, v5: bool) -> None:
        self.on_messages = on_messages
        #: the PUBACK of a message written with a packet id from ``claim_id``
        self.on_puback: Callable[[codec.PubAck], None] | None = None
        self.auto_ack = auto_ack
        self.v5 = v5
        self.reader = codec.Reader(v5=v5)
        self.transport: asyncio.Transport | None = None
        loop = asyncio.get_running_loop()
        self.connack: asyncio.Future[codec.ConnAck] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()
        # read by whoever holds the connection; one that ended first must not log it as lost
        self.closed.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._waiting: dict[int, asyncio.Future[codec.PubAck | codec.SubAck]] = {}
        self._claimed: set[int] = set()
        self._next_id = 0
        self.heard = loop.time()
        #: not reading (the owner holds enough): the broker's silence is then this side's
        self.paused = False
        self._pinger: asyncio.Task[None] | None = None
        #: what the broker allows in flight to it (3.2.2.3.3), from its CONNACK
        self.receive_maximum = 65_535

    # -- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.heard = asyncio.get_running_loop().time()
        try:
            packets = self.reader.feed(data)
        except codec.MalformedPacket as exc:
            log.error("mqtt_malformed", error=str(exc))
            self.fail(MqttError(f"malformed packet from the broker: {exc}"))
            return  # the packets before it were all acknowledged or not: sent again either way
        publishes: list[codec.Publish] = []
        for packet in packets:
            if type(packet) is codec.Publish:
                if packet.qos == 2:  # subscribed at QoS 1 at most: a broker never sends 2 (3.8.4)
                    self.fail(MqttError("a QoS 2 PUBLISH on a QoS 1 subscription"))
                    return
                publishes.append(packet)
            else:
                self._control(packet)
        if publishes:
            self._deliver(publishes)

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(MqttError(f"connection lost: {exc or 'closed by the broker'}"))

    # -- what comes in ---------------------------------------------------------------------

    def _deliver(self, publishes: list[codec.Publish]) -> None:
        if self.on_messages is not None:
            self.on_messages(publishes)
        if self.auto_ack:
            self.ack([p.packet_id for p in publishes if p.packet_id is not None])

    def _control(self, packet: codec.Packet) -> None:
        if isinstance(packet, codec.PubAck | codec.SubAck):
            pid = packet.packet_id
            if pid in self._claimed and isinstance(packet, codec.PubAck):
                self._claimed.discard(pid)
                if self.on_puback is not None:
                    self.on_puback(packet)
                return
            waiter = self._waiting.pop(pid, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(packet)
        elif isinstance(packet, codec.ConnAck):
            if self.connack.done():
                self.fail(MqttError("a second CONNACK"))
            else:
                self.connack.set_result(packet)
        elif isinstance(packet, codec.Disconnect):
            self.fail(MqttError(f"the broker disconnected: reason 0x{packet.reason:02x} "
                                f"{packet.reason_string or ''}".rstrip()))  # fmt: skip

    # -- what goes out ---------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return not self.closed.done() and self.transport is not None

    def write(self, data: bytes) -> None:
        if self.transport is None or self.transport.is_closing() or self.closed.done():
            raise MqttError("not connected")
        self.transport.write(data)

    def claim_id(self) -> int:
        """A packet id for a PUBLISH built elsewhere and written with ``write``; its PUBACK goes
        to ``on_puback``, and the id is free again."""
        pid = self._free_id()
        self._claimed.add(pid)
        return pid

    def _free_id(self) -> int:
        for _ in range(0xFFFF):
            self._next_id = self._next_id % 0xFFFF + 1
            if self._next_id not in self._waiting and self._next_id not in self._claimed:
                return self._next_id
        raise MqttError("every packet id is in use")

    async def _answer(
        self, data: Callable[[int], bytes], within_s: float
    ) -> codec.PubAck | codec.SubAck:
        pid = self._free_id()
        waiter: asyncio.Future[codec.PubAck | codec.SubAck]
        waiter = asyncio.get_running_loop().create_future()
        self._waiting[pid] = waiter
        try:
            self.write(data(pid))
            async with asyncio.timeout(within_s):
                return await waiter
        except TimeoutError as exc:
            raise MqttError(f"no answer to packet {pid} within {within_s:.0f} s") from exc
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
        """QoS 1; returns once the broker has it (PUBACK). ``MqttError`` when there is no
        connection, it is lost meanwhile, no PUBACK comes in time or the broker refuses it."""

        def packet(pid: int) -> bytes:
            return codec.publish(
                topic, payload, qos=1, packet_id=pid, retain=retain, v5=self.v5,
                user_properties=user_properties, response_topic=response_topic,
                correlation=correlation,
            )  # fmt: skip

        answer = await self._answer(packet, within_s)
        if not isinstance(answer, codec.PubAck):
            raise MqttError("a SUBACK for a PUBLISH's packet id")
        if answer.reason >= 0x80:
            reason = f"0x{answer.reason:02x}"
            raise MqttError(f"the broker refused the publish to {topic}: reason {reason}")

    async def subscribe(self, filters: list[tuple[str, int]], *, within_s: float = 10.0) -> None:
        """SUBSCRIBE, each filter with its options byte (codec.subscribe); ``MqttError`` naming
        the filters the broker refused."""
        answer = await self._answer(lambda pid: codec.subscribe(pid, filters, v5=self.v5), within_s)
        if not isinstance(answer, codec.SubAck):
            raise MqttError("a PUBACK for a SUBSCRIBE's packet id")
        refused = [f for (f, _), r in zip(filters, answer.reasons, strict=False) if r >= 0x80]
        if refused:
            raise MqttError(f"the broker refused the subscription to {refused}: {answer.reasons}")

    def ack(self, packet_ids: list[int]) -> bool:
        """Acknowledge received QoS 1 messages; False (nothing sent) when the connection is gone:
        the broker sends them again on the next."""
        if not packet_ids:
            return False
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

    def fail(self, exc: MqttError) -> None:
        """End the connection at once (no DISCONNECT: the broker sends the will)."""
        self._end(exc)
        if self.transport is not None:
            self.transport.abort()

    def close(self) -> None:
        """A clean end: DISCONNECT (the broker drops the will), then close."""
        if self.transport is not None and not self.transport.is_closing():
            with contextlib.suppress(RuntimeError, MqttError):
                self.write(codec.disconnect())
            self.transport.close()
        self._end(MqttError("closed by this client"))

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
        if self._pinger is not None:
            self._pinger.cancel()

    def accepted(self, connack: codec.ConnAck, keepalive: int) -> None:
        """The broker's CONNACK took this connection: its limits kept, the keep-alive begun
        (the broker's Server Keep Alive when it set one, 3.2.2.3.14)."""
        self.receive_maximum = connack.receive_maximum
        seconds = connack.server_keep_alive or keepalive
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
    """A connection the broker has accepted (CONNACK, reason 0), its keep-alive running.
    ``MqttError`` for anything else, within ``within_s`` from the TCP connect to the CONNACK."""
    loop = asyncio.get_running_loop()
    conn = Connection(on_messages, auto_ack=auto_ack, v5=endpoint.v5)
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
        said = connack.reason_string or _REFUSALS.get((endpoint.v5, connack.reason), "")
        raise MqttError(f"the broker refused the connection: reason 0x{connack.reason:02x} "
                        f"{said}".rstrip())  # fmt: skip
    conn.accepted(connack, keepalive)
    return conn
