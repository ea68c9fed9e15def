"""The table against a real Mosquitto that limits or refuses as production brokers do: an ACL
that denies a topic (0x87 on the PUBACK) and is mended while the table runs, a Maximum Packet
Size, no retained messages; and what a subscriber finds after a clean stop. An independent
subscriber (aiomqtt) checks that every seq arrives."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiomqtt
import pytest

from tableside.daemon.app import TableDaemon
from tableside.daemon.config import Config

from .conftest import Mosquitto, free_port
from .hil import (
    Received,
    make_config,
    ruling,
    simulated_table,
    simulator,
    start_simulator,
    stop,
    until,
)

pytestmark = pytest.mark.asyncio

#: what the table's login may write, as the shipped ACL has it, and the ruling topic apart
_TABLE = """user hil-1
topic write tableside/hil-1/status
topic write tableside/hil-1/table
topic write tableside/hil-1/ruling_state
topic write tableside/hil-1/command_result
topic write tableside/hil-1/checkpoint
topic write tableside/hil-1/replay
topic write tableside/hil-1/withheld
topic write tableside/hil-1/config
topic write tableside/hil-1/clock
topic write tableside/hil-1/software
topic write tableside/hil-1/device/+/state
topic write tableside/hil-1/device/+/event
topic write tableside/hil-1/response/#
topic read tableside/hil-1/command/+
"""


def logged_in(config: Config) -> Config:
    broker = config.broker.model_copy(update={"username": "hil-1", "password": "pw"})
    return config.model_copy(update={"broker": broker})


def seqs(messages: list[Received]) -> set[int]:
    """The seqs a subscriber has of the table's own records (not retained copies, republished
    state, the will or replays)."""
    return {
        m.payload["seq"]
        for m in messages
        if not m.retained and m.kind != "replay"
        and not m.payload.get("republished") and not m.payload.get("will")
    }  # fmt: skip


def every_seq_arrived(messages: list[Received], upto: int) -> Callable[[], bool]:
    return lambda: set(range(upto + 1)) <= seqs(messages)


async def test_a_topic_the_acl_denies_is_said_and_sent_once_the_acl_is_mended(
    tmp_path: Path,
) -> None:
    """Rulings denied by the ACL: the broker answers 0x87 and the table neither marks them
    delivered nor stops; its status names the first refused record, topic and reason. The ACL
    mended (SIGHUP re-reads it), the refused rulings go again and every seq arrives."""
    (tmp_path / "broker").mkdir()
    acl = tmp_path / "broker" / "acl"
    acl.write_text("topic read tableside/#\n" + _TABLE, encoding="utf-8")
    passwords = tmp_path / "broker" / "passwords"
    command = ["mosquitto_passwd", "-b", "-c", str(passwords), "hil-1", "pw"]
    await asyncio.to_thread(subprocess.run, command, check=True, capture_output=True, timeout=30)
    broker = Mosquitto(tmp_path / "broker", f"password_file {passwords}\nacl_file {acl}\n")
    broker.start()
    try:
        sim = simulator("count=51@1", "count=51@2")
        async with simulated_table(broker.url, tmp_path, sim, adjust=logged_in) as table:
            sub, daemon = table.subscriber, table.daemon
            said = await sub.wait_for(lambda m: m.kind == "status"
                                      and bool(m.payload.get("undelivered")))  # fmt: skip
            undelivered = said[0].payload["undelivered"]
            assert undelivered["topic"] == "tableside/hil-1/ruling"
            assert undelivered["reason"] == "0x87 (not authorized)"
            assert daemon.journal.acked < undelivered["seq"]
            assert not sub.matching(ruling())
            acl.write_text("topic read tableside/#\n" + _TABLE
                           + "topic write tableside/hil-1/ruling\n", encoding="utf-8")  # fmt: skip
            assert broker.proc is not None
            broker.proc.send_signal(signal.SIGHUP)
            await sub.wait_for(ruling(), count=2, within=30)
            last = daemon.journal.next_seq - 1
            await until(every_seq_arrived(sub.messages, last), 30)
            first = said[0].payload["seq"]
            await sub.wait_for(lambda m: m.kind == "status" and m.payload["seq"] > first
                               and not m.payload["undelivered"])  # fmt: skip
    finally:
        broker.stop()


async def test_records_over_the_brokers_packet_limit_arrive_as_stand_ins(tmp_path: Path) -> None:
    """Mosquitto's max_packet_size (its CONNACK's Maximum Packet Size): the table state
    (about 2 KB) would have the connection cut, every time; it goes as a ``withheld`` stand-in
    under its own seq, and every seq arrives."""
    broker = Mosquitto(tmp_path, "max_packet_size 1200\n")
    broker.start()
    try:
        async with simulated_table(broker.url, tmp_path, simulator("count=51@1")) as table:
            sub = table.subscriber
            await sub.wait_for(
                lambda m: m.kind == "withheld" and m.payload["topic"].endswith("/table")
            )
            await until(lambda: table.daemon.journal.next_seq > 30)
            last = table.daemon.journal.next_seq - 1
            await until(every_seq_arrived(sub.messages, last), 30)
            assert table.daemon.publisher.connections == 1
            stand_ins = [m.payload for m in sub.matching(lambda m: m.kind == "withheld")]
            table_state = [p for p in stand_ins if p["topic"] == "tableside/hil-1/table"]
            assert table_state and table_state[0]["size"] > 1200
    finally:
        broker.stop()


async def test_a_broker_without_retained_messages_gets_every_seq(tmp_path: Path) -> None:
    """retain_available false: Mosquitto refuses a retained will at CONNACK (0x9A) and would
    cut the connection on a retained PUBLISH; the table connects with an unretained will and
    sends its retained state unretained. Every seq arrives; nothing is retained."""
    broker = Mosquitto(tmp_path, "retain_available false\n")
    broker.start()
    try:
        async with simulated_table(broker.url, tmp_path, simulator()) as table:
            await until(lambda: table.daemon.journal.next_seq > 30)
            last = table.daemon.journal.next_seq - 1
            await until(every_seq_arrived(table.subscriber.messages, last), 30)
            assert not [m for m in table.subscriber.messages if m.retained]
    finally:
        broker.stop()


async def test_after_a_clean_stop_the_retained_status_is_the_clean_offline(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    """A clean stop says DISCONNECT, so the broker drops the will: what a subscriber finds
    retained afterwards is the table's own last record, ``offline`` with the last seq, not the
    will (``will: true`` and the seq of the moment it connected, as it was)."""
    async with simulated_table(mosquitto.url, tmp_path, simulator()) as table:
        await until(lambda: table.daemon.journal.next_seq > 20)
        daemon = table.daemon
    last = daemon.journal.next_seq - 1
    retained: list[dict[str, Any]] = []
    async with aiomqtt.Client("127.0.0.1", mosquitto.port) as client:
        await client.subscribe("tableside/hil-1/status", qos=1)
        async with asyncio.timeout(10):
            async for message in client.messages:
                assert isinstance(message.payload, bytes)
                retained.append(json.loads(message.payload))
                break
    (status,) = retained
    assert (status["status"], status["will"], status["seq"]) == ("offline", False, last)


async def test_records_never_sent_go_unmarked_after_a_clean_restart(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    """A table that ran with its broker away and stopped cleanly sent none of its records: the
    next run sends them as new, not ``redelivered`` (every one was, before: the journal kept no
    word of what had been sent)."""
    nowhere = f"mqtt://127.0.0.1:{free_port()}"
    sim_url, sim_task = await start_simulator(simulator(interval=0.05), "socket")
    try:
        first = TableDaemon(make_config(nowhere, sim_url, tmp_path))
        task = asyncio.create_task(first.run())
        await until(lambda: first.journal.next_seq > 10)
        await stop(task)
        unsent = first.journal.next_seq - 1
        async with simulated_table(mosquitto.url, tmp_path, simulator()) as table:
            await until(every_seq_arrived(table.subscriber.messages, unsent), 30)
            early = [m for m in table.subscriber.messages
                     if not m.retained and m.payload["seq"] <= unsent]  # fmt: skip
    finally:
        await stop(sim_task)
    assert early and not [m.payload["seq"] for m in early if m.payload["redelivered"]]
