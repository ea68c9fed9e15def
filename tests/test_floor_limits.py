"""What a table sends to a broker that limits it (docs/mqtt.md, "What each broker allows"), as
the floor understands it (docs/floor.md, "A record the broker could not carry"):

* a withheld stand-in (``<prefix>/<table>/withheld``) in place of a record larger than the
  broker's Maximum Packet Size: the record's seq and chain entry, not its content. The floor
  stores the seq as accounted for, the chain walk links across it when it links at both ends,
  the view and the export say what it is, and the record itself, replayed, takes its seq; a
  stand-in that does not link is a claim the chain does not vouch for;
* ``chain-retain: true``: a record journaled retained and sent unretained (a broker that keeps
  none), verified as retained;
* a status's ``undelivered`` (a record the broker refuses), on the tile and the page until a
  later status clears it.

Each goes through the floor's own writer step and chain walk (tests/test_floor_forgery.py's
``Pit``) on SQLite and on a real PostgreSQL, into the web view's model; the last test runs the
real daemon behind a Mosquitto with ``max_packet_size 1200`` and a real floor."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from tableside.daemon.config import Config
from tableside.daemon.journal import Record
from tableside.floor.judge import judge
from tableside.floor.order import live
from tableside.floor.service import Floor, RepairPolicy
from tableside.floor.store import Message, Store, TableState, open_store
from tableside.floor.verify import against_export, export_line
from tableside.rules.vocabulary import Game, Phase
from tableside.wire import proof
from tableside.wire.payloads import WithheldPayload
from tableside.wire.topics import TopicKind
from tests.conftest import Mosquitto
from tests.floorpeer import PeerTable
from tests.test_floor import running
from tests.test_floor_forgery import Pit, ruling

TS = "2026-12-01T08:00:00.000Z"
#: the broker's Maximum Packet Size in these tests (as tests/test_mqtt_limits.py's Mosquitto)
LIMIT = 1200


def table_state(peer: PeerTable) -> Record:
    """A table state larger than the broker's limit (a real one is about 2 KB), journaled."""
    return peer.message(
        "table", retain=True, game=Game.CARIBBEAN_STUD, phase=Phase.BETTING, round=3,
        rounds_since_stub_count=3, deck_age_h=0.5, meter_cents=None,
        state={"seats": ["x" * 60] * 30}, cause="start_round",
    )  # fmt: skip


def stand_in(
    peer: PeerTable,
    record: Record,
    keys: dict[str, Any] | None = None,
    *,
    chain: proof.Chain | None = None,
    redelivered: bool = False,
) -> Message:
    """The record as the table sends it to a broker whose limit it passes: a withheld stand-in
    under its seq, carrying its chain entry (``chain``: another, a forger's)."""
    body = WithheldPayload(
        table=peer.table, ts=TS, seq=record.seq, redelivered=redelivered, topic=record.topic,
        retain=record.retain, size=len(record.payload) + 80, limit=LIMIT,
    )  # fmt: skip
    entry = chain or proof.Chain(record.prev_hash, record.hash, record.ts)
    return judge("tableside", f"tableside/{peer.table}/withheld", body.model_dump_json().encode(),
                 False, entry.properties(), time.time(), keys or {})  # fmt: skip


def words(peer: PeerTable, record: Record) -> str:
    return (f"seq {record.seq}: a {len(record.payload) + 80}-byte record for "
            f"tableside/{peer.table}/table withheld: larger than the broker's limit {LIMIT}; "
            "in the table's journal")  # fmt: skip


def journal_lines(peer: PeerTable) -> Iterable[tuple[int, dict[str, object]]]:
    """The peer's journal as ``tableside journal export`` writes it."""
    for n, (seq, r) in enumerate(sorted(peer.records.items()), 1):
        yield n, {"seq": seq, "journal_ts": r.ts, "topic": r.topic, "retain": r.retain,
                  "payload": json.loads(r.payload), "prev_hash": r.prev_hash.hex(),
                  "hash": r.hash.hex()}  # fmt: skip


async def _state(store: Store, table: str = "cs-01") -> TableState:
    state = await store.state(table)
    assert state is not None
    return state


async def assert_proven(
    pit: Pit, peer: PeerTable, withheld: Iterable[int] = (), *, signed: int | None = None
) -> None:
    """Every seq of the table stored as its own (the ``withheld`` ones as its stand-ins, their
    chain entries the table's), linked from the first to the last with no gap and no break, and
    shown once each, in order."""
    held = sorted(withheld)
    last = max(peer.records)
    stored = await pit.store.records(peer.table)
    assert [(m.seq, m.hash) for m in stored] == [(s, peer.records[s].hash) for s in range(last + 1)]
    assert [m.seq for m in stored if m.what is TopicKind.WITHHELD] == held
    assert [(m.seq, m.verdict) for m in stored if m.verdict != "ok"] == [
        (s, "withheld") for s in held
    ]
    state = await _state(pit.store, peer.table)
    assert (state.gaps, state.withheld) == ([], held)
    assert state.progress.contiguous_upto == last and state.progress.verified_upto == last
    assert not state.progress.broken
    if signed is not None:
        assert state.progress.signed_upto == signed
    assert pit.seqs_shown(peer.table) == list(range(last + 1))


# -- (a) a stand-in in the middle of a stream ---------------------------------------------------


@pytest.mark.parametrize("restarted", [False, True], ids=["running", "restarted"])
@pytest.mark.parametrize("per_batch", [1, 100])
async def test_a_stream_with_a_stand_in_in_the_middle_is_proven_whole_to_a_signed_checkpoint(
    store: Store, per_batch: int, restarted: bool
) -> None:
    """A table state too large for the broker goes as a stand-in at seq 3: the floor stores it
    as seq 3, links the chain across it (its chain-prev is seq 2's hash, seq 4's chain-prev is
    its chain-hash) up to a signed checkpoint, the view shows it as withheld, and an auditor's
    export says so (and agrees with the table's journal)."""
    pit = Pit(store)
    peer = PeerTable()
    await store.enrol("cs-01", proof.public_key_hex(peer.key))
    keys = {"cs-01": peer.public}
    records = [peer.event(), peer.event(), peer.event(), table_state(peer)]  # 0..3
    big = records[3]
    assert len(big.payload) > LIMIT
    sent = [peer.judged(r, keys) for r in records[:3]] + [stand_in(peer, big, keys)]
    await pit.deliver_each(sent, per_batch)
    if restarted:
        pit.restart()  # it knows no head, and the stand-in waits for the record after it
    after = [peer.event(), ruling(peer, 5), peer.checkpoint(), peer.event()]  # 4..7
    await pit.deliver_each((peer.judged(r, keys) for r in after), per_batch)
    await assert_proven(pit, peer, [3], signed=5)
    assert (await _state(store)).flagged is None
    assert await store.messages("cs-01", kind="rejected") == []
    assert await store.messages("cs-01", kind="conflict") == []
    assert await store.problems("cs-01") == []

    page = pit.view.table_page("cs-01", time.time())
    assert page is not None
    listed, events = page["withheld"], page["events"]
    assert isinstance(listed, list) and isinstance(events, list)
    assert [w["text"] for w in listed] == [words(peer, big)]
    assert {"seq": 3, "ts": TS, "what": "WITHHELD", "detail": words(peer, big)} in events
    assert [r.seq for r in pit.view.open_rulings("cs-01")] == [5]
    assert pit.view.tile("cs-01", time.time())["withheld_state"] == [{
        "topic": "tableside/cs-01/table", "seq": 3,
        "text": "table state withheld at seq 3 (larger than the broker's limit): none shown",
    }]  # fmt: skip

    (line,) = [export_line(m) for m in await store.records("cs-01", 3, 3)]
    assert line == {
        "seq": 3, "journal_ts": big.ts, "topic": "tableside/cs-01/table", "retain": True,
        "payload": None, "prev_hash": big.prev_hash.hex(), "hash": big.hash.hex(),
        "withheld": {"size": len(big.payload) + 80, "limit": LIMIT, "reason": words(peer, big)},
    }  # fmt: skip
    stored = {m.seq or 0: m for m in await store.records("cs-01")}
    assert list(against_export(stored, journal_lines(peer))) == []
    if not restarted:  # (a floor started again counts from nothing)
        get = pit.floor.metrics.registry.get_sample_value
        assert get("tableside_floor_withheld_records_total", {"what": "stand-in"}) == 1.0


async def test_a_stand_in_at_the_end_waits_for_the_record_after_it_as_no_gap(store: Store) -> None:
    """Nothing vouches for a stand-in's chain-hash until the record after it links to it: the
    walk stops before it, not calling it a gap (nothing is asked of the table) nor a break;
    the record after it takes it on."""
    pit = Pit(store)
    peer = PeerTable()
    await pit.deliver(*(peer.judged(peer.event()) for _ in range(3)))  # 0..2
    big = table_state(peer)  # 3
    await pit.deliver(stand_in(peer, big))
    await pit.repair_pass()
    state = await _state(store)
    assert (state.progress.contiguous_upto, state.progress.verified_upto) == (2, 2)
    assert not state.progress.broken and state.gaps == [] and state.withheld == [3]
    assert pit.seqs_shown() == [0, 1, 2] and pit.floor._held_at == {}
    await pit.deliver(peer.judged(peer.event()))  # 4
    await assert_proven(pit, peer, [3])


async def test_a_tile_whose_newest_state_was_withheld_says_the_one_shown_is_older(
    store: Store,
) -> None:
    pit = Pit(store)
    peer = PeerTable()
    small: dict[str, Any] = {"game": "caribbean_stud", "rounds_since_stub_count": 1,
                             "deck_age_h": 0.5, "meter_cents": None, "state": {},
                             "cause": "start_round"}  # fmt: skip
    shown = peer.message("table", retain=True, phase="betting", round=1, **small)  # 0
    event, big = peer.event(), table_state(peer)  # 1, 2
    await pit.deliver(peer.judged(shown), peer.judged(event), stand_in(peer, big),
                      peer.judged(peer.event()))  # fmt: skip
    tile = pit.view.tile("cs-01", time.time())
    assert (tile["phase"], tile["round"]) == ("betting", 1)
    assert [w["text"] for w in tile["withheld_state"]] == [  # type: ignore[attr-defined]
        "table state withheld at seq 2 (larger than the broker's limit): the one shown is older"
    ]
    newer = peer.message("table", retain=True, phase="dealing", round=4, **small)  # 4
    await pit.deliver(peer.judged(newer))
    tile = pit.view.tile("cs-01", time.time())
    assert (tile["phase"], tile["withheld_state"]) == ("dealing", [])


async def test_stand_ins_in_a_row_each_link_to_the_next(store: Store) -> None:
    pit = Pit(store)
    peer = PeerTable()
    records = [peer.event(), table_state(peer), table_state(peer), peer.event()]  # 0..3
    sent = [peer.judged(records[0]), stand_in(peer, records[1]), stand_in(peer, records[2]),
            peer.judged(records[3])]  # fmt: skip
    await pit.deliver_each(sent)
    await assert_proven(pit, peer, [1, 2])


async def test_the_record_itself_replayed_takes_the_seq_of_its_stand_in(store: Store) -> None:
    """A replay of the withheld seq (once it is small enough for the broker) carries the same
    chain entry and a hash that holds for its content: it becomes the verified record for the
    seq, and the stand-in is kept beside it (kind ``withheld``); the chain stays verified."""
    pit = Pit(store)
    peer = PeerTable()
    records = [peer.event(), peer.event(), table_state(peer), peer.event()]  # 0..3
    big = records[2]
    await pit.deliver(peer.judged(records[0]), peer.judged(records[1]), stand_in(peer, big),
                      peer.judged(records[3]))  # fmt: skip
    await pit.deliver(peer.replayed(big))
    stored = {m.seq or 0: m for m in await store.records("cs-01")}
    assert (stored[2].verdict, stored[2].replayed, stored[2].payload) == ("ok", True, big.payload)
    (kept,) = await store.messages("cs-01", kind="withheld")
    assert kept.seq == 2 and kept.hash == big.hash and "took the seq" in kept.reason
    state = await _state(store)
    assert (state.withheld, state.records, state.duplicates, state.conflicts) == ([], 4, 0, 0)
    assert state.progress.verified_upto == 3 and not state.progress.broken
    assert export_line(stored[2])["payload"] == json.loads(big.payload)
    assert list(against_export(stored, journal_lines(peer))) == []
    get = pit.floor.metrics.registry.get_sample_value
    assert get("tableside_floor_withheld_records_total", {"what": "filled-in"}) == 1.0
    # the stand-in again (a redelivery) is a duplicate of the record, not a claim on its seq
    await pit.deliver(stand_in(peer, big, redelivered=True))
    assert (await _state(store)).duplicates == 1
    assert (await store.records("cs-01", 2, 2))[0].replayed


# -- (b) retained state sent unretained ---------------------------------------------------------


def unretained(peer: PeerTable, record: Record, *, say: str | None = "true") -> Message:
    """The record as the table sends it to a broker that keeps nothing retained: unretained,
    its chain entry saying ``chain-retain`` (``say``: that value; None: left out)."""
    topic, payload, _, props = peer.wire(record)
    if say is not None:
        props = [*props, (proof.CHAIN_RETAIN, say)]
    return judge("tableside", topic, payload, False, props, time.time(), {})


async def test_a_retained_record_sent_unretained_with_chain_retain_verifies(store: Store) -> None:
    """Its hash covers retain=true, the flag it was journaled with: with ``chain-retain`` the
    floor checks it so, keeps it as retained state, and the chain verifies; it came live all
    the same. Without the property the same bytes do not verify (the hash decides), and a
    ``chain-retain`` on a record journaled unretained is no better."""
    pit = Pit(store)
    peer = PeerTable()
    event = peer.event()  # 0
    status = peer.message("status", retain=True, status="online", version="0")  # 1
    state = table_state(peer)  # 2: larger than the limit, and retained
    last = peer.event()  # 3
    said = unretained(peer, status)
    assert (said.verdict, said.retain, live(said)) == ("ok", True, True)
    await pit.deliver(peer.judged(event), said, stand_in(peer, state), peer.judged(last))
    await assert_proven(pit, peer, [2])
    stored = {m.seq or 0: m for m in await store.records("cs-01")}
    assert stored[1].retain and export_line(stored[1])["retain"] is True
    assert list(against_export(stored, journal_lines(peer))) == []
    assert pit.view.tile("cs-01", time.time())["status"] == "online"

    assert unretained(peer, status, say=None).verdict == "altered"
    claimed = unretained(peer, event)
    assert (claimed.verdict, claimed.reason) == (
        "altered", "seq 0: its chain-hash is not the hash of what arrived"
    )  # fmt: skip
    odd = unretained(peer, status, say="yes")
    assert odd.kind == "rejected" and "chain-retain is 'yes'" in odd.reason


# -- (c) the broker refuses a record: the table's status says so --------------------------------


async def test_a_refused_record_shows_on_the_tile_and_page_until_a_status_clears_it(
    store: Store,
) -> None:
    pit = Pit(store)
    peer = PeerTable()
    refused = {"seq": 41, "topic": "tableside/cs-01/ruling", "reason": "0x87 (not authorized)"}
    text = "broker refuses seq 41 on tableside/cs-01/ruling: 0x87 (not authorized)"
    sent = [peer.message("status", retain=True, status="online", version="0"),
            peer.event(),
            peer.message("status", retain=True, status="online", version="0",
                         undelivered=refused)]  # fmt: skip
    await pit.deliver(*(peer.judged(r) for r in sent))
    now = time.time()
    tile = pit.view.tile("cs-01", now)
    assert tile["undelivered"] == refused | {"text": text}
    page = pit.view.table_page("cs-01", now)
    assert page is not None and page["tile"]["undelivered"] == refused | {"text": text}  # type: ignore[index]
    cleared = peer.message("status", retain=True, status="online", version="0", undelivered=None)
    await pit.deliver(peer.judged(cleared))
    assert pit.view.tile("cs-01", time.time())["undelivered"] is None


# -- (d) a stand-in the chain does not vouch for -------------------------------------------------


def forged_stand_in(peer: PeerTable, seq: int, *, links: bool) -> Message:
    """A stand-in anyone who reads the stream can send: at ``seq``, a made-up chain-hash, and a
    chain-prev that is seq - 1's hash as the table sent it (``links``) or another."""
    prev = peer.records[seq - 1].hash if links else bytes(range(32))
    fake = Record(seq, 1764590000.0, f"tableside/{peer.table}/table", True, b"{}", prev,
                  bytes(32 * [7]))  # fmt: skip
    return stand_in(peer, fake)


@pytest.mark.parametrize("restarted", [False, True], ids=["running", "restarted"])
async def test_a_stand_in_that_does_not_link_to_the_seq_before_is_not_the_record(
    store: Store, restarted: bool
) -> None:
    """Its chain-prev is no hash of the table's: on a running floor it is held apart (the
    table's seq 2 links to seq 1, by construction); on one that has just started, it is stored
    and gives its seq to the table's stand-in, which links at both ends."""
    pit = Pit(store)
    peer = PeerTable()
    await pit.deliver(*(peer.judged(peer.event()) for _ in range(2)))  # 0, 1
    if restarted:
        pit.restart()
    forgery = forged_stand_in(peer, 2, links=False)
    big = table_state(peer)  # 2
    await pit.deliver_each([forgery, stand_in(peer, big), peer.judged(peer.event())])
    await assert_proven(pit, peer, [2])
    (kept,) = [m for m in await store.messages("cs-01", limit=100) if m.hash == forgery.hash]
    assert kept.kind in ("rejected", "conflict") and "chain" in kept.reason
    assert pit.counted("seq-ahead", "unvouched") == 1


@pytest.mark.parametrize("own", ["stand-in", "record"])
@pytest.mark.parametrize("restarted", [False, True], ids=["running", "restarted"])
async def test_a_stand_in_that_links_only_at_its_near_end_gives_way_to_the_tables_own(
    store: Store, own: str, restarted: bool
) -> None:
    """A forger copies seq 1's hash for chain-prev and makes up a chain-hash: it comes before
    the table's own seq 2 and takes it first, but the table's seq 3 does not link to it. The
    seq goes to the table's own (its stand-in, or its record), which seq 3 links to."""
    pit = Pit(store)
    peer = PeerTable()
    await pit.deliver(*(peer.judged(peer.event()) for _ in range(2)))  # 0, 1
    if restarted:
        pit.restart()
    forgery = forged_stand_in(peer, 2, links=True)
    two = table_state(peer) if own == "stand-in" else peer.event()
    mine = stand_in(peer, two) if own == "stand-in" else peer.judged(two)
    await pit.deliver_each([forgery, mine, peer.judged(peer.event()), peer.judged(peer.event())])
    await assert_proven(pit, peer, [2] if own == "stand-in" else [])
    (kept,) = await store.messages("cs-01", kind="conflict")
    assert kept.hash == forgery.hash and kept.reason.startswith("seq 2: ")
    assert pit.counted("unvouched") == 1


async def test_a_stand_in_in_place_of_a_record_lost_on_the_way_waits_for_its_replay(
    store: Store,
) -> None:
    """The table's seq 2 lost on the way and a forged stand-in that links to seq 1 in its
    place: seq 3 does not link to it, so the walk waits at 2 (nothing after seq 1 shown, the
    chain not called broken) and the repair asks the table for 2 and 3; the table's 2,
    replayed, takes the seq."""
    pit = Pit(store)
    peer = PeerTable()
    await pit.deliver(*(peer.judged(peer.event()) for _ in range(2)))  # 0, 1
    forgery = forged_stand_in(peer, 2, links=True)
    two, three = peer.event(), peer.event()
    await pit.deliver(forgery)
    await pit.deliver(peer.judged(three))
    await pit.repair_pass()
    state = await _state(store)
    assert (state.progress.verified_upto, state.progress.broken) == (1, False)
    assert pit.seqs_shown() == [0, 1]
    assert pit.floor._held_at == {"cs-01": 2} and pit.floor._far == {"cs-01"}
    await pit.deliver(peer.replayed(two))
    await assert_proven(pit, peer)
    assert pit.floor._held_at == {} and pit.floor._far == set()


async def test_a_record_that_does_not_link_to_a_stand_in_gives_way_to_the_one_that_does(
    store: Store,
) -> None:
    """The table's stand-in at seq 2, then a forged seq 3 of a chain of its own before the
    table's seq 3: the table's, which links to the stand-in, takes seq 3."""
    pit = Pit(store)
    peer = PeerTable()
    zero, one, big = peer.event(), peer.event(), table_state(peer)  # 0..2
    stranger = PeerTable()
    forged = stranger.judged([stranger.event(99) for _ in range(4)][3])
    await pit.deliver_each([peer.judged(zero), peer.judged(one), stand_in(peer, big), forged,
                            peer.judged(peer.event())])  # fmt: skip
    await assert_proven(pit, peer, [2])
    (kept,) = await store.messages("cs-01", kind="conflict")
    assert kept.hash == forged.hash


async def test_a_stand_in_after_the_tables_record_changes_nothing(store: Store) -> None:
    pit = Pit(store)
    peer = PeerTable()
    await pit.deliver(*(peer.judged(r) for r in [peer.event(), peer.event(), peer.event()]))
    await pit.deliver(forged_stand_in(peer, 2, links=True), peer.judged(peer.event()))  # 3
    await assert_proven(pit, peer)
    (kept,) = await store.messages("cs-01", kind="conflict")
    assert kept.what is TopicKind.WITHHELD


# -- the web view in a browser ------------------------------------------------------------------


@pytest.mark.slow
async def test_the_page_shows_a_refused_record_and_a_withheld_one(tmp_path: Path) -> None:
    """In Chromium: the tile and the table's page say what the table's status says its broker
    refuses, and stop once a status says null; the page lists a withheld stand-in in its
    words, and the tile counts it (from the store)."""
    from playwright.async_api import expect

    from tableside.floor.web.app import WebApp, serving
    from tableside.floor.web.commander import Commander, Request
    from tableside.floor.web.users import Users
    from tableside.floor.web.view import FloorView
    from tests.browser import chromium

    async def send(request: Request) -> None:
        raise AssertionError("nothing is asked of the table here")

    users = Users(tmp_path / "users.json")
    users.set("bob", "surveillance", "correct horse battery")
    async with open_store(f"sqlite:///{tmp_path}/floor.db") as store:
        app = WebApp(FloorView(), users, Commander(send), store=store)
        pit = Pit(store, view=app.view)
        pit.floor.on_stored = app.live.stored
        peer = PeerTable()
        refused = {"seq": 41, "topic": "tableside/cs-01/ruling", "reason": "0x87 (not authorized)"}
        text = "broker refuses seq 41 on tableside/cs-01/ruling: 0x87 (not authorized)"
        big = [peer.event(), table_state(peer)][1]  # 0, 1
        await pit.deliver(peer.judged(peer.records[0]), stand_in(peer, big),
                          peer.judged(peer.message("status", retain=True, status="online",
                                                   version="0", undelivered=refused)))  # fmt: skip
        async with serving(app, "127.0.0.1", 0) as url, chromium() as browser:
            page = await browser.new_page(viewport={"width": 1366, "height": 768})
            await page.goto(url + "/login")
            await page.fill("#username", "bob")
            await page.fill("#password", "correct horse battery")
            await page.click("button[type=submit]")
            tile = page.locator("article[data-table='cs-01']")
            await expect(tile.locator(".undelivered")).to_have_text(text)
            await expect(tile).to_contain_text("1 withheld")
            await expect(tile.locator(".stale")).to_have_text(
                "table state withheld at seq 1 (larger than the broker's limit): none shown"
            )
            await page.goto(url + "/table/cs-01")
            await expect(page.locator("main .undelivered")).to_have_text(text)
            await expect(page.locator("section.withheld li[data-seq='1']")).to_have_text(
                words(peer, big)
            )
            await page.goto(url + "/")
            await pit.deliver(peer.judged(peer.message("status", retain=True, status="online",
                                                       version="0")))  # fmt: skip
            await expect(tile).to_contain_text("seq 3")
            await expect(tile.locator(".undelivered")).to_have_count(0)


# -- the real table behind a broker that limits packets -----------------------------------------


@pytest.mark.slow
async def test_a_floor_proves_every_seq_of_a_real_table_behind_a_packet_limit(
    tmp_path: Path,
) -> None:
    """tests/test_mqtt_limits.py's Mosquitto (``max_packet_size 1200``): the real daemon sends
    its table state, too large for it, as withheld stand-ins, and a floor subscribed to that
    broker stores every seq, links the chain across each stand-in and verifies it to the
    end, signed by the table's enrolled key."""
    from tests.hil import simulated_table, simulator, until

    (tmp_path / "broker").mkdir()
    broker = Mosquitto(tmp_path / "broker", f"max_packet_size {LIMIT}\n")
    broker.start()
    key = proof.load_or_create_key(tmp_path / "hil-1")  # the table's, made before it starts

    def checkpoints(config: Config) -> Config:
        fast = config.proof.model_copy(update={"checkpoint_interval_s": 0.5})
        return config.model_copy(update={"proof": fast})

    fast = RepairPolicy(interval_s=0.2, retry_s=0.5, max_retry_s=2.0, rate_per_s=100)
    try:
        async with open_store(f"sqlite:///{tmp_path}/floor.db") as store:
            await store.enrol("hil-1", proof.public_key_hex(key))
            floor = Floor(store, broker.url, client_id="floor-limits", repair=fast)
            async with running(floor):
                async with simulated_table(broker.url, tmp_path, simulator("count=51@1"),
                                           adjust=checkpoints) as table:  # fmt: skip
                    await table.subscriber.wait_for(lambda m: m.kind == "withheld")
                    await until(lambda: table.daemon.journal.next_seq > 30)
                last = table.daemon.journal.next_seq - 1  # the clean stop's offline status

                async def proven() -> TableState | None:
                    state = await store.state("hil-1")
                    done = state is not None and state.progress.verified_upto == last
                    return state if done else None

                async with asyncio.timeout(30):
                    while (state := await proven()) is None:
                        await asyncio.sleep(0.05)
            stored = await store.records("hil-1", limit=10_000)
            kept = await store.messages("hil-1", limit=10_000)
    finally:
        broker.stop()
    assert [m.seq for m in stored] == list(range(last + 1))
    assert state.gaps == [] and not state.progress.broken and state.flagged is None
    assert state.withheld, "no record was withheld"
    assert state.withheld == [m.seq for m in stored if m.what is TopicKind.WITHHELD]
    assert {m.verdict for m in stored} == {"ok", "withheld"}
    assert state.progress.signed_upto is not None
    assert state.progress.signed_upto >= max(state.withheld)
    assert not [m for m in kept if m.kind in ("conflict", "rejected")]


# -- the auditor's tools ------------------------------------------------------------------------


def test_gaps_export_and_verify_say_what_was_withheld(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real journal's records 0..9, its table state at seq 5 too large for the broker and
    stored as its stand-in: ``floor gaps`` names it, ``floor export`` writes its line with no
    payload and why, and ``floor verify`` against the table's own ``journal export`` finds
    nothing amiss (the hash, links, topic and retain flag agree; the content never came)."""
    from tableside.cli import main
    from tableside.daemon.journal import Journal, export_records
    from tableside.wire.payloads import DeviceEventPayload, TablePayload

    path, url = tmp_path / "journal.sqlite", f"sqlite:///{tmp_path}/floor.db"

    def event(seq: int) -> bytes:
        return DeviceEventPayload(
            table="cs-01", ts=TS, seq=seq, device="shoe", device_class="shoe",
            event="card_dealt", data={"n": seq},
        ).model_dump_json().encode()  # fmt: skip

    def state(seq: int) -> bytes:
        return TablePayload(
            table="cs-01", ts=TS, seq=seq, game=Game.CARIBBEAN_STUD, phase=Phase.BETTING, round=1,
            rounds_since_stub_count=1, deck_age_h=0.5, state={"seats": ["x" * 60] * 30},
            cause="start_round",
        ).model_dump_json().encode()  # fmt: skip

    async def fill() -> list[Record]:
        journal = Journal(path, "cs-01")
        journal.open()
        journal.start()
        for seq in range(10):
            topic = "tableside/cs-01/" + ("table" if seq == 5 else "device/shoe/event")
            journal.append(topic, state if seq == 5 else event, retain=seq == 5, key=None)
        await journal.wait_durable(9)
        records = await journal.read_from(0, 10)
        journal.close()
        peer = PeerTable(records={r.seq: r for r in records})
        async with open_store(url) as store:
            await store.write([stand_in(peer, r) if r.seq == 5 else peer.judged(r)
                               for r in records])  # fmt: skip
        return records

    records = asyncio.run(fill())
    assert main(["floor", "gaps", "--store", url, "--table", "cs-01"]) == 0
    assert "  withheld: seq 5 (larger than the broker's limit" in capsys.readouterr().out
    out = tmp_path / "floor.jsonl"
    assert main(["floor", "export", "--store", url, "--table", "cs-01", "-o", str(out)]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    theirs = json.loads(json.dumps(list(export_records(path))))
    assert [line for line in lines if line["seq"] != 5] == [t for t in theirs if t["seq"] != 5]
    withheld = lines[5]
    assert {k: withheld[k] for k in ("topic", "retain", "hash", "prev_hash", "journal_ts")} == {
        k: theirs[5][k] for k in ("topic", "retain", "hash", "prev_hash", "journal_ts")
    }
    assert withheld["payload"] is None and withheld["withheld"]["limit"] == LIMIT
    export = tmp_path / "cs-01.jsonl"
    export.write_text("".join(json.dumps(r) + "\n" for r in export_records(path)))
    assert main(["floor", "verify", "--store", url, "--table", "cs-01",
                 "--journal-export", str(export)]) == 0  # fmt: skip
    said = capsys.readouterr().out
    assert said.startswith("cs-01: 10 records (1 withheld, seq 5: ")
    assert "chain verified up to 9" in said and said.rstrip().endswith(": ok")
    assert records[5].retain
