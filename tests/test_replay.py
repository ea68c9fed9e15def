"""Record and replay (docs/replay.md): the shipped captures replayed into the real daemon must
give the rulings stored beside them; a live session recorded through ``tableside record`` replays
to the same rulings; a host that does not do what the recording says is reported."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import Mosquitto
from .replaying import CAPTURES, Expected, replay_into_daemon

CASES = sorted(p.stem for p in CAPTURES.glob("*.capture"))


@pytest.mark.parametrize("name", CASES)
async def test_shipped_capture_gives_its_rulings(
    mosquitto: Mosquitto, tmp_path: Path, name: str
) -> None:
    expected = Expected.read(CAPTURES / f"{name}.expect")
    played = await replay_into_daemon(
        CAPTURES / f"{name}.capture", CAPTURES / f"{name}.toml", mosquitto.url, tmp_path,
        rulings=len(expected.rulings),
    )  # fmt: skip
    assert played.replay.divergences == []
    assert played.rulings == expected.rulings
    assert expected.missing_events(played.messages) == []
    assert played.handling_errors == 0
