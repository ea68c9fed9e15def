"""Issue 27, symptom 8: one message published on a table's topic, at a seq the table has not sent
yet, must not take that seq from the table (docs/floor.md, "A claim the chain does not vouch
for"). Each scenario goes through the floor's own writer step (floor/service.py ``Floor._write``:
the order judge, the store, the chain walk, the feed) one batch at a time, on SQLite and on a
real PostgreSQL, into the web view's model (floor/web/view.py): what a person would see. One
more runs the whole floor on a real Mosquitto, the forgery published by a client of its own.

A forgery is kept, as what it is (rejected or a conflict, with its reason, counted), and never as
the record for its seq: the table's records are stored, linked, verified and shown, each once,
in order."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiomqtt
import pytest

from tableside.daemon.journal import Record
from tableside.floor.judge import judge
from tableside.floor.service import Floor, RepairPolicy
from tableside.floor.store import Message, Store, TableState, open_store
from tableside.floor.web.view import FloorView
from tableside.rules.rows import RULES
from tableside.wire import proof
from tests.conftest import Mosquitto
from tests.floorpeer import PeerTable
from tests.test_floor import running, table_on

TS = "2026-12-01T08:00:00.000Z"
ROW = next(r for r in RULES if r.actions and r.affects == "all")
#: the verdicts a forgery is counted under: held apart on arrival, or giving its seq way
FORGERY_COUNTS = ("seq-ahead", "unvouched")


def ruling(peer: PeerTable, n: int) -> Record:
    """A ruling that halts dealing, journaled by the table: it opens in the floor's queue."""
    return peer.message("ruling", **_ruling_fields(n))


def _ruling_fields(n: int) -> dict[str, Any]:
    return {
        "rule_id": ROW.id, "game": "caribbean_stud", "clause": ROW.citation, "words": ROW.words,
        "summary": ROW.summary, "actions": [str(a) for a in ROW.actions], "affected": ["all"],
        "event": {"device": "shuffler", "event": "shuffle_complete", "seq": n, "data": {}},
        "round": n, "halts": True,
    }  # fmt: skip


def forged(
    table: str,
    kind: str,
    seq: int,
    *,
    retain: bool = False,
    chain: proof.Chain | None = None,
    **fields: object,
) -> Message:
    """What anyone who may publish on a table's topic can send: a whole, valid payload of the
    table's, at a seq of the forger's choosing, with no chain entry (or one of its own)."""
    body = {"table": table, "ts": TS, "seq": seq, "republished": False, "redelivered": False}
    payload = json.dumps(body | fields, separators=(",", ":")).encode()
    properties = chain.properties() if chain is not None else None
    return judge("tableside", f"tableside/{table}/{kind}", payload, retain, properties,
                 time.time(), {})  # fmt: skip


def forged_ruling(table: str, seq: int) -> Message:
    return forged(table, "ruling", seq, **_ruling_fields(seq))


def forged_status(table: str, seq: int) -> Message:
    """A forged retained status, as the table's own statuses are (so not *live*)."""
    return forged(table, "status", seq, retain=True, status="online", version="0")


def stranger_record(seq: int, table: str = "cs-01") -> tuple[Message, PeerTable]:
    """A record of ``table`` at ``seq`` with a chain entry of its own that holds (a forger who
    computes hashes), chained from nothing the table sent: its chain-prev is not the table's."""
    stranger = PeerTable(table=table)
    records = [stranger.event(99) for _ in range(seq + 1)]
    return stranger.judged(records[seq]), stranger


@dataclass
class Pit:
    """The floor as it runs, one batch at a time: each ``deliver`` is one pass of the writer
    (``Floor._write``: marked in arrival order, stored in one transaction, the chain walked,
    what the store vouches for fed to the view); ``repair_pass`` is the repair loop's walk."""

    store: Store
    view: FloorView = field(default_factory=FloorView)
    #: (table, seq) of each record the view was fed, in the order it was fed
    shown: list[tuple[str, int]] = field(default_factory=list)
    floor: Floor = field(init=False)

    def __post_init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        """A new floor on the same store (it knows no table's head until its walk)."""
        self.floor = Floor(self.store, "mqtt://127.0.0.1:1", client_id="floor-forgery",
                           on_stored=self._take)  # fmt: skip

    async def _take(self, messages: list[Message]) -> None:
        for m in messages:
            if m.kind == "record" and m.seq is not None:
                self.shown.append((m.table, m.seq))
            self.view.take(m, now=time.time())

    async def deliver(self, *messages: Message) -> None:
        floor = self.floor
        await floor._load_keys()
        batch = [m for m, _, _ in floor._marked([(m, 0, None) for m in messages])]
        written = await floor._store(batch)
        await floor._stored(written, batch)

    async def deliver_each(self, messages: Iterable[Message], per_batch: int = 1) -> None:
        pending = list(messages)
        for i in range(0, len(pending), per_batch):
            await self.deliver(*pending[i : i + per_batch])

    async def repair_pass(self) -> None:
        for table in await self.store.incomplete():
            await self.floor.walk(table)
        await self.floor._feed(self.floor._linked_since())

    def seqs_shown(self, table: str = "cs-01") -> list[int]:
        return [seq for t, seq in self.shown if t == table]

    def counted(self, *verdicts: str) -> float:
        get = self.floor.metrics.registry.get_sample_value
        return sum(
            get("tableside_floor_verification_failures_total", {"verdict": v}) or 0.0
            for v in verdicts
        )


async def _state(store: Store, table: str = "cs-01") -> TableState:
    state = await store.state(table)
    assert state is not None
    return state


async def assert_the_tables_own(
    pit: Pit, peer: PeerTable, forgeries: Sequence[Message], *, signed: int | None = None
) -> None:
    """Every record of the table stored as its own, verified and shown once, in order; each
    forgery kept as what it is, never the record for its seq, and counted."""
    store = pit.store
    last = max(peer.records)
    stored = await store.records(peer.table)
    assert [(m.seq, m.hash) for m in stored] == [(s, peer.records[s].hash) for s in range(last + 1)]
    assert all(m.verdict == "ok" for m in stored), [(m.seq, m.verdict) for m in stored]
    state = await _state(store, peer.table)
    assert state.progress.contiguous_upto == last and state.progress.verified_upto == last
    assert not state.progress.broken
    if signed is not None:
        assert state.progress.signed_upto == signed
    assert pit.seqs_shown(peer.table) == list(range(last + 1))  # each once, in order
    kept = [m for m in await store.messages(peer.table, limit=10_000) if m.kind != "record"]
    for f in forgeries:
        (claim,) = [m for m in kept if m.payload == f.payload and m.seq == f.seq]
        assert claim.kind in ("rejected", "conflict") and claim.verdict in ("rejected", "conflict")
        assert "chain" in claim.reason, claim.reason
    assert pit.counted(*FORGERY_COUNTS) == len(forgeries)


# -- (a) one forged ruling ahead of the table's own ---------------------------------------------


@pytest.mark.parametrize("restarted", [False, True], ids=["running", "restarted"])
@pytest.mark.parametrize("per_batch", [1, 3, 100])
async def test_one_forged_ruling_ahead_gives_way_to_the_tables_rulings(
    store: Store, restarted: bool, per_batch: int
) -> None:
    """Issue 27's report: one forged ruling at seq 4, no chain entry, while the table is at
    seq 2; the table's own rulings 4 and 5 reach the queue, and its chain is verified. On a
    running floor and on one that started again just before the forgery (it knows no head)."""
    pit = Pit(store)
    peer = PeerTable()
    await pit.deliver(*(peer.judged(peer.event()) for _ in range(3)))  # 0..2
    if restarted:
        pit.restart()
    forgery = forged_ruling("cs-01", 4)
    genuine = [peer.event(), ruling(peer, 4), ruling(peer, 5), peer.event()]  # 3..6
    await pit.deliver_each([forgery, *(peer.judged(r) for r in genuine)], per_batch)
    await assert_the_tables_own(pit, peer, [forgery])
    assert [r.seq for r in pit.view.open_rulings("cs-01")] == [4, 5]


@pytest.mark.parametrize("restarted", [False, True], ids=["running", "restarted"])
async def test_a_forgery_ahead_of_an_enrolled_signing_table_leaves_it_signed(
    store: Store, restarted: bool
) -> None:
    """The same with the table's key enrolled and its checkpoints signed: signed up to its
    newest checkpoint, the forgery gave way and flagged nothing."""
    pit = Pit(store)
    peer = PeerTable()
    await store.enrol("cs-01", proof.public_key_hex(peer.key))
    keys = {"cs-01": peer.public}
    first = [peer.event(), peer.event(), peer.checkpoint()]  # 0..2
    await pit.deliver(*(peer.judged(r, keys) for r in first))
    if restarted:
        pit.restart()
    forgery = forged_ruling("cs-01", 4)
    genuine = [peer.event(), ruling(peer, 4), ruling(peer, 5), peer.checkpoint()]  # 3..6
    await pit.deliver_each([forgery, *(peer.judged(r, keys) for r in genuine)])
    await assert_the_tables_own(pit, peer, [forgery], signed=5)
    assert (await _state(store)).flagged is None


# -- (b) many forged statuses ahead of a live stream --------------------------------------------


@pytest.mark.parametrize("restarted", [False, True], ids=["running", "restarted"])
async def test_39_forged_statuses_ahead_leave_none_of_the_tables_records_unshown(
    store: Store, restarted: bool
) -> None:
    """Issue 27's demo: 39 forged retained statuses at seqs the table has yet to send; then the
    table's stream goes on, a few records a batch. Every one of its records is shown, once,
    in order, and the chain is verified to its end."""
    pit = Pit(store)
    peer = PeerTable()
    await pit.deliver(*(peer.judged(peer.event()) for _ in range(10)))  # 0..9
    if restarted:
        pit.restart()
    forgeries = [forged_status("cs-01", seq) for seq in range(12, 12 + 2 * 39, 2)]
    await pit.deliver(*forgeries)
    genuine = [peer.judged(peer.event()) for _ in range(90)]  # 10..99
    await pit.deliver_each(genuine, per_batch=5)
    await assert_the_tables_own(pit, peer, forgeries)
    assert (await _state(store)).records == 100


# -- (c) a forgery after the table's own record -------------------------------------------------


@pytest.mark.parametrize("restarted", [False, True], ids=["running", "restarted"])
async def test_a_forgery_after_the_tables_record_changes_nothing(
    store: Store, restarted: bool
) -> None:
    pit = Pit(store)
    peer = PeerTable()
    await pit.deliver(*(peer.judged(r) for r in [peer.event(), peer.event(), peer.event(),
                                                 peer.event(), ruling(peer, 4)]))  # fmt: skip
    if restarted:
        pit.restart()
    stranger, _ = stranger_record(3)
    late = [forged_ruling("cs-01", 4), forged_status("cs-01", 2), stranger]
    await pit.deliver(*late)
    await pit.deliver(*(peer.judged(peer.event()) for _ in range(3)))  # 5..7
    stored = await store.records("cs-01")
    assert [m.hash for m in stored] == [peer.records[s].hash for s in range(8)]
    state = await _state(store)
    assert state.progress.verified_upto == 7 and not state.progress.broken
    assert pit.seqs_shown() == list(range(8))
    assert [r.seq for r in pit.view.open_rulings("cs-01")] == [4]
    kinds = {m.seq: m.kind for m in await store.messages("cs-01", limit=100) if m.kind != "record"}
    assert kinds.keys() == {2, 3, 4} and set(kinds.values()) <= {"rejected", "conflict"}


# -- (d) a forgery with a chain entry of its own ------------------------------------------------


@pytest.mark.parametrize("restarted", [False, True], ids=["running", "restarted"])
@pytest.mark.parametrize("per_batch", [1, 100])
async def test_a_forgery_with_a_chain_entry_that_does_not_link_gives_way(
    store: Store, restarted: bool, per_batch: int
) -> None:
    """A forger who computes hashes: its seq 4 carries a chain entry that holds for what it
    sent, but its chain-prev is no record of the table's. It gives way once the table's own
    seq 4, which links to the table's seq 3, arrives."""
    pit = Pit(store)
    peer = PeerTable()
    await pit.deliver(*(peer.judged(peer.event()) for _ in range(3)))  # 0..2
    if restarted:
        pit.restart()
    forgery, _ = stranger_record(4)
    assert forgery.verdict == "ok" and forgery.hash is not None
    genuine = [peer.event(), ruling(peer, 4), ruling(peer, 5), peer.event()]  # 3..6
    await pit.deliver_each([forgery, *(peer.judged(r) for r in genuine)], per_batch)
    await assert_the_tables_own(pit, peer, [forgery])
    assert [r.seq for r in pit.view.open_rulings("cs-01")] == [4, 5]


async def test_a_forged_chain_of_its_own_ahead_gives_way_link_by_link(store: Store) -> None:
    """Two forged records ahead, the second linked to the first (a chain of the forger's own):
    each gives way to the table's record of its seq, in turn."""
    pit = Pit(store)
    peer = PeerTable()
    await pit.deliver(*(peer.judged(peer.event()) for _ in range(3)))  # 0..2
    pit.restart()
    stranger = PeerTable()
    chain = [stranger.event(99) for _ in range(6)]
    forgeries = [stranger.judged(chain[4]), stranger.judged(chain[5])]
    await pit.deliver(*forgeries)
    genuine = [peer.judged(r) for r in [peer.event(), ruling(peer, 4), ruling(peer, 5)]]
    await pit.deliver_each(genuine)
    await assert_the_tables_own(pit, peer, forgeries)


async def test_a_forgery_whose_seq_the_table_sends_only_later_holds_the_walk_not_the_view(
    store: Store,
) -> None:
    """While the table's own seq 4 has not come, the forgery's seq holds the walk as a gap
    does: nothing after seq 3 is shown, the chain is not called broken, and the repair asks the
    table for seq 4; its record, replayed, takes the seq."""
    pit = Pit(store)
    peer = PeerTable()
    await pit.deliver(*(peer.judged(peer.event()) for _ in range(3)))  # 0..2
    pit.restart()
    forgery, _ = stranger_record(4)
    await pit.deliver(forgery)
    three, four, five = peer.event(), ruling(peer, 4), peer.event()
    await pit.deliver(peer.judged(three), peer.judged(five))  # the table's 4 lost on the way
    await pit.repair_pass()
    state = await _state(store)
    assert (state.progress.verified_upto, state.progress.broken) == (3, False)
    assert pit.seqs_shown() == [0, 1, 2, 3]
    assert pit.floor._held_at == {"cs-01": 4}  # what the repair asks the table for
    await pit.deliver(peer.replayed(four))
    await assert_the_tables_own(pit, peer, [forgery])


async def test_a_wait_ends_as_a_break_when_the_table_has_nothing_else_for_that_seq(
    store: Store,
) -> None:
    """The walk waits at a record that does not link only while the table's own record of that
    seq may come. An impostor's seq 4 linked first, the table's 4 never came, and the table's
    5 does not link to the impostor's: when the table answers the floor's request for 5 with
    that same record, 5 is the break it is (linking is not signing); and a seq the table's
    journal no longer has is passed the same way."""
    pit = Pit(store)
    peer = PeerTable()
    await pit.deliver(*(peer.judged(peer.event()) for _ in range(4)))  # 0..3
    pit.restart()
    impostor = PeerTable(records=dict(peer.records))
    inserted = impostor.event(99)
    peer.event()  # the table's 4, lost on the way
    five = peer.event()
    await pit.deliver(impostor.judged(inserted), peer.judged(five))
    await pit.repair_pass()
    assert pit.floor._held_at == {"cs-01": 5}
    assert (await _state(store)).progress.contiguous_upto == 4
    await pit.deliver(peer.replayed(five))  # the table's answer: the record stored
    stored = {m.seq: m for m in await store.records("cs-01")}
    assert stored[4].hash == inserted.hash and stored[5].verdict == "break"
    state = await _state(store)
    assert (state.progress.contiguous_upto, state.progress.verified_upto) == (5, 4)
    assert state.progress.broken and pit.floor._held_at == {}
    # another table: its journal no longer has the seq the walk waits at
    other = PeerTable(table="cs-02")
    await pit.deliver(*(other.judged(other.event()) for _ in range(3)))  # 0..2
    pit.restart()
    claim, _ = stranger_record(3, table="cs-02")
    other.event()  # its 3, lost on the way
    await pit.deliver(claim, other.judged(other.event()))  # 4
    await pit.repair_pass()
    assert pit.floor._held_at == {"cs-02": 3}
    await store.note_pruned("cs-02", 4)
    pit.floor._walked.pop("cs-02")  # as the floor does on a replay's pruned_before
    await pit.repair_pass()  # 3 passed; its 4 does not link to the 3 stored: asked for
    assert pit.floor._held_at == {"cs-02": 4}
    await pit.deliver(other.replayed(other.records[4]))
    state = await _state(store, "cs-02")
    assert (state.progress.contiguous_upto, state.progress.verified_upto) == (4, 2)
    assert pit.floor._held_at == {}


# -- what stays as it was -----------------------------------------------------------------------


async def test_an_impostor_that_links_first_still_keeps_its_seq_and_the_break_is_found(
    store: Store,
) -> None:
    """Linking is not signing (docs/floor.md): a record that links to the table's seq 3 and
    came first keeps seq 4, the table's own is the conflict, and its seq 5 is the break."""
    pit = Pit(store)
    peer = PeerTable()
    await pit.deliver(*(peer.judged(peer.event()) for _ in range(4)))  # 0..3
    pit.restart()  # no head: the order judge would hold the table's 5 apart (not linking to 4)
    impostor = PeerTable(records=dict(peer.records))
    inserted = impostor.event(99)
    four, five, six = peer.event(), peer.event(), peer.event()
    await pit.deliver(impostor.judged(inserted), peer.judged(four), peer.judged(five),
                      peer.judged(six))  # fmt: skip
    stored = {m.seq: m for m in await store.records("cs-01")}
    assert stored[4].hash == inserted.hash and stored[5].verdict == "break"
    state = await _state(store)
    assert state.progress.contiguous_upto == 6 and state.progress.verified_upto == 4
    assert state.progress.broken and state.conflicts == 1


async def test_a_table_without_chain_entries_keeps_its_present_behaviour(store: Store) -> None:
    """An MQTT 3.1.1 table sends no chain entry: its records are stored as unverifiable, each
    under its seq; a gap is repaired by replays (which carry the journal's chain entry); the
    walk goes through, finding where no chain entry is, and nothing of it is held apart."""
    pit = Pit(store)
    peer = PeerTable()
    records = [peer.event() for _ in range(10)]

    def plain(r: Record) -> Message:
        return judge("tableside", r.topic, r.payload, r.retain, None, time.time(), {})

    await pit.deliver_each([plain(r) for r in records if r.seq not in (5, 6)], per_batch=3)
    await pit.deliver(*(peer.replayed(records[s]) for s in (5, 6)))
    await pit.repair_pass()
    stored = await store.records("cs-01")
    assert [m.seq for m in stored] == list(range(10))
    assert [m.verdict for m in stored] == ["unverifiable"] * 5 + ["ok"] * 2 + ["unverifiable"] * 3
    state = await _state(store)
    assert (state.progress.contiguous_upto, state.progress.verified_upto) == (9, None)
    assert state.progress.broken and state.conflicts == 0
    assert [str(p) for p in await store.problems("cs-01")] == [
        "seq 0: carries no chain entry: the chain stops here",
        "seq 7: carries no chain entry: the chain stops here",
    ]
    assert await store.messages("cs-01", kind="rejected") == []
    assert pit.seqs_shown() == [6]  # the replayed 6 links to the replayed 5


# -- on a real broker ---------------------------------------------------------------------------


async def test_one_forged_ruling_on_the_broker_does_not_hide_the_tables_rulings(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    """The whole floor on a real Mosquitto, the forgery published by a client of its own, as
    issue 27 saw it: a forged ruling at the seq the table is about to use, then the table's
    own rulings. Both reach the queue, and the chain is verified."""
    view, shown = FloorView(), []

    async def take(messages: list[Message]) -> None:
        for m in messages:
            shown.append(m.seq)
            view.take(m, now=time.time())

    fast = RepairPolicy(interval_s=0.2, retry_s=0.5, max_retry_s=2.0, rate_per_s=100)
    peer = PeerTable()
    async with open_store(f"sqlite:///{tmp_path}/floor.db") as store:
        floor = Floor(store, mosquitto.url, client_id="floor-forgery-e2e", repair=fast,
                      on_stored=take)  # fmt: skip
        async with running(floor), aiomqtt.Client("127.0.0.1", mosquitto.port) as forger, \
                aiomqtt.Client("127.0.0.1", mosquitto.port,
                               protocol=aiomqtt.ProtocolVersion.V5) as table:  # fmt: skip
            for _ in range(3):
                await peer.publish(table, peer.event())
            body = {"table": "cs-01", "ts": TS, "seq": 4, "republished": False,
                    "redelivered": False} | _ruling_fields(4)  # fmt: skip
            await forger.publish("tableside/cs-01/ruling", json.dumps(body), qos=1)
            for record in [peer.event(), ruling(peer, 4), ruling(peer, 5), peer.event()]:
                await peer.publish(table, record)

            async def verified() -> bool:
                state = await store.state("cs-01")
                return state is not None and state.progress.verified_upto == 6

            async with asyncio.timeout(20):
                while not await verified():
                    await asyncio.sleep(0.05)
        assert shown == list(range(7))
        assert [r.seq for r in view.open_rulings("cs-01")] == [4, 5]
        stored = await store.records("cs-01")
        assert [m.hash for m in stored] == [peer.records[s].hash for s in range(7)]
        (kept,) = [m for m in await store.messages("cs-01", limit=100) if m.kind != "record"]
        assert kept.seq == 4 and kept.payload == json.dumps(body).encode()
        assert kept.kind == "rejected" and "carries no chain entry" in kept.reason


async def test_a_forgery_in_place_of_a_record_lost_on_the_way_gives_way_to_its_replay(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    """The table's seq 4 lost on the way, a forged seq 4 (a chain entry of its own, marked as
    sent again) in its place: the walk waits at 4, the floor asks the table for it, and the
    table's journal answers with its own, which takes the seq."""
    fast = RepairPolicy(interval_s=0.2, retry_s=0.5, max_retry_s=2.0, rate_per_s=100)
    peer = PeerTable()
    async with open_store(f"sqlite:///{tmp_path}/floor.db") as store:
        floor = Floor(store, mosquitto.url, client_id="floor-forgery-lost", repair=fast)
        async with running(floor), table_on(mosquitto, peer) as table:
            for _ in range(4):  # 0..3
                await peer.publish(table, peer.event())
            _, stranger = stranger_record(4)  # marked as sent again: not held apart on arrival
            await stranger.publish(table, stranger.records[4], redelivered=True)
            peer.event()  # 4: journaled, lost on the way
            for _ in range(2):  # 5, 6
                await peer.publish(table, peer.event())

            async def verified() -> bool:  # the table's answer, its command_result, included
                state = await store.state("cs-01")
                return state is not None and state.progress.verified_upto == max(peer.records)

            async with asyncio.timeout(20):
                while not await verified():
                    await asyncio.sleep(0.05)
        assert any(first <= 4 <= last for first, last in peer.asked)
        stored = await store.records("cs-01")
        assert [m.hash for m in stored] == [r.hash for _, r in sorted(peer.records.items())]
        assert stored[4].replayed
        (kept,) = await store.messages("cs-01", kind="conflict")
        assert kept.hash == stranger.records[4].hash
        assert kept.reason.startswith(
            "seq 4: its chain-prev is not the hash of seq 3; it gave its "
            "seq to the record whose chain-prev is the hash of seq 3"
        )
