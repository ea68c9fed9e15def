"""Issue 19 on the table, end to end: a card-recognising simulated shuffler (``--shuffle``)
through the real daemon and a real Mosquitto. A rigged one gets its surveillance alert (a
ruling with its lifecycle, citing COMAR 36.05.02.17(F), not a Pennsylvania clause), a fair one
none; an order is sealed while its deck may be dealt (not on the wire, in the journal or the
logs), and no card identity leaves a table that does not publish them."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tableside.daemon.config import Config
from tableside.drivers.shuffler.driver import ShufflerOptions
from tests.conftest import Mosquitto
from tests.hil import Received, ask, simulated_table, simulator

pytestmark = pytest.mark.slow

ALERT = "integrity.shuffle-alert"
#: a card's name as the table spells it
CARD = re.compile(r"\b(?:[2-9]|10|[AJQK])[CDHS]\b")


def _recognising(config: Config) -> Config:
    """The shuffler's option ``recognises_cards`` on (off by default)."""
    device = config.devices["shuffler"]
    options = ShufflerOptions(counts_cards=True, recognises_cards=True)
    devices = {**config.devices, "shuffler": device.model_copy(update={"options": options})}
    return config.model_copy(update={"devices": devices})


def _event(name: str) -> Any:
    return lambda m: m.topic.endswith("/device/shuffler/event") and m.payload["event"] == name


def _alerts(messages: list[Received]) -> list[Received]:
    return [m for m in messages if m.kind == "ruling" and m.payload["rule_id"] == ALERT]


def _no_card_on_the_wire(messages: list[Received]) -> None:
    for m in messages:
        text = json.dumps(m.payload)
        assert "output_cards" not in text and "input_cards" not in text, m
        if m.topic.endswith("/device/shuffler/event"):
            assert not CARD.findall(json.dumps(m.payload["data"])), m


async def test_a_rigged_shuffler_gets_its_alert_and_the_alert_its_lifecycle(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    sim = simulator(interval=0.05, shuffle="shelf:10")
    async with simulated_table(mosquitto.url, tmp_path, sim, adjust=_recognising) as table:
        (ruling,) = await table.subscriber.wait_for(
            lambda m: m.kind == "ruling" and m.payload["rule_id"] == ALERT, within=60
        )
        alert = ruling.payload
        assert alert["clause"] == "COMAR 36.05.02.17(F)" and alert["actions"] == ["alert"]
        assert not alert["halts"] and "not a Pennsylvania ruling" in alert["summary"]
        source = alert["event"]
        assert source["device"] == "shuffler" and source["event"] == "shuffle_alert"
        assert source["data"]["p_value"] < 1e-6 and source["data"]["test"] in alert["summary"]
        # flagged within the goal for one 10-shelf pass (≤ 10 shuffles)
        assert source["data"]["shuffle_id"] <= 11, source["data"]
        stats = table.subscriber.matching(_event("shuffle_statistics"))
        assert stats and stats[-1].payload["data"]["tests"]
        # the shuffler stays in use: its alerts go on, as events, under the one open ruling
        await table.subscriber.wait_for(_event("shuffle_alert"), count=3, within=60)
        assert len(_alerts(table.subscriber.messages)) == 1
        port = mosquitto.port
        seq = alert["seq"]
        acked = await ask(
            table, port, "floorperson", "acknowledge_ruling", "a", ruling=seq, by="bob"
        )
        assert acked["ok"], acked
        note = "shuffler out of use for inspection"
        resolved = await ask(table, port, "floorperson", "resolve_ruling", "r", ruling=seq,
                             by="bob", action="alert", note=note)  # fmt: skip
        assert resolved["ok"], resolved
        states = [m.payload["state"] for m in table.subscriber.messages
                  if m.kind == "ruling_state" and m.payload["ruling"] == seq]  # fmt: skip
        assert states == ["acknowledged", "resolved"]
        # resolved (say, inspected and put back as it was): its next alert is a new ruling
        again = await table.subscriber.wait_for(
            lambda m: m.kind == "ruling" and m.payload["rule_id"] == ALERT, count=2, within=60
        )
        assert again[1].payload["seq"] > resolved["seq"]
        _no_card_on_the_wire(table.subscriber.messages)


async def test_a_fair_shuffler_gets_statistics_and_no_alert(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    sim = simulator(interval=0.02, shuffle="fair")
    async with simulated_table(mosquitto.url, tmp_path, sim, adjust=_recognising) as table:
        stats = await table.subscriber.wait_for(_event("shuffle_statistics"), count=60, within=90)
        last = stats[-1].payload["data"]
        assert last["shuffles"] >= 60 and last["with_input"] == last["shuffles"]
        assert {t["test"] for t in last["tests"]} >= {"rising sequences", "guessing score"}
        assert all(t["high"] < 1 for t in last["tests"])
        assert not _alerts(table.subscriber.messages)
        orders = table.subscriber.matching(_event("shuffle_order"))
        assert len(orders) >= 60 and orders[0].payload["data"]["output_count"] == 52
        _no_card_on_the_wire(table.subscriber.messages)


async def test_an_order_is_sealed_while_its_deck_may_be_dealt(
    mosquitto: Mosquitto, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Even at a table that publishes card identities: shuffle 1's order is nowhere (wire,
    journal files, logs) until the shuffler has shuffled that deck again; then it is."""
    sim = simulator(interval=None, shuffle="riffle:7")
    state = tmp_path / "state"
    async with simulated_table(mosquitto.url, state, sim, adjust=_recognising,
                               publish_cards=True) as table:  # fmt: skip
        await table.daemon.publisher.connected.wait()
        port = mosquitto.port
        assert (await ask(table, port, "floorperson", "open_table", "o"))["ok"]
        assert (await ask(table, port, "dealer", "start_shuffle", "s1", device="shuffler"))["ok"]
        await table.subscriber.wait_for(_event("shuffle_complete"))
        async with asyncio.timeout(20):  # the table has acknowledged the shuffle's order
            while sim.orders_sent < 1:
                await asyncio.sleep(0.02)
        first = sim.decks[next(iter(sim.decks))]
        spelt = _spellings(first)
        await table.subscriber.wait_for(lambda m: m.kind == "status")  # (what came with it)
        assert not _holds(table.subscriber.messages, spelt)
        assert not _files_hold(state, spelt)
        assert not any(s in capfd.readouterr().out for s in spelt)
        assert not table.subscriber.matching(_event("shuffle_order"))
        assert table.daemon.runtime.shuffles.sealed("shuffler") == 1
        assert (await ask(table, port, "dealer", "start_shuffle", "s2", device="shuffler"))["ok"]
        (released,) = await table.subscriber.wait_for(_event("shuffle_order"))
        data = released.payload["data"]
        assert data["shuffle_id"] == 1 and len(data["output_cards"]) == 52
        assert _holds([released], spelt)  # the deck is out of play: its order is evidence now


def _spellings(order: tuple[int, ...]) -> list[str]:
    """The first eight cards of ``order`` as JSON and as Python would print them."""
    from tableside.shuffle.deck import spell

    names = spell(order[:8])
    return [json.dumps(names)[1:-1], json.dumps(names, separators=(",", ":"))[1:-1],
            repr(tuple(names))[1:-1]]  # fmt: skip


def _holds(messages: list[Received], spelt: list[str]) -> bool:
    return any(s in json.dumps(m.payload) or s in json.dumps(m.payload, separators=(",", ":"))
               for m in messages for s in spelt)  # fmt: skip


def _files_hold(directory: Path, spelt: list[str]) -> bool:
    return any(s.encode() in path.read_bytes() for path in directory.rglob("*")
               if path.is_file() for s in spelt)  # fmt: skip


async def test_recognition_off_at_the_table_refuses_the_orders_and_the_shuffler_goes_on(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    """A shuffler that sends its orders to a table whose config leaves ``recognises_cards``
    off (the default): each ShuffleOrder is NAKed, nothing is tested or published of it, and
    the link stays up, shuffle after shuffle."""
    sim = simulator(interval=0.05, shuffle="fair")
    async with simulated_table(mosquitto.url, tmp_path, sim) as table:
        completed = await table.subscriber.wait_for(_event("shuffle_complete"), count=8)
        assert [m.payload["data"]["shuffle_id"] for m in completed] == list(range(1, 9))
        events = {m.payload["event"] for m in table.subscriber.messages
                  if m.topic.endswith("/device/shuffler/event")}  # fmt: skip
        assert not events & {"shuffle_order", "shuffle_statistics", "shuffle_alert"}
        assert table.daemon.runtime.devices["shuffler"].connects == 1
