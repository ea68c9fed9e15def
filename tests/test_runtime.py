"""The table runtime (daemon/runtime.py) on its own: events in, records out, in order, with no
broker and nothing running but the journal's writer. ``table_runtime`` (daemon/app.py) is the
factory, from a config and an outbox (a publisher that never runs): no daemon, no driver, no
device opened. A restart is the daemon's (its constructor restores from the journal)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tableside.daemon.app import TableDaemon, table_runtime
from tableside.daemon.config import load_config
from tableside.daemon.journal import Journal
from tableside.daemon.publisher import Publisher
from tableside.daemon.runtime import DeviceAction, TableActionFailed, TableRuntime
from tableside.drivers.cards import Card
from tableside.drivers.cctalk.events import AcceptorIdentity
from tableside.drivers.events import IdentityEvent
from tableside.drivers.progressive.events import ButtonPressed
from tableside.drivers.progressive.protocol import Button
from tableside.drivers.shuffler.events import ShuffleCompleted, ShufflerFault
from tableside.drivers.shuffler.protocol import Deck, FaultCode
from tableside.errors import Refused
from tableside.rules.commands import NoArgs, PayBonus
from tableside.wire.topics import Topics
from tests.conftest import shipped_config


@dataclass
class Table:
    """A table's runtime and the journal it records to, built without a daemon."""

    journal: Journal
    runtime: TableRuntime

    @property
    def topics(self) -> Topics:
        return self.runtime.topics


@contextlib.contextmanager
def table(tmp_path: Path, text: str) -> Iterator[Table]:
    """Under a running loop (the journal's writer tells it what it committed)."""
    path = tmp_path / "cs.toml"
    path.write_text(text, encoding="utf-8")
    config = load_config(path, use_env=False)
    journal = Journal(tmp_path / "journal.sqlite", config.table.id)
    journal.open()
    journal.start()
    try:
        outbox = Publisher(config.broker, config.table.id, config.client_id, journal)
        yield Table(journal, table_runtime(config, outbox))
    finally:
        journal.close()


@pytest.fixture
async def built(tmp_path: Path) -> AsyncIterator[Table]:
    with table(tmp_path, shipped_config(tmp_path)) as t:
        yield t


async def journaled(d: Table | TableDaemon, first: int) -> list[tuple[str, dict[str, Any]]]:
    """What the journal committed from ``first`` on: (topic under the table, payload)."""
    newest = d.journal.head[0]
    if newest < first:
        return []
    await d.journal.wait_durable(newest)
    base = f"{d.topics.base}/"
    return [(r.topic.removeprefix(base), json.loads(r.payload))
            for r in await d.journal.read_from(first, newest - first + 1)]  # fmt: skip


async def test_a_device_event_is_journaled_with_its_state_ruling_and_table(
    built: Table,
) -> None:
    first = built.journal.next_seq
    fault = ShufflerFault(
        device="shuffler", shuffle_id=3, fault=FaultCode.JAM, detail="cards stuck"
    )
    assert built.runtime.handle(built.runtime.devices["shuffler"], fault) == []
    records = await journaled(built, first)
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
    assert built.runtime.rulings_by_clause == {("555.14(e).shuffler-fault", ruling["clause"]): 1}


async def test_card_identities_stay_on_the_table_but_reach_the_rules(
    built: Table,
) -> None:
    first = built.journal.next_seq
    short = ShuffleCompleted(device="shuffler", shuffle_id=1, card_count=51, counted=True,
                             deck=Deck.SINGLE, back_colour="red", missing_count=1, extra_count=0,
                             missing_cards=(Card.named("AS"),))  # fmt: skip
    built.runtime.handle(built.runtime.devices["shuffler"], short)
    records = await journaled(built, first)
    event = records[0][1]
    assert event["event"] == "shuffle_complete" and "missing_cards" not in event["data"]
    # the rules saw 51 cards: a ruling, citing the event as published (no card identities)
    rulings = [p for topic, p in records if topic == "ruling"]
    assert rulings and all("missing_cards" not in r["event"]["data"] for r in rulings)


async def test_no_more_bets_asks_every_acceptor_to_lock_out(built: Table) -> None:
    first = built.journal.next_seq
    press = ButtonPressed(device="progressive", button=Button.NO_MORE_BETS)
    assert built.runtime.handle(built.runtime.devices["progressive"], press) == [
        DeviceAction("acceptors", "lock_out")
    ]
    assert built.runtime.state.phase.value == "no_more_bets"
    # a person's word does the same; "bets open" releases
    assert built.runtime.person("bets_open", NoArgs()) == [DeviceAction("acceptors", "release")]
    assert built.runtime.person("no_more_bets", NoArgs()) == [DeviceAction("acceptors", "lock_out")]
    causes = [p["cause"] for topic, p in await journaled(built, first) if topic == "table"]
    assert causes == ["progressive_controller.button", "bets_open", "no_more_bets"]


async def test_a_word_the_table_cannot_take_is_refused_and_journals_nothing(
    built: Table,
) -> None:
    first, before = built.journal.next_seq, built.runtime.state
    with pytest.raises(Refused, match="unknown command 'open_vault'"):
        built.runtime.person("open_vault", NoArgs())
    with pytest.raises(Refused, match="the Let It Ride Bonus is Let It Ride's"):
        built.runtime.person("pay_bonus", PayBonus(seat=1, hand="flush"))
    assert built.runtime.state == before
    assert await journaled(built, first) == []


async def test_a_lock_out_that_failed_is_an_event_of_its_own(built: Table) -> None:
    first = built.journal.next_seq
    failed = TableActionFailed(device="acceptors", action="lock_out", detail="bus down")
    built.runtime.handle(built.runtime.devices["acceptors"], failed)
    (topic, event), *_ = await journaled(built, first)
    assert topic == "device/acceptors/event"
    assert event["event"] == "table_action_failed"
    assert event["data"] == {"action": "lock_out", "detail": "bus down"}


async def test_the_factory_gives_one_table_facts_with_every_configured_fact(
    tmp_path: Path,
) -> None:
    """One TableFacts for the table (the progressive's pay table and the gaming day included,
    which each device's own facts lacked), and a second shuffler that does not count named in
    it: its short count gets no count ruling, while the counting one's does."""
    spare = (
        '[devices.spare]\ndriver = "tableside.shuffler"\nurl = "/dev/null"\ncounts_cards = false\n'
    )
    with table(tmp_path, shipped_config(tmp_path) + "\n" + spare) as d:
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
