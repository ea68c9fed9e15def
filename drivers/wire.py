"""Payload field encoding shared by tableside's device protocols.

Integers are big-endian and unsigned. A string is one length byte then that many UTF-8 bytes
(at most 64). A byte list is one count byte then the bytes.
"""

from __future__ import annotations

from typing import SupportsIndex

from tableside.errors import WireError

__all__ = ["MAX_STRING", "MalformedPayload", "PayloadReader", "PayloadWriter"]

MAX_STRING = 64


class MalformedPayload(WireError, ValueError):
    """An intact frame whose payload does not decode as its type says."""


class PayloadWriter:
    __slots__ = ("_out",)

    def __init__(self) -> None:
        self._out = bytearray()

    def u8(self, value: SupportsIndex) -> PayloadWriter:
        """A byte: an int, or a protocol's code (drivers/common.py ``WireEnum``)."""
        self._out.append(value)
        return self

    def u16(self, value: int) -> PayloadWriter:
        self._out += value.to_bytes(2, "big")
        return self

    def u32(self, value: int) -> PayloadWriter:
        self._out += value.to_bytes(4, "big")
        return self

    def raw(self, value: bytes) -> PayloadWriter:
        self._out += value
        return self

    def string(self, value: str) -> PayloadWriter:
        data = value.encode("utf-8")
        if len(data) > MAX_STRING:
            raise ValueError(f"string of {len(data)} bytes exceeds {MAX_STRING}: {value!r}")
        self._out += bytes((len(data),)) + data
        return self

    def byte_list(self, values: tuple[int, ...]) -> PayloadWriter:
        if len(values) > 0xFF:
            raise ValueError(f"list of {len(values)} exceeds 255")
        self._out += bytes((len(values), *values))
        return self

    def getvalue(self) -> bytes:
        return bytes(self._out)


class PayloadReader:
    __slots__ = ("_data", "_pos", "_what")

    def __init__(self, data: bytes, what: str) -> None:
        self._data = data
        self._pos = 0
        self._what = what

    def _take(self, n: int) -> bytes:
        end = self._pos + n
        if end > len(self._data):
            raise MalformedPayload(
                f"{self._what}: payload ends at byte {len(self._data)}, "
                f"needed {n} more from byte {self._pos}"
            )
        chunk = self._data[self._pos : end]
        self._pos = end
        return chunk

    def u8(self) -> int:
        return self._take(1)[0]

    def u16(self) -> int:
        return int.from_bytes(self._take(2), "big")

    def u32(self) -> int:
        return int.from_bytes(self._take(4), "big")

    def raw(self, n: int) -> bytes:
        return self._take(n)

    def string(self) -> str:
        n = self.u8()
        if n > MAX_STRING:
            raise MalformedPayload(f"{self._what}: string length {n} exceeds {MAX_STRING}")
        data = self._take(n)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedPayload(f"{self._what}: string is not UTF-8: {data!r}") from exc

    def byte_list(self) -> tuple[int, ...]:
        return tuple(self._take(self.u8()))

    def end(self) -> None:
        if self._pos != len(self._data):
            raise MalformedPayload(
                f"{self._what}: {len(self._data) - self._pos} unexpected trailing bytes"
            )
