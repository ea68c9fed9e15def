"""The wire's own types: a protocol's codes (``WireEnum``), declared once with the word the
table publishes for each. No I/O."""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Self, TypeVar

from tableside.drivers.wire import MalformedPayload

__all__ = ["WireEnum", "decode_enum", "decode_optional_enum", "optional_code"]


class WireEnum(enum.StrEnum):
    """A protocol's codes and the word the table publishes for each, declared once:
    ``JAM = "jam", 1``. A member is its word (a str: the rules, the payloads and their schemas
    read it so); ``code`` is its byte on the link (``int(m)``, and wherever a byte is written);
    ``cls.of(code)`` finds the member a byte names."""

    code: int

    if TYPE_CHECKING:  # what a caller sees: ``cls(word)`` looks a member up by its word

        def __new__(cls, word: str) -> Self: ...

    else:  # what makes each member from its declaration's (word, code)

        def __new__(cls, word, code):
            member = str.__new__(cls, word)
            member._value_ = word
            member.code = code
            return member

    def __index__(self) -> int:
        return self.code

    def __int__(self) -> int:
        return self.code

    @classmethod
    def of(cls, code: int) -> Self:
        """The member whose byte is ``code``; ValueError for a byte that names none."""
        for member in cls:
            if member.code == code:
                return member
        raise ValueError(f"{code} is no {cls.__name__}")


_E = TypeVar("_E", bound=WireEnum)


def decode_enum(cls: type[_E], value: int, what: str) -> _E:
    try:
        return cls.of(value)
    except ValueError as exc:
        raise MalformedPayload(f"{what}: {value} is no {cls.__name__}") from exc


def decode_optional_enum(cls: type[_E], value: int, what: str) -> _E | None:
    """A byte where 0 means "none" and anything else is a member of ``cls``."""
    return None if value == 0 else decode_enum(cls, value, what)


def optional_code(value: WireEnum | None) -> int:
    return 0 if value is None else int(value)
