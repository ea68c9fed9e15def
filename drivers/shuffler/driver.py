"""Driver for shufflers speaking the tableside shuffler protocol (docs/protocols/shuffler.md)."""

from __future__ import annotations

from typing import ClassVar

from tableside.drivers.base import Driver
from tableside.drivers.cards import card_name
from tableside.drivers.errors import DeviceRejected
from tableside.drivers.events import DeviceEvent, IdentityEvent, ProtocolErrorEvent
from tableside.drivers.link import FramedLink
from tableside.drivers.messages import Message, MessageSet
from tableside.drivers.shuffler import protocol as p
from tableside.drivers.shuffler.events import (
    ShuffleCompleted,
    ShufflerFault,
    ShufflerStatus,
    ShuffleStarted,
)

__all__ = ["ShufflerDriver"]

_DECK_NAMES = {p.Deck.SINGLE: "single", p.Deck.A: "A", p.Deck.B: "B"}


class ShufflerDriver(Driver):
    device_class: ClassVar[str] = "shuffler"
    protocol: ClassVar[MessageSet] = p.PROTOCOL
    commands: ClassVar[frozenset[str]] = frozenset(
        {"start_shuffle", "query_status", "query_identity"}
    )

    async def on_link_up(self, link: FramedLink) -> None:
        for query in (p.QueryIdentity(), p.QueryStatus()):
            try:
                await link.send(query)
            except DeviceRejected as exc:
                # A device that will not say who it is still shuffles; report it and go on.
                self._sink(
                    ProtocolErrorEvent(
                        device=self.name,
                        frame_type=query.TYPE,
                        reason="query_refused",
                        detail=str(exc),
                    )
                )

    async def command(self, name: str) -> None:
        message: Message
        if name == "start_shuffle":
            message = p.StartShuffle()
        elif name == "query_status":
            message = p.QueryStatus()
        elif name == "query_identity":
            message = p.QueryIdentity()
        else:
            raise ValueError(
                f"{self.name}: unknown shuffler command {name!r} "
                f"(known: {', '.join(sorted(self.commands))})"
            )
        await self.require_link().send(message)

    def translate(self, message: Message) -> DeviceEvent | None:
        d = self.name
        match message:
            case p.Heartbeat():
                return None  # liveness only: it keeps the device from going stale
            case p.Identity():
                return IdentityEvent(
                    device=d,
                    vendor=message.vendor,
                    model=message.model,
                    serial=message.serial,
                    firmware_version=message.firmware_version,
                    firmware_sha256=message.firmware_sha256.hex(),
                )
            case p.Status():
                return ShufflerStatus(
                    device=d,
                    state=message.state.name.lower(),
                    fault=None if message.fault is None else message.fault.name.lower(),
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
                    deck=_DECK_NAMES[message.deck],
                    back_colour=message.back_colour,
                    missing_count=len(message.missing),
                    extra_count=len(message.extra),
                    missing_cards=tuple(card_name(c) for c in message.missing),
                    extra_cards=tuple(card_name(c) for c in message.extra),
                )
            case p.Fault():
                return ShufflerFault(
                    device=d,
                    shuffle_id=message.shuffle_id,
                    fault=message.code.name.lower(),
                    detail=message.detail,
                )
        # Host-to-device messages arriving from the device break the protocol; say so.
        return ProtocolErrorEvent(
            device=d,
            frame_type=message.TYPE,
            reason="unexpected_direction",
            detail=f"{type(message).__name__} is a host-to-device message",
        )
