"""Issue 18: the web view's actions answered by the table's MQTT v5 response, on the role's one
kept connection, as soon as the table answers (not once the floor's store has committed its
``command_result``), and only by the table asked. Against a real Mosquitto: with the shipped
config and ACL (systemd/), and under a real daemon, floor and browser."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiomqtt
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from playwright.async_api import expect

from tableside.daemon.app import TableDaemon
from tableside.daemon.config import BrokerConfig, Config, DeviceConfig, TableConfig
from tableside.floor.store import Message, Store
from tableside.floor.web.commander import Commander, MqttSender, RoleLogin
from tableside.rules.model import Game
from tests.conftest import Mosquitto
from tests.floorweb import log_in, pit
from tests.hil import ask, simulator, start_simulator, stop, until

pytestmark = pytest.mark.slow

TS = "2026-12-01T08:00:00.000Z"
WEB = "floor-floorperson"
#: the response topic the web view names: one per table, its connection's token last
RESPONSE_TOPIC = re.compile(rf"tableside/(cs-0[12])/response/{WEB}/[0-9a-f]{{16}}")


@pytest.fixture
def shipped(tmp_path: Path) -> Iterator[Mosquitto]:
    """systemd/'s broker config and ACL, as shipped (tests/test_security.py's fixture)."""
    (tmp_path / "broker").mkdir()
    broker = Mosquitto.shipped(tmp_path / "broker", ("cs-01", "cs-02", "surveillance", WEB))
    broker.start()
    yield broker
    broker.stop()


@contextlib.asynccontextmanager
async def commander(broker: Mosquitto, within_s: float = 5.0) -> AsyncIterator[Commander]:
    """The web view's commander and its sender, speaking as the floorperson's login; no floor
    and no store behind it: its only source of answers is the tables' responses."""
    sender = MqttSender(broker.url, "tableside", {"floorperson": RoleLogin(WEB, "pw")})
    asking = Commander(sender)
    asking.answer_within_s = within_s
    try:
        yield asking
    finally:
        await sender.aclose()


def _login(broker: Mosquitto, user: str) -> aiomqtt.Client:
    return aiomqtt.Client("127.0.0.1", broker.port, username=user, password="pw",
                          protocol=aiomqtt.ProtocolVersion.V5)  # fmt: skip


async def test_the_tables_response_answers_with_no_store_under_the_shipped_acl(
    shipped: Mosquitto, tmp_path: Path
) -> None:
    """The real daemon logged in as cs-01 refuses an acknowledge of a ruling it never gave: the
    refusal is its answer, through the ACL's ``<prefix>/+/response/%u/#``, though nothing
    stores or vouches for its ``command_result``. The request names one response topic per
    table and random correlation data; a second request reuses the subscription."""
    url, sim_task = await start_simulator(simulator(interval=None), "socket")
    table = Config(
        table=TableConfig(id="cs-01", game=Game.CARIBBEAN_STUD, state_dir=tmp_path / "table"),
        broker=BrokerConfig(url=shipped.url, username="cs-01", password="pw"),
        devices={"shuffler": DeviceConfig(driver="tableside.shuffler", url=url)},
    )
    daemon = TableDaemon(table)
    task = asyncio.create_task(daemon.run())
    requests: list[aiomqtt.Message] = []
    try:
        await until(lambda: daemon.publisher.connected.is_set())
        async with _login(shipped, "surveillance") as watcher, commander(shipped) as asking:
            await watcher.subscribe("tableside/cs-01/command/#", qos=1)
            watching = asyncio.create_task(_collect(watcher, requests))
            try:
                answers = [await _acknowledge_nothing(asking) for _ in range(2)]
                await until(lambda: len(requests) == 2, within=10)
            finally:
                await stop(watching)
    finally:
        await stop(task, sim_task)
    for answer in answers:
        assert answer["table"] == "cs-01", answer  # the table's own word, not "no answer"
        assert answer["ok"] is False and answer["command"] == "acknowledge_ruling"
        assert answer["role"] == "floorperson"
    (first, first_data), (second, second_data) = (_reply_to(r) for r in requests)
    assert RESPONSE_TOPIC.fullmatch(first)
    assert first == second  # one subscription for the table
    assert len(first_data) == 16 and first_data != second_data


async def _acknowledge_nothing(asking: Commander) -> dict[str, object]:
    return await asking.ask("cs-01", "floorperson", "acknowledge_ruling",
                            {"ruling": 999_999, "by": "bob"})  # fmt: skip


def _reply_to(request: aiomqtt.Message) -> tuple[str, bytes]:
    """The response topic and correlation data a request names (paho's untyped Properties)."""
    properties: Any = request.properties
    assert properties is not None
    return properties.ResponseTopic, properties.CorrelationData


async def _collect(client: aiomqtt.Client, into: list[aiomqtt.Message]) -> None:
    async for message in client.messages:
        into.append(message)


async def _respond(
    client: aiomqtt.Client, topic: str, body: dict[str, Any], correlation: bytes | None
) -> None:
    """A table's MQTT v5 response (``daemon/publisher.py`` ``respond``), or a forged one."""
    properties: Any = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
    if correlation is not None:
        properties.CorrelationData = correlation
    await client.publish(topic, json.dumps(body), qos=1, properties=properties)


def _result(table: str, request: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"table": table, "ts": TS, "seq": 7, "republished": False, "redelivered": False,
            "role": "floorperson", "device": "table", "command": request["command"],
            "request_id": request["request_id"], "ok": True} | fields  # fmt: skip


async def test_a_forged_response_is_not_taken(shipped: Mosquitto) -> None:
    """Everything a table may write that is not the asked table's answer to this request, on
    the web view's own response topics and with the request's correlation data read off the
    request (the worst case), is not taken: wrong or no correlation data, another request id,
    role or command, another table's name in the payload, not a command result, the other
    table's response topic. Sent in that order before the real answer, any one taken would
    be the answer the page gets; sent alone, they answer nothing."""
    async with (
        _login(shipped, "cs-01") as asked,
        _login(shipped, "cs-02") as other,
        commander(shipped, within_s=2.0) as asking,
    ):  # fmt: skip
        await asked.subscribe("tableside/cs-01/command/floorperson", qos=1)
        await other.subscribe("tableside/cs-02/command/floorperson", qos=1)
        # the other table answers a request of its own first: the web view's connection is
        # then subscribed to cs-02's response topic too
        task = asyncio.create_task(asking.ask("cs-02", "floorperson", "acknowledge_ruling", {}))
        async for request in other.messages:
            body = json.loads(bytes(request.payload))
            other_topic, correlation = _reply_to(request)
            await _respond(other, other_topic, _result("cs-02", body), correlation)
            break
        assert (await task)["table"] == "cs-02"

        async def forge(genuine: bool) -> None:
            async for request in asked.messages:
                body = json.loads(bytes(request.payload))
                topic, correlation = _reply_to(request)
                assert RESPONSE_TOPIC.fullmatch(topic)
                wrong = bytes(b ^ 0xFF for b in correlation)
                for client, where, forged, with_correlation in (
                    (asked, topic, _result("cs-01", body, error="f1"), wrong),
                    (asked, topic, _result("cs-01", body, error="f2"), None),
                    (asked, topic, _result("cs-01", body, error="f3", request_id="floor-x"),
                     correlation),
                    (asked, topic, _result("cs-01", body, error="f4", role="dealer"), correlation),
                    (asked, topic, _result("cs-01", body, error="f5", command="resolve_ruling"),
                     correlation),
                    (asked, topic, _result("cs-02", body, error="f6"), correlation),
                    (asked, topic, {"ok": True, "request_id": body["request_id"]}, correlation),
                    (other, other_topic, _result("cs-02", body, error="f7"), correlation),
                    (other, other_topic, _result("cs-01", body, error="f8"), correlation),
                ):  # fmt: skip
                    await _respond(client, where, forged, with_correlation)
                if genuine:
                    await _respond(asked, topic, _result("cs-01", body, error=None), correlation)
                return

        for genuine in (False, True):
            responder = asyncio.create_task(forge(genuine))
            answer = await asking.ask("cs-01", "floorperson", "acknowledge_ruling", {})
            await responder
            if genuine:
                assert answer["ok"] is True and answer["table"] == "cs-01", answer
                assert answer["error"] is None
            else:
                assert answer == {"ok": False, "error": "no answer from table cs-01 in 2 s"}


async def test_the_page_is_answered_while_the_floors_store_is_held(
    mosquitto: Mosquitto, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A floorperson acknowledges the real daemon's miscount in Chromium while the floor's
    store commits nothing (its writes held): the table's response answers the click at once;
    the queue still shows the ruling open, as the view is fed only what the store vouches
    for, and shows it acknowledged once the store has the table's records."""
    async with pit(mosquitto.url, tmp_path) as (floor, table, page):
        await log_in(page, floor.url)
        assert (await ask(table, mosquitto.port, "floorperson", "open_table", "o"))["ok"]
        assert (await ask(table, mosquitto.port, "dealer", "start_shuffle", "s",
                          device="shuffler"))["ok"]  # fmt: skip
        (ruling,) = await table.subscriber.wait_for(lambda m: m.kind == "ruling")
        seq = ruling.payload["seq"]
        await page.goto(floor.url + "/rulings")
        row = page.locator(f"tr.ruling[data-ruling='hil-1-{seq}']")
        await expect(row).to_contain_text(ruling.payload["clause"])

        gate = asyncio.Event()
        write = floor.store.write
        held: list[int] = []

        async def held_write(batch: list[Message]) -> Any:
            held.append(len(batch))
            await gate.wait()
            return await write(batch)

        monkeypatch.setattr(floor.store, "write", held_write)
        await row.locator("button.ack").click()
        status = page.locator(f"#ruling-hil-1-{seq}-status")
        await expect(status).to_have_text("acknowledged", timeout=4_000)  # less than the 5 s
        results = await floor.store.messages("hil-1", "tableside/hil-1/command_result", 100)
        assert not [m for m in results if b"acknowledge_ruling" in m.payload]  # not committed
        await expect(row.locator("td.state")).to_have_text("open")
        assert held  # the table's answer reached the floor, and waits at its store
        gate.set()
        await expect(row.locator("td.state")).to_contain_text("acknowledged by bob")
        await _stored_answer(floor.store)


async def _stored_answer(store: Store) -> None:
    """The table's ``command_result`` for the acknowledge, and its response copy, stored."""

    async def kinds() -> set[str]:
        found = await store.messages("hil-1", limit=200)
        return {m.kind for m in found if b"acknowledge_ruling" in m.payload}

    async with asyncio.timeout(20):
        while not {"record", "response"} <= await kinds():
            await asyncio.sleep(0.05)
