"""The floor against a real table: the daemon, a simulated shuffler over a socket, a real
Mosquitto. The floor starts late, so what the table sent before it came is fetched from the
table's journal by replays; the store ends holding the table's journal exactly, verified."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tableside.daemon.journal import export_records
from tableside.floor.service import Floor
from tableside.floor.store import Store, open_store
from tableside.floor.verify import against_export
from tests.conftest import Mosquitto
from tests.hil import event, simulated_table, simulator
from tests.test_floor import FAST, running, until_true


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    async with open_store(f"sqlite:///{tmp_path}/floor.db") as opened:
        yield opened


async def test_a_real_table_stored_repaired_and_verified(
    mosquitto: Mosquitto, store: Store, tmp_path: Path
) -> None:
    state_dir = tmp_path / "state"
    async with simulated_table(mosquitto.url, state_dir, simulator()) as table:
        await table.subscriber.wait_for(event("shuffle_complete"), count=3)
        async with running(Floor(store, mosquitto.url, client_id="floor-real", repair=FAST)):
            await table.subscriber.wait_for(event("shuffle_complete"), count=6)
            high = max(m.payload["seq"] for m in table.subscriber.messages if "seq" in m.payload)

            async def caught_up() -> bool:
                s = await store.state("hil-1")
                return s is not None and (s.progress.verified_upto or -1) >= high

            await until_true(caught_up, within=20)
        state = await store.state("hil-1")
        assert state is not None and state.problems == 0 and not state.progress.broken
        stored = {m.seq: m for m in await store.records("hil-1", 0, high) if m.seq is not None}
        assert sorted(stored) == list(range(high + 1))
        # from before the floor came: replayed from the journal (but what the broker still
        # retains, such as the config record at seq 0, which came as retained)
        assert [seq for seq, m in stored.items() if m.replayed]
    journal = list(export_records(state_dir / "hil-1" / "journal.sqlite", 0, high))
    assert list(against_export(stored, enumerate(journal, 1))) == []
