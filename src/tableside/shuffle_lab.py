"""``tableside shuffle-test FILE`` and ``tableside shuffle-decks SPEC``: the lab's side of the
shuffle tests (docs/shuffle.md). Reads and writes files; the tests themselves are pure
(``tableside.shuffle``)."""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from tableside.errors import ConfigurationError
from tableside.shuffle import (
    CardSpellingError,
    ShuffleSpecError,
    new_deck,
    parse_deck,
    parse_shuffle,
    spell,
)

if TYPE_CHECKING:  # the battery and its plots load with these commands, not with the parser
    from tableside.shuffle.battery import Batch

__all__ = ["add_parsers", "shuffle_decks", "shuffle_test"]

Deck = tuple[int, ...]


class DeckFileError(ConfigurationError, ValueError):
    """A line of a deck file that is not a deck: ``file:line: what``."""


def add_parsers(add: Callable[..., argparse.ArgumentParser]) -> None:
    """``add``: the subparsers' ``add_parser``."""
    test = add("shuffle-test", help="every shuffle test over a file of decks")
    test.add_argument("file", type=Path, help='JSON lines: {"input": [...], "output": [...]}')
    test.add_argument("--level", type=float, default=0.05, help="reject below this p-value")
    test.add_argument("--plots", type=Path, metavar="DIR", help="write the SVG figures here")
    decks = add("shuffle-decks", help="write decks shuffled by a simulated machine")
    decks.add_argument("spec", help="fair, riffle:K, shelf:M[xP], rig:steer=AS@5 …")
    decks.add_argument("--count", type=int, default=1000, help="decks (default 1000)")
    decks.add_argument("--seed", type=int, help="random.Random(SEED) (default: the OS CSPRNG)")
    decks.add_argument("--output-only", action="store_true", help="leave the input orders out")
    decks.add_argument("-o", "--output", type=Path, help="file to write (default stdout)")


def read_decks(path: Path) -> list[tuple[Deck | None, Deck]]:
    """Every deck of the file, each line checked; the first line's cards are every deck's."""
    decks: list[tuple[Deck | None, Deck]] = []
    with path.open(encoding="utf-8") as stream:
        for number, line in enumerate(stream, start=1):
            if not line.strip():
                continue
            try:
                decks.append(_deck(line, decks[0][1] if decks else None))
            except (ValueError, CardSpellingError) as error:
                raise DeckFileError(f"{path}:{number}: {error}") from error
    if not decks:
        raise DeckFileError(f"{path}: no decks")
    return decks


def _deck(line: str, first: Deck | None) -> tuple[Deck | None, Deck]:
    record = json.loads(line)
    if not isinstance(record, dict) or not isinstance(record.get("output"), list):
        raise ValueError('expected {"output": [card, …]} with an optional "input"')
    after = parse_deck(record["output"])
    before = record.get("input")
    if before is not None:
        if not isinstance(before, list):
            raise ValueError('"input" must be a list of cards')
        before = parse_deck(before)
        if sorted(before) != sorted(after):
            raise ValueError("the input and the output are not the same cards")
    if first is not None and sorted(after) != sorted(first):
        raise ValueError(f"not the first deck's {len(first)} cards")
    return before, after


def shuffle_test(args: argparse.Namespace) -> int:
    """Print every test with its p-value and verdict; 0 if none rejects, 1 if one does."""
    try:
        decks = read_decks(args.file)
    except (OSError, DeckFileError) as error:
        print(f"shuffle-test: {error}", file=sys.stderr)
        return 2
    from tableside.shuffle.battery import run_battery

    batch = run_battery(decks)
    known = sum(a is not None for a, _ in decks)
    print(f"{len(decks)} decks of {batch.cards} cards ({known} with their input order); "
          f"level {args.level}")  # fmt: skip
    print(f"{'test':<28} {'statistic':>10} {'fair':>9} {'p-value':>10}  verdict  null law")
    rejected = 0
    for r in batch.results:
        verdict = "REJECT" if r.p_value < args.level else "pass"
        rejected += verdict == "REJECT"
        note = f"  ({r.note})" if r.note else ""
        print(f"{r.test:<28} {r.statistic:>10.3f} {r.expected:>9.3f} {r.p_value:>10.3g}  "
              f"{verdict:<7}  {r.law}{note}")  # fmt: skip
    if args.plots is not None:
        for path in _plots(batch, args.plots):
            print(f"written: {path}")
    return 1 if rejected else 0


def _plots(batch: Batch, folder: Path) -> Iterator[Path]:
    from tableside.shuffle.laws import guess_law, rising_law
    from tableside.shuffle.plots import heat_map, histogram

    folder.mkdir(parents=True, exist_ok=True)
    if not batch.rising:
        return  # each figure needs the input orders
    figures = {
        "rising_sequences.svg": histogram("Rising sequences per deck", "rising sequences",
                                          batch.rising, rising_law(batch.cards)),
        "guessing_score.svg": histogram("Correct guesses per deck (with feedback)",
                                        "correct guesses", batch.guesses,
                                        guess_law(batch.cards)),
        "positions.svg": heat_map("Where each input position ended up", batch.positions),
    }  # fmt: skip
    for name, svg in figures.items():
        path = folder / name
        path.write_text(svg, encoding="utf-8")
        yield path


def shuffle_decks(args: argparse.Namespace) -> int:
    """JSON lines of decks: each shuffle's input is the previous one's output."""
    try:
        model = parse_shuffle(args.spec)
    except ShuffleSpecError as error:
        print(f"shuffle-decks: {error}", file=sys.stderr)
        return 2
    rng = random.SystemRandom() if args.seed is None else random.Random(args.seed)
    out: TextIO = sys.stdout if args.output is None else args.output.open("w", encoding="utf-8")
    try:
        deck = new_deck()
        for _ in range(args.count):
            after = model.shuffle(deck, rng)
            record = {"output": spell(after)}
            if not args.output_only:
                record = {"input": spell(deck), **record}
            out.write(json.dumps(record) + "\n")
            deck = after
    finally:
        if out is not sys.stdout:
            out.close()
    return 0
