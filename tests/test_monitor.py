"""The monitor's lines and its gap check."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

from tableside.daemon.app import TableDaemon
from tableside.daemon.monitor import Monitor, default_client_id, format_message

from .conftest import Mosquitto
from .hil import make_config, simulator, start_simulator, stop, until


def msg(seq: int, **extra: object) -> bytes:
    return json.dumps(
        {"table": "t", "ts": "2026-11-29T14:43:13.123Z", "seq": seq, **extra}
    ).encode()


def test_gap_is_reported_and_repeats_are_not_gaps() -> None:
    out = io.StringIO()
    monitor = Monitor("mqtt://127.0.0.1:1", "t", out=out)
    status = "tableside/t/status"
    monitor._handle(status, msg(5, status="online", version="0"), retained=True)  # old, retained
    monitor._handle(status, msg(10, status="online", version="0"), retained=False)
    monitor._handle(status, msg(11, status="online", version="0", republished=True), retained=False)
    monitor._handle(status, msg(9, status="offline", version="0", will=True), retained=False)
    monitor._handle(status, msg(14, status="online", version="0"), retained=False)
    monitor._handle(status, b"\xff not json", retained=False)
    # a replay from the journal (docs/floor.md) repeats an old seq: it fills no gap, and
    # moves the highest seq seen nowhere
    replay = {"replayed": True, "topic": "tableside/t/ruling", "retain": False}
    monitor._handle("tableside/t/replay", msg(20, **replay), retained=False)
    monitor._handle(status, msg(21, status="online", version="0"), retained=False)
    assert monitor.gaps == [(11, 13), (15, 20)]
    text = out.getvalue()
    assert "GAP: seq 11..13 not received" in text
    assert "(last will)" in text
    assert "unreadable payload" in text


def test_ruling_line_names_clause_actions_and_source() -> None:
    line = format_message(
        "tableside/t/ruling",
        {
            "ts": "2026-11-29T14:43:13.123Z",
            "seq": 7,
            "clause": "58 Pa. Code § 555.5(b)",
            "actions": ["remove_deck"],
            "summary": "Remove the deck.",
            "event": {"device": "shuffler", "event": "shuffle_complete", "seq": 6},
        },
    )
    assert "14:43:13.123 #     7 RULING  58 Pa. Code § 555.5(b) → remove_deck" in line
    assert "(from shuffler shuffle_complete #6)" in line


def test_a_gap_across_the_monitors_own_reconnect_is_its_own() -> None:
    """A gap across one of the monitor's reconnects is said to be the monitor's (its session was
    not kept), with the command that fetches the range; one while it stayed connected is not."""
    out = io.StringIO()
    monitor = Monitor(
        "mqtt://127.0.0.1:1", "t", out=out, journal_hint="--config /etc/tableside/t.toml"
    )
    event = "tableside/t/device/shuffler/event"
    monitor._on_connection()
    monitor._handle(event, msg(1, event="x", data={}), retained=False)
    monitor._handle(event, msg(3, event="x", data={}), retained=False)  # connected: the table's
    monitor._on_connection()  # the monitor was away
    monitor._handle("tableside/t/status", msg(2, status="online"), retained=True)  # replay
    monitor._handle(event, msg(9, event="x", data={}), retained=False)
    monitor._handle(event, msg(11, event="x", data={}), retained=False)
    assert monitor.gaps == [(2, 2), (10, 10)]
    assert monitor.missed == [(4, 8)]
    text = out.getvalue()
    assert "GAP: seq 2..2 not received (lost before or at the broker)" in text
    assert "GAP (this monitor's): seq 4..8" in text
    assert "tableside journal export --config /etc/tableside/t.toml --from-seq 4 --to-seq 8" in text


async def test_monitor_keeps_its_session_across_broker_outages(tmp_path: Path) -> None:
    """The broker killed twice while the table publishes (as in ``demo --rounds 30``): the
    monitor, on its default persistent session, misses nothing and reports no gap."""
    (tmp_path / "broker").mkdir()
    broker = Mosquitto(tmp_path / "broker", persistent=True)
    broker.start()
    # a brisk table, but not so brisk that a loaded machine's monitor falls more than the
    # broker's queue limit behind (docs/mqtt.md: what a slow subscriber loses)
    sim_url, sim_task = await start_simulator(simulator(interval=0.03), "socket")
    lines = io.StringIO()
    monitor = Monitor(broker.url, "hil-1", out=lines, client_id=default_client_id("hil-1"))
    monitor_task = asyncio.create_task(monitor.run())
    daemon = TableDaemon(make_config(broker.url, sim_url, tmp_path))
    task: asyncio.Task[None] | None = None
    try:
        await until(lambda: monitor.connections == 1)
        await until(
            lambda: broker.saved("tableside/hil-1/#")
        )  # the monitor's session survives a kill
        task = asyncio.create_task(daemon.run())
        for n in range(2):
            await until(lambda n=n: monitor._high is not None and monitor._high >= 100 * (n + 1))  # type: ignore[misc]
            broker.kill()
            await until(lambda: not daemon.publisher.connected.is_set())
            await asyncio.sleep(1.0)  # the table goes on: its events wait in the journal
            broker.start()
        await until(lambda: daemon.journal.next_seq > 300, 60)
        await stop(sim_task)
        await until(lambda: daemon.publisher.connected.is_set())
        async with asyncio.timeout(60):
            await daemon.publisher.flush()
        last = daemon.journal.next_seq - 1
        await until(lambda: monitor._high is not None and monitor._high >= last, 60)
        assert monitor.connections >= 3
        assert monitor.gaps == [] and monitor.missed == [], lines.getvalue()[-2000:]
        assert set(range(0, last + 1)) <= monitor.seen
    finally:
        try:
            await stop(*(t for t in (task, sim_task, monitor_task) if t is not None))
        finally:
            broker.stop()
