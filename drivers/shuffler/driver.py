"""Driver for shufflers speaking the tableside shuffler protocol (docs/protocols/shuffler.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from tableside.drivers.base import DriverOptions, FramedDriver
from tableside.drivers.cards import Card
from tableside.drivers.commands import START_SHUFFLE
from tableside.drivers.events import DeviceEvent
from tableside.drivers.framing import NakReason
from tableside.drivers.messages import Message, MessageSet
from tableside.drivers.shuffler import protocol as p
from tableside.drivers.shuffler.events import (
    ShuffleCompleted,
    ShuffleOrdered,
    ShufflerFault,
    ShufflerStatus,
    ShuffleStarted,
)

__all__ = ["ShufflerDriver", "ShufflerOptions"]


class ShufflerOptions(DriverOptions):
    """``tableside.shuffler`` (and a plug-in shuffler's options, subclassing it)."""

    #: whether the device counts the cards after each shuffle (555.5(b)): the rules that need
    #: a counting shuffler apply only when it does
    counts_cards: bool = True
    #: whether the device recognises cards and reports, after each shuffle, the order it made
    #: (ShuffleOrder, docs/protocols/shuffler.md); off by default: a device without it sends none
    recognises_cards: bool = False


class ShufflerDriver(FramedDriver):
    device_class: ClassVar[str] = "shuffler"
    protocol: ClassVar[MessageSet] = p.PROTOCOL
    simple_commands: ClassVar[Mapping[str, type[Message]]] = {
        **FramedDriver.simple_commands,
        START_SHUFFLE.name: p.StartShuffle,
    }
    commands: ClassVar[frozenset[str]] = frozenset(simple_commands)
    Options: ClassVar[type[DriverOptions]] = ShufflerOptions

    def translate(self, message: Message) -> DeviceEvent | None:
        d = self.name
        match message:
            case p.Status():
                return ShufflerStatus(
                    device=d,
                    state=message.state,
                    fault=message.fault,
                    shuffles=message.shuffles,
                )
            case p.ShuffleStarted():
                return ShuffleStarted(device=d, shuffle_id=message.shuffle_id)
            case p.ShuffleComplete():
                return ShuffleCompleted(
                    device=d,
                    shuffle_id=message.shuffle_id,
                    card_count=message.card_count,
                    counted=message.counted,
                    deck=message.deck,
                    back_colour=message.back_colour,
                    missing_count=len(message.missing),
                    extra_count=len(message.extra),
                    missing_cards=tuple(Card.of(c) for c in message.missing),
                    extra_cards=tuple(Card.of(c) for c in message.extra),
                )
            case p.ShuffleOrder():
                return self._order(message)
            case p.Fault():
                return ShufflerFault(
                    device=d,
                    shuffle_id=message.shuffle_id,
                    fault=message.code,
                    detail=message.detail,
                )
        return None  # a message of the protocol this driver does not report

    def refuse(self, message: Message) -> NakReason | None:
        """A ShuffleOrder from a shuffler whose options do not enable ``recognises_cards`` is
        NAKed UNKNOWN_TYPE, as a host without the message would (docs/protocols/shuffler.md)."""
        if isinstance(message, p.ShuffleOrder) and not self.recognises_cards:
            return NakReason.UNKNOWN_TYPE
        return None

    @property
    def recognises_cards(self) -> bool:
        options = self.options
        return isinstance(options, ShufflerOptions) and options.recognises_cards

    def _order(self, message: p.ShuffleOrder) -> ShuffleOrdered:
        return ShuffleOrdered(
            device=self.name,
            shuffle_id=message.shuffle_id,
            deck=message.deck,
            output_count=len(message.output),
            input_count=len(message.input),
            output_cards=tuple(Card.of(c) for c in message.output),
            input_cards=tuple(Card.of(c) for c in message.input),
        )
