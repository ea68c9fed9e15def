"""A simulated Spanish 21 hole-card reader: the device side of docs/protocols/card-reader.md.

Every ``interval`` the dealer checks a hole card in it (as 551.8(e) has them do when the up
card is an ace or a face card). Served over a pty or a socket it is the RS-232 model; served
on the simulated USB bus (tableside.simulators.usb) it is the USB model, and the USB faults
(``unplug``, ``stall``, ``usb_timeout``) act on that bus.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import structlog

from tableside.drivers.card_reader import protocol as p
from tableside.drivers.framing import NakReason
from tableside.drivers.link import FramedLink
from tableside.drivers.messages import Message, MessageSet
from tableside.simulators.base import LINE_FAULTS, StatefulSimulator

__all__ = ["FAULTS", "USB_FAULTS", "CardReaderSimulator"]

log = structlog.get_logger("tableside.sim.card_reader")

USB_FAULTS: dict[str, str] = {
    "unplug": "USB only: the reader leaves the bus for VALUE s (default 1), then comes back",
    "stall": "USB only: the next VALUE bulk reads (default 1) stall (EPIPE) until cleared",
    "usb_timeout": "USB only: the next VALUE bulk writes (default 1) time out",
}
_OWN_FAULTS: dict[str, str] = {
    "blackjack": "the hole card checked on cycle N makes a Blackjack",
    "malfunction": "the reader malfunctions (551.16(m)); it stays in fault until a self-test",
    "tamper": "the reader reports tampering",
    "door": "the reader's door is opened",
    "selftest_fail": "the next self-test fails",
    **USB_FAULTS,
}
FAULTS: dict[str, str] = {**_OWN_FAULTS, **LINE_FAULTS}


@dataclass
class CardReaderSimulator(StatefulSimulator[p.ReaderState, p.ReaderFaultCode]):
    """Device-side card reader."""

    FAULTS: ClassVar[Mapping[str, str]] = _OWN_FAULTS
    INT_VALUES: ClassVar[frozenset[str]] = frozenset({"stall", "usb_timeout"})
    MODEL: ClassVar[str] = "SIM-READER-1"
    protocol: ClassVar[MessageSet] = p.PROTOCOL

    #: whether this model could let a player learn the hole card (551.16(l)(1))
    reveals_hole_card: bool = False
    read_time: float = 0.05
    fault_clear_time: float = 0.3
    #: USB faults act through these (set by the simulated USB bus); name → action(value)
    usb_hooks: dict[str, Callable[[str | None], None]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.checks = 0
        self._state = p.ReaderState.READY
        self._fault = None
        self._fail_next_self_test = False

    def status(self) -> p.ReaderStatus:
        return p.ReaderStatus(self._state, self._fault, self.reveals_hole_card, self.checks)

    def on_command(self, message: Message) -> NakReason | None:
        if not isinstance(message, p.RunSelfTest):
            return NakReason.UNKNOWN_TYPE
        if self._state == p.ReaderState.READING:
            return NakReason.BUSY
        self.requests.put_nowait(("self_test", None))
        return None

    async def on_link_up(self, link: FramedLink) -> None:
        await link.send(self.status())

    async def cycle(
        self, link: FramedLink, n: int, faults: Mapping[str, str | None], request: object
    ) -> None:
        if "selftest_fail" in faults:
            self._fail_next_self_test = True
        for name in USB_FAULTS:
            if name in faults:
                hook = self.usb_hooks.get(name)
                if hook is None:
                    log.warning("sim_fault_needs_usb", fault=name, cycle=n)
                else:
                    log.info("sim_fault", fault=name, cycle=n)
                    hook(faults[name])
        if self._fault == p.ReaderFaultCode.MALFUNCTION:
            return  # a broken reader reads nothing until it is repaired
        self.disconnect_now(faults)
        await self.set_state(link, p.ReaderState.READING)
        await asyncio.sleep(self.read_time)
        for name, code in (("malfunction", p.ReaderFaultCode.MALFUNCTION),
                           ("tamper", p.ReaderFaultCode.TAMPER),
                           ("door", p.ReaderFaultCode.DOOR_OPEN)):  # fmt: skip
            if name in faults:
                log.info("sim_fault", fault=name, cycle=n)
                await link.send(p.ReaderFault(code, f"simulated {name}"))
                await self.set_state(link, p.ReaderState.FAULT, code)
                if code != p.ReaderFaultCode.MALFUNCTION:
                    await asyncio.sleep(self.fault_clear_time)
                    await self.set_state(link, p.ReaderState.READY)
                return
        self.checks += 1
        blackjack = "blackjack" in faults or self.rng.random() < 0.3
        await link.send(p.HoleCardChecked(self.checks, blackjack))
        await self.set_state(link, p.ReaderState.READY)

    async def on_request(self, link: FramedLink, kind: str, request: object) -> None:
        # A self-test is not a hole-card check: it takes no cycle number of its own.
        if kind != "self_test":
            await super().on_request(link, kind, request)
            return
        await self.set_state(link, p.ReaderState.SELF_TEST, self._fault)
        await asyncio.sleep(self.read_time)
        if self._fail_next_self_test:
            self._fail_next_self_test = False
            await link.send(p.SelfTestResult(False, 0x0101, "optical sensor out of range"))
            await self.set_state(link, p.ReaderState.FAULT, p.ReaderFaultCode.MALFUNCTION)
            return
        await link.send(p.SelfTestResult(True))
        await self.set_state(link, p.ReaderState.READY)  # a passed self-test clears a fault
