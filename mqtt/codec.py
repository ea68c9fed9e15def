"""The MQTT packets every tableside client speaks (mqtt/connection.py), as bytes: no I/O.

One codec for the table's publisher, the floor, the monitor, the web view and ``tableside
command``: what a client that publishes and subscribes at QoS 0 and 1 needs. CONNECT (with a
will), CONNACK, SUBSCRIBE, SUBACK, PUBLISH (both ways), PUBACK (both ways), PINGREQ, PINGRESP,
DISCONNECT (both ways). MQTT v5 by default; v3.1.1 (``v5=False``: protocol level 4, no
properties, no reason codes on PUBACK) for a broker that speaks nothing newer. Section numbers
are the MQTT 5.0 OASIS standard's.

Every packet is::

    byte 0      type << 4 | flags                       (2.1.2)
    bytes 1..4  remaining length, a variable byte int    (1.5.5)
    …           variable header and payload, ``remaining length`` bytes

``Reader.feed`` takes whatever the socket gave (any number of packets, or part of one) and
returns the whole packets in it; a malformed one raises ``MalformedPacket`` naming what and
where, and the connection is to be closed (4.13: a malformed packet is a protocol error).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from tableside.errors import WireError

__all__ = [
    "CONNACK",
    "DISCONNECT",
    "MAX_PACKET",
    "PINGRESP",
    "PUBACK",
    "PUBLISH",
    "SUBACK",
    "ConnAck",
    "Disconnect",
    "MalformedPacket",
    "Other",
    "Packet",
    "PacketTooLarge",
    "ProtocolError",
    "PubAck",
    "Publish",
    "Reader",
    "SubAck",
    "TopicAliasInvalid",
    "Will",
    "connect",
    "disconnect",
    "pingreq",
    "puback",
    "pubacks",
    "publish",
    "subscribe",
]

CONNECT: Final = 1
CONNACK: Final = 2
PUBLISH: Final = 3
PUBACK: Final = 4
SUBSCRIBE: Final = 8
SUBACK: Final = 9
PINGREQ: Final = 12
PINGRESP: Final = 13
DISCONNECT: Final = 14

#: the largest packet this client takes (sent as Maximum Packet Size in CONNECT, 3.1.2.11.4, so
#: a broker does not send larger); a length field beyond it is a malformed packet here
MAX_PACKET: Final = 16 * 1024 * 1024

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")

# property identifier → its type (2.2.2.2): how many bytes to skip, or how to read it
_BYTE, _U16T, _U32T, _VARINT, _UTF8, _BINARY, _PAIR = range(7)
_PROPERTY_TYPES: Final[dict[int, int]] = {
    0x01: _BYTE, 0x02: _U32T, 0x03: _UTF8, 0x08: _UTF8, 0x09: _BINARY, 0x0B: _VARINT,
    0x11: _U32T, 0x12: _UTF8, 0x13: _U16T, 0x15: _UTF8, 0x16: _BINARY, 0x17: _BYTE,
    0x18: _U32T, 0x19: _BYTE, 0x1A: _UTF8, 0x1C: _UTF8, 0x1F: _UTF8, 0x21: _U16T,
    0x22: _U16T, 0x23: _U16T, 0x24: _BYTE, 0x25: _BYTE, 0x26: _PAIR, 0x27: _U32T,
    0x28: _BYTE, 0x29: _BYTE, 0x2A: _BYTE,
}  # fmt: skip
_USER_PROPERTY: Final = 0x26
_REASON_STRING: Final = 0x1F
_TOPIC_ALIAS: Final = 0x23
_RECEIVE_MAXIMUM: Final = 0x21
_SESSION_EXPIRY: Final = 0x11
_RESPONSE_TOPIC: Final = 0x08
_CORRELATION_DATA: Final = 0x09
_MAXIMUM_PACKET_SIZE: Final = 0x27
_SERVER_KEEP_ALIVE: Final = 0x13
_ASSIGNED_CLIENT_ID: Final = 0x12
_MAXIMUM_QOS: Final = 0x24
_RETAIN_AVAILABLE: Final = 0x25
_WILDCARD_AVAILABLE: Final = 0x28
_SHARED_AVAILABLE: Final = 0x2A


class MalformedPacket(WireError, ValueError):
    """Bytes that are not the MQTT packet they claim to be; says what, and at which byte of
    the connection's stream. ``reason``: the DISCONNECT reason code the client closes with
    (4.13: 0x81 Malformed Packet)."""

    reason = 0x81


class PacketTooLarge(MalformedPacket):
    """A packet longer than this client's Maximum Packet Size (3.1.2.11.4: 0x95)."""

    reason = 0x95


class TopicAliasInvalid(MalformedPacket):
    """A topic alias this client never allowed (3.3.2.3.4: 0x94)."""

    reason = 0x94


class ProtocolError(MalformedPacket):
    """A well-formed packet that breaks the protocol's rules (4.13: 0x82 Protocol Error), such
    as a CONNACK's Receive Maximum of 0 (3.2.2.3.3)."""

    reason = 0x82


# -- the packets received -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Publish:
    """3.3: a message. ``packet_id`` is None at QoS 0; ``user_properties`` None when it has
    none (the chain entry of a table's record travels there: docs/floor.md); a request that
    asks for an answer names its ``response_topic`` and ``correlation`` data (4.10)."""

    topic: str
    payload: bytes
    qos: int
    retain: bool
    dup: bool
    packet_id: int | None
    user_properties: list[tuple[str, str]] | None
    response_topic: str | None = None
    correlation: bytes | None = None


@dataclass(frozen=True, slots=True)
class ConnAck:
    """3.2: the broker's answer to CONNECT, with the limits it sets for this connection (each
    property absent means the spec's default; a v3.1.1 CONNACK has none of them)."""

    session_present: bool
    reason: int
    reason_string: str | None = None
    #: QoS 1 publishes this client may have unacknowledged at once (3.2.2.3.3)
    receive_maximum: int = 65_535
    server_keep_alive: int | None = None
    assigned_client_id: str | None = None
    #: the largest packet the broker takes (3.2.2.3.6); None: no limit but the protocol's
    maximum_packet_size: int | None = None
    #: 3.2.2.3.5: False, and a retained PUBLISH (or will) is a protocol error
    retain_available: bool = True
    #: 3.2.2.3.4: the highest QoS the broker takes from this client
    maximum_qos: int = 2
    #: 3.2.2.3.11, 3.2.2.3.13: wildcard and shared subscriptions
    wildcard_available: bool = True
    shared_available: bool = True
    #: 3.2.2.3.2: the session expiry the broker will use instead of the one asked for
    session_expiry: int | None = None


@dataclass(frozen=True, slots=True)
class SubAck:
    """3.9: one reason code per filter subscribed (0-2: the QoS granted; 0x80 and up: refused)."""

    packet_id: int
    reasons: tuple[int, ...]
    reason_string: str | None = None


@dataclass(frozen=True, slots=True)
class PubAck:
    """3.4: the broker's answer to a QoS 1 message this client sent: ``reason`` below 0x80, it
    has it; 0x80 and up, it refused it (3.4.2.1: 0x87 not authorized, 0x97 quota exceeded …)."""

    packet_id: int
    reason: int = 0
    reason_string: str | None = None

    @property
    def refused(self) -> bool:
        return self.reason >= 0x80


@dataclass(frozen=True, slots=True)
class Disconnect:
    """3.14: the broker is closing the connection, and why."""

    reason: int = 0
    reason_string: str | None = None


@dataclass(frozen=True, slots=True)
class Other:
    """A packet of a type this client has no use for but that is well formed (PINGRESP)."""

    type: int


Packet = Publish | ConnAck | SubAck | PubAck | Disconnect | Other


# -- reading ---------------------------------------------------------------------------------------


class Reader:
    """Bytes in, whole packets out, whatever the socket splits them into; ``v5=False`` reads a
    v3.1.1 connection's packets (no properties, CONNACK's return code as its reason)."""

    __slots__ = ("_buf", "_offset", "max_packet", "v5")

    def __init__(self, max_packet: int = MAX_PACKET, *, v5: bool = True) -> None:
        self._buf = bytearray()
        #: bytes of the stream already consumed (for error messages: where)
        self._offset = 0
        self.max_packet = max_packet
        self.v5 = v5

    def feed(self, data: bytes) -> list[Packet]:
        """The whole packets ``data`` completes, in order; the rest is kept for the next feed."""
        buf = self._buf
        buf += data
        out: list[Packet] = []
        pos = 0
        end = len(buf)
        try:
            while end - pos >= 2:
                first = buf[pos]
                # remaining length: at most 4 bytes, 7 bits each (1.5.5)
                length = 0
                shift = 0
                i = pos + 1
                while True:
                    if i >= end:
                        return out  # the length itself is not all here yet
                    byte = buf[i]
                    length |= (byte & 0x7F) << shift
                    i += 1
                    if not byte & 0x80:
                        break
                    shift += 7
                    if shift > 21:
                        raise self._bad(pos, "remaining length longer than 4 bytes")
                if length > self.max_packet:
                    what = f"remaining length {length} > {self.max_packet}"
                    raise self._bad(pos, what, PacketTooLarge)
                if end - i < length:
                    return out
                body = bytes(buf[i : i + length])
                try:
                    out.append(_parse(first, body, self.v5))
                except MalformedPacket as exc:
                    raise self._bad(pos, str(exc), type(exc)) from None
                except (IndexError, struct.error, UnicodeDecodeError) as exc:
                    raise self._bad(pos, f"type {first >> 4}: {exc}") from None
                pos = i + length
            return out
        finally:
            if pos:
                del buf[:pos]
                self._offset += pos

    def _bad(
        self, pos: int, what: str, kind: type[MalformedPacket] = MalformedPacket
    ) -> MalformedPacket:
        at = self._offset + pos
        head = bytes(self._buf[pos : pos + 16]).hex()
        return kind(f"{what} (packet at stream byte {at}, starting {head})")

    @property
    def buffered(self) -> int:
        """Bytes held of a packet not complete yet."""
        return len(self._buf)


def _parse(first: int, body: bytes, v5: bool = True) -> Packet:
    kind = first >> 4
    flags = first & 0x0F
    if kind == PUBLISH:
        return _publish(flags, body, v5)
    if kind == PUBACK:
        return _puback(flags, body)
    if kind == CONNACK:
        return _connack(flags, body) if v5 else _connack_v3(flags, body)
    if kind == SUBACK:
        return _suback(flags, body, v5)
    if kind == PINGRESP:
        if flags or body:
            raise MalformedPacket("PINGRESP with flags or a body")
        return Other(PINGRESP)
    if kind == DISCONNECT and v5:  # a v3.1.1 broker just closes the connection
        return _disconnect(flags, body)
    raise MalformedPacket(f"packet type {kind} is not one a broker sends this client")


def _varint(body: bytes, i: int) -> tuple[int, int]:
    value = 0
    for shift in (0, 7, 14, 21):
        byte = body[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i
    raise MalformedPacket("variable byte integer longer than 4 bytes")


def _string(body: bytes, i: int) -> tuple[str, int]:
    """1.5.4: a UTF-8 string, two length bytes first; no U+0000 (1.5.4: malformed)."""
    n = (body[i] << 8) | body[i + 1]
    i += 2
    if i + n > len(body):
        raise MalformedPacket(f"a string of {n} bytes runs past the packet's end")
    text = body[i : i + n].decode()
    if "\x00" in text:
        raise MalformedPacket("a string holds U+0000")
    return text, i + n


def _properties(body: bytes, i: int) -> tuple[dict[int, object], list[tuple[str, str]] | None, int]:
    """2.2.2: (the properties other than user properties, by identifier; the user properties in
    order, or None; where the properties end)."""
    length, i = _varint(body, i)
    end = i + length
    if end > len(body):
        raise MalformedPacket(f"properties of {length} bytes run past the packet's end")
    found: dict[int, object] = {}
    pairs: list[tuple[str, str]] | None = None
    while i < end:
        ident = body[i]
        i += 1
        kind = _PROPERTY_TYPES.get(ident)
        value: object
        if kind == _PAIR:
            key, i = _string(body, i)
            val, i = _string(body, i)
            if pairs is None:
                pairs = []
            pairs.append((key, val))
            continue
        if kind == _UTF8:
            value, i = _string(body, i)
        elif kind == _BYTE:
            value = body[i]
            i += 1
        elif kind == _U16T:
            value = (body[i] << 8) | body[i + 1]
            i += 2
        elif kind == _U32T:
            (value,) = _U32.unpack_from(body, i)
            i += 4
        elif kind == _VARINT:
            value, i = _varint(body, i)
        elif kind == _BINARY:
            n = (body[i] << 8) | body[i + 1]
            value = body[i + 2 : i + 2 + n]
            i += 2 + n
        else:
            raise MalformedPacket(f"unknown property identifier 0x{ident:02x}")
        if ident in found and ident != 0x0B:  # 2.2.2.2: only these may repeat
            raise MalformedPacket(f"property 0x{ident:02x} twice")
        found[ident] = value
    if i != end:
        raise MalformedPacket("the last property runs past the properties' length")
    return found, pairs, end


def _publish(flags: int, body: bytes, v5: bool = True) -> Publish:
    qos = (flags >> 1) & 3
    if qos == 3:
        raise MalformedPacket("PUBLISH with QoS 3")
    dup = bool(flags & 8)
    if dup and qos == 0:
        raise MalformedPacket("PUBLISH with DUP set at QoS 0")
    topic, i = _string(body, 0)
    packet_id = None
    if qos:
        packet_id = (body[i] << 8) | body[i + 1]
        i += 2
        if packet_id == 0:
            raise MalformedPacket("PUBLISH with packet id 0")
    pairs = response_topic = correlation = None
    if not v5:
        pass  # 3.1.1: no properties
    elif body[i] == 0:  # no properties: the common case from a v3 publisher
        i += 1
    else:
        found, pairs, i = _properties(body, i)
        if _TOPIC_ALIAS in found:  # this client allows none (Topic Alias Maximum 0, 3.1.2.11.5)
            raise TopicAliasInvalid("PUBLISH with a topic alias; this client allows none")
        answer_to, data = found.get(_RESPONSE_TOPIC), found.get(_CORRELATION_DATA)
        response_topic = answer_to if isinstance(answer_to, str) else None
        correlation = data if isinstance(data, bytes) else None
    if not topic:
        raise MalformedPacket("PUBLISH with an empty topic")
    if "+" in topic or "#" in topic:
        raise MalformedPacket(f"PUBLISH to a wildcard topic {topic[:80]!r}")
    return Publish(
        topic, body[i:], qos, bool(flags & 1), dup, packet_id, pairs, response_topic, correlation
    )


def _fixed_flags(name: str, flags: int) -> None:
    if flags:
        raise MalformedPacket(f"{name} with flags 0x{flags:x} (reserved: 0)")


def _puback(flags: int, body: bytes) -> PubAck:
    _fixed_flags("PUBACK", flags)
    (packet_id,) = _U16.unpack_from(body, 0)
    reason = body[2] if len(body) > 2 else 0
    said = None
    if len(body) > 3:
        found, _, _ = _properties(body, 3)
        text = found.get(_REASON_STRING)
        said = text if isinstance(text, str) else None
    return PubAck(packet_id, reason, said)


#: a v3.1.1 CONNACK's refusals (3.1.1's 3.2.2.3) as v5 reason codes
_V3_REFUSALS: Final = {1: 0x84, 2: 0x85, 3: 0x88, 4: 0x86, 5: 0x87}


def _connack(flags: int, body: bytes) -> ConnAck:
    _fixed_flags("CONNACK", flags)
    if len(body) == 2 and body[1] in _V3_REFUSALS:
        # a broker that speaks only 3.1.1 refuses a v5 CONNECT so (3.1.1's 3.1.2.2: return
        # code 1, unacceptable protocol level), with no properties: the v5 reason says it
        return _connack_v3(flags, bytes([body[0], _V3_REFUSALS[body[1]]]))
    if body[0] & 0xFE:
        raise MalformedPacket("CONNACK acknowledge flags with reserved bits set")
    found, _, end = _properties(body, 2)
    if end != len(body):
        raise MalformedPacket("CONNACK longer than its properties")

    def number(ident: int, default: int) -> int:
        value = found.get(ident, default)
        return value if isinstance(value, int) else default

    def flag(ident: int, name: str) -> bool:  # 3.2.2.3: a byte property that is 0 or 1
        value = number(ident, 1)
        if value not in (0, 1):
            raise ProtocolError(f"CONNACK {name} {value} (0 or 1)")
        return value == 1

    receive_max = number(_RECEIVE_MAXIMUM, 65_535)
    if receive_max == 0:
        raise ProtocolError("CONNACK Receive Maximum 0 (3.2.2.3.3: a protocol error)")
    packet_max = found.get(_MAXIMUM_PACKET_SIZE)
    if packet_max == 0:
        raise ProtocolError("CONNACK Maximum Packet Size 0 (3.2.2.3.6: a protocol error)")
    maximum_qos = number(_MAXIMUM_QOS, 2)  # absent: QoS 2 (3.2.2.3.4), present: 0 or 1
    if _MAXIMUM_QOS in found and maximum_qos not in (0, 1):
        raise ProtocolError(f"CONNACK Maximum QoS {maximum_qos} (0 or 1)")
    reason_string = found.get(_REASON_STRING)
    keep_alive = found.get(_SERVER_KEEP_ALIVE)
    assigned = found.get(_ASSIGNED_CLIENT_ID)
    expiry = found.get(_SESSION_EXPIRY)
    return ConnAck(
        bool(body[0] & 1), body[1],
        reason_string if isinstance(reason_string, str) else None,
        receive_max,
        keep_alive if isinstance(keep_alive, int) else None,
        assigned if isinstance(assigned, str) else None,
        packet_max if isinstance(packet_max, int) else None,
        flag(_RETAIN_AVAILABLE, "Retain Available"),
        maximum_qos,
        flag(_WILDCARD_AVAILABLE, "Wildcard Subscription Available"),
        flag(_SHARED_AVAILABLE, "Shared Subscription Available"),
        expiry if isinstance(expiry, int) else None,
    )  # fmt: skip


def _connack_v3(flags: int, body: bytes) -> ConnAck:
    """3.1.1 §3.2: acknowledge flags and a return code (0 accepted, 1-5 refused), nothing more."""
    _fixed_flags("CONNACK", flags)
    if len(body) != 2:
        raise MalformedPacket(f"a v3.1.1 CONNACK of {len(body)} bytes (2)")
    if body[0] & 0xFE:
        raise MalformedPacket("CONNACK acknowledge flags with reserved bits set")
    return ConnAck(bool(body[0] & 1), body[1])


def _suback(flags: int, body: bytes, v5: bool = True) -> SubAck:
    _fixed_flags("SUBACK", flags)
    (packet_id,) = _U16.unpack_from(body, 0)
    found: dict[int, object] = {}
    i = 2
    if v5:
        found, _, i = _properties(body, 2)
    if i >= len(body):
        raise MalformedPacket("SUBACK with no reason code")
    reason_string = found.get(_REASON_STRING)
    return SubAck(
        packet_id, tuple(body[i:]), reason_string if isinstance(reason_string, str) else None
    )


def _disconnect(flags: int, body: bytes) -> Disconnect:
    _fixed_flags("DISCONNECT", flags)
    if not body:
        return Disconnect()
    reason_string = None
    if len(body) > 1:
        found, _, _ = _properties(body, 1)
        text = found.get(_REASON_STRING)
        reason_string = text if isinstance(text, str) else None
    return Disconnect(body[0], reason_string)


# -- writing --------------------------------------------------------------------------------------


def _length(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | 0x80 if n else byte)
        if not n:
            return bytes(out)


def _packet(first: int, body: bytes) -> bytes:
    return bytes([first]) + _length(len(body)) + body


def _str(text: str) -> bytes:
    data = text.encode()
    if len(data) > 0xFFFF:
        raise ValueError(f"a string of {len(data)} bytes: MQTT's limit is 65,535")
    return _U16.pack(len(data)) + data


def _props(*parts: bytes) -> bytes:
    data = b"".join(parts)
    return _length(len(data)) + data


@dataclass(frozen=True, slots=True)
class Will:
    """3.1.2.5: what the broker publishes for this client when its connection ends unsaid."""

    topic: str
    payload: bytes
    qos: int = 1
    retain: bool = True


def connect(
    client_id: str,
    *,
    keepalive: int,
    clean_start: bool,
    session_expiry: int = 0,
    receive_maximum: int = 65_535,
    username: str | None = None,
    password: str | None = None,
    max_packet: int = MAX_PACKET,
    will: Will | None = None,
    v5: bool = True,
) -> bytes:
    """3.1: CONNECT (v3.1.1 when not ``v5``: protocol level 4, and no properties, so the
    session expiry, receive maximum and maximum packet size are not said)."""
    flags = (0x02 if clean_start else 0) | (0x80 if username is not None else 0)
    flags |= 0x40 if password is not None else 0
    if will is not None:
        flags |= 0x04 | (will.qos << 3) | (0x20 if will.retain else 0)
    if not 0 < receive_maximum <= 0xFFFF:
        raise ValueError(f"receive maximum {receive_maximum}: 1..65535")
    props = b""
    if v5:
        props = _props(
            bytes([_SESSION_EXPIRY]) + _U32.pack(session_expiry),
            bytes([_RECEIVE_MAXIMUM]) + _U16.pack(receive_maximum),
            bytes([_MAXIMUM_PACKET_SIZE]) + _U32.pack(max_packet),
        )
    level = b"\x05" if v5 else b"\x04"
    body = b"\x00\x04MQTT" + level + bytes([flags]) + _U16.pack(keepalive) + props
    body += _str(client_id)
    if will is not None:  # 3.1.3.2-4: its properties (v5: none), topic, payload
        body += (b"\x00" if v5 else b"") + _str(will.topic) + _U16.pack(len(will.payload))
        body += will.payload
    if username is not None:
        body += _str(username)
    if password is not None:
        data = password.encode()
        body += _U16.pack(len(data)) + data
    return _packet(CONNECT << 4, body)


def subscribe(packet_id: int, filters: list[tuple[str, int]], *, v5: bool = True) -> bytes:
    """3.8: SUBSCRIBE; each filter with its options byte (3.8.3.1: QoS in bits 0-1, No Local
    0x04, Retain As Published 0x08, Retain Handling in bits 4-5; v3.1.1 has the QoS only)."""
    body = _U16.pack(packet_id) + (b"\x00" if v5 else b"")
    for topic, options in filters:
        body += _str(topic) + bytes([options if v5 else options & 0x03])
    return _packet((SUBSCRIBE << 4) | 0x02, body)


def publish(
    topic: str,
    payload: bytes,
    *,
    qos: int = 0,
    packet_id: int | None = None,
    retain: bool = False,
    dup: bool = False,
    user_properties: list[tuple[str, str]] | None = None,
    response_topic: str | None = None,
    correlation: bytes | None = None,
    v5: bool = True,
) -> bytes:
    """3.3: PUBLISH; a v3.1.1 one (not ``v5``) carries no properties, so none may be given."""
    flags = (qos << 1) | (1 if retain else 0) | (8 if dup else 0)
    body = _str(topic)
    if qos:
        if not packet_id:
            raise ValueError("QoS 1 or 2 needs a packet id 1..65535")
        body += _U16.pack(packet_id)
    props = b"".join(bytes([_USER_PROPERTY]) + _str(k) + _str(v) for k, v in user_properties or ())
    if response_topic is not None:
        props += bytes([_RESPONSE_TOPIC]) + _str(response_topic)
    if correlation is not None:
        props += bytes([_CORRELATION_DATA]) + _U16.pack(len(correlation)) + correlation
    if not v5:
        if props:
            raise ValueError("MQTT 3.1.1 has no properties: no user properties, no response topic")
        return _packet((PUBLISH << 4) | flags, body + payload)
    return _packet((PUBLISH << 4) | flags, body + _length(len(props)) + props + payload)


def puback(packet_id: int) -> bytes:
    """3.4: PUBACK, success (reason code and properties left out: 3.4.2.1)."""
    return b"\x40\x02" + _U16.pack(packet_id)


def pubacks(packet_ids: list[int]) -> bytes:
    """Many PUBACKs, one write."""
    pack = _U16.pack
    return b"".join(b"\x40\x02" + pack(p) for p in packet_ids)


def pingreq() -> bytes:
    """3.12."""
    return b"\xc0\x00"


def disconnect(reason: int = 0, *, v5: bool = True) -> bytes:
    """3.14: DISCONNECT, normal (0) unless told. Any reason but 0 keeps the will (3.1.2.5): the
    broker sends it, as for a lost connection. A v3.1.1 DISCONNECT has no reason and always
    drops the will, so it is refused one (a v3.1.1 client that keeps its will just closes)."""
    if reason and not v5:
        raise ValueError("MQTT 3.1.1's DISCONNECT has no reason code (and drops the will)")
    return b"\xe0\x01" + bytes([reason]) if reason else b"\xe0\x00"
