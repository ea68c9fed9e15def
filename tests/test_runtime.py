"""The table runtime (daemon/runtime.py) on its own: events in, records out, in order, with no
broker and nothing running but the journal's writer. The daemon's constructor is the factory
(config → drivers, facts, the runtime); its tasks never start, so no device is opened."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tableside.daemon.app import TableDaemon
from tableside.daemon.config import load_config
from tableside.daemon.runtime import DeviceAction, TableActionFailed
from tableside.drivers.cctalk.events import AcceptorIdentity
from tableside.drivers.events import IdentityEvent
from tableside.drivers.progressive.events import ButtonPressed
from tableside.drivers.progressive.protocol import Button
from tableside.drivers.shuffler.events import ShuffleCompleted, ShufflerFault
from tableside.drivers.shuffler.protocol import Deck, FaultCode
from tableside.rules.commands import NoArgs, PayBonus
from tests.conftest import shipped_config


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[TableDaemon]:
    config = tmp_path / "cs.toml"
    config.write_text(shipped_config(tmp_path), encoding="utf-8")
    d = TableDaemon(load_config(config, use_env=False))
    d.journal.start()
    try:
        yield d
    finally:
        d.journal.close()


async def journaled(d: TableDaemon, first: int) -> list[tuple[str, dict[str, Any]]]:
    """What the journal committed from ``first`` on: (topic under the table, payload)."""
    newest = d.journal.head[0]
    if newest < first:
        return []
    await d.journal.wait_durable(newest)
    base = f"{d.topics.base}/"
    return [(r.topic.removeprefix(base), json.loads(r.payload))
            for r in await d.journal.read_from(first, newest - first + 1)]  # fmt: skip


async def test_a_device_event_is_journaled_with_its_state_ruling_and_table(
    daemon: TableDaemon,
) -> None:
    first = daemon.journal.next_seq
    fault = ShufflerFault(
        device="shuffler", shuffle_id=3, fault=FaultCode.JAM, detail="cards stuck"
    )
    assert daemon.runtime.handle(daemon.runtime.devices["shuffler"], fault) == []
    records = await journaled(daemon, first)
    assert [topic for topic, _ in records] == [
        "device/shuffler/event", "device/shuffler/state", "ruling", "table"
    ]  # fmt: skip
    (_, event), (_, state), (_, ruling), (_, table) = records
    assert event["event"] == "fault" and event["data"]["fault"] == "jam"
    assert state["fault"] == "jam"
    # the ruling cites the event it was given on, by its seq, and opens on the table
    assert ruling["clause"] == "58 Pa. Code § 555.14(e)" and "reshuffle" in ruling["actions"]
    assert ruling["event"] == {"device": "shuffler", "event": "fault", "seq": event["seq"],
                               "data": event["data"]}  # fmt: skip
    assert [r["id"] for r in table["state"]["rulings"]] == [ruling["seq"]]
    assert table["cause"] == "rulings_opened"
    assert [p["seq"] for _, p in records] == list(range(first, first + 4))
    assert daemon.runtime.rulings_by_clause == {("555.14(e).shuffler-fault", ruling["clause"]): 1}


async def test_card_identities_stay_on_the_table_but_reach_the_rules(
    daemon: TableDaemon,
) -> None:
    first = daemon.journal.next_seq
    short = ShuffleCompleted(device="shuffler", shuffle_id=1, card_count=51, counted=True,
                             deck=Deck.SINGLE, back_colour="red", missing_count=1, extra_count=0,
                             missing_cards=("AS",))  # fmt: skip
    daemon.runtime.handle(daemon.runtime.devices["shuffler"], short)
    records = await journaled(daemon, first)
    event = records[0][1]
    assert event["event"] == "shuffle_complete" and "missing_cards" not in event["data"]
    # the rules saw 51 cards: a ruling, citing the event as published (no card identities)
    rulings = [p for topic, p in records if topic == "ruling"]
    assert rulings and all("missing_cards" not in r["event"]["data"] for r in rulings)


async def test_no_more_bets_asks_every_acceptor_to_lock_out(daemon: TableDaemon) -> None:
    first = daemon.journal.next_seq
    press = ButtonPressed(device="progressive", button=Button.NO_MORE_BETS)
    assert daemon.runtime.handle(daemon.runtime.devices["progressive"], press) == [
        DeviceAction("acceptors", "lock_out")
    ]
    assert daemon.runtime.state.phase.value == "no_more_bets"
    # a person's word does the same; "bets open" releases
    assert daemon.runtime.person("bets_open", NoArgs()) == [DeviceAction("acceptors", "release")]
    assert daemon.runtime.person("no_more_bets", NoArgs()) == [
        DeviceAction("acceptors", "lock_out")
    ]
    causes = [p["cause"] for topic, p in await journaled(daemon, first) if topic == "table"]
    assert causes == ["progressive_controller.button", "bets_open", "no_more_bets"]


async def test_a_word_the_table_cannot_take_is_refused_and_journals_nothing(
    daemon: TableDaemon,
) -> None:
    first, before = daemon.journal.next_seq, daemon.runtime.state
    with pytest.raises(ValueError, match="unknown command 'open_vault'"):
        daemon.runtime.person("open_vault", NoArgs())
    with pytest.raises(ValueError, match="the Let It Ride Bonus is Let It Ride's"):
        daemon.runtime.person("pay_bonus", PayBonus(seat=1, hand="flush"))
    assert daemon.runtime.state == before
    assert await journaled(daemon, first) == []


async def test_a_lock_out_that_failed_is_an_event_of_its_own(daemon: TableDaemon) -> None:
    first = daemon.journal.next_seq
    failed = TableActionFailed(device="acceptors", action="lock_out", detail="bus down")
    daemon.runtime.handle(daemon.runtime.devices["acceptors"], failed)
    (topic, event), *_ = await journaled(daemon, first)
    assert topic == "device/acceptors/event"
    assert event["event"] == "table_action_failed"
    assert event["data"] == {"action": "lock_out", "detail": "bus down"}


async def test_the_factory_gives_one_table_facts_with_every_configured_fact(
    tmp_path: Path,
) -> None:
    """One TableFacts for the table (the progressive's pay table and the gaming day included,
    which each device's own facts lacked), and a second shuffler that does not count named in
    it: its short count gets no count ruling, while the counting one's does."""
    config = tmp_path / "cs.toml"
    spare = (
        '[devices.spare]\ndriver = "tableside.shuffler"\nurl = "/dev/null"\ncounts_cards = false\n'
    )
    text = shipped_config(tmp_path) + "\n" + spare
    config.write_text(text, encoding="utf-8")
    d = TableDaemon(load_config(config, use_env=False))
    d.journal.start()
    try:
        facts = d.runtime.facts
        assert facts.not_counting == {"spare"} and facts.shuffler_counts
        assert facts.progressive is not None and facts.gaming_day is not None

        def short(device: str) -> ShuffleCompleted:
            return ShuffleCompleted(device=device, shuffle_id=1, card_count=51, counted=True,
                                    deck=Deck.SINGLE, back_colour="red", missing_count=1,
                                    extra_count=0)  # fmt: skip

        assert d.runtime.handle(d.runtime.devices["spare"], short("spare")) == []
        assert d.runtime.rulings == 0
        d.runtime.handle(d.runtime.devices["shuffler"], short("shuffler"))
        assert d.runtime.rulings == 1
    finally:
        d.journal.close()


async def test_a_firmware_swap_is_known_after_a_restart_from_the_journal_alone(
    tmp_path: Path,
) -> None:
    """What the table last saw of each device's firmware (and each seat's acceptor's ROM) is
    the identity in its retained state, which the journal keeps: a restarted table notices a
    swap with no file of its own beside the journal."""
    config = tmp_path / "cs.toml"
    config.write_text(shipped_config(tmp_path), encoding="utf-8")

    def identity(firmware: str) -> IdentityEvent:
        return IdentityEvent(device="shuffler", vendor="SIM", model="S-1", serial="1",
                             firmware_version="1", firmware_sha256=firmware)  # fmt: skip

    def acceptor(rom: str) -> AcceptorIdentity:
        return AcceptorIdentity(device="acceptors", seat=3, address=5, manufacturer="SIM",
                                product="A", serial="9", software="1",
                                rom_checksum=rom)  # fmt: skip

    first = TableDaemon(load_config(config, use_env=False))
    first.journal.start()
    first.runtime.handle(first.runtime.devices["shuffler"], identity("aa" * 32))
    first.runtime.handle(first.runtime.devices["acceptors"], acceptor("0001"))
    await first.journal.wait_durable(first.journal.head[0])
    first.journal.close()
    assert sorted(p.name for p in (tmp_path / "cs-01").iterdir() if "journal" not in p.name) == [
        "table-key.pem"]  # fmt: skip

    again = TableDaemon(load_config(config, use_env=False))
    again.journal.start()
    try:
        begin = again.journal.next_seq
        again.runtime.handle(again.runtime.devices["shuffler"], identity("aa" * 32))  # the same
        again.runtime.handle(again.runtime.devices["shuffler"], identity("bb" * 32))
        again.runtime.handle(again.runtime.devices["acceptors"], acceptor("0002"))
        changes = [p["data"] for t, p in await journaled(again, begin)
                   if t.endswith("/event") and p["event"] == "firmware_changed"]  # fmt: skip
        assert changes == [
            {"part": "", "previous": "aa" * 32, "current": "bb" * 32},
            {"part": "seat3", "previous": "0001", "current": "0002"},
        ]
    finally:
        again.journal.close()
