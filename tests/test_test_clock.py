"""A lab's test clock ([test_clock], `tableside run --clock-speed`): deck age and the gaming
day driven end to end in seconds through the running daemon; refused by a table that is not a
lab's; every message published under it says so."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import aiomqtt
import pytest

from tableside.daemon.config import Config, ConfigError, LabClockConfig, validate_config
from tableside.rules.model import Game

from .conftest import Mosquitto
from .hil import SimulatedTable, simulated_table, simulator
from .test_shoe import shoe

LAB = """\
[table]
id = "lab-1"
game = "caribbean_stud"
{lab}
[test_clock]
speed = 3600

[devices.shuffler]
driver = "tableside.shuffler"
url = "socket://127.0.0.1:7001"
"""


def test_a_floor_table_refuses_a_test_clock() -> None:
    with pytest.raises(
        ConfigError, match=r"t.toml:5: test_clock: .*\[test_clock\] is for a lab table"
    ):
        validate_config(LAB.format(lab=""), "t.toml", use_env=False)
    config = validate_config(LAB.format(lab="lab = true"), "t.toml", use_env=False)
    assert config.test_clock is not None and config.test_clock.speed == 3600


def test_run_refuses_clock_options_for_a_floor_table(tmp_path: Path) -> None:
    path = tmp_path / "floor.toml"
    path.write_text(LAB.format(lab="").replace("[test_clock]\nspeed = 3600\n", ""))
    result = subprocess.run(
        [sys.executable, "-m", "tableside", "run", "--config", str(path), "--clock-speed", "3600"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert "are for a lab table ([table] lab = true)" in result.stderr
    assert "Traceback" not in result.stderr


def lab_clock(speed: float, offset_s: float = 0.0) -> Any:
    def adjust(config: Config) -> Config:
        table = config.table.model_copy(
            update={"lab": True, "timezone": "America/New_York", "gaming_day_starts": 6}
        )
        clock = LabClockConfig(speed=speed, offset_s=offset_s)
        return config.model_copy(update={"table": table, "test_clock": clock})

    return adjust


async def _ask(table: SimulatedTable, port: int, role: str, name: str, rid: str,
               device: str = "table", **args: Any) -> dict[str, Any]:  # fmt: skip
    body = {"command": name, "device": device, "args": args, "request_id": rid}
    async with aiomqtt.Client("127.0.0.1", port) as client:
        await client.publish(f"tableside/hil-1/command/{role}", json.dumps(body), qos=1)
    found = await table.subscriber.wait_for(
        lambda m: m.kind == "command_result" and m.payload["request_id"] == rid
    )
    return dict(found[0].payload)


async def test_deck_age_driven_by_a_test_clock(mosquitto: Mosquitto, tmp_path: Path) -> None:
    """At 20,000 times real speed the cards from the shoe reach 8 hours in under 2 s: the
    next round is 555.3(c)(2). Every message carries the test clock."""
    async with simulated_table(
        mosquitto.url, tmp_path, simulator(interval=None), others={"shoe": shoe(interval=None)},
        adjust=lab_clock(20_000),
    ) as table:  # fmt: skip
        await table.daemon.publisher.connected.wait()
        port = mosquitto.port
        assert (await _ask(table, port, "floorperson", "open_table", "o"))["ok"]
        opened = table.daemon.runtime.state.cards_in_play_since
        assert opened is not None
        while table.daemon.journal.clock.now() - opened < 8.1 * 3600:
            await asyncio.sleep(0.05)
        assert (await _ask(table, port, "dealer", "start_round", "s"))["ok"]
        (found,) = await table.subscriber.wait_for(
            lambda m: m.kind == "ruling" and "555.3(c)(2)" in m.payload["clause"]
        )
        assert found.payload["actions"] == ["replace_cards"]
        assert all(m.payload["test_clock"] == "x20000 +0s" for m in table.subscriber.messages)


async def test_the_gaming_day_turns_on_a_test_clock(mosquitto: Mosquitto, tmp_path: Path) -> None:
    """Spanish 21 in New York, the gaming day from 06:00: inspected at 05:58 (table time), a
    round deals; past 06:00 the next round is refused (551.2(e)) until the new day's inspection
    is recorded."""
    ny = ZoneInfo("America/New_York")
    now = datetime.now(ny)
    target = now.replace(hour=5, minute=58, second=0, microsecond=0)
    if target < now:
        target += timedelta(days=1)
    offset = target.timestamp() - now.timestamp()
    async with simulated_table(
        mosquitto.url, tmp_path, simulator(interval=None), game=Game.SPANISH_21,
        adjust=lab_clock(60, offset),
    ) as table:  # fmt: skip
        await table.daemon.publisher.connected.wait()
        port = mosquitto.port
        assert (await _ask(table, port, "floorperson", "open_table", "o"))["ok"]
        assert (await _ask(table, port, "floorperson", "reader_inspected", "i"))["ok"]
        assert (await _ask(table, port, "dealer", "start_round", "s1"))["ok"]
        assert (await _ask(table, port, "dealer", "reveal", "r1"))["ok"]
        assert (await _ask(table, port, "dealer", "round_settled", "e1"))["ok"]
        six = target.replace(hour=6, minute=0).timestamp()
        while table.daemon.journal.clock.now() < six + 1:
            await asyncio.sleep(0.05)
        refused = await _ask(table, port, "dealer", "start_round", "s2")
        assert not refused["ok"] and "551.2(e)" in refused["error"]
        assert (await _ask(table, port, "floorperson", "reader_inspected", "i2"))["ok"]
        assert (await _ask(table, port, "dealer", "start_round", "s3"))["ok"]
