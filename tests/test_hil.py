"""The real daemon against the shuffler simulator over a pty and over socket://, with a real
Mosquitto, checked by a plain MQTT subscriber."""

from __future__ import annotations

import asyncio
import gc
import json
from pathlib import Path

import aiomqtt
import pytest
from pydantic import BaseModel

from tableside.daemon import app
from tableside.daemon.app import FREEZE_WITHIN_S, TableDaemon
from tableside.daemon.journal import export_records
from tableside.rules.model import Game
from tableside.wire.payloads import (
    DeviceEventPayload,
    DeviceStatePayload,
    RulingPayload,
    StatusPayload,
)

from .conftest import Mosquitto
from .hil import (
    Received,
    Subscriber,
    assert_seq_sound,
    event,
    make_config,
    ruling,
    simulated_table,
    simulator,
    start_simulator,
    state,
    stop,
    until,
)

pytestmark = pytest.mark.hil

MODELS: dict[str, type[BaseModel]] = {
    "status": StatusPayload,
    "state": DeviceStatePayload,
    "event": DeviceEventPayload,
    "ruling": RulingPayload,
}


def validate_payloads(messages: list[Received]) -> None:
    for m in messages:
        if m.kind in MODELS:
            MODELS[m.kind].model_validate(m.payload)


@pytest.mark.parametrize("mode", ["socket", "pty"])
async def test_each_fault_gives_its_ruling(mosquitto: Mosquitto, tmp_path: Path, mode: str) -> None:
    sim = simulator("count=51@1", "jam@2", "stop@3", "incomplete@4", "noise=80@5", "count=53@6")
    async with simulated_table(mosquitto.url, tmp_path, sim, mode=mode) as table:
        sub = table.subscriber
        await sub.wait_for(ruling(), count=5)
        await sub.wait_for(lambda m: m.kind == "event" and m.payload["data"].get("shuffle_id") == 7)
        rulings = [m.payload for m in sub.matching(ruling())]
        assert [(r["clause"], r["actions"], r["event"]["event"]) for r in rulings] == [
            ("58 Pa. Code § 555.5(b)", ["remove_deck"], "shuffle_complete"),
            ("58 Pa. Code § 555.14(e)", ["reshuffle"], "fault"),
            ("58 Pa. Code § 555.14(e)", ["reshuffle"], "fault"),
            ("58 Pa. Code § 555.14(e)", ["reshuffle"], "fault"),
            ("58 Pa. Code § 555.5(b)", ["remove_deck"], "shuffle_complete"),
        ]
        assert [r["event"]["data"].get("fault") for r in rulings[1:4]] == [
            "jam",
            "stopped",
            "incomplete",
        ]
        assert rulings[0]["event"]["data"]["card_count"] == 51
        assert "the deck shall be removed from the table" in rulings[0]["words"]
        # A ruling names the seq of the event it came from, and follows it.
        events_by_seq = {
            m.payload["seq"]: m.payload for m in sub.matching(lambda m: m.kind == "event")
        }
        for r in rulings:
            source = events_by_seq[r["event"]["seq"]]
            assert source["event"] == r["event"]["event"] and r["seq"] > source["seq"]
        # Noise on the line (shuffle 5) is reported, and shuffle 5 still completes with 52 cards.
        noise = sub.matching(event("line_noise"))
        assert noise and noise[0].payload["data"]["discarded_bytes"] > 0
        fifth = [
            m
            for m in sub.matching(event("shuffle_complete"))
            if m.payload["data"]["shuffle_id"] == 5
        ]
        assert fifth[0].payload["data"]["card_count"] == 52
        assert table.daemon.handling_errors == 0
    fresh = sub.fresh()
    assert_seq_sound(fresh)
    seqs = [m.payload["seq"] for m in fresh]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "a gap in a run with no outage"
    validate_payloads(sub.messages)
    assert sub.messages[-1].kind == "status" and sub.messages[-1].payload["status"] == "offline"
    assert not sub.messages[-1].payload["will"]


@pytest.mark.parametrize(
    ("game", "clause", "faults"),
    [
        (Game.FOUR_CARD_POKER, "58 Pa. Code § 557.5(b)", ("count=51@1",)),
        (Game.LET_IT_RIDE, "58 Pa. Code § 559.5(b)", ("count=50@1",)),
        (Game.SPANISH_21, "58 Pa. Code § 551.3(a)", ("count=287@1",)),
        (Game.FOUR_CARD_POKER, "58 Pa. Code § 557.13(e)", ("jam@1",)),
        (Game.LET_IT_RIDE, "58 Pa. Code § 559.15(d)", ("stop@1",)),
        (Game.SPANISH_21, "58 Pa. Code § 551.16(j)", ("incomplete@1",)),
    ],
)
async def test_each_game_cites_its_own_clause(
    mosquitto: Mosquitto, tmp_path: Path, game: Game, clause: str, faults: tuple[str, ...]
) -> None:
    sim = simulator(*faults, cards=288 if game is Game.SPANISH_21 else 52)
    async with simulated_table(mosquitto.url, tmp_path, sim, game=game) as table:
        (found,) = await table.subscriber.wait_for(ruling())
        assert found.payload["clause"] == clause
        assert found.payload["game"] == game.value
        await table.subscriber.wait_for(event("shuffle_complete"), count=2)
        assert len(table.subscriber.matching(ruling())) == 1  # full decks after it: no ruling


async def test_broker_restart_is_survived(mosquitto: Mosquitto, tmp_path: Path) -> None:
    sim = simulator()
    async with simulated_table(mosquitto.url, tmp_path, sim) as table:
        sub = table.subscriber
        await sub.wait_for(event("shuffle_complete"), count=2)
        connections = table.daemon.publisher.connections
        mosquitto.kill()
        await asyncio.sleep(1.0)  # events keep coming from the shuffler meanwhile
        mosquitto.start()  # same port, empty: no retained messages survive (persistence off)
        # The connection lived less than STABLE_S: a flap, so the same "online" goes again
        # (republished, its first seq), replacing what the broker lost; no new one.
        online = await sub.wait_for(
            lambda m: m.kind == "status" and m.payload["status"] == "online", count=2
        )
        assert online[1].payload["republished"]
        assert online[1].payload["seq"] == online[0].payload["seq"]
        back = table.daemon.journal.next_seq - 1  # what waited through the outage, and more
        await sub.wait_for(
            lambda m: (
                m.payload["seq"] > back
                and m.kind == "event"
                and m.payload["event"] == "shuffle_complete"
            )
        )
        assert table.daemon.publisher.connections > connections
        # A newcomer sees the right retained state straight away.
        late = Subscriber(mosquitto.url, "tableside/hil-1/#")
        late_task = asyncio.create_task(late.run())
        try:
            status = await late.wait_for(lambda m: m.kind == "status" and m.retained)
            assert status[0].payload["status"] == "online"
            device = await late.wait_for(lambda m: m.kind == "state" and m.retained)
            assert device[0].payload["connection"] == "connected"
            assert device[0].payload["identity"]["model"] == "SIM-SHUFFLER-1"
        finally:
            await stop(late_task)
        # everything that waited through the outage acknowledged (the shuffler goes on, so
        # "nothing pending" would race its next event)
        await until(lambda: table.daemon.journal.acked >= back)
    assert_seq_sound(sub.fresh())


async def test_simulator_restart_is_survived(mosquitto: Mosquitto, tmp_path: Path) -> None:
    sim = simulator()
    async with simulated_table(mosquitto.url, tmp_path, sim) as table:
        sub = table.subscriber
        await sub.wait_for(event("shuffle_complete"), count=2)
        port = int(table.device_url.rsplit(":", 1)[1])
        await stop(table.tasks["sim"])
        await sub.wait_for(state("disconnected"))
        replacement = simulator()
        _, table.tasks["sim"] = await start_simulator(replacement, "socket", port)
        mark = len(sub.messages)
        await sub.wait_for(
            lambda m: (
                sub.messages.index(m) >= mark
                and m.kind == "event"
                and m.payload["event"] == "identity"
            )
        )
        await sub.wait_for(
            lambda m: (
                sub.messages.index(m) >= mark
                and m.kind == "event"
                and m.payload["event"] == "shuffle_complete"
            )
        )
        retained = await sub.wait_for(state("connected"), count=2)
        assert retained[-1].payload["connects"] >= 2
    assert_seq_sound(sub.fresh())


async def test_silent_line_goes_stale_then_recovers(mosquitto: Mosquitto, tmp_path: Path) -> None:
    sim = simulator("disconnect=2@2")
    async with simulated_table(
        mosquitto.url, tmp_path, sim, mode="pty", heartbeat_timeout=0.4
    ) as table:
        sub = table.subscriber
        await sub.wait_for(state("stale"))
        await sub.wait_for(state("disconnected"))
        await sub.wait_for(
            lambda m: (
                m.kind == "event"
                and m.payload["event"] == "shuffle_complete"
                and m.payload["data"]["shuffle_id"] > 2
            ),
            within=30,
        )
        assert table.daemon.runtime.devices["shuffler"].connection.value == "connected"


async def test_card_identities_stay_on_the_table(mosquitto: Mosquitto, tmp_path: Path) -> None:
    sim = simulator("count=50@1", identifies_cards=True)
    async with simulated_table(mosquitto.url, tmp_path / "a", sim) as table:
        (done,) = (await table.subscriber.wait_for(event("shuffle_complete")))[:1]
    assert done.payload["data"]["missing_count"] == 2
    assert "missing_cards" not in done.payload["data"]
    sim = simulator("count=50@1", identifies_cards=True)
    async with simulated_table(mosquitto.url, tmp_path / "b", sim, publish_cards=True) as table:
        (done,) = (await table.subscriber.wait_for(event("shuffle_complete")))[:1]
    assert len(done.payload["data"]["missing_cards"]) == 2


async def test_commands_over_mqtt_by_role(mosquitto: Mosquitto, tmp_path: Path) -> None:
    """Requests arrive on the role's topic; what that role may not do, a malformed request, an
    unknown role, command or device are refused with the reason, journaled and published."""
    sim = simulator(interval=None)  # no dealer: shuffles only when commanded
    async with simulated_table(mosquitto.url, tmp_path, sim) as table:
        sub = table.subscriber
        await sub.wait_for(state("connected"))
        await table.daemon.publisher.connected.wait()
        base = "tableside/hil-1/command"
        requests = [
            ("dealer", {"command": "start_shuffle", "device": "shuffler", "request_id": "r1"}),
            ("dealer", {"command": "deal_me_in", "device": "shuffler", "request_id": "r2"}),
            ("dealer", {"command": "set_meter", "device": "shuffler", "request_id": "r3"}),
            ("technician", {"command": "deal_round", "device": "shuffler", "request_id": "r4"}),
            ("croupier", {"command": "start_shuffle", "device": "shuffler", "request_id": "r5"}),
            ("dealer", {"command": "start_shuffle", "device": "shoe", "request_id": "r6"}),
            ("floorperson", {"command": "release", "device": "shuffler", "request_id": "r7"}),
        ]
        async with aiomqtt.Client("127.0.0.1", mosquitto.port) as client:
            for role, request in requests:
                await client.publish(f"{base}/{role}", json.dumps(request), qos=1)
            await client.publish(f"{base}/dealer", "{not json", qos=1)
            await client.publish(f"{base}/dealer", json.dumps({"command": "x"}), qos=1)
            results = await sub.wait_for(lambda m: m.kind == "command_result", count=9)
        await sub.wait_for(event("shuffle_complete"))
    by_id = {r.payload["request_id"]: r.payload for r in results}
    assert by_id["r1"]["ok"] is True and by_id["r1"]["role"] == "dealer"
    refused = {k: v["error"] for k, v in by_id.items() if k and not v["ok"]}
    assert "a shuffler has no command 'release'" in refused.pop("r7"), "allowed, not a shuffler's"
    assert refused.pop("r2").startswith(
        "unknown command 'deal_me_in' (commands: acknowledge_ruling, bets_open, "
    )
    assert refused == {
        "r3": "a dealer may not give 'set_meter' (it needs: floorperson)",
        "r4": "a technician may not give 'deal_round' (it needs: dealer, floorperson)",
        "r5": "unknown role 'croupier' (roles: dealer, floorperson, technician, auditor)",
        "r6": "no device 'shoe' at table hil-1 (devices: shuffler)",
    }
    anonymous = [r.payload["error"] for r in results if r.payload["request_id"] is None]
    assert len(anonymous) == 2 and all("malformed request" in e for e in anonymous)
    assert sim.shuffles == 1
    # Every result, refusals included, is in the journal: the record of what was asked.
    journaled = [
        r for r in export_records(tmp_path / "hil-1" / "journal.sqlite")
        if r["topic"] == "tableside/hil-1/command_result"
    ]  # fmt: skip
    assert len(journaled) == 9
    assert sum(not r["payload"]["ok"] for r in journaled) == 8


async def test_seq_never_repeats_across_restarts(mosquitto: Mosquitto, tmp_path: Path) -> None:
    last_seen = -1
    for _ in range(3):
        sim = simulator()
        async with simulated_table(mosquitto.url, tmp_path, sim) as table:
            await table.subscriber.wait_for(event("shuffle_complete"))
        seqs = [m.payload["seq"] for m in table.subscriber.fresh()]
        assert seqs[0] == last_seen + 1, "a clean restart carries straight on"
        last_seen = seqs[-1]


async def test_daemon_without_broker_keeps_serving_devices(tmp_path: Path) -> None:
    from .conftest import free_port

    sim = simulator()
    url, sim_task = await start_simulator(sim, "socket")
    daemon = TableDaemon(make_config(f"mqtt://127.0.0.1:{free_port()}", url, tmp_path))
    task = asyncio.create_task(daemon.run())
    try:
        async with asyncio.timeout(10):
            while sim.completed < 3:
                await asyncio.sleep(0.05)
        assert daemon.publisher.pending > 0  # queued, waiting for a broker
        assert not daemon.publisher.connected.is_set()
    finally:
        await stop(task, sim_task)


async def test_a_firmware_swap_is_noticed_across_restarts(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    from tableside.simulators.base import SimIdentity

    async with simulated_table(mosquitto.url, tmp_path, simulator()) as table:
        await table.subscriber.wait_for(event("identity"))
        assert not table.subscriber.matching(event("firmware_changed"))
    swapped = simulator(identity=SimIdentity(model="SIM-SHUFFLER-1", firmware_version="6.6.6"))
    async with simulated_table(mosquitto.url, tmp_path, swapped) as table:
        (changed,) = (await table.subscriber.wait_for(event("firmware_changed")))[:1]
    data = changed.payload["data"]
    assert data["part"] == "" and data["previous"] != data["current"]
    identity = table.subscriber.matching(event("identity"))[-1].payload["data"]
    assert identity["firmware_sha256"] == data["current"]


async def test_each_device_says_who_it_is_once_per_connection(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    """A device sends its identity unasked at connect and again when the host asks: the table
    publishes one identity event per connection, and another when the link comes back."""
    from .test_shoe import shoe

    async with simulated_table(
        mosquitto.url, tmp_path, simulator(interval=None), others={"shoe": shoe(interval=None)}
    ) as table:
        sub = table.subscriber
        await sub.wait_for(state("connected"), count=2)
        await sub.wait_for(event("status"), count=2)  # the answer to the query after identity
        await table.daemon.publisher.connected.wait()
        async with aiomqtt.Client("127.0.0.1", mosquitto.port) as client:
            body = {"command": "query_identity", "device": "shuffler", "request_id": "q"}
            await client.publish("tableside/hil-1/command/dealer", json.dumps(body), qos=1)
        await sub.wait_for(lambda m: m.kind == "command_result" and m.payload["request_id"] == "q")
        identities = [m.payload["device"] for m in sub.matching(event("identity"))]
        assert sorted(identities) == ["shoe", "shuffler"]


async def test_start_up_is_frozen_once_online_and_the_collector_turned_back_on(
    mosquitto: Mosquitto, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tableside run`` starts with the cyclic collector off (cli/__init__.py). Once the table's
    ``online`` is on its way, not before, the daemon collects once, freezes what start-up made
    and turns the collector back on (daemon/app.py)."""
    seen_at_freeze: list[tuple[bool, bool]] = []
    freeze = gc.freeze

    def recorded_freeze() -> None:
        daemon = table.daemon
        seen_at_freeze.append((daemon.publisher.connected.is_set(), gc.isenabled()))
        freeze()

    monkeypatch.setattr(gc, "freeze", recorded_freeze)
    gc.unfreeze()
    gc.disable()
    try:
        # yielded at once: the freeze (after online) reads the table this binds
        async with simulated_table(mosquitto.url, tmp_path, simulator(), connected=False) as table:
            await table.subscriber.wait_for(
                lambda m: m.kind == "status" and m.payload["status"] == "online"
            )
            await until(gc.isenabled, within=FREEZE_WITHIN_S + 1)
            assert seen_at_freeze == [(True, False)]  # once, connected, the collector still off
            assert gc.get_freeze_count() > 0
    finally:
        gc.enable()


async def test_a_daemon_stopped_before_it_is_online_turns_the_collector_back_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The collector ``tableside run`` turned off comes back on when the daemon stops before
    its broker answered (here: none listens), long before it would have given up waiting."""
    monkeypatch.setattr(app, "FREEZE_WITHIN_S", 60.0)
    config = make_config("mqtt://127.0.0.1:1", "socket://127.0.0.1:1", tmp_path)
    daemon = TableDaemon(config, shutdown_grace=0.2)  # no broker to flush to
    gc.disable()
    try:
        task = asyncio.create_task(daemon.run())
        await until(daemon.ready.is_set, within=10)
        assert not gc.isenabled()  # waiting for the broker (FREEZE_WITHIN_S at most)
        task.cancel()
        await asyncio.wait([task])
        assert gc.isenabled()
    finally:
        gc.enable()
