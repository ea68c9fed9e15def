"""bench/floor_outage.py, short: a few tables (simulated ones answering replays from their
journal, and a real daemon) through the shipped bridge into one floor, each outage a few
seconds, both brokers' queues cut to 20 messages so that every outage loses messages on the way
and only the floor's repair from the tables' journals can bring them back: after each outage
the store holds every seq every table published."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[1]


@pytest.mark.timeout(900)
@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
async def test_no_seq_is_lost_across_four_outages(store: str, tmp_path: Path) -> None:
    out = tmp_path / "outage.json"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "bench" / "floor_outage.py"), "--store", store,
        "--tables", "4", "--daemons", "1", "--rate", "10", "--cut-s", "4", "--down-s", "4",
        "--warmup", "3", "--between", "1", "--settle", "120", "--max-queued", "20",
        "--broker-down-s", "2",
        "--name", f"t{store[:2]}", "--out", str(out),
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}, cwd=ROOT,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        _, err = await asyncio.wait_for(proc.communicate(), 840)
    finally:
        if proc.returncode is None:  # its brokers and floor stopped as it ends
            proc.send_signal(signal.SIGINT)
            await proc.wait()
    assert proc.returncode == 0, err.decode()[-3000:]
    report = json.loads(out.read_text())
    scenarios = {s["scenario"]: s for s in report["scenarios"]}
    assert list(scenarios) == ["bridge", "floor-down", "floor-kill", "broker-restart"]
    for name, s in scenarios.items():
        assert s["lost_after_repair"] == 0 and s["converged_s_after_outage"] is not None, name
    # the outages did lose messages on the way: repair (replays) brought them back
    for name in ("bridge", "floor-down"):
        assert scenarios[name]["lost_before_repair"] > 0, scenarios[name]
    assert report["end"]["lost_after_repair"] == 0
    assert report["end"]["replay_requests_answered_by_simulated_tables"] > 0
