"""The benches that show issue 20's limits run and measure what they say (docs/benchmarks.md,
"Where the time, the CPU and the memory go"): bench/imports.py's rows, and bench/commit.py's
journal beside the same journal with no checkpoint and the durable twin's file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def _run(script: str, *args: str) -> str:
    return subprocess.run([sys.executable, str(ROOT / "bench" / script), *args], check=True,
                          capture_output=True, text=True, timeout=120).stdout  # fmt: skip


def test_imports_measures_each_dependency_the_floor_and_the_daemon(tmp_path: Path) -> None:
    out = tmp_path / "imports.json"
    printed = _run("imports.py", "--rounds", "1", "--json", str(out))
    result = json.loads(out.read_text())
    rows = result["rows"]
    assert list(rows)[:2] == ["python", "stdlib"]
    assert {"+ pydantic", "+ structlog", "+ cryptography", "floor", "tableside.daemon.app"} <= set(
        rows
    )
    (python,), (floor,), (app,), (counted,) = (
        result["samples"][name] for name in ("python", "floor", "tableside.daemon.app",
                                             "(its dataclasses timed)")
    )  # fmt: skip
    # fields: import_s, rss_mib, dataclasses_s, dataclasses, modules
    assert python[4] < floor[4] < app[4]  # each row imports more modules than the one before
    assert floor[1] < app[1]  # the daemon holds more than its dependencies alone
    assert counted[3] > 100 and counted[2] > 0  # the daemon's dataclasses, timed
    assert "over the floor" in printed


def test_commit_runs_the_journal_beside_no_checkpoint_and_the_twin(tmp_path: Path) -> None:
    out = tmp_path / "commit.json"
    _run("commit.py", "--records", "400", "--rounds", "1", "--twin", "--dir", str(tmp_path),
         "--json", str(out))  # fmt: skip
    result = json.loads(out.read_text())
    assert result["commit"] and result["machine"]
    by = {(r["journal"], r["devices"]): r for r in result["results"]}
    assert set(by) == {(j, d) for j in ("this tree", "no ckpt", "twin") for d in (1, 8)}
    for r in by.values():
        assert r["records"] == 400
    # one device: every record its own batch, one sync each (the twin's too)
    assert by["this tree", 1]["commits"] == by["twin", 1]["commits"] == 400
    assert by["twin", 8]["commits"] < 400  # eight at once: grouped
    # SQLite takes the records behind the log, up to a second's in a transaction (issue 30):
    # not one transaction a record, as the log's syncs are
    assert by["this tree", 1]["stores"] <= 400 / 10
    assert by["no ckpt", 1]["checkpoints_off_path"] == 0
    assert by["twin", 1]["txn_ms"] is None  # no database transaction to time
