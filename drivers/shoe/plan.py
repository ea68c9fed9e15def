"""Where a dealing shoe's stacks go: the stack-target vocabulary, declared once (its byte on
the link and its name in JSON), a stack and a round's plan. No I/O.

Every layer carries these values: the shoe's codec (drivers/shoe/protocol.py), its events, the
device command ``deal`` and the table command ``misdeal``, the game's dispense patterns
(rules/patterns.py), the rules, and the simulated shoe. ``seat3``, ``dealer`` are spelt only
where JSON is written or read (drivers/named.py).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

from tableside.drivers.named import Named, spelling_schema

__all__ = ["SEATS", "Plan", "Stack", "Target"]


class Target(Named, enum.Enum):
    """Where a stack goes (docs/protocols/shoe.md): a betting position, counted from the
    dealer's left, or one of the dealer's stacks. Its value is its byte on the link; its name
    in JSON is its member's, in lower case (``seat3``, ``dealer_extra``)."""

    SEAT1 = 1
    SEAT2 = 2
    SEAT3 = 3
    SEAT4 = 4
    SEAT5 = 5
    SEAT6 = 6
    SEAT7 = 7
    DEALER = 0x80  # the dealer's hand
    DEALER_EXTRA = 0x81  # Four Card Poker: the extra stack whose bottom card is the dealer's sixth
    COMMUNITY = 0x82  # Let It Ride: the community stack whose left card is discarded

    @property
    def code(self) -> int:
        """Its byte on the link."""
        value: int = self.value
        return value

    @property
    def seat(self) -> int | None:
        """The betting position (1..7) it is; None: one of the dealer's stacks."""
        return self.code if self.code <= 7 else None

    @classmethod
    def of(cls, code: int) -> Target:
        """The target a byte names; ValueError for a byte that names none."""
        return cls(code)

    @classmethod
    def at_seat(cls, seat: int) -> Target:
        """The stack of betting position ``seat`` (1..7); ValueError for another number."""
        if not 1 <= seat <= 7:
            raise ValueError(f"a betting position is 1..7, not {seat}")
        return cls(seat)

    @classmethod
    def named(cls, name: str) -> Target:
        """The target of its name (``seat3``, ``dealer``, ``dealer_extra``, ``community``);
        ValueError for anything else."""
        target = _BY_NAME.get(name)
        if target is None:
            raise ValueError(f"{name!r} is none of {', '.join(_BY_NAME)}")
        return target

    def spelt(self) -> str:
        return self.name.lower()

    def __str__(self) -> str:
        return self.name.lower()

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: object, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        """Read from its name, written as its name, described as a string."""
        return spelling_schema(cls, cls.named, core_schema.str_schema())


_BY_NAME: dict[str, Target] = {t.spelt(): t for t in Target}

#: the betting positions' stacks, seat1..seat7
SEATS: tuple[Target, ...] = tuple(t for t in Target if t.seat is not None)


@dataclass(frozen=True, slots=True)
class Stack(Named):
    """One stack of a deal plan: where it goes and how many cards. JSON: ``{"target":
    "seat1", "size": 5}``."""

    target: Target
    size: int

    def spelt(self) -> dict[str, str | int]:
        return {"target": self.target.spelt(), "size": self.size}

    @classmethod
    def read(cls, value: dict[str, str | int]) -> Stack:
        """A stack from its JSON (ValueError for what is none)."""
        target, size = value.get("target"), value.get("size")
        if set(value) != {"target", "size"} or not isinstance(target, str):
            raise ValueError(f"a stack is {{'target': name, 'size': n}}, not {value!r}")
        if not isinstance(size, int) or isinstance(size, bool):
            raise ValueError(f"a stack's size is a whole number, not {size!r}")
        return cls(Target.named(target), size)

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: object, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        """Read from its JSON object, written as it, described as an object of names and
        numbers."""
        names_and_numbers = core_schema.union_schema(
            [core_schema.str_schema(), core_schema.int_schema()]
        )
        return spelling_schema(
            cls, cls.read, core_schema.dict_schema(core_schema.str_schema(), names_and_numbers)
        )


#: a round's plan: its stacks in the order the shoe dispenses them
Plan = tuple[Stack, ...]
