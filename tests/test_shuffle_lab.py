"""``tableside shuffle-decks`` and ``tableside shuffle-test`` end to end, as processes."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def tableside(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tableside", *map(str, args)],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip


def verdicts(stdout: str) -> dict[str, str]:
    found = {}
    for line in stdout.splitlines()[2:]:
        for verdict in ("REJECT", "pass"):
            if f"  {verdict} " in line:
                found[line[:28].strip()] = verdict
    return found


def test_a_shelf_machine_fails_the_tests_and_its_figures_are_drawn(tmp_path: Path) -> None:
    decks = tmp_path / "shelf.jsonl"
    made = tableside("shuffle-decks", "shelf:10", "--count", "300", "--seed", "4", "-o", decks)
    assert made.returncode == 0, made.stderr
    lines = decks.read_text().splitlines()
    assert len(lines) == 300 and set(json.loads(lines[0])) == {"input", "output"}
    done = tableside("shuffle-test", decks, "--level", "0.01", "--plots", tmp_path / "plots")
    assert done.returncode == 1, done.stdout + done.stderr
    found = verdicts(done.stdout)
    assert found["guessing score"] == found["valleys"] == found["positions (COMAR χ²)"] == "REJECT"
    assert len(found) == 11
    for name in ("rising_sequences.svg", "guessing_score.svg", "positions.svg"):
        root = ET.parse(tmp_path / "plots" / name).getroot()
        assert root.tag.endswith("svg") and len(root) > 10


def test_a_fair_shuffler_passes_and_outputs_alone_run_what_needs_no_input(tmp_path: Path) -> None:
    decks = tmp_path / "fair.jsonl"
    made = tableside("shuffle-decks", "fair", "--count", "300", "--seed", "9", "--output-only",
                     "-o", decks)  # fmt: skip
    assert made.returncode == 0, made.stderr
    done = tableside("shuffle-test", decks, "--level", "0.001")
    assert done.returncode == 0, done.stdout + done.stderr
    assert set(verdicts(done.stdout)) == {"colour changes", "card positions χ²",
                                          "repeated output", "sorted output"}  # fmt: skip
    assert "0 with their input order" in done.stdout


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ('{"output": ["AS", "ZZ"]}', "'ZZ' is no card"),
        ("not json", "Expecting value"),
        ('{"input": ["AS"]}', '{"output"'),
        ('{"output": ["AS", "AS"]}', "appears twice"),
    ],
)
def test_a_malformed_line_is_refused_with_file_and_line(tmp_path: Path, line: str,
                                                        says: str) -> None:  # fmt: skip
    decks = tmp_path / "decks.jsonl"
    good = json.dumps({"output": ["AS", "KD"]})
    decks.write_text(f"{good}\n\n{line}\n{good}\n")
    done = tableside("shuffle-test", decks)
    assert done.returncode == 2
    assert f"{decks}:3: " in done.stderr and says in done.stderr, done.stderr


def test_a_deck_of_other_cards_than_the_first_is_refused(tmp_path: Path) -> None:
    decks = tmp_path / "decks.jsonl"
    decks.write_text('{"output": ["AS", "KD"]}\n{"output": ["AS", "QD"]}\n')
    done = tableside("shuffle-test", decks)
    assert done.returncode == 2 and f"{decks}:2: not the first deck's 2 cards" in done.stderr
