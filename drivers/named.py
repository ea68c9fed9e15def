"""Values with a type of their own inside the table (bellows' ``types/named.py``): a card, a
stack target, a stack. Each layer carries the value; it is spelt as a name only where JSON is
written or read. No I/O.

``spelt()`` is the value as JSON (``DeviceEvent.data()``, a ruling's citation); the type's
``__get_pydantic_core_schema__`` reads it back from that spelling and describes it, so the
event schemas (drivers/catalog.py), a command's arguments and a test that names a card read
and describe the one spelling the value writes.
"""

from __future__ import annotations

__all__ = ["Named", "spelt"]


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
