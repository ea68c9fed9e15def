"""The simulated machines: the shelf machine's known facts by enumerating every choice it can
make, the riffle's, the rigs', and the spec parser."""

from __future__ import annotations

import itertools
import random
from collections import Counter, defaultdict
from collections.abc import Sequence
from fractions import Fraction

import pytest

from tableside.shuffle import (
    Fair,
    Riffle,
    Rig,
    Shelf,
    ShuffleSpecError,
    new_deck,
    parse_card,
    parse_shuffle,
)
from tableside.shuffle.models import Steer
from tableside.shuffle.stats import positions, prefix_kept, valleys


class Scripted(random.Random):
    """Plays back the machine's choices: a shelf (randrange) and a side (random) per card."""

    def __init__(self, choices: Sequence[int]) -> None:
        super().__init__(0)
        self.script = list(choices)

    def randrange(self, stop: int) -> int:  # type: ignore[override]
        return self.script.pop(0)

    def random(self) -> float:
        return 0.25 if self.script.pop(0) else 0.75


def shelf_law(model: Shelf, n: int) -> dict[tuple[int, ...], Fraction]:
    """Every order one pass (or more) can make, with its exact chance."""
    per_card = [(s, side) for s in range(model.shelves) for side in (0, 1)]
    counts: Counter[tuple[int, ...]] = Counter()
    for script in itertools.product(per_card, repeat=n * model.passes):
        choices = [c for pair in script for c in pair]
        counts[model.shuffle(tuple(range(n)), Scripted(choices))] += 1
    total = sum(counts.values())
    assert total == (2 * model.shelves) ** (n * model.passes)
    return {order: Fraction(c, total) for order, c in counts.items()}


@pytest.mark.parametrize(("n", "m"), [(5, 2), (5, 3), (6, 2)])
def test_a_shelf_pass_chance_depends_on_valleys_alone(n: int, m: int) -> None:
    by_valleys: dict[int, set[Fraction]] = defaultdict(set)
    law = shelf_law(Shelf(m), n)
    for order in itertools.permutations(range(n)):
        by_valleys[valleys(positions(range(n), order))].add(law.get(order, Fraction(0)))
    assert all(len(chances) == 1 for chances in by_valleys.values()), by_valleys
    assert len(by_valleys) > 1


@pytest.mark.parametrize("m", [1, 2, 3])
def test_the_top_card_stays_on_top_with_chance_about_one_in_2m(m: int) -> None:
    """Dealt last, it stays on top if it lands on the first shelf holding a card, above them
    (or alone): 1/(2m) plus what empty shelves add, which vanishes as the deck grows."""
    law = shelf_law(Shelf(m), 4)
    assert sum(p for order, p in law.items() if order[0] == 0) == top_stays(4, m)
    assert abs(top_stays(52, 10) - Fraction(1, 20)) < Fraction(1, 1000)


def top_stays(n: int, m: int) -> Fraction:
    empty = [Fraction(m - s, m) ** (n - 1) for s in range(m + 1)]  # shelves 1..s empty
    return sum((Fraction(1, m) * (empty[s] + empty[s + 1]) / 2 for s in range(m)), Fraction(0))


def test_the_top_card_on_a_52_card_deck_stays_on_top_one_pass_in_20() -> None:
    rng, deck = random.Random(11), new_deck()
    stays = sum(Shelf(10).shuffle(deck, rng)[0] == deck[0] for _ in range(20_000))
    assert abs(stays / 20_000 - 1 / 20) < 4 * (0.05 * 0.95 / 20_000) ** 0.5 + 0.003


def test_two_passes_are_one_pass_of_2_m1_m2_shelves() -> None:
    assert shelf_law(Shelf(1, passes=2), 4) == shelf_law(Shelf(2), 4)
    assert shelf_law(Shelf(2, passes=2), 3) == shelf_law(Shelf(8), 3)


def test_one_riffle_leaves_at_most_two_rising_sequences_and_the_deck_whole() -> None:
    rng, deck = random.Random(7), new_deck()
    outs = [Riffle(1).shuffle(deck, rng) for _ in range(2000)]
    assert all(sorted(o) == sorted(deck) for o in outs)
    assert all(sum(s[i + 1] < s[i] for i in range(51)) <= 1
               for s in (positions(deck, o) for o in outs))  # fmt: skip
    # the identity has chance (n + 1)/2^n = 53/2^52: never; a cut at the very top, once in 2^52
    assert sum(o == deck for o in outs) == 0


def test_the_models_repeat_given_a_seed() -> None:
    deck = new_deck()
    for spec in ("fair", "riffle:7", "shelf:10x2", "rig:steer=AS@5,keep=3/4,fixed/7"):
        a = [parse_shuffle(spec).shuffle(deck, random.Random(3)) for _ in range(2)]
        assert a[0] == a[1]
    assert Fair().shuffle(deck, random.Random(1)) != Fair().shuffle(deck, random.Random(2))


def test_the_rigs_do_what_their_spec_says() -> None:
    rng, deck = random.Random(5), new_deck()
    steer = parse_shuffle("rig:steer=AS@5")
    assert all(steer.shuffle(deck, rng)[4] == parse_card("AS") for _ in range(20))
    keep = parse_shuffle("rig:keep=3/4")
    kept = [prefix_kept(deck, keep.shuffle(deck, rng)) >= 3 for _ in range(8)]
    assert kept[3] and kept[7]
    fixed = parse_shuffle("rig:fixed/3")
    outs = [fixed.shuffle(deck, rng) for _ in range(9)]
    assert outs[2] == outs[5] == outs[8] != outs[0]


@pytest.mark.parametrize(
    ("spec", "model"),
    [
        ("fair", Fair()),
        (" Random ", Fair()),
        ("riffle:7", Riffle(7)),
        ("riffles:4", Riffle(4)),
        ("GSR:3", Riffle(3)),
        ("shelf:10", Shelf(10)),
        ("shelves:10x2", Shelf(10, 2)),
        ("shelf:10*3", Shelf(10, 3)),
    ],
)
def test_specs_in_their_natural_spellings(spec: str, model: object) -> None:
    assert parse_shuffle(spec) == model


def test_a_rig_spec_reads_its_steps() -> None:
    rig = parse_shuffle("rig:steer=10h@1/2, keep=5/10, fixed/20")
    assert isinstance(rig, Rig)
    assert [type(s).__name__ for s in rig.steps] == ["Steer", "Keep", "Fixed"]
    assert rig.steps[0] == Steer(parse_card("10H"), 1, 2)


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("Perfect", "unknown shuffle 'perfect'"),
        ("riffle:", "riffles must be a whole number"),
        ("riffle:-1", "riffles must be a whole number"),
        ("shelf:10x", "passes must be a whole number"),
        ("shelf:ten", "shelves must be a whole number"),
        ("rig:steer=ZZ@5", "'ZZ' is no card"),
        ("rig:steer=AS", "steer needs CARD@POSITION"),
        ("rig:swap=AS", "unknown rig step 'swap=AS'"),
        ("fair:3", "unknown shuffle 'fair'"),
    ],
)
def test_a_bad_spec_is_refused_saying_what_and_where(spec: str, says: str) -> None:
    with pytest.raises(ShuffleSpecError, match=says) as error:
        parse_shuffle(spec)
    assert repr(spec) in str(error.value)
