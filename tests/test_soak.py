"""The soak benchmark's short version, run as a user runs it: the daemon and every simulated
device as processes, a minute's worth of a table many times busier than a real one, no seq lost
and the daemon's memory sampled (bench/soak.py; the hour-long figures are in docs/benchmarks.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).parents[1] / "bench" / "soak.py"


def test_short_soak(tmp_path: Path) -> None:
    cmd = [
        sys.executable,
        str(BENCH),
        "--duration",
        "15",
        "--sample",
        "3",
        "--output",
        str(tmp_path),
    ]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    result = json.loads((tmp_path / "soak-15s.json").read_text())
    assert result["daemon_exit"] == 0
    assert result["lost"] == 0 and result["unmarked_repeats"] == 0
    assert result["messages"] > 100, "the simulated table produced events"
    assert result["seqs"] == result["last_seq"] + 1
    assert len(result["samples"]) >= 4
    assert all(0 < s["rss_mib"] < 500 for s in result["samples"])
