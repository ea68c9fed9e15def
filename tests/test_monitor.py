"""The monitor's lines and its gap check."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tableside.daemon.app import TableDaemon
from tableside.daemon.monitor import Monitor, default_client_id, format_message
from tableside.mqtt.client import Client
from tableside.mqtt.connection import Endpoint
from tableside.wire.payloads import RulingPayload

from .conftest import Mosquitto, free_port
from .hil import make_config, simulator, start_simulator, stop, until

TS = "2026-11-29T14:43:13.123Z"
STATUS = "tableside/t/status"
EVENT = "tableside/t/device/shuffler/event"
RESULT = "tableside/t/command_result"
REPLAY = "tableside/t/replay"


def msg(seq: object, **extra: object) -> bytes:
    return json.dumps({"table": "t", "ts": TS, "seq": seq, **extra}).encode()


def status(seq: object, **extra: object) -> bytes:
    return msg(seq, **{"status": "online", "version": "0", **extra})


def event(seq: object, **extra: object) -> bytes:
    fields = {"device": "shuffler", "device_class": "shuffler", "event": "x", "data": {}}
    return msg(seq, **{**fields, **extra})


def result(seq: object, **extra: object) -> bytes:
    fields = {"role": "auditor", "device": "table", "command": "replay", "request_id": "r1",
              "ok": True}  # fmt: skip
    return msg(seq, **{**fields, **extra})


def replayed(seq: object, **extra: object) -> bytes:
    """A journal record sent again on ``replay`` for the auditor (wire/payloads.py)."""
    record = {"table": "t", "replayed": True, "seq": seq, "topic": EVENT, "retain": False,
              "ts": 1.5, "prev": "0" * 64, "hash": "1" * 64, "payload": "{}"}  # fmt: skip
    return json.dumps({**record, **extra}).encode()


def test_gap_is_reported_and_repeats_are_not_gaps() -> None:
    out = io.StringIO()
    monitor = Monitor("mqtt://127.0.0.1:1", "t", out=out)
    monitor._handle(STATUS, status(5), retained=True)  # old, retained
    monitor._handle(STATUS, status(10), retained=False)
    monitor._handle(STATUS, status(11, republished=True), retained=False)
    monitor._handle(STATUS, status(9, status="offline", will=True), retained=False)
    monitor._handle(STATUS, status(14), retained=False)
    monitor._handle(STATUS, b"\xff not json", retained=False)
    # a replay from the journal (docs/floor.md) repeats an old seq: it fills no gap, and
    # moves the highest seq seen nowhere
    monitor._handle(REPLAY, replayed(20), retained=False)
    monitor._handle(STATUS, status(21), retained=False)
    assert monitor.gaps == [(11, 13), (15, 20)]
    text = out.getvalue()
    assert "GAP: seq 11..13 not received" in text
    assert "(last will)" in text
    assert f"BAD {STATUS}: " in text
    assert "REPLAY  tableside/t/device/shuffler/event" in text


def test_a_bad_payload_is_said_to_be_bad_and_counts_for_nothing() -> None:
    """Whatever comes on a table's topic, the monitor prints a line and goes on: a payload that
    is not its topic's (not JSON, no seq, a seq that is no number the table gives) is ``BAD``,
    and neither fills a gap nor makes one."""
    out = io.StringIO()
    monitor = Monitor("mqtt://127.0.0.1:1", "t", out=out)
    monitor._handle(EVENT, event(1), retained=False)
    bad = [
        (EVENT, b"\xff not json"),
        (EVENT, b"[1, 2]"),
        (EVENT, event([1])),  # a seq no line can show
        (EVENT, event(None)),
        (EVENT, event("7")),
        (EVENT, event(True)),  # JSON's true is no seq, though Python takes it for 1
        (EVENT, event(7.0)),
        (EVENT, event(-1)),
        (EVENT, json.dumps({"table": "t", "ts": TS, "device": "shuffler"}).encode()),  # no seq
        (STATUS, status(7, status="lost")),
        ("tableside/t/table", msg(7, phase="open", deck_age_h="old")),
        (RESULT, result(7, replayed="all")),
        (REPLAY, replayed(7, replayed=False)),
        (REPLAY, replayed("7")),
    ]
    for topic, payload in bad:
        monitor._handle(topic, payload, retained=False)
    monitor._handle(EVENT, event(2), retained=False)
    assert monitor.seen == {1, 2} and monitor.gaps == [] and monitor.missed == []
    lines = out.getvalue().splitlines()
    assert len([line for line in lines if line.startswith("BAD ")]) == len(bad), lines
    assert "BAD tableside/t/device/shuffler/event: seq: " in out.getvalue()


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=12,
)  # fmt: skip
_TOPICS = st.sampled_from(
    [STATUS, EVENT, RESULT, REPLAY, "tableside/t/device/shuffler/state", "tableside/t/ruling",
     "tableside/t/ruling_state", "tableside/t/table", "tableside/t/checkpoint",
     "tableside/t/response/web/1", "tableside/t/command/dealer", "tableside/t/nothing/listed"]
)  # fmt: skip
_FIELDS = st.sampled_from(["seq", "data", "event", "replayed", "republished", "will", "tests",
                           "deck_age_h", "actions", "identity", "state"])  # fmt: skip


@given(_TOPICS, _FIELDS, _JSON, st.booleans())
def test_any_payload_on_any_topic_is_a_line_not_a_traceback(
    topic: str, name: str, value: object, retained: bool
) -> None:
    """A table's payloads with one field swapped for any JSON value: a line each, never an
    exception out of the monitor (which would end ``tableside monitor`` and the demo)."""
    out = io.StringIO()
    monitor = Monitor("mqtt://127.0.0.1:1", "t", out=out, on_message=lambda topic, msg: None)
    statistics = {"shuffles": 3, "with_input": 1, "alerts": 0,
                  "tests": [{"test": "riffle", "level": 1}, {"level": "high"}, 7]}  # fmt: skip
    for base in (status(3), event(3, event="shuffle_statistics", data=statistics), result(3),
                 replayed(3), msg(3, phase="open", deck_age_h=1.5, meter_cents=100)):  # fmt: skip
        fields = json.loads(base)
        monitor._handle(topic, json.dumps({**fields, name: value}).encode(), retained)
        data = fields.get("data")
        if isinstance(data, dict):
            fields["data"] = {**data, name: value}
            monitor._handle(topic, json.dumps(fields).encode(), retained)
        monitor._handle(topic, json.dumps(value).encode(), retained)


def test_a_replays_result_is_a_record_and_counts() -> None:
    """An auditor's replay: its ``command_result`` says how many records went (``"replayed":
    248``, a count) and is a journal record with a seq of its own, which the loss rule counts;
    the records sent again on ``replay`` (``"replayed": true``) are repeats, not counted."""
    out = io.StringIO()
    monitor = Monitor("mqtt://127.0.0.1:1", "t", out=out)
    monitor._handle(EVENT, event(10), retained=False)
    for seq in (3, 4, 5):
        monitor._handle(REPLAY, replayed(seq), retained=False)
    monitor._handle(RESULT, result(11, replayed=248), retained=False)
    monitor._handle(RESULT, result(12, replayed=0), retained=False)
    monitor._handle(EVENT, event(13), retained=False)
    assert monitor.gaps == [], out.getvalue()
    assert monitor.seen == {10, 11, 12, 13}
    assert "GAP" not in out.getvalue()


def test_a_response_is_a_copy_and_counts_for_nothing() -> None:
    """MQTT v5: the table sends a result to the requester's response topic at once, ahead of
    the journal's queue; it is a copy of a ``command_result`` still to come, not the next seq."""
    out = io.StringIO()
    monitor = Monitor("mqtt://127.0.0.1:1", "t", out=out)
    monitor._handle(EVENT, event(10), retained=False)
    monitor._handle("tableside/t/response/web/1", result(13), retained=False)
    for seq in (11, 12):
        monitor._handle(EVENT, event(seq), retained=False)
    monitor._handle(RESULT, result(13), retained=False)
    assert monitor.gaps == [] and monitor.seen == {10, 11, 12, 13}, out.getvalue()


def test_ruling_line_names_clause_actions_and_source() -> None:
    ruling = RulingPayload.model_validate(
        {
            "table": "t",
            "ts": "2026-11-29T14:43:13.123Z",
            "seq": 7,
            "rule_id": "pa-555.5b",
            "game": "caribbean_stud",
            "clause": "58 Pa. Code § 555.5(b)",
            "words": "…",
            "actions": ["remove_deck"],
            "affected": ["all"],
            "summary": "Remove the deck.",
            "event": {"device": "shuffler", "event": "shuffle_complete", "seq": 6, "data": {}},
        }
    )
    line = format_message("tableside/t/ruling", ruling)
    assert line == (
        "14:43:13.123 #     7 RULING  58 Pa. Code § 555.5(b) → remove_deck\n"
        f"{'':>20}Remove the deck. (from shuffler shuffle_complete #6)"
    )


def test_a_gap_across_the_monitors_own_reconnect_is_its_own() -> None:
    """A gap across a reconnect on which the broker had not kept the monitor's session (its
    CONNACK: no session present) is said to be the monitor's, with the command that fetches the
    range; one while it stayed connected is not."""
    out = io.StringIO()
    monitor = Monitor(
        "mqtt://127.0.0.1:1", "t", out=out, journal_hint="--config /etc/tableside/t.toml"
    )
    monitor._on_connection(session_present=False)
    monitor._handle(EVENT, event(1), retained=False)
    monitor._handle(EVENT, event(3), retained=False)  # connected: the table's
    monitor._on_connection(session_present=False)  # the monitor was away, its session lost
    monitor._handle(STATUS, status(2), retained=True)  # retained, sent on subscribing
    monitor._handle(EVENT, event(3, redelivered=True), retained=False)  # a repeat decides nothing
    monitor._handle(EVENT, event(9), retained=False)
    monitor._handle(EVENT, event(11), retained=False)
    assert monitor.gaps == [(2, 2), (10, 10)]
    assert monitor.missed == [(4, 8)]
    text = out.getvalue()
    assert "GAP: seq 2..2 not received (lost before or at the broker)" in text
    assert "GAP (this monitor's): seq 4..8" in text
    assert "tableside journal export --config /etc/tableside/t.toml --from-seq 4 --to-seq 8" in text


def test_a_gap_across_a_reconnect_to_a_session_the_broker_kept_is_not_the_monitors() -> None:
    """The broker kept the session (CONNACK: session present): what the table published while
    the monitor was away was queued for it, so a gap is a loss before or at the broker (one
    killed before it saved what it had taken), not the monitor's. The messages it sends again
    (MQTT DUP) are repeats and decide nothing."""
    out = io.StringIO()
    monitor = Monitor("mqtt://127.0.0.1:1", "t", out=out)
    monitor._on_connection(session_present=False)
    for seq in (1, 2, 3):
        monitor._handle(EVENT, event(seq), retained=False)
    monitor._on_connection(session_present=True)
    monitor._handle(EVENT, event(6), retained=False)
    monitor._handle(EVENT, event(6), retained=False)  # in flight when the broker went: again
    monitor._handle(EVENT, event(7), retained=False)
    assert monitor.missed == [] and monitor.gaps == [(4, 5)], out.getvalue()


async def test_a_monitor_starting_clean_keeps_its_session_across_broker_restarts(
    tmp_path: Path,
) -> None:
    """The demo's monitor (``resume=False``: no session of an earlier run) across two restarts
    of a broker that persists sessions: what is published while it is away reaches it after.
    Mosquitto saves only a session whose CONNECT did not ask for a clean start, so a monitor
    whose first CONNECT did found no session after the restart, and called the loss its own."""
    broker = Mosquitto(tmp_path, persistent=True)
    broker.start()
    lines = io.StringIO()
    monitor = Monitor(broker.url, "t", out=lines, client_id="tableside-demo-monitor-t",
                      resume=False)  # fmt: skip
    watching = asyncio.create_task(monitor.run())
    published = 1  # the table's status, retained: the monitor has subscribed once it has it

    async def publish(count: int) -> None:
        nonlocal published
        async with Client(Endpoint(broker.url)) as client:
            for _ in range(count):
                await client.publish(EVENT, event(published))
                published += 1

    try:
        async with Client(Endpoint(broker.url)) as client:
            await client.publish(STATUS, status(0), retain=True)
        await until(lambda: "TABLE t is online" in lines.getvalue())
        for restart in range(2):
            await publish(5)
            await until(lambda: monitor._high == published - 1)
            # the monitor away while the broker restarts and the table goes on: its next
            # connections go where nothing listens until the table has published
            monitor.endpoint = Endpoint(f"mqtt://127.0.0.1:{free_port()}")
            broker.stop()  # SIGTERM: Mosquitto saves the sessions it keeps
            broker.start()
            await publish(5)
            monitor.endpoint = None
            await until(lambda restart=restart: monitor.connections == restart + 2)  # type: ignore[misc]
        await publish(1)
        await until(lambda: monitor._high == published - 1)
        assert monitor.missed == [] and monitor.gaps == [], lines.getvalue()
        assert monitor.seen == set(range(1, published))
    finally:
        try:
            await stop(watching)
        finally:
            broker.stop()


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
