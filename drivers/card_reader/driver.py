"""Driver for card readers speaking the tableside card-reader protocol, over USB
(``usb://VID:PID``) or a serial line: the same driver, only the URL differs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from tableside.drivers.base import DriverOptions, FramedDriver
from tableside.drivers.card_reader import events as ev
from tableside.drivers.card_reader import protocol as p
from tableside.drivers.commands import SELF_TEST
from tableside.drivers.events import DeviceEvent
from tableside.drivers.messages import Message, MessageSet

__all__ = ["CardReaderDriver", "CardReaderOptions"]


class CardReaderOptions(DriverOptions):
    """``tableside.card_reader``."""

    #: whether this model could let a player learn the hole card (551.16(l)); unset: what the
    #: reader itself reports
    reveals_hole_card: bool | None = None


class CardReaderDriver(FramedDriver):
    device_class: ClassVar[str] = "card_reader"
    protocol: ClassVar[MessageSet] = p.PROTOCOL
    simple_commands: ClassVar[Mapping[str, type[Message]]] = {
        **FramedDriver.simple_commands,
        SELF_TEST.name: p.RunSelfTest,
    }
    commands: ClassVar[frozenset[str]] = frozenset(simple_commands)
    Options: ClassVar[type[DriverOptions]] = CardReaderOptions

    def translate(self, message: Message) -> DeviceEvent | None:
        d = self.name
        match message:
            case p.ReaderStatus():
                assert isinstance(self.options, CardReaderOptions)  # Driver.__init__ checked it
                configured = self.options.reveals_hole_card
                return ev.ReaderStatus(
                    device=d,
                    state=message.state,
                    fault=message.fault,
                    reveals_hole_card=message.reveals_hole_card
                    if configured is None
                    else configured,
                    reveals_source="device" if configured is None else "config",
                    checks=message.checks,
                )
            case p.SelfTestResult():
                return ev.SelfTestResult(
                    device=d, passed=message.passed, code=message.code, detail=message.detail
                )
            case p.HoleCardChecked():
                return ev.HoleCardChecked(
                    device=d, check_id=message.check_id, blackjack=message.blackjack
                )
            case p.ReaderFault():
                return ev.ReaderFault(device=d, fault=message.code, detail=message.detail)
        return None  # a message of the protocol this driver does not report
