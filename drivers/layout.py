"""A message's payload derived from its fields' annotations (bellows' ``types/struct.py``):
declare the fields in wire order with their wire types, and ``Struct`` writes and reads them.
No I/O.

An annotation names how its field goes on the wire (drivers/wire.py's encodings)::

    U8, U16, U32              an unsigned big-endian integer of 1, 2 or 4 bytes
    bool                      one byte, 0 or 1
    Annotated[bool, Bit(n)]   bit n of a flags byte that consecutive bits share; a set bit
                              that no field declares is refused
    str                       a string (length byte, UTF-8)
    SomeWireEnum              its code, one byte; ``SomeWireEnum | None``: 0 is None
    Annotated[T, field]       any other ``Field`` (fixed raw bytes, cards, a protocol's own)

A variable part that is no sequence of these (a shoe's deal plan) is a ``Field`` of its own,
written by hand beside its protocol. A message whose wire order is not its fields' order says
so in ``WIRE_ORDER``; a check across fields goes in ``_check``.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, ClassVar, Never, Self, TypeVar

from tableside.drivers.wire import MalformedPayload, PayloadReader, PayloadWriter

__all__ = [
    "U8",
    "U16",
    "U32",
    "Bit",
    "Coded",
    "Field",
    "Layout",
    "Raw",
    "Struct",
    "Uint",
    "WireEnum",
    "decode_enum",
    "layout",
]


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
        by_code = _BY_CODE.get(cls)
        if by_code is None:
            by_code = _BY_CODE[cls] = {member.code: member for member in cls}
        member = by_code.get(code)
        if member is None:
            raise ValueError(f"{code} is no {cls.__name__}")
        return typing.cast(Self, member)  # a member of cls: its map holds only those


#: each WireEnum's members by their byte (made at the first lookup)
_BY_CODE: dict[type[WireEnum], dict[int, WireEnum]] = {}


_E = TypeVar("_E", bound=WireEnum)


def decode_enum(cls: type[_E], value: int, what: str) -> _E:
    try:
        return cls.of(value)
    except ValueError as exc:
        raise MalformedPayload(f"{what}: {value} is no {cls.__name__}") from exc


class Field:
    """How one field goes on the wire. ``what`` names it in errors (``Message.field``)."""

    __slots__ = ()

    def write(self, w: PayloadWriter, value: Never, what: str) -> None:
        """Append ``value`` (each field narrows it to its own type); ValueError if it cannot."""
        raise NotImplementedError

    def read(self, r: PayloadReader, what: str) -> object:
        """The field's value from ``r``; MalformedPayload for bytes that are none."""
        raise NotImplementedError


class Uint(Field):
    """An unsigned big-endian integer of 1, 2 or 4 bytes."""

    __slots__ = ("_get", "_put", "size")

    def __init__(self, size: int) -> None:
        put: dict[int, Callable[[PayloadWriter, int], object]] = {
            1: PayloadWriter.u8, 2: PayloadWriter.u16, 4: PayloadWriter.u32,
        }  # fmt: skip
        get = {1: PayloadReader.u8, 2: PayloadReader.u16, 4: PayloadReader.u32}
        if size not in put:
            raise ValueError(f"no unsigned integer of {size} bytes on the wire")
        self.size, self._put, self._get = size, put[size], get[size]

    def write(self, w: PayloadWriter, value: int, what: str) -> None:
        self._put(w, value)

    def read(self, r: PayloadReader, what: str) -> int:
        return self._get(r)


U8 = Annotated[int, Uint(1)]
U16 = Annotated[int, Uint(2)]
U32 = Annotated[int, Uint(4)]


class _Bool(Field):
    __slots__ = ()

    def write(self, w: PayloadWriter, value: bool, what: str) -> None:
        w.u8(int(value))

    def read(self, r: PayloadReader, what: str) -> bool:
        value = r.u8()
        if value > 1:
            raise MalformedPayload(f"{what} must be 0 or 1, got {value}")
        return bool(value)


class _Str(Field):
    __slots__ = ()

    def write(self, w: PayloadWriter, value: str, what: str) -> None:
        w.string(value)

    def read(self, r: PayloadReader, what: str) -> str:
        return r.string()


class Raw(Field):
    """Exactly ``size`` bytes as they are."""

    __slots__ = ("size",)

    def __init__(self, size: int) -> None:
        self.size = size

    def write(self, w: PayloadWriter, value: bytes, what: str) -> None:
        if len(value) != self.size:
            raise ValueError(f"{what.rpartition('.')[2]} must be {self.size} bytes")
        w.raw(value)

    def read(self, r: PayloadReader, what: str) -> bytes:
        return r.raw(self.size)


class Coded(Field):
    """A protocol's code (drivers/common.py ``WireEnum``), one byte; ``optional``: 0 is None."""

    __slots__ = ("cls", "optional")

    def __init__(self, cls: type[WireEnum], *, optional: bool = False) -> None:
        self.cls = cls
        self.optional = optional

    def write(self, w: PayloadWriter, value: WireEnum | None, what: str) -> None:
        w.u8(0 if value is None else value.code)

    def read(self, r: PayloadReader, what: str) -> WireEnum | None:
        value = r.u8()
        if value == 0 and self.optional:
            return None
        return decode_enum(self.cls, value, what)


class Bit(Field):
    """Bit ``n`` of a flags byte that the consecutive ``Bit`` fields around it share."""

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        if not 0 <= n <= 7:
            raise ValueError(f"a flags byte has no bit {n}")
        self.n = n


class _Part:
    """A run of a layout's bytes: one field, or a flags byte shared by bit fields."""

    __slots__ = ()

    def write(self, w: PayloadWriter, message: object) -> None:
        raise NotImplementedError

    def read(self, r: PayloadReader, out: list[object]) -> None:
        """Append its fields' values to ``out``, in wire order."""
        raise NotImplementedError


class _One(_Part):
    __slots__ = ("field", "name", "what")

    def __init__(self, name: str, field: Field, what: str) -> None:
        self.name, self.field, self.what = name, field, what

    def write(self, w: PayloadWriter, message: object) -> None:
        self.field.write(w, getattr(message, self.name), self.what)

    def read(self, r: PayloadReader, out: list[object]) -> None:
        out.append(self.field.read(r, self.what))


class _Flags(_Part):
    """A flags byte: each field one bit; a bit no field declares must be clear."""

    __slots__ = ("bits", "declared", "owner")

    def __init__(self, owner: str, bits: tuple[tuple[str, int], ...]) -> None:
        self.owner, self.bits = owner, bits
        self.declared = sum(1 << n for _, n in bits)

    def write(self, w: PayloadWriter, message: object) -> None:
        w.u8(sum(1 << n for name, n in self.bits if getattr(message, name)))

    def read(self, r: PayloadReader, out: list[object]) -> None:
        flags = r.u8()
        if flags & ~self.declared:
            raise MalformedPayload(f"{self.owner}: reserved flag bits set in 0x{flags:02x}")
        out.extend(bool(flags >> n & 1) for _, n in self.bits)


@dataclass(frozen=True, slots=True)
class Layout:
    """A message's payload: its parts in wire order, and the fields they read, in that order
    (``positional``: the order the message is made with)."""

    parts: tuple[_Part, ...]
    names: tuple[str, ...]
    positional: bool


_LAYOUTS: dict[type, Layout] = {}


def layout(cls: type[Struct]) -> Layout:
    """``cls``'s payload, derived once from its fields' annotations; TypeError for a field
    whose annotation names no wire type."""
    found = _LAYOUTS.get(cls)
    if found is None:
        found = _LAYOUTS[cls] = _derive(cls)
    return found


def _derive(cls: type[Struct]) -> Layout:
    hints = typing.get_type_hints(cls, include_extras=True)
    names = [f.name for f in dataclasses.fields(cls)]
    order = cls.WIRE_ORDER or tuple(names)
    if sorted(order) != sorted(names):
        raise TypeError(f"{cls.__name__}.WIRE_ORDER {order} is not its fields {names}")
    parts: list[_Part] = []
    bits: list[tuple[str, int]] = []  # the flags byte being declared
    for name in order:
        field = _field(hints[name], f"{cls.__name__}.{name}")
        if bits and not (isinstance(field, Bit) and field.n > bits[-1][1]):
            parts.append(_Flags(cls.__name__, tuple(bits)))  # the flags byte ends
            bits = []
        if isinstance(field, Bit):
            bits.append((name, field.n))
        else:
            parts.append(_One(name, field, f"{cls.__name__}.{name}"))
    if bits:
        parts.append(_Flags(cls.__name__, tuple(bits)))
    return Layout(tuple(parts), tuple(order), tuple(order) == tuple(names))


_PLAIN: dict[object, Field] = {bool: _Bool(), str: _Str()}


def _field(hint: object, what: str) -> Field:
    """The wire type an annotation names."""
    if typing.get_origin(hint) is Annotated:
        fields = [m for m in getattr(hint, "__metadata__", ()) if isinstance(m, Field)]
        if fields:
            return fields[-1]
        hint = typing.get_args(hint)[0]
    plain = _PLAIN.get(hint)
    if plain is not None:
        return plain
    if isinstance(hint, type) and issubclass(hint, WireEnum):
        return Coded(hint)
    if isinstance(hint, types.UnionType):
        args = typing.get_args(hint)
        rest = [a for a in args if a is not type(None)]
        if len(args) == 2 and len(rest) == 1:
            inner = rest[0]
            if isinstance(inner, type) and issubclass(inner, WireEnum):
                return Coded(inner, optional=True)
    raise TypeError(f"{what}: {hint!r} names no wire type (an int needs U8, U16 or U32)")


class Struct:
    """Base of a message whose payload is its fields, in order, as their annotations say."""

    __slots__ = ()

    TYPE: ClassVar[int] = 0
    #: the fields' order on the wire, when it is not their declaration's (empty: the same)
    WIRE_ORDER: ClassVar[tuple[str, ...]] = ()
    if TYPE_CHECKING:  # a Struct is a dataclass (dataclasses.fields raises TypeError if not)
        __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[object]]]

    def to_payload(self) -> bytes:
        w = PayloadWriter()
        for part in layout(type(self)).parts:
            part.write(w, self)
        return w.getvalue()

    @classmethod
    def from_payload(cls, payload: bytes) -> Self:
        wire = layout(cls)
        r = PayloadReader(payload, cls.__name__)
        values: list[object] = []
        for part in wire.parts:
            part.read(r, values)
        r.end()
        make: Callable[..., Self] = cls
        if wire.positional:
            message = make(*values)
        else:
            message = make(**dict(zip(wire.names, values, strict=True)))
        message._check()
        return message

    def _check(self) -> None:
        """What a message of this type must also satisfy, across its fields (raise
        MalformedPayload)."""
