"""A broker of the tests' own that misbehaves on purpose, on a free loopback port: it reads what
a client sends (the broker's side of the packets, written here from the MQTT 5 standard, not
with our codec) and answers as a ``Policy`` says: a CONNACK with any limits (Receive Maximum 0,
a Maximum Packet Size, no retained messages), a PUBACK refusing chosen messages, a SUBACK
refusing chosen filters, a connection cut after its CONNACK, a PUBLISH before it. Real brokers
cannot be told to do all of this; what they can do is tested against them (test_mqtt_limits.py).

Each connection is a ``Session`` that records what the client did: the PUBLISHes the broker
took (PUBACK reason below 0x80) and refused, the most QoS 1 publishes it had unacknowledged at
once, its DISCONNECT and reason."""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["Got", "HostileBroker", "Policy", "Session", "connack", "puback"]


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | 0x80 if n else byte)
        if not n:
            return bytes(out)


def _packet(first: int, body: bytes) -> bytes:
    return bytes([first]) + _varint(len(body)) + body


def connack(reason: int = 0, *, session_present: bool = False, **limits: int) -> bytes:
    """A v5 CONNACK; ``limits`` by name: receive_maximum, maximum_packet_size,
    retain_available, maximum_qos, wildcard_available, shared_available."""
    kinds = {"receive_maximum": (0x21, ">H"), "maximum_packet_size": (0x27, ">I"),
             "retain_available": (0x25, ">B"), "maximum_qos": (0x24, ">B"),
             "wildcard_available": (0x28, ">B"), "shared_available": (0x2A, ">B")}  # fmt: skip
    props = b"".join(bytes([kinds[k][0]]) + struct.pack(kinds[k][1], v) for k, v in limits.items())
    return _packet(0x20, bytes([int(session_present), reason]) + _varint(len(props)) + props)


def puback(packet_id: int, reason: int = 0) -> bytes:
    return _packet(0x40, struct.pack(">HB", packet_id, reason) + b"\x00")


def publish(topic: str, payload: bytes, packet_id: int) -> bytes:
    """A v5 QoS 1 PUBLISH from the broker to the client."""
    name = topic.encode()
    return _packet(0x32, struct.pack(">H", len(name)) + name + struct.pack(">H", packet_id)
                   + b"\x00" + payload)  # fmt: skip


@dataclass
class Got:
    """A PUBLISH from the client."""

    topic: str
    payload: bytes
    qos: int
    retain: bool
    dup: bool
    packet_id: int | None
    user_properties: dict[str, str]

    @property
    def json(self) -> dict[str, object]:
        found = json.loads(self.payload)
        assert isinstance(found, dict)
        return found

    @property
    def seq(self) -> int | None:
        seq = self.json.get("seq")
        return seq if isinstance(seq, int) else None


@dataclass
class Session:
    """One client connection, as the broker saw it."""

    index: int
    v5: bool = True
    will_retain: bool = False
    took: list[Got] = field(default_factory=list)
    refused: list[Got] = field(default_factory=list)
    filters: list[str] = field(default_factory=list)
    in_flight: set[int] = field(default_factory=set)
    most_in_flight: int = 0
    disconnect: int | None = None  # the DISCONNECT's reason code, if one came
    publishes: int = 0
    largest: int = 0  # the largest PUBLISH packet, in bytes
    reused_ids: int = 0  # PUBLISHes with a packet id still in flight (MQTT-2.2.1-3)
    pings: int = 0


@dataclass
class Policy:
    """How the broker answers; every default is a well-behaved broker's."""

    connack: Callable[[Session], bytes] = lambda s: connack()
    #: the PUBACK reason code for a PUBLISH (None: no PUBACK at all)
    publish: Callable[[Session, Got], int | None] = lambda s, g: 0
    #: a SUBACK reason code for each filter
    subscribe: Callable[[Session, str], int] = lambda s, f: 1
    #: reason codes a SUBACK carries beyond one per filter (a broker that miscounts)
    suback_extra: bytes = b""
    #: bytes sent before the CONNACK (a broker that breaks 3.2.0-1)
    before_connack: Callable[[Session], bytes] = lambda s: b""
    #: close the connection this long after its CONNACK (None: never)
    cut_after_s: Callable[[Session], float | None] = lambda s: None
    #: each PUBACK waits this long (so that publishes pile up in flight)
    ack_delay_s: float = 0.0
    #: requests to send the client once it has subscribed: (topic, payload)
    requests: list[tuple[str, bytes]] = field(default_factory=list)


class HostileBroker:
    def __init__(self, policy: Policy | None = None) -> None:
        self.policy = policy or Policy()
        self.sessions: list[Session] = []
        self.server: asyncio.Server | None = None
        self.port = 0
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    async def __aenter__(self) -> HostileBroker:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self.server is not None
        self.server.close()
        for writer in list(self._writers):
            writer.close()
        await self.server.wait_closed()

    @property
    def took(self) -> list[Got]:
        """Every PUBLISH taken, on every connection, in order."""
        return [g for s in self.sessions for g in s.took]

    def seqs_taken(self) -> set[int]:
        return {g.seq for g in self.took if g.seq is not None and "/replay" not in g.topic}

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        session = Session(len(self.sessions))
        self.sessions.append(session)
        self._writers.add(writer)
        cutter: asyncio.TimerHandle | None = None
        try:
            while True:
                first, body = await _read(reader)
                kind = first >> 4
                if kind == 1:
                    self._connect(session, body)
                    policy = self.policy
                    writer.write(policy.before_connack(session) + policy.connack(session))
                    cut = policy.cut_after_s(session)
                    if cut is not None:
                        cutter = asyncio.get_running_loop().call_later(cut, writer.close)
                elif kind == 3:
                    got = _publish(first, body, session.v5)
                    session.publishes += 1
                    session.largest = max(session.largest, 1 + len(_varint(len(body))) + len(body))
                    if got.packet_id is not None:
                        if got.packet_id in session.in_flight:  # MQTT-2.2.1-3
                            session.reused_ids += 1
                        session.in_flight.add(got.packet_id)
                        session.most_in_flight = max(session.most_in_flight, len(session.in_flight))
                    reason = self.policy.publish(session, got)
                    if reason is None:
                        continue
                    (session.took if reason < 0x80 else session.refused).append(got)
                    if got.packet_id is not None:
                        answer = _answer(session, writer, got.packet_id, reason)
                        if self.policy.ack_delay_s:
                            loop = asyncio.get_running_loop()
                            loop.call_later(self.policy.ack_delay_s, answer)
                        else:
                            answer()
                elif kind == 8:
                    pid, filters = _subscribe(body, session.v5)
                    session.filters += filters
                    codes = bytes(self.policy.subscribe(session, f) for f in filters)
                    codes += self.policy.suback_extra
                    writer.write(_packet(0x90, struct.pack(">H", pid) + b"\x00" + codes))
                    for n, (topic, payload) in enumerate(self.policy.requests, 1):
                        writer.write(publish(topic, payload, 1000 + n))
                elif kind == 12:
                    session.pings += 1
                    writer.write(b"\xd0\x00")
                elif kind == 14:
                    session.disconnect = body[0] if body else 0
                    break
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            if cutter is not None:
                cutter.cancel()
            writer.close()
            self._writers.discard(writer)

    def _connect(self, session: Session, body: bytes) -> None:
        level, flags = body[6], body[7]
        session.v5 = level == 5
        session.will_retain = bool(flags & 0x04 and flags & 0x20)


def _answer(
    session: Session, writer: asyncio.StreamWriter, pid: int, reason: int
) -> Callable[[], None]:
    def send() -> None:
        session.in_flight.discard(pid)
        if not writer.is_closing():
            writer.write(puback(pid, reason))

    return send


async def _read(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    first = (await reader.readexactly(1))[0]
    length, shift = 0, 0
    while True:
        byte = (await reader.readexactly(1))[0]
        length |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    return first, await reader.readexactly(length)


def _read_varint(body: bytes, i: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = body[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


def _string(body: bytes, i: int) -> tuple[str, int]:
    (n,) = struct.unpack_from(">H", body, i)
    return body[i + 2 : i + 2 + n].decode(), i + 2 + n


def _publish(first: int, body: bytes, v5: bool) -> Got:
    qos, retain, dup = (first >> 1) & 3, bool(first & 1), bool(first & 8)
    topic, i = _string(body, 0)
    pid = None
    if qos:
        (pid,) = struct.unpack_from(">H", body, i)
        i += 2
    props: dict[str, str] = {}
    if v5:
        length, i = _read_varint(body, i)
        end = i + length
        while i < end:
            ident = body[i]
            i += 1
            if ident == 0x26:
                key, i = _string(body, i)
                value, i = _string(body, i)
                props[key] = value
            elif ident == 0x08:  # response topic
                props["response-topic"], i = _string(body, i)
            elif ident == 0x09:  # correlation data
                (n,) = struct.unpack_from(">H", body, i)
                props["correlation"] = body[i + 2 : i + 2 + n].hex()
                i += 2 + n
            else:  # the table sends no other
                raise AssertionError(f"a property 0x{ident:02x} the test broker does not read")
    return Got(topic, body[i:], qos, retain, dup, pid, props)


def _subscribe(body: bytes, v5: bool) -> tuple[int, list[str]]:
    (pid,) = struct.unpack_from(">H", body, 0)
    i = 2
    if v5:
        length, i = _read_varint(body, i)
        i += length
    filters = []
    while i < len(body):
        topic, i = _string(body, i)
        i += 1  # options
        filters.append(topic)
    return pid, filters
