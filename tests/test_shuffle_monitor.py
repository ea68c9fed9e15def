"""The sequential decision flags weak and rigged shufflers and leaves fair ones alone (fixed
seeds); shuffle/ stays pure."""

from __future__ import annotations

import ast
import random
from pathlib import Path

import pytest

from tableside.shuffle import Alert, ShuffleMonitor, new_deck, parse_shuffle

ROOT = Path(__file__).parents[1]


def run(spec: str, seed: int, shuffles: int, input_known: bool = True) -> tuple[int, Alert | None]:
    """Shuffles until the first alert (or ``shuffles``), each deck the last one's output."""
    rng, model, monitor, deck = (
        random.Random(seed),
        parse_shuffle(spec),
        ShuffleMonitor(),
        new_deck(),
    )
    for t in range(1, shuffles + 1):
        out = model.shuffle(deck, rng)
        alert = monitor.observe(deck if input_known else None, out)
        if alert is not None:
            return t, alert
        deck = out
    return shuffles, None


@pytest.mark.parametrize(
    ("spec", "within", "test"),
    [
        ("shelf:10", 10, {"valleys", "guessing score"}),
        ("shelf:20", 60, {"valleys", "guessing score"}),
        ("riffle:4", 10, {"rising sequences"}),
        ("rig:steer=AS@5", 20, {"card positions", "positions"}),
        ("rig:keep=5/10", 40, {"top cards kept"}),
        ("rig:fixed/20", 41, {"repeated output"}),
    ],
)
def test_a_weak_or_rigged_shuffler_is_flagged(spec: str, within: int, test: set[str]) -> None:
    for seed in range(3):
        t, alert = run(spec, seed, within)
        assert alert is not None, f"{spec} seed {seed}: no alert in {within}"
        assert alert.test in test
        assert alert.p_value < 1e-6 and 1 <= alert.shuffles <= t
        assert alert.log_e >= alert.threshold


def test_seven_riffles_are_flagged_from_rising_sequences() -> None:
    _, alert = run("riffle:7", 0, 200)
    assert alert is not None and alert.test == "rising sequences"
    assert alert.statistic < 26.5


def test_output_only_still_catches_a_steered_card_and_a_repeat() -> None:
    for spec, test in (("rig:steer=AS@5", "card positions"), ("rig:fixed/10", "repeated output")):
        _, alert = run(spec, 1, 30, input_known=False)
        assert alert is not None and alert.test == test
        assert "AS" not in alert.detail  # no card identity in what leaves the table


def test_a_fair_shuffler_is_not_flagged() -> None:
    monitor = ShuffleMonitor()
    rng, deck = random.Random(2024), new_deck()
    for _ in range(3000):
        out = tuple(rng.sample(deck, 52))
        assert monitor.observe(deck, out) is None
        deck = out
    status = {s.test: s for s in monitor.status()}
    assert status["guessing score"].mean == pytest.approx(4.538, abs=0.1)
    assert all(s.high < 1 for s in status.values())
    assert monitor.shuffles == monitor.with_input == 3000


def test_a_sorted_output_is_flagged_at_once_and_a_short_deck_is_skipped() -> None:
    monitor = ShuffleMonitor()
    deck = new_deck()
    rng = random.Random(1)
    assert monitor.observe(None, tuple(rng.sample(deck, 52))) is None
    assert monitor.observe(None, deck[:51]) is None
    assert monitor.skipped == 1
    alert = monitor.observe(tuple(rng.sample(deck, 52)), deck)
    assert alert is not None and alert.test == "sorted output"


def test_the_package_does_no_io_and_knows_nothing_of_the_table() -> None:
    banned = {"asyncio", "socket", "os", "io", "sqlite3", "pathlib", "subprocess", "threading",
              "aiomqtt", "serial", "usb", "numpy", "scipy", "matplotlib"}  # fmt: skip
    for path in sorted((ROOT / "shuffle").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in banned, f"{path.name} imports {name}"
                assert not name.startswith(("tableside.daemon", "tableside.floor")), path.name
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id != "open", f"{path.name} opens a file"


def test_the_budget_bounds_the_false_alarm_rate() -> None:
    """With a budget large enough to see alarms in a test's time (one per 100 shuffles), a fair
    shuffler raises some, and no more than the budget allows: the thresholds are calibrated,
    neither slack nor loose."""
    budget, shuffles = 1e-2, 10_000
    monitor = ShuffleMonitor(budget=budget)
    rng, deck = random.Random(77), new_deck()
    alarms = 0
    for _ in range(shuffles):
        out = tuple(rng.sample(deck, 52))
        alarms += monitor.observe(deck, out) is not None
        deck = out
    assert 0 < alarms <= budget * shuffles
    assert monitor.alerts == alarms
