"""How soon the shuffle decision flags a weak or rigged shuffler, and how rarely a fair one.

* **Detection** (``--runs`` shufflers per model): each shuffles a new deck, then its own last
  output, on and on, through one :class:`ShuffleMonitor` fed the input and output orders (and,
  with ``--output-only``, the outputs alone), until it is flagged or ``--cap`` shuffles pass;
  median and 95th percentile of the shuffles until flagged, and which test flagged.
* **False alarms** (``--fair N``): N fair shuffles split over ``--shufflers`` monitors; every
  alarm is counted, and the CPU per shuffle of the whole battery taken.

    nice .venv/bin/python bench/shuffle_detection.py --runs 200
    nice .venv/bin/python bench/shuffle_detection.py --fair 1000000 --shufflers 10
    nice .venv/bin/python bench/shuffle_detection.py --fair 1000000 --output-only

Seeds are fixed (``random.Random(seed)``), so a run repeats exactly. Writes
bench/results/shuffle_detection.json or shuffle_false_alarms.json, with the command and commit.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections import Counter
from pathlib import Path

from shuffle_results import RESULTS, provenance, write

from tableside.shuffle import ShuffleMonitor, new_deck, parse_shuffle

MODELS = ["shelf:10", "shelf:20", "riffle:4", "riffle:7", "rig:steer=AS@5",
          "rig:steer=AS@5/3", "rig:keep=5/10", "rig:keep=1", "rig:fixed/20"]  # fmt: skip
GOALS = {"shelf:10": 10, "shelf:20": 60, "riffle:4": 10, "riffle:7": 200}


def until_flagged(spec: str, seed: int, cap: int, with_input: bool) -> tuple[int | None, str]:
    rng, model, monitor = random.Random(seed), parse_shuffle(spec), ShuffleMonitor()
    deck = new_deck()
    for t in range(1, cap + 1):
        out = model.shuffle(deck, rng)
        alert = monitor.observe(deck if with_input else None, out)
        if alert is not None:
            return t, alert.test
        deck = out
    return None, ""


def detection(specs: list[str], runs: int, cap: int, with_input: bool) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for spec in specs:
        found = [until_flagged(spec, seed, cap, with_input) for seed in range(runs)]
        times = sorted(t for t, _ in found if t is not None)
        row: dict[str, object] = {
            "model": spec,
            "input_known": with_input,
            "runs": runs,
            "flagged": len(times),
            "median": statistics.median(times) if times else None,
            "p95": times[min(len(times) - 1, int(0.95 * runs))] if len(times) == runs else None,
            "max": times[-1] if times else None,
            "tests": dict(Counter(test for t, test in found if t is not None)),
            "goal": GOALS.get(spec),
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def false_alarms(total: int, shufflers: int, with_input: bool) -> dict[str, object]:
    alarms: list[dict[str, object]] = []
    highest: dict[str, float] = {}
    cpu = 0.0
    per = total // shufflers
    for seed in range(shufflers):
        rng, monitor, deck = random.Random(10_000 + seed), ShuffleMonitor(), new_deck()
        for t in range(1, per + 1):
            out = tuple(rng.sample(deck, len(deck)))
            start = time.process_time()
            alert = monitor.observe(deck if with_input else None, out)
            cpu += time.process_time() - start
            if alert is not None:
                alarms.append({"shuffler": seed, "shuffle": t, "test": alert.test,
                               "p_value": alert.p_value, "shuffles": alert.shuffles})  # fmt: skip
            deck = out
        for status in monitor.status():
            highest[status.test] = max(highest.get(status.test, 0.0), round(status.high, 3))
        print(f"shuffler {seed}: {per} fair shuffles, alarms so far {len(alarms)}", flush=True)
    return {
        "fair_shuffles": per * shufflers,
        "input_known": with_input,
        "shufflers": shufflers,
        "false_alarms": len(alarms),
        "alarms": alarms,
        "cpu_us_per_shuffle": round(cpu / (per * shufflers) * 1e6, 1),
        "highest_level": highest,  # each test's closest approach to its threshold (1 = alert)
        "goal": "fewer than 1 per 100,000 fair shuffles",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="shufflers per model")
    parser.add_argument("--cap", type=int, default=2000, help="give up after this many")
    parser.add_argument("--model", action="append", help="only these (default: all)")
    parser.add_argument("--fair", type=int, help="count false alarms over this many")
    parser.add_argument("--shufflers", type=int, default=10)
    parser.add_argument("--output-only", action="store_true", help="--fair: outputs alone")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    result = provenance("shuffle_detection.py")
    if args.fair:
        result |= false_alarms(args.fair, args.shufflers, not args.output_only)
        name = "shuffle_false_alarms" + ("_output_only" if args.output_only else "") + ".json"
    else:
        specs = args.model or MODELS
        result["with_input"] = detection(specs, args.runs, args.cap, True)
        rigs = [s for s in specs if s.startswith("rig")]
        result["output_only"] = detection(rigs, args.runs, args.cap, False)
        name = "shuffle_detection.json"
    write(result, args.output, name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
