"""Big and many requests: a request over the size limit is refused without being repeated back;
under a flood the broker (the shipped config) drops what it cannot queue before the table
sees it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiomqtt
import pytest

from tableside.wire.payloads import MAX_REQUEST_BYTES

from .conftest import Mosquitto
from .hil import simulated_table, simulator, state

pytestmark = pytest.mark.hil


async def test_an_oversized_request_is_refused_without_echo(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    """10 MB of request, and a request whose command name alone is 60 KiB: each gets a small
    refusal saying why, and the table goes on answering."""
    async with simulated_table(mosquitto.url, tmp_path, simulator(interval=None)) as table:
        sub = table.subscriber
        await sub.wait_for(state("connected"))
        await table.daemon.publisher.connected.wait()
        big = json.dumps({"command": "start_shuffle", "device": "shuffler",
                          "args": {"junk": "x" * 10_000_000}, "request_id": "big"})  # fmt: skip
        long_name = json.dumps({"command": "y" * 60_000, "device": "shuffler", "request_id": "n"})
        fine = json.dumps({"command": "start_shuffle", "device": "shuffler", "request_id": "ok"})
        async with aiomqtt.Client("127.0.0.1", mosquitto.port) as client:
            for payload in (big, long_name, fine):
                await client.publish("tableside/hil-1/command/dealer", payload, qos=1)
            results = await sub.wait_for(lambda m: m.kind == "command_result", count=3)
    first, second, third = (r.payload for r in results)
    assert first["ok"] is False and first["request_id"] is None
    assert f"refused unread: requests are limited to {MAX_REQUEST_BYTES} bytes" in first["error"]
    assert second["ok"] is False and "malformed request" in second["error"]
    assert third["ok"] is True and third["request_id"] == "ok"
    for result in (first, second):
        assert len(json.dumps(result)) < 1500, f"a refusal of {len(json.dumps(result))} bytes"


async def test_a_flood_of_requests_is_bounded_by_the_broker(tmp_path: Path) -> None:
    """The shipped broker config holds at most max_queued_messages (and the in-flight window)
    for a table that is not reading: a console's flood loses the rest at the broker, before the
    table sees it (docs/commands.md says what a console should expect)."""
    (tmp_path / "broker").mkdir()
    broker = Mosquitto.shipped(tmp_path / "broker", ("cs-01", "floor-bob"))
    broker.start()

    def login(user: str, *, persistent: bool = False) -> aiomqtt.Client:
        return aiomqtt.Client("127.0.0.1", broker.port, username=user, password="pw",
                              identifier=user, clean_session=not persistent)  # fmt: skip

    try:
        # the table's session, there while the table is not reading it
        async with login("cs-01", persistent=True) as table:
            await table.subscribe("tableside/cs-01/command/#", qos=1)
        sent = 1500
        async with login("floor-bob") as console:
            for n in range(sent):
                body = {"command": "open_table", "device": "table", "request_id": f"f{n}"}
                await console.publish("tableside/cs-01/command/floorperson", json.dumps(body), 1)
        got: list[str] = []
        async with login("cs-01", persistent=True) as table:
            try:
                async with asyncio.timeout(3):
                    async for message in table.messages:
                        assert isinstance(message.payload, bytes)
                        got.append(json.loads(message.payload)["request_id"])
            except TimeoutError:
                pass  # nothing more comes
    finally:
        broker.stop()
    queue = int(
        next(line.split()[1] for line in broker.conf.read_text().splitlines()
             if line.startswith("max_queued_messages"))
    )  # fmt: skip
    assert queue <= len(got) <= queue + 20 < sent
    assert got == [f"f{n}" for n in range(len(got))], "the first ones are kept, in order"
