"""The floor's store (floor/store.py): one suite, run on SQLite and on a real PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tableside.floor.judge import judge
from tableside.floor.order import SeqOrder
from tableside.floor.store import Progress, Store, StoreError, open_store
from tableside.floor.verify import walk
from tableside.wire import proof
from tests.floorpeer import PeerTable
from tests.postgres import Postgres


async def test_records_are_stored_once_and_repeats_counted(store: Store) -> None:
    peer = PeerTable()
    records = [peer.event() for _ in range(5)]
    written = await store.write([peer.judged(r) for r in records])
    assert sorted(written.stored) == [("cs-01", s) for s in range(5)]  # a table starts at 0
    # a redelivery, a republished copy and a replay of seqs already stored: counted, not kept
    again = [
        peer.judged(records[1], redelivered=True),
        peer.judged(records[2], republished=True),
        peer.replayed(records[3]),
        peer.judged(records[3]),  # twice in one batch
    ]
    written = await store.write(again)
    assert written.stored == [] and written.duplicates == {"cs-01": 4}
    state = await store.state("cs-01")
    assert state is not None
    assert (state.highest_seq, state.records, state.duplicates, state.gaps) == (4, 5, 4, [])
    assert await store.count("cs-01") == 5
    stored = await store.records("cs-01")
    assert [m.seq for m in stored] == [0, 1, 2, 3, 4]
    assert stored[0].payload == records[0].payload and stored[0].hash == records[0].hash
    assert all(m.verdict == "ok" for m in stored)


async def test_a_repeat_with_other_content_is_a_conflict_kept_beside(store: Store) -> None:
    peer = PeerTable()
    first = peer.event()
    await store.write([peer.judged(first)])
    other = PeerTable()  # same table, same seq, another record
    impostor = other.event(99)
    written = await store.write([other.judged(impostor)])
    assert written.conflicts == [("cs-01", 0)] and written.stored == []
    state = await store.state("cs-01")
    assert state is not None and (state.records, state.conflicts, state.problems) == (1, 1, 1)
    (kept,) = await store.records("cs-01")
    assert kept.hash == first.hash  # the first stays the record
    (conflict,) = await store.messages("cs-01", kind="conflict")
    assert conflict.hash == impostor.hash and "other content" in conflict.reason
    (problem,) = await store.problems("cs-01")
    assert problem.seq == 0 and "altered or inserted" in problem.what


async def test_gaps_are_ranges_and_a_replay_fills_one(store: Store) -> None:
    peer = PeerTable()
    records = [peer.event() for _ in range(12)]
    live = [r for r in records if r.seq not in (0, 1, 4, 7, 8, 9)]
    await store.write([peer.judged(r) for r in live])
    assert await store.gaps("cs-01") == [(0, 1), (4, 4), (7, 9)]
    written = await store.write([peer.replayed(records[4])])
    assert written.stored == [("cs-01", 4)]
    assert await store.gaps("cs-01") == [(0, 1), (7, 9)]
    (replayed,) = await store.records("cs-01", 4, 4)
    assert replayed.replayed and replayed.verdict == "ok" and replayed.topic == records[4].topic
    # the table's journal starts at 2 (retention): 0..1 is no gap the floor can close
    await store.note_pruned("cs-01", 2)
    assert await store.gaps("cs-01") == [(7, 9)]


async def test_every_kind_of_message_is_kept_with_its_flags(store: Store) -> None:
    peer = PeerTable()
    record = peer.event()
    now = time.time()
    will = (b'{"table":"cs-01","ts":"x","seq":1,"republished":false,"redelivered":false,'
            b'"status":"offline","version":"0","will":true}')  # fmt: skip
    from tableside.floor.judge import judge

    batch = [
        peer.judged(record),
        judge("tableside", "tableside/cs-01/status", will, True, None, now, {}),
        judge(
            "tableside", "tableside/cs-01/command/dealer", b'{"command":"x"}', False, None, now, {}
        ),
        judge("tableside", "tableside/cs-01/ruling", b"\xff not json", False, None, now, {}),
        judge("tableside", "tableside/cs-01", b"{}", False, None, now, {}),
    ]
    await store.write(batch)
    kinds = {m.kind: m for m in await store.messages("cs-01", limit=10)}
    assert set(kinds) == {"record", "will", "request", "rejected"}
    assert kinds["will"].will and kinds["will"].retain and kinds["will"].seq == 1
    assert kinds["will"].verdict == "unverifiable"
    assert "not JSON" in kinds["rejected"].reason
    # a topic of no table is kept too, under no table
    (orphan,) = await store.messages("", limit=10)
    assert orphan.kind == "rejected" and "not a table's topic" in orphan.reason
    state = await store.state("cs-01")
    assert state is not None and state.records == 1 and state.problems == 1  # the rejected one
    assert [m.seq for m in await store.messages("cs-01", topic=record.topic)] == [0]


async def test_keys_enrolled_and_a_flag_cleared(store: Store) -> None:
    peer = PeerTable()
    await store.set_flag("cs-01", "forged checkpoint at seq 4")
    state = await store.state("cs-01")
    assert state is not None and state.flagged == "forged checkpoint at seq 4"
    await store.enrol("cs-01", proof.public_key_hex(peer.key))
    assert await store.keys() == {"cs-01": proof.public_key_hex(peer.key)}
    state = await store.state("cs-01")
    assert state is not None and state.flagged is None
    assert await store.tables() == ["cs-01"]


async def test_software_manifests_approved_and_revoked(store: Store) -> None:
    """The approved list (docs/software.md), as keys are enrolled: approved again, the note is
    the new one; revoked, it is off the list; a store opened again keeps it."""
    one, two = "a" * 64, "b" * 64
    assert await store.approved_software() == {}
    await store.approve_software(one, "0.1.0 as released")
    await store.approve_software(two)
    await store.approve_software(one, "0.1.0, lab report 17")
    assert await store.approved_software() == {one: "0.1.0, lab report 17", two: None}
    assert await store.revoke_software(two) is True
    assert await store.revoke_software(two) is False
    assert await store.approved_software() == {one: "0.1.0, lab report 17"}


async def test_progress_is_kept_and_a_break_flagged(store: Store) -> None:
    peer = PeerTable()
    records = [peer.event() for _ in range(4)]
    records.append(peer.checkpoint())
    await store.write([peer.judged(r, {"cs-01": peer.public}) for r in records])
    progress, found = walk(Progress(), await store.records("cs-01"))
    assert found == []
    assert progress == Progress(4, records[4].hash, 4, 3, False)
    await store.advance("cs-01", progress)
    state = await store.state("cs-01")
    assert state is not None and state.progress == progress
    await store.flag("cs-01", 3, "break", "chain break here")
    (three,) = await store.records("cs-01", 3, 3)
    assert (three.verdict, three.reason) == ("break", "chain break here")
    assert [str(p) for p in await store.problems("cs-01")] == ["seq 3: chain break here"]


async def test_many_tables_in_one_batch(store: Store) -> None:
    peers = [PeerTable(table=f"t{i:02}") for i in range(20)]
    batch = [p.judged(p.event()) for p in peers for _ in range(3)]
    written = await store.write(batch)
    assert len(written.stored) == 60
    assert await store.tables() == [f"t{i:02}" for i in range(20)]
    assert [(s.table, s.records) for s in await store.states()] == [
        (f"t{i:02}", 3) for i in range(20)
    ]
    for p in peers:
        state = await store.state(p.table)
        assert state is not None and (state.highest_seq, state.gaps) == (2, [])


@pytest.mark.slow
async def test_the_postgresql_store_reconnects_after_a_server_restart(
    postgres_server: Postgres, postgres: str
) -> None:
    peer = PeerTable()
    async with open_store(postgres) as store:
        await store.write([peer.judged(peer.event())])
        postgres_server.restart()
        record = peer.judged(peer.event())
        for attempt in range(2):  # the first use finds the connection broken, at most
            try:
                await store.write([record])
                break
            except StoreError:
                assert attempt == 0
        state = await store.state("cs-01")
        assert state is not None and (state.records, state.gaps) == (2, [])


async def test_a_stopping_floor_stores_what_it_holds(tmp_path: Path) -> None:
    """Messages the broker has handed over (and counts as delivered) are not dropped when the
    floor stops before its next batch: they are stored on the way out."""
    from tableside.floor.service import Floor
    from tests.ports import free_port

    peer = PeerTable()
    async with open_store(f"sqlite:///{tmp_path}/floor.db") as store:
        floor = Floor(store, f"mqtt://127.0.0.1:{free_port()}", client_id="floor-stop")
        task = asyncio.create_task(floor.run(), name="floor-stopping")
        async with asyncio.timeout(10):  # the floor's writer starts, and waits
            while not any(t.get_name() == "floor-write" for t in asyncio.all_tasks()):
                await asyncio.sleep(0.01)
        for _ in range(3):  # handed over, and the stop comes before the writer takes them
            floor._held.append((peer.judged(peer.event()), 0, None))
            floor._arrived.set()
        task.cancel()  # as the command's SIGTERM does
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert [m.seq for m in await store.records("cs-01")] == [0, 1, 2]


async def test_a_seq_going_backwards_is_rejected_unless_it_is_a_repeat(store: Store) -> None:
    """docs/floor.md, "A seq going backwards": a live record below the newest seq chained
    from the table is a duplicate if it is the record stored under its seq, and rejected
    otherwise; the next seq that does not link to the chained one is not the table's."""
    order = SeqOrder()
    peer = PeerTable()
    records = [peer.event() for _ in range(41)]
    await store.write(order.mark([peer.judged(r) for r in records if r.seq != 30]))
    replaced = PeerTable()  # the table's journal replaced: it numbers from 0 again
    reused = [replaced.event(7) for _ in range(13)]
    forger = PeerTable()  # a chain of its own: its seq 30 does not link to the table's 29
    fake = [forger.event(99) for _ in range(31)][30]
    batch = [
        peer.judged(records[12]),  # the same record again, unmarked (a bridge's resend)
        replaced.judged(reused[12]),  # seq 12 again, another record
        forger.judged(fake),  # seq 30, into the gap
        peer.judged(records[13], redelivered=True),  # marked: no evidence of anything
        peer.replayed(records[14]),  # asked for
    ]
    written = await store.write(order.mark(batch))
    assert written.stored == [] and written.conflicts == []
    assert written.duplicates == {"cs-01": 3}
    rejected = {m.seq or 0: m for m in await store.messages("cs-01", kind="rejected")}
    assert sorted(rejected) == [12, 30]
    assert rejected[12].reason.startswith("seq 12 after 29 from this table (not a redelivery")
    assert rejected[30].reason.startswith("seq 30 does not link to seq 29, the newest chained")
    assert rejected[12].hash == reused[12].hash and rejected[30].hash == fake.hash
    assert await store.gaps("cs-01") == [(30, 30)]  # the forger's seq 30 is not the record
    (kept,) = await store.records("cs-01", 12, 12)
    assert kept.hash == records[12].hash
    problems = " | ".join(str(p) for p in await store.problems("cs-01"))
    assert "seq 30: seq 30 does not link to seq 29" in problems
    # the table's own seq 30, replayed, fills the gap; the next live seq goes on from 40
    written = await store.write(order.mark([peer.replayed(records[30])]))
    assert written.stored == [("cs-01", 30)] and await store.gaps("cs-01") == []
    written = await store.write(order.mark([peer.judged(peer.event())]))
    assert written.stored == [("cs-01", 41)]


async def test_one_forged_seq_far_ahead_neither_freezes_the_table_nor_opens_a_gap(
    store: Store,
) -> None:
    """Issue 21, attack 2: one ``{"table": T, "seq": 999999999, …}`` on one of T's topics made
    every genuine record after it "behind" (stored as rejected) and the store's gap reach to
    it. A seq is believed when it is chained: the forged one links to nothing verified, is
    held apart (rejected, far ahead), and the table's records go on being stored."""
    order = SeqOrder()
    peer = PeerTable()
    await store.write(order.mark([peer.judged(peer.event()) for _ in range(10)]))
    forged = judge(
        "tableside", "tableside/cs-01/ruling_state",
        b'{"table":"cs-01","seq":999999999,"ts":"2026-12-01T08:00:00.000Z"}', False, None,
        time.time(), {},
    )  # fmt: skip
    genuine = [peer.judged(peer.event()) for _ in range(477)]
    written = await store.write(order.mark([forged, *genuine]))
    assert len(written.stored) == 477 and written.backwards == []
    state = await store.state("cs-01")
    assert state is not None
    assert (state.highest_seq, state.missing, state.records) == (486, 0, 487)
    (held,) = await store.messages("cs-01", kind="rejected")
    assert held.seq == 999999999 and "links to nothing verified" in held.reason


async def test_every_message_of_a_flagged_table_carries_the_flag(store: Store) -> None:
    peer = PeerTable()
    await store.enrol("cs-01", proof.public_key_hex(peer.key))
    keys = {"cs-01": peer.public}
    before = peer.judged(peer.event(), keys)
    forged = peer.judged(peer.checkpoint(key=Ed25519PrivateKey.generate()), keys)
    assert forged.verdict == "forged"
    after = peer.judged(peer.event(), keys)
    await store.write([before, forged, after])
    later = [peer.judged(peer.event(), keys), peer.judged(peer.checkpoint(), keys)]
    await store.write([*later, judge("tableside", "tableside/cs-01/ruling", b"x", False, None,
                                     1.0, keys)])  # fmt: skip
    stored = {m.seq: m for m in await store.records("cs-01")}
    assert stored[0].flagged is None
    for seq in (1, 2, 3, 4):  # the forged checkpoint, and everything after it
        assert "not the enrolled one" in (stored[seq].flagged or "")
    assert stored[4].verdict == "ok"  # its own verdict is its own; the flag is the table's
    (rejected,) = await store.messages("cs-01", kind="rejected")
    assert rejected.flagged == stored[1].flagged
    state = await store.state("cs-01")
    assert state is not None and state.flagged == stored[1].flagged
    await store.enrol("cs-01", proof.public_key_hex(peer.key))  # enrolled again: cleared
    await store.write([peer.judged(peer.event(), keys)])
    (fresh,) = await store.records("cs-01", 5, 5)
    assert fresh.flagged is None
    assert (await store.records("cs-01", 3, 3))[0].flagged is not None  # what was, stays


async def test_a_store_made_before_the_flag_column_gains_it(store: Store) -> None:
    peer = PeerTable()
    await store.write([peer.judged(peer.event())])
    await store._execute([("ALTER TABLE messages DROP COLUMN flagged", ())])
    await store.close()
    await store.open()
    await store.write([peer.judged(peer.event())])
    assert [m.flagged for m in await store.records("cs-01")] == [None, None]
