"""Simulated shuffling machines, deterministic given a :class:`random.Random`.

A deck is a tuple of card codes (``tableside.drivers.cards``), top card first. ``parse_shuffle``
reads the specs the simulator and the lab tool take (``fair``, ``riffle:7``, ``shelf:10x2``,
``rig:steer=AS@5``…); ``docs/shuffle.md`` lists them.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from tableside.errors import ConfigurationError
from tableside.shuffle.deck import CardSpellingError, parse_card

__all__ = [
    "Fair",
    "Model",
    "Riffle",
    "Rig",
    "Shelf",
    "ShuffleSpecError",
    "parse_shuffle",
]

Deck = tuple[int, ...]


class ShuffleSpecError(ConfigurationError, ValueError):
    """A shuffle spec that is not one: says what and where."""


class Model(Protocol):
    """A shuffling machine: the order it makes of ``deck``."""

    @property
    def spec(self) -> str: ...

    def shuffle(self, deck: Sequence[int], rng: random.Random) -> Deck: ...


@dataclass(frozen=True)
class Fair:
    """Every order equally likely (give it ``random.SystemRandom()`` for the OS's CSPRNG)."""

    @property
    def spec(self) -> str:
        return "fair"

    def shuffle(self, deck: Sequence[int], rng: random.Random) -> Deck:
        cards = list(deck)
        rng.shuffle(cards)
        return tuple(cards)


@dataclass(frozen=True)
class Riffle:
    """``times`` riffles in the Gilbert-Shannon-Reeds model: cut Binomial(n, 1/2), then drop
    from each packet with probability proportional to its size."""

    times: int

    @property
    def spec(self) -> str:
        return f"riffle:{self.times}"

    def shuffle(self, deck: Sequence[int], rng: random.Random) -> Deck:
        cards = list(deck)
        for _ in range(self.times):
            cut = sum(rng.random() < 0.5 for _ in cards)
            top, bottom = cards[:cut], cards[cut:]
            out: list[int] = []
            i = j = 0
            while i < len(top) or j < len(bottom):
                left, right = len(top) - i, len(bottom) - j
                if rng.random() * (left + right) < left:
                    out.append(top[i])
                    i += 1
                else:
                    out.append(bottom[j])
                    j += 1
            cards = out
        return tuple(cards)


@dataclass(frozen=True)
class Shelf:
    """The shelf machine (Diaconis, Fulman and Holmes 2013): cards dealt one by one from the
    bottom onto a uniformly chosen shelf, each above or below that shelf's cards with
    probability 1/2; shelf 1 stacked on shelf 2 on …; ``passes`` times."""

    shelves: int
    passes: int = 1

    @property
    def spec(self) -> str:
        return f"shelf:{self.shelves}" + (f"x{self.passes}" if self.passes != 1 else "")

    def shuffle(self, deck: Sequence[int], rng: random.Random) -> Deck:
        cards = list(deck)
        for _ in range(self.passes):
            piles: list[deque[int]] = [deque() for _ in range(self.shelves)]
            for card in reversed(cards):
                pile = piles[rng.randrange(self.shelves)]
                if rng.random() < 0.5:
                    pile.appendleft(card)
                else:
                    pile.append(card)
            cards = [card for pile in piles for card in pile]
        return tuple(cards)


@dataclass(frozen=True)
class Steer:
    """Card ``card`` moved to ``position`` (1 = top) every ``every``-th shuffle."""

    card: int
    position: int
    every: int = 1


@dataclass(frozen=True)
class Keep:
    """The top ``cards`` left where they were every ``every``-th shuffle."""

    cards: int
    every: int = 1


@dataclass(frozen=True)
class Fixed:
    """One fixed order (the first output the rig made) every ``every``-th shuffle."""

    every: int = 1


@dataclass
class Rig:
    """A fair shuffle tampered with as its ``steps`` say; counts its shuffles (1, 2, …)."""

    steps: tuple[Steer | Keep | Fixed, ...]
    text: str
    count: int = 0
    fixed: Deck | None = field(default=None)

    @property
    def spec(self) -> str:
        return self.text

    def shuffle(self, deck: Sequence[int], rng: random.Random) -> Deck:
        self.count += 1
        cards = list(Fair().shuffle(deck, rng))
        for step in self.steps:
            if self.count % step.every:
                continue
            if isinstance(step, Fixed):
                if self.fixed is None or sorted(self.fixed) != sorted(cards):
                    self.fixed = tuple(cards)
                cards = list(self.fixed)
            elif isinstance(step, Keep):
                kept = list(deck[: step.cards])
                cards = kept + [c for c in cards if c not in kept]
            elif step.card in cards:
                cards.remove(step.card)
                cards.insert(min(step.position, len(cards) + 1) - 1, step.card)
        return tuple(cards)


_FAIR = {"fair", "random", "uniform", "csprng"}
_RIFFLE = {"riffle", "riffles", "gsr", "dovetail"}
_SHELF = {"shelf", "shelves"}
_RIG = {"rig", "rigged"}
_EXPECTED = "fair, riffle:K, shelf:M or shelf:MxP, rig:steer=CARD@POS[/N],keep=K[/N],fixed[/N]"


def parse_shuffle(text: str) -> Model:
    """``fair``, ``riffle:7``, ``shelf:10``, ``shelf:10x2``, ``rig:steer=AS@5,keep=3/10``."""
    name, _, arg = text.strip().partition(":")
    name = name.strip().lower()
    if name in _FAIR and not arg:
        return Fair()
    if name in _RIFFLE:
        return Riffle(_count(arg, "riffles", text))
    if name in _SHELF:
        shelves, sep, passes = arg.lower().replace("*", "x").partition("x")
        return Shelf(_count(shelves, "shelves", text), _count(passes, "passes", text) if sep else 1)
    if name in _RIG:
        return Rig(tuple(_rig_step(part, text) for part in arg.split(",")), text.strip())
    raise ShuffleSpecError(f"unknown shuffle {name!r} in {text!r} (expected {_EXPECTED})")


def _count(text: str, what: str, spec: str) -> int:
    text = text.strip()
    if not text.isdigit() or int(text) < 1:
        raise ShuffleSpecError(f"{what} must be a whole number ≥ 1, got {text!r} in {spec!r}")
    return int(text)


def _rig_step(part: str, spec: str) -> Steer | Keep | Fixed:
    key, _, value = part.strip().partition("=")
    body, slash, every_text = (value if value else key).partition("/")
    every = _count(every_text, "every", spec) if slash else 1
    key = key.partition("/")[0].strip().lower()
    if key == "steer":
        card_text, at, position = body.partition("@")
        try:
            card = parse_card(card_text.strip())
        except CardSpellingError as error:
            raise ShuffleSpecError(f"{error} in {spec!r}") from error
        if not at:
            raise ShuffleSpecError(f"steer needs CARD@POSITION, got {body!r} in {spec!r}")
        return Steer(card, _count(position, "position", spec), every)
    if key == "keep":
        return Keep(_count(body, "kept cards", spec), every)
    if key == "fixed" and (not value or slash):
        return Fixed(every)
    raise ShuffleSpecError(f"unknown rig step {part.strip()!r} in {spec!r} (expected {_EXPECTED})")
