"""Driver for dealing shoes speaking the tableside shoe protocol (docs/protocols/shoe.md)."""

from __future__ import annotations

from typing import ClassVar

from tableside.drivers.base import DriverSettings, EventSink, FramedDriver
from tableside.drivers.cards import Card
from tableside.drivers.commands import DEAL, Args, Deal, names
from tableside.drivers.events import DeviceEvent
from tableside.drivers.messages import Message, MessageSet
from tableside.drivers.shoe import events as ev
from tableside.drivers.shoe import protocol as p
from tableside.drivers.shoe.plan import Plan

__all__ = ["ShoeDriver"]


class ShoeDriver(FramedDriver):
    device_class: ClassVar[str] = "shoe"
    protocol: ClassVar[MessageSet] = p.PROTOCOL
    commands: ClassVar[frozenset[str]] = FramedDriver.commands | names(DEAL)

    def __init__(self, name: str, settings: DriverSettings, sink: EventSink) -> None:
        super().__init__(name, settings, sink)
        self._plans: dict[int, Plan] = {}

    async def command(self, name: str, args: Args) -> None:
        if name == DEAL.name and isinstance(args, Deal):
            plan = tuple(stack.stack() for stack in args.stacks)
            self._plans[args.round] = plan
            await self.send(p.DealRound(args.round, plan))
        else:
            await super().command(name, args)

    def _expected(self, round_: int, index: int) -> int | None:
        plan = self._plans.get(round_)
        return plan[index].size if plan is not None and index < len(plan) else None

    def translate(self, message: Message) -> DeviceEvent | None:
        d = self.name
        match message:
            case p.ShoeStatus():
                return ev.ShoeStatus(
                    device=d,
                    state=message.state,
                    fault=message.fault,
                    cards_loaded=message.cards_loaded,
                    cards_remaining=message.cards_remaining,
                )
            case p.CardsLoaded():
                return ev.CardsLoaded(
                    device=d, count=None if message.count == 0xFFFF else message.count
                )
            case p.DealStarted():
                self._plans[message.round] = message.stacks
                # Keep only recent plans: a long-running table deals thousands of rounds.
                for old in [r for r in self._plans if r < message.round - 16]:
                    del self._plans[old]
                return ev.DealStarted(
                    device=d,
                    round=message.round,
                    plan=message.stacks,
                )
            case p.StackDispensed():
                return ev.StackDispensed(
                    device=d,
                    round=message.round,
                    index=message.index,
                    target=message.target,
                    count=message.count,
                    expected=self._expected(message.round, message.index),
                    cards=tuple(Card.of(c) for c in message.cards),
                )
            case p.FaceUpCard():
                return ev.CardFaceUp(
                    device=d,
                    round=message.round,
                    index=message.index,
                    total=message.total,
                    card=Card.of(message.card) if message.card else None,
                )
            case p.CardDrawn():
                return ev.CardDrawn(device=d, round=message.round, index=message.index,
                                    card=Card.of(message.card))  # fmt: skip
            case p.FirstCardBurned():
                return ev.FirstCardBurned(device=d, card=Card.of(message.card),
                                          burned=message.burned)  # fmt: skip
            case p.ShoeFault():
                return ev.ShoeFault(
                    device=d,
                    round=message.round,
                    fault=message.code,
                    index=message.index,
                    detail=message.detail,
                )
            case p.StubRemoved():
                return ev.StubRemoved(
                    device=d,
                    round=message.round,
                    count=None if message.count == 0xFFFF else message.count,
                )
            case p.DealComplete():
                plan = self._plans.get(message.round)
                return ev.DealCompleted(
                    device=d,
                    round=message.round,
                    stacks=message.stacks,
                    cards=message.cards,
                    expected_stacks=None if plan is None else len(plan),
                    expected_cards=None if plan is None else sum(s.size for s in plan),
                )
        return None  # a message of the protocol this driver does not report
