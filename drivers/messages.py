"""A protocol's message set: frame type byte ↔ frozen dataclass, for any tableside protocol."""

from __future__ import annotations

from typing import ClassVar, Protocol, Self

from tableside.drivers.framing import ACK, NAK, Frame
from tableside.drivers.layout import Struct, layout
from tableside.drivers.wire import MalformedPayload
from tableside.errors import WireError

__all__ = ["Message", "MessageSet", "UnknownMessageType"]


class UnknownMessageType(WireError, ValueError):
    """An intact frame whose type byte this protocol does not define."""


class Message(Protocol):
    TYPE: ClassVar[int]

    def to_payload(self) -> bytes: ...

    @classmethod
    def from_payload(cls, payload: bytes) -> Self: ...


class MessageSet:
    """The messages one protocol defines, looked up by type byte."""

    def __init__(self, name: str, *classes: type[Message]) -> None:
        self.name = name
        self._by_type: dict[int, type[Message]] = {}
        for cls in classes:
            if cls.TYPE in (ACK, NAK) or cls.TYPE in self._by_type:
                raise ValueError(f"{name}: type 0x{cls.TYPE:02x} of {cls.__name__} is taken")
            self._by_type[cls.TYPE] = cls
            if issubclass(cls, Struct):
                layout(cls)  # a field that names no wire type fails here, at import

    @property
    def classes(self) -> tuple[type[Message], ...]:
        return tuple(self._by_type.values())

    def encode(self, message: Message, seq: int) -> Frame:
        if type(message) not in self._by_type.values():
            raise TypeError(f"{self.name} has no message {type(message).__name__}")
        return Frame(seq=seq, type=message.TYPE, payload=message.to_payload())

    def decode(self, frame: Frame) -> Message:
        """Raise UnknownMessageType or MalformedPayload for a frame that is not a message."""
        cls = self._by_type.get(frame.type)
        if cls is None:
            raise UnknownMessageType(f"{self.name}: unknown message type 0x{frame.type:02x}")
        try:
            return cls.from_payload(frame.payload)
        except MalformedPayload:
            raise
        except ValueError as exc:
            raise MalformedPayload(f"{self.name}: {cls.__name__}: {exc}") from exc
