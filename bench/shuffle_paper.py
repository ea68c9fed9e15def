"""Diaconis, Fulman and Holmes (2013) and Bayer and Diaconis (1992), from tableside.shuffle.

* the guessing score (with feedback, the input order known) under a uniform deck, exactly, and
  after one pass through m = 1, 2, 4, 10, 20, 64 shelves and two 10-shelf passes, simulated;
* colour changes of a deck with all red above all black, uniform (exact) and after one 10-shelf
  pass (simulated); the original top card still on top after one pass (1/(2m));
* total variation from uniform after k = 1 … 10 riffles of 52 cards, exactly, from the law of
  rising sequences.

    nice .venv/bin/python bench/shuffle_paper.py --decks 20000

Writes bench/results/shuffle_paper.json with the command and commit.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
from pathlib import Path

from shuffle_results import RESULTS, provenance, write

from tableside.shuffle import Shelf
from tableside.shuffle.deck import is_red, new_deck
from tableside.shuffle.laws import colour_changes_law, guess_law, riffle_tv, shelf_tv
from tableside.shuffle.stats import ShelfGuesser, colour_changes, guess_score, positions

PAPER_GUESS = {1: (39, 3.2), 2: (27, 5.6), 4: (17.6, 6.0), 10: (9.3, 4.7), 20: (6.2, 3.8),
               64: (4.7, 3.1)}  # fmt: skip
PAPER_TV = [1.000, 1.000, 1.000, 1.000, 0.924, 0.614, 0.334, 0.167, 0.085, 0.043]
#: Diaconis, Fulman and Holmes 2013, Table 1: total variation after one pass of m shelves
PAPER_SHELF_TV = {10: 1.000, 20: 0.720, 30: 0.391, 50: 0.159, 100: 0.041, 200: 0.010}


def guessing(decks: int, rng: random.Random) -> dict[str, object]:
    deck = new_deck()
    law = guess_law(52)
    rows: dict[str, object] = {"uniform (exact)": {"mean": law.mean, "variance": law.variance}}
    for m, (mean, var) in PAPER_GUESS.items():
        best = ShelfGuesser(52, m)
        sigmas = [positions(deck, Shelf(m).shuffle(deck, rng)) for _ in range(decks)]
        scores = [guess_score(sigma) for sigma in sigmas]
        optimal = [best.score(sigma) for sigma in sigmas]
        rows[f"one pass, {m} shelves"] = {
            "mean": statistics.fmean(scores), "variance": statistics.variance(scores),
            "se_of_mean": statistics.stdev(scores) / math.sqrt(decks), "decks": decks,
            "best_mean": statistics.fmean(optimal), "best_variance": statistics.variance(optimal),
            "best_se_of_mean": statistics.stdev(optimal) / math.sqrt(decks),
            "paper_mean": mean, "paper_variance": var,
        }  # fmt: skip
    twice = [guess_score(positions(deck, Shelf(10, 2).shuffle(deck, rng)))
             for _ in range(5 * decks)]  # fmt: skip
    rows["two passes, 10 shelves"] = {
        "mean": statistics.fmean(twice), "excess_over_uniform": statistics.fmean(twice) - law.mean,
        "se_of_mean": statistics.stdev(twice) / math.sqrt(5 * decks), "decks": 5 * decks,
        "paper_excess": 0.02,
    }  # fmt: skip
    return rows


def colours(decks: int, rng: random.Random) -> dict[str, object]:
    cards = new_deck()
    deck = tuple(c for c in cards if is_red(c)) + tuple(c for c in cards if not is_red(c))
    law = colour_changes_law(26, 26)
    changes = [colour_changes(Shelf(10).shuffle(deck, rng)) for _ in range(decks)]
    return {
        "uniform (exact)": {"mean": law.mean, "sd": math.sqrt(law.variance), "paper": "26 ± 3.6"},
        "one pass, 10 shelves": {"mean": statistics.fmean(changes),
                                 "sd": statistics.stdev(changes), "decks": decks,
                                 "paper": "17 ± 1.8"},
    }  # fmt: skip


def top_stays(decks: int, rng: random.Random) -> dict[str, object]:
    deck = new_deck()
    return {
        str(m): {"simulated": sum(Shelf(m).shuffle(deck, rng)[0] == deck[0]
                                  for _ in range(decks)) / decks, "1/(2m)": 1 / (2 * m)}
        for m in (1, 2, 10)
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--decks", type=int, default=20_000, help="simulated decks per row")
    parser.add_argument("--seed", type=int, default=2013)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    result = provenance("shuffle_paper.py") | {
        "seed": args.seed,
        "riffle_tv": [
            {"k": k, "tv": round(riffle_tv(52, k), 4), "paper": PAPER_TV[k - 1]}
            for k in range(1, 11)
        ],
        "shelf_tv": [
            {"shelves": m, "tv": round(shelf_tv(52, m), 4), "paper": paper}
            for m, paper in PAPER_SHELF_TV.items()
        ],
        "guessing": guessing(args.decks, rng),
        "colour_changes": colours(args.decks, rng),
        "top_card_stays_on_top": top_stays(args.decks, rng),
    }
    print(json.dumps(result, indent=1))
    write(result, args.output, "shuffle_paper.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
