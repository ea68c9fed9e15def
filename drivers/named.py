"""Values with a type of their own inside the table (bellows' ``types/named.py``): a card, a
stack target, a stack. Each layer carries the value; it is spelt as a name only where JSON is
written or read. No I/O.

``spelt()`` is the value as JSON (``DeviceEvent.data()``, a ruling's citation); the type's
``__get_pydantic_core_schema__`` reads it back from that spelling and describes it, so the
event schemas (drivers/catalog.py), a command's arguments and a test that names a card read
and describe the one spelling the value writes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic_core import core_schema

__all__ = ["Named", "spelling_schema", "spelt"]


class Named:
    """A value spelt as JSON only at the edge."""

    __slots__ = ()

    def spelt(self) -> object:
        """The value as JSON writes it (a name, or an object of names and numbers)."""
        raise NotImplementedError


def spelt(value: object) -> object:
    """``value`` as JSON writes it: a named value by its spelling, a tuple of them as a list
    of theirs, anything else as it is (a tuple as a list)."""
    if isinstance(value, Named):
        return value.spelt()
    if isinstance(value, tuple):
        return [v.spelt() if isinstance(v, Named) else v for v in value]
    return value


def spelling_schema(
    cls: type[Named], read: Callable[[Any], Named], spelling: core_schema.CoreSchema
) -> core_schema.CoreSchema:
    """A named type's pydantic schema (its ``__get_pydantic_core_schema__``): read through
    ``read`` from its spelling (``spelling``), an instance taken as it is, written as
    ``spelt()``, described as its spelling."""
    from_spelling = core_schema.no_info_after_validator_function(read, spelling)
    either = core_schema.union_schema([core_schema.is_instance_schema(cls), from_spelling])
    return core_schema.json_or_python_schema(
        json_schema=from_spelling,
        python_schema=either,
        serialization=core_schema.plain_serializer_function_ser_schema(cls.spelt),
    )
