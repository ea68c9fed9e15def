"""The floor's store (floor/store.py): one suite, run on SQLite and on a real PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tableside.daemon import proof
from tableside.floor.store import Progress, Store, StoreError, open_store
from tableside.floor.verify import walk
from tests.floorpeer import PeerTable
from tests.postgres import Postgres


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/floor.db"
    else:
        url = request.getfixturevalue("postgres")
    async with open_store(url) as opened:
        yield opened


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
    from tableside.daemon.broker import free_port
    from tableside.floor.service import Floor

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
