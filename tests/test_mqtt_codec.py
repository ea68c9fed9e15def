"""The MQTT codec every tableside client uses (mqtt/codec.py), no I/O: packets built by hand
from the standard's layout, by paho's own encoder (a cross-check), round trips, hostile bytes,
and MQTT 3.1.1's shapes."""

from __future__ import annotations

import socket
import struct
import threading

import paho.mqtt.client as paho
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from tableside.mqtt import codec as mqtt

CHAIN = [("chain-prev", "0" * 64), ("chain-hash", "ab" * 32), ("chain-ts", "1764590000.125")]


def _s(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">H", len(data)) + data


def _frame(first: int, body: bytes) -> bytes:
    assert len(body) < 128
    return bytes([first, len(body)]) + body


def test_a_publish_built_by_hand() -> None:
    """3.3: QoS 1, retain, DUP; packet id 7; two user properties; the payload is the rest."""
    props = b"\x26" + _s("chain-prev") + _s("00") + b"\x26" + _s("chain-ts") + _s("1.5")
    body = _s("tableside/cs-01/ruling") + b"\x00\x07" + bytes([len(props)]) + props + b'{"a":1}'
    (p,) = mqtt.Reader().feed(_frame(0x3B, body))
    assert p == mqtt.Publish("tableside/cs-01/ruling", b'{"a":1}', 1, True, True, 7,
                             [("chain-prev", "00"), ("chain-ts", "1.5")])  # fmt: skip


def test_a_qos0_publish_with_no_properties() -> None:
    (p,) = mqtt.Reader().feed(_frame(0x30, _s("t/x") + b"\x00" + b"hi"))
    assert p == mqtt.Publish("t/x", b"hi", 0, False, False, None, None)


def test_control_packets_built_by_hand() -> None:
    """CONNACK (session present, Receive Maximum 20, a reason string), SUBACK (two filters, the
    second refused), PUBACK short and long, PINGRESP, DISCONNECT with a reason."""
    connack = _frame(0x20, b"\x01\x00" + bytes([3 + 5]) + b"\x21\x00\x14" + b"\x1f" + _s("hi"))
    suback = _frame(0x90, b"\x00\x05\x00\x01\x87")
    data = (connack + suback + b"\x40\x02\x00\x09" + _frame(0x40, b"\x00\x0a\x10\x00")
            + b"\xd0\x00" + _frame(0xE0, b"\x8e\x00"))  # fmt: skip
    assert mqtt.Reader().feed(data) == [
        mqtt.ConnAck(True, 0, "hi", 20),
        mqtt.SubAck(5, (1, 0x87)),
        mqtt.PubAck(9),
        mqtt.PubAck(10, 0x10),
        mqtt.Other(mqtt.PINGRESP),
        mqtt.Disconnect(0x8E),
    ]


def test_every_connack_limit_is_read() -> None:
    """3.2.2.3: Maximum Packet Size, Retain Available, Maximum QoS, Wildcard and Shared
    Subscription Available, Session Expiry, Server Keep Alive, an assigned client id; a PUBACK
    refusal's reason string."""
    props = (b"\x27" + struct.pack(">I", 900) + b"\x25\x00" + b"\x24\x00" + b"\x28\x00"
             + b"\x2a\x00" + b"\x11" + struct.pack(">I", 60) + b"\x13\x00\x05"
             + b"\x12" + _s("given"))  # fmt: skip
    (connack,) = mqtt.Reader().feed(_frame(0x20, b"\x00\x00" + bytes([len(props)]) + props))
    assert connack == mqtt.ConnAck(
        False, 0, None, 65_535, 5, "given", 900, retain_available=False, maximum_qos=0,
        wildcard_available=False, shared_available=False, session_expiry=60,
    )  # fmt: skip
    (puback,) = mqtt.Reader().feed(_frame(0x40, b"\x00\x07\x87\x05\x1f" + _s("no")))
    assert puback == mqtt.PubAck(7, 0x87, "no") and puback.refused


@pytest.mark.parametrize(
    ("props", "what"),
    [(b"\x21\x00\x00", "Receive Maximum 0"), (b"\x27\x00\x00\x00\x00", "Maximum Packet Size 0"),
     (b"\x24\x02", "Maximum QoS 2"), (b"\x25\x02", "Retain Available 2"),
     (b"\x28\x07", "Wildcard Subscription Available 7")],
)  # fmt: skip
def test_a_connack_limit_the_standard_forbids_is_a_protocol_error(props: bytes, what: str) -> None:
    """3.2.2.3: each of these is a Protocol Error (0x82), not a limit to live by."""
    with pytest.raises(mqtt.ProtocolError, match=what) as caught:
        mqtt.Reader().feed(_frame(0x20, b"\x00\x00" + bytes([len(props)]) + props))
    assert caught.value.reason == 0x82


def test_a_3_1_1_refusal_of_a_v5_connect_reads_as_unsupported_version() -> None:
    """A broker that speaks only 3.1.1 answers a v5 CONNECT with its own 2-byte CONNACK, return
    code 1: reason 0x84 (unsupported protocol version), not a malformed packet."""
    assert mqtt.Reader().feed(b"\x20\x02\x00\x01") == [mqtt.ConnAck(False, 0x84)]


def test_a_disconnect_with_a_reason_and_none_for_3_1_1() -> None:
    assert mqtt.disconnect(0x80) == b"\xe0\x01\x80"
    assert mqtt.disconnect(v5=False) == b"\xe0\x00"
    with pytest.raises(ValueError, match="no reason code"):
        mqtt.disconnect(0x80, v5=False)  # it would drop the will the reason means to keep


def test_our_packets_as_the_standard_draws_them() -> None:
    assert mqtt.puback(0x1234) == b"\x40\x02\x12\x34"
    assert mqtt.pubacks([1, 2]) == b"\x40\x02\x00\x01\x40\x02\x00\x02"
    assert mqtt.pingreq() == b"\xc0\x00"
    assert mqtt.disconnect() == b"\xe0\x00"
    assert mqtt.subscribe(3, [("a/#", 0x09)]) == b"\x82\x09\x00\x03\x00" + _s("a/#") + b"\x09"
    connect = mqtt.connect("c", keepalive=30, clean_start=False, session_expiry=60,
                           receive_maximum=100, username="u", password="p")  # fmt: skip
    props = b"\x11\x00\x00\x00\x3c" + b"\x21\x00\x64" + b"\x27" + struct.pack(">I", mqtt.MAX_PACKET)
    body = (
        b"\x00\x04MQTT\x05\xc0\x00\x1e" + bytes([len(props)]) + props + _s("c") + _s("u") + _s("p")
    )
    assert connect == b"\x10" + bytes([len(body)]) + body


def test_a_long_remaining_length() -> None:
    """1.5.5: 200 bytes of payload need two length bytes (0xC? 0x01)."""
    payload = bytes(range(200))
    data = mqtt.publish("t", payload, qos=1, packet_id=1)
    assert data[1] & 0x80 and data[2] == 1
    (p,) = mqtt.Reader().feed(data)
    assert isinstance(p, mqtt.Publish) and p.payload == payload


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64, 10_000])
def test_packets_split_anyhow_arrive_whole_and_in_order(chunk: int) -> None:
    sent = [
        mqtt.Publish(f"tableside/t{n}/event", b"x" * n * 37, 1, n % 2 == 0, False, n + 1, CHAIN)
        for n in range(20)
    ]
    data = b"".join(
        mqtt.publish(
            p.topic,
            p.payload,
            qos=1,
            packet_id=p.packet_id,
            retain=p.retain,
            user_properties=p.user_properties,
        )
        for p in sent
    )
    reader = mqtt.Reader()
    got: list[mqtt.Packet] = []
    for i in range(0, len(data), chunk):
        got.extend(reader.feed(data[i : i + chunk]))
    assert got == sent and reader.buffered == 0


@settings(max_examples=300, deadline=None)
@given(
    topic=st.text(min_size=1, max_size=60).filter(lambda t: not set(t) & {"+", "#", "\x00"}),
    payload=st.binary(max_size=3000),
    qos=st.integers(0, 1),
    retain=st.booleans(),
    pid=st.integers(1, 0xFFFF),
    props=st.lists(st.tuples(st.text(max_size=20), st.text(max_size=80)).filter(
        lambda kv: "\x00" not in kv[0] + kv[1]), max_size=4),
)  # fmt: skip
def test_round_trip(
    topic: str, payload: bytes, qos: int, retain: bool, pid: int, props: list[tuple[str, str]]
) -> None:
    data = mqtt.publish(topic, payload, qos=qos, packet_id=pid if qos else None, retain=retain,
                        user_properties=props)  # fmt: skip
    (p,) = mqtt.Reader().feed(data)
    assert p == mqtt.Publish(topic, payload, qos, retain, False, pid if qos else None,
                             props or None)  # fmt: skip


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300), st.integers(1, 50))
def test_hostile_bytes_give_packets_or_malformed_never_anything_else(
    data: bytes, chunk: int
) -> None:
    reader = mqtt.Reader(max_packet=1024)
    try:
        for i in range(0, len(data), chunk):
            reader.feed(data[i : i + chunk])
    except mqtt.MalformedPacket as exc:
        assert "stream byte" in str(exc)


@pytest.mark.parametrize(
    ("data", "what"),
    [
        (b"\x30\xff\xff\xff\xff\x01", "longer than 4 bytes"),
        (b"\x32\xff\xff\xff\x7f", "remaining length"),  # 256 MiB: past MAX_PACKET
        (_frame(0x36, _s("t") + b"\x00\x01\x00"), "QoS 3"),
        (_frame(0x32, _s("t") + b"\x00\x00\x00"), "packet id 0"),
        (_frame(0x38, _s("t") + b"\x00"), "DUP set at QoS 0"),
        (_frame(0x30, _s("t/#") + b"\x00"), "wildcard"),
        (_frame(0x30, _s("") + b"\x00"), "empty topic"),
        (_frame(0x30, _s("t") + b"\x03\x23\x00\x01"), "topic alias"),
        (_frame(0x30, _s("t") + b"\x02\x7f\x00"), "unknown property"),
        (_frame(0x30, _s("t") + b"\x09\x26\x00\x01a\x00\x05abc"), "past the packet"),
        (_frame(0x30, b"\x00\x03a\x00b\x00"), r"U\+0000"),
        (_frame(0x30, b"\x00\x02\xff\xfe\x00"), "type 3"),  # not UTF-8
        (_frame(0x30, _s("t")), "type 3"),  # ends before its properties
        (_frame(0x10, b"\x00"), "packet type 1"),  # a CONNECT, from a broker
        (_frame(0x41, b"\x00\x01"), "reserved"),
        (b"\xd0\x01\x00", "PINGRESP"),
        (_frame(0x20, b"\x02\x00\x00"), "reserved bits"),
        (_frame(0x20, b"\x00\x00\x06\x21\x00\x01\x21\x00\x02"), "twice"),
    ],
)
def test_malformed_packets_are_named_with_where(data: bytes, what: str) -> None:
    reader = mqtt.Reader()
    good = mqtt.publish("t", b"ok")
    with pytest.raises(mqtt.MalformedPacket, match=what) as caught:
        reader.feed(good + data)
    assert f"stream byte {len(good)}" in str(caught.value)


def test_paho_encoded_publishes_decode() -> None:
    """A cross-check against another encoder: what a real paho client sends (QoS 1, retained,
    user properties) parses to the same message; our PUBLISH, sent to a paho client, reaches
    its on_message with the same topic, payload, flags and properties."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    got: list[paho.MQTTMessage] = []
    received = threading.Event()

    def on_message(_c: paho.Client, _u: object, message: paho.MQTTMessage) -> None:
        got.append(message)
        received.set()

    client = paho.Client(CallbackAPIVersion.VERSION2, client_id="x",
                         protocol=paho.MQTTv5)  # fmt: skip
    client.on_message = on_message
    client.connect_async("127.0.0.1", port)
    client.loop_start()
    try:
        conn, _ = server.accept()
        conn.settimeout(10)
        data = b""
        while len(data) < 2 or len(data) < 2 + data[1]:  # the CONNECT (short: one length byte)
            data += conn.recv(4096)
        connect_len = 2 + data[1]
        conn.sendall(b"\x20\x03\x00\x00\x00")  # CONNACK, accepted
        properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
        properties.UserProperty = CHAIN
        client.publish("tableside/cs-01/ruling", b'{"seq":3}', qos=1, retain=True,
                       properties=properties)  # fmt: skip
        reader = mqtt.Reader()
        packets = reader.feed(data[connect_len:])
        while not packets:
            packets = reader.feed(conn.recv(4096))
        (p,) = packets
        assert isinstance(p, mqtt.Publish)
        assert (p.topic, p.payload, p.qos, p.retain, p.dup) == (
            "tableside/cs-01/ruling", b'{"seq":3}', 1, True, False)  # fmt: skip
        assert p.user_properties == CHAIN
        conn.sendall(mqtt.puback(p.packet_id or 0))
        conn.sendall(mqtt.publish("tableside/cs-02/event", b"\x00\xffbytes", qos=1, packet_id=9,
                                  retain=True, user_properties=CHAIN))  # fmt: skip
        assert received.wait(10)
        (m,) = got
        assert (m.topic, m.payload, m.qos, m.retain, m.mid) == (
            "tableside/cs-02/event", b"\x00\xffbytes", 1, True, 9)  # fmt: skip
        assert m.properties is not None and getattr(m.properties, "UserProperty", None) == CHAIN
        conn.close()
    finally:
        client.loop_stop()
        server.close()


def test_v311_packets_as_the_standard_draws_them() -> None:
    """3.1.1: protocol level 4, no properties anywhere; CONNACK is two bytes, its return code
    the reason; SUBACK has no properties; a PUBLISH's payload follows its packet id."""
    will = mqtt.Will("t/status", b"off")
    assert mqtt.connect("c", keepalive=30, clean_start=True, will=will, v5=False) == _frame(
        0x10, b"\x00\x04MQTT\x04" + bytes([0x02 | 0x04 | 0x08 | 0x20]) + b"\x00\x1e" + _s("c")
        + _s("t/status") + _s("off"))  # fmt: skip
    assert mqtt.publish("a/b", b"xy", qos=1, packet_id=5, v5=False) == _frame(
        0x32, _s("a/b") + b"\x00\x05xy")  # fmt: skip
    assert mqtt.subscribe(3, [("a/#", 0x09)], v5=False) == _frame(
        0x82, b"\x00\x03" + _s("a/#") + b"\x01"
    )
    with pytest.raises(ValueError, match=r"3\.1\.1 has no properties"):
        mqtt.publish("a", b"", user_properties=[("k", "v")], v5=False)
    reader = mqtt.Reader(v5=False)
    packets = reader.feed(_frame(0x20, b"\x01\x05") + _frame(0x90, b"\x00\x03\x01\x80")
                          + _frame(0x30, _s("a/b") + b"{}"))  # fmt: skip
    assert packets == [
        mqtt.ConnAck(True, 5),
        mqtt.SubAck(3, (1, 0x80)),
        mqtt.Publish("a/b", b"{}", 0, False, False, None, None),
    ]
    with pytest.raises(mqtt.MalformedPacket, match=r"v3\.1\.1 CONNACK of 3 bytes"):
        mqtt.Reader(v5=False).feed(_frame(0x20, b"\x00\x00\x00"))


def test_a_v5_will_and_a_requests_answer_address() -> None:
    """The will's properties (none), topic and payload follow the client id (3.1.3.2-4); a
    request's response topic (0x08) and correlation data (0x09) survive a round trip."""
    packet = mqtt.connect(
        "c", keepalive=10, clean_start=True, will=mqtt.Will("s", b"o", retain=False)
    )
    assert packet.endswith(_s("c") + b"\x00" + _s("s") + _s("o"))
    assert packet[9] == 0x02 | 0x04 | 0x08  # clean start, will, will QoS 1, not retained
    sent = mqtt.publish("t/command/dealer", b"{}", qos=1, packet_id=2,
                        response_topic="t/response/x", correlation=b"\x00id")  # fmt: skip
    (back,) = mqtt.Reader().feed(sent)
    assert isinstance(back, mqtt.Publish)
    assert (back.response_topic, back.correlation, back.payload) == (
        "t/response/x",
        b"\x00id",
        b"{}",
    )
