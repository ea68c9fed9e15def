"""The one MQTT connection every tableside client uses (mqtt/connection.py, mqtt/client.py),
against a real Mosquitto: v5 and v3.1.1, a request's response topic and correlation data, the
will on a lost connection and none on a clean close, a refused login named, and a subscriber
that acknowledges only when told."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import aiomqtt
import pytest

from tableside.mqtt import codec
from tableside.mqtt.client import Client
from tableside.mqtt.connection import Endpoint, MqttError, connect
from tests.conftest import Mosquitto

pytestmark = pytest.mark.asyncio


async def _first(client: Client) -> codec.Publish:
    async with asyncio.timeout(10):
        async for message in client.messages():
            return message
    raise AssertionError("the stream ended")


@pytest.mark.parametrize("v5", [True, False], ids=["v5", "v3.1.1"])
async def test_a_message_goes_round_both_versions(mosquitto: Mosquitto, v5: bool) -> None:
    endpoint = Endpoint(mosquitto.url, v5=v5)
    async with Client(endpoint) as listener, Client(endpoint) as talker:
        await listener.subscribe("t/#")
        await talker.publish("t/a", b'{"x": 1}', retain=True)
        message = await _first(listener)
        assert (message.topic, message.payload, message.qos) == ("t/a", b'{"x": 1}', 1)
    async with Client(endpoint) as late:  # the retained copy, to a new subscriber
        await late.subscribe("t/a")
        again = await _first(late)
        assert (again.payload, again.retain) == (b'{"x": 1}', True)


async def test_a_requests_response_topic_and_correlation_arrive(mosquitto: Mosquitto) -> None:
    """The table answers a v5 request on its response topic with its correlation data; both
    come through our codec as another client (aiomqtt, on paho) sent them."""
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    async with Client(Endpoint(mosquitto.url)) as table:
        await table.subscribe("tableside/cs-01/command/+")
        async with aiomqtt.Client("127.0.0.1", mosquitto.port,
                                  protocol=aiomqtt.ProtocolVersion.V5) as person:  # fmt: skip
            properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
            properties.ResponseTopic = "tableside/cs-01/response/me"
            properties.CorrelationData = b"\x00\x01ask"
            await person.subscribe("tableside/cs-01/response/me", qos=1)
            await person.publish("tableside/cs-01/command/dealer", b"{}", qos=1,
                                 properties=properties)  # fmt: skip
            request = await _first(table)
            assert request.response_topic == "tableside/cs-01/response/me"
            assert request.correlation == b"\x00\x01ask"
            await table.conn.publish(request.response_topic, b'{"ok": true}',
                                     correlation=request.correlation)  # fmt: skip
            async with asyncio.timeout(10):
                answer = await anext(aiter(person.messages))
            assert answer.payload == b'{"ok": true}'
            assert answer.properties is not None
            assert getattr(answer.properties, "CorrelationData", None) == b"\x00\x01ask"


@pytest.mark.parametrize("v5", [True, False], ids=["v5", "v3.1.1"])
async def test_the_will_is_sent_when_the_connection_is_lost_not_when_closed(
    mosquitto: Mosquitto, v5: bool
) -> None:
    endpoint = Endpoint(mosquitto.url, v5=v5)
    will = codec.Will("t/status", b"offline")
    async with Client(endpoint) as watcher:
        await watcher.subscribe("t/status")
        quiet = await connect(endpoint, "quiet", will=will)
        quiet.close()
        lost = await connect(endpoint, "lost", will=will)
        lost.fail(MqttError("the test cut it"))  # no DISCONNECT: as if the cable went
        message = await _first(watcher)
        assert (message.topic, message.payload, message.retain) == ("t/status", b"offline", False)
        # exactly one will: the clean close sent none
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1.5):
                async for extra in watcher.messages():
                    raise AssertionError(f"a second will: {extra}")


@pytest.fixture
def login_broker(tmp_path: Path) -> Iterator[Mosquitto]:
    """A Mosquitto that lets in only dealer/right."""
    passwords = tmp_path / "passwords"
    subprocess.run(["mosquitto_passwd", "-b", "-c", str(passwords), "dealer", "right"],
                   check=True, capture_output=True, timeout=30)  # fmt: skip
    broker = Mosquitto(tmp_path, f"allow_anonymous false\npassword_file {passwords}\n")
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


async def test_a_refused_login_is_named(login_broker: Mosquitto) -> None:
    broker = login_broker
    with pytest.raises(MqttError, match=r"refused the connection: reason 0x8[67] \(.+\)"):
        await connect(Endpoint(broker.url, "dealer", "wrong"), "x")
    with pytest.raises(MqttError, match=r"refused the connection: reason 0x0[45] \(.+\)"):
        await connect(Endpoint(broker.url, "dealer", "wrong", v5=False), "x")
    conn = await connect(Endpoint(broker.url, "dealer", "right"), "x")
    conn.close()


async def test_nothing_listening_is_an_mqtt_error_naming_the_broker() -> None:
    from tableside.daemon.broker import free_port

    url = f"mqtt://127.0.0.1:{free_port()}"
    with pytest.raises(MqttError, match=url):
        await connect(Endpoint(url), "x", within_s=3)


async def test_unacknowledged_messages_come_again_on_the_next_connection(
    mosquitto: Mosquitto,
) -> None:
    """A subscriber that acknowledges only when told (the floor, once stored): what it did not
    acknowledge the broker sends again, marked DUP, on the session's next connection."""
    endpoint = Endpoint(mosquitto.url)
    got: list[codec.Publish] = []
    arrived = asyncio.Event()

    def take(publishes: list[codec.Publish]) -> None:
        got.extend(publishes)
        arrived.set()

    floor = await connect(endpoint, "floor", clean_start=False, session_expiry=300,
                          auto_ack=False, on_messages=take)  # fmt: skip
    await floor.subscribe([("t/#", 1)])
    async with Client(endpoint) as table:
        await table.publish("t/1", b"one")
        await table.publish("t/2", b"two")
        async with asyncio.timeout(10):
            while len(got) < 2:
                arrived.clear()
                await arrived.wait()
        first = got[0]
        assert first.packet_id is not None and floor.ack([first.packet_id])
        await asyncio.sleep(0.3)  # the PUBACK reaches the broker before the cut
        floor.fail(MqttError("killed"))
        got.clear()
        floor = await connect(endpoint, "floor", clean_start=False, session_expiry=300,
                              auto_ack=False, on_messages=take)  # fmt: skip
        async with asyncio.timeout(10):
            while not got:
                arrived.clear()
                await arrived.wait()
        assert [(m.payload, m.dup) for m in got] == [(b"two", True)]
        floor.close()
