"""daemon/restore.py on its own: a table journals what happened, stops; a new daemon on the
same journal (the constructor restores, no task runs, no device opens) is the table as the
journal last saw it: its phase and rulings, each device's state, and a lock-out in force.
tests/test_recovery.py runs the same across real crashes and ``journal recover``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tableside.daemon.app import TableDaemon
from tableside.daemon.config import load_config
from tableside.drivers.progressive.events import ButtonPressed
from tableside.drivers.progressive.protocol import Button
from tableside.drivers.shuffler.events import ShufflerFault
from tableside.drivers.shuffler.protocol import FaultCode
from tests.conftest import shipped_config


@pytest.fixture
def config(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "cs.toml"
    path.write_text(shipped_config(tmp_path), encoding="utf-8")
    yield path


def _daemon(config: Path) -> TableDaemon:
    return TableDaemon(load_config(config, use_env=False))


async def _stop(daemon: TableDaemon) -> None:
    """Everything journaled made durable, then the journal closed (as a clean stop does)."""
    await daemon.journal.wait_durable(daemon.journal.head[0])
    daemon.journal.close()


@pytest.mark.parametrize(
    ("last", "held", "phase"),
    [("no_more_bets", True, "no_more_bets"), ("bets_open", False, "betting")],
)
async def test_no_more_bets_before_a_stop_holds_after_it(
    config: Path, last: str, held: bool, phase: str
) -> None:
    before = _daemon(config)
    before.journal.start()
    rt = before.runtime.devices["progressive"]
    for button in ("no_more_bets", "bets_open", last):
        before.runtime.handle(rt, ButtonPressed(device="progressive", button=Button(button)))
    await _stop(before)
    after = _daemon(config)
    try:
        acceptors = after.drivers["acceptors"]
        assert acceptors.holds_lock_out is held
        assert after.restored["locked_out"] == int(held)
        assert not after.drivers["shuffler"].holds_lock_out  # none to hold
        assert after.runtime.state.phase.value == phase
    finally:
        after.journal.close()


async def test_the_table_and_each_device_come_back_as_last_journaled(config: Path) -> None:
    before = _daemon(config)
    before.journal.start()
    jam = ShufflerFault(device="shuffler", shuffle_id=3, fault=FaultCode.JAM, detail="cards stuck")
    before.runtime.handle(before.runtime.devices["shuffler"], jam)
    (ruling,) = before.runtime.state.rulings
    await _stop(before)
    after = _daemon(config)
    try:
        assert after.restored["table_state"] == 1 and after.restored["devices"] >= 1
        assert after.runtime.devices["shuffler"].fault == "jam"
        (again,) = after.runtime.state.rulings
        assert (again.id, again.rule_id, again.state) == (ruling.id, ruling.rule_id, ruling.state)
        assert after.restored["retained"] >= 2  # the table's state and the shuffler's
    finally:
        after.journal.close()


async def test_a_fresh_journal_restores_nothing(config: Path) -> None:
    fresh = _daemon(config)
    try:
        assert fresh.restored == {"retained": 0, "devices": 0, "locked_out": 0, "table_state": 0}
        assert not fresh.drivers["acceptors"].holds_lock_out
    finally:
        fresh.journal.close()
