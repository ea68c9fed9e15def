"""A simulated automated dealing shoe: the device side of docs/protocols/shoe.md.

The host sends DealRound with the round's plan; the shoe dispenses the stacks one by one. Left
alone with an ``interval`` it deals its own ``plan`` every interval, as a dealer pressing the
deal button would. Faults are scripted per round (``--fault NAME[=VALUE]@N``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import structlog

from tableside.drivers.cards import card_code
from tableside.drivers.framing import NakReason
from tableside.drivers.link import FramedLink
from tableside.drivers.messages import Message, MessageSet
from tableside.drivers.shoe import protocol as p
from tableside.drivers.shoe.plan import Plan, Stack, Target
from tableside.simulators.base import LINE_FAULTS, StatefulSimulator
from tableside.simulators.faults import FaultSpec

__all__ = ["DEFAULT_PLAN", "FAULTS", "ShoeSimulator", "parse_plan_spec", "plan_spec"]

log = structlog.get_logger("tableside.sim.shoe")

# STACK: a stack by its place in the dealing order (1, 2, …) or by its target (seat3, dealer,
# dealer_extra, community): every misdeal can be made in the regulation's own dealing order.
_OWN_FAULTS: dict[str, str] = {
    "jam": "the shoe jams before STACK (default 2: after the first stack), e.g. jam=dealer@2",
    "stop": "the shoe stops dealing before STACK (default 2), e.g. stop=4@1",
    "short": "stack STACK (default 1) has K cards: short=K[:STACK]@N, e.g. short=4:dealer@2",
    "extra": "stack STACK (default 1) has K cards more: extra=K[:STACK]@N, e.g. extra=1:3@2",
    "faceup": "K cards (default 1) are found face up at STACK (default 1): faceup[=K[:STACK]]@N",
    "door": "the door is opened before STACK (default 2) (fault DOOR_OPEN), e.g. door=3@1",
    "extra_card": "baccarat: one card more than the drawing rules allow is drawn",
    "skip_draw": "baccarat: a hand that must draw stays (no third card where one is due)",
    "no_burn": "baccarat: the next new shoe is dealt without its first-card burn",
}
FAULTS: dict[str, str] = {**_OWN_FAULTS, **LINE_FAULTS}

#: three players and the dealer, five cards each (Caribbean Stud, 555.10(b))
DEFAULT_PLAN: Plan = (
    Stack(Target.SEAT1, 5), Stack(Target.SEAT2, 5), Stack(Target.SEAT3, 5),
    Stack(Target.DEALER, 5),
)  # fmt: skip

#: the command line's one-letter shorthand for the dealer's stacks (a seat is its number)
_LETTERS = {Target.DEALER: "D", Target.DEALER_EXTRA: "X", Target.COMMUNITY: "C"}
_BY_LETTER = {letter: target for target, letter in _LETTERS.items()}


def parse_plan_spec(spec: str) -> Plan:
    """``"1:5,2:5,D:5"`` → stacks. Targets: 1..7 seats, D dealer, X dealer extra, C community."""
    stacks = []
    for part in spec.split(","):
        word, sep, size = part.strip().partition(":")
        if not sep or not size.isdigit():
            raise ValueError(f"plan {spec!r}: expected TARGET:SIZE items like 1:5,D:5")
        target = _BY_LETTER.get(word.upper())
        if target is None and word.isdigit() and 1 <= int(word) <= 7:
            target = Target.at_seat(int(word))
        if target is None or not 1 <= int(size) <= 52:
            raise ValueError(
                f"plan {spec!r}: bad item {part!r} (targets 1..7, D, X, C; size 1..52)"
            )
        stacks.append(Stack(target, int(size)))
    return tuple(stacks)


def plan_spec(plan: Plan) -> str:
    """A plan as ``parse_plan_spec`` reads it: ``"1:5,2:5,D:5"``."""
    return ",".join(f"{_LETTERS.get(s.target, s.target.seat)}:{s.size}" for s in plan)


@dataclass
class ShoeSimulator(StatefulSimulator[p.ShoeState, p.ShoeFaultCode]):
    """Device-side dealing shoe."""

    FAULTS: ClassVar[Mapping[str, str]] = _OWN_FAULTS
    NEED_VALUE: ClassVar[frozenset[str]] = frozenset({"short", "extra"})
    protocol: ClassVar[MessageSet] = p.PROTOCOL

    interval: float | None = None
    MODEL: ClassVar[str] = "SIM-SHOE-1"
    plan: Plan = DEFAULT_PLAN
    deck_size: int = 52
    reads_cards: bool = False
    stack_time: float = 0.05
    fault_clear_time: float = 0.3
    #: a baccarat shoe that reads cards: each cycle is one coup, drawn card by card (CardDrawn)
    baccarat: bool = False
    decks: int = 8

    def __post_init__(self) -> None:
        super().__post_init__()
        self.rounds_dealt = 0
        self._state = p.ShoeState.IDLE
        self._fault = None
        self._remaining = self.deck_size
        self._deck: list[int] = []

    def check_fault_value(self, fault: FaultSpec) -> None:
        if fault.name in _STACK_FAULTS:
            _stack_fault(fault.name, fault.value)
        elif fault.name in _CARD_FAULTS:
            _card_fault(fault.name, fault.value)
        else:
            super().check_fault_value(fault)

    def status(self) -> p.ShoeStatus:
        return p.ShoeStatus(self._state, self._fault, self.deck_size, self._remaining)

    def default_request(self) -> p.DealRound:
        """The next round, dealt to the shoe's own plan (a dealer pressing the button)."""
        return p.DealRound(self.cycles + 1, self.plan)

    def on_command(self, message: Message) -> NakReason | None:
        if not isinstance(message, p.DealRound):
            return NakReason.UNKNOWN_TYPE
        if self._state != p.ShoeState.IDLE:
            return NakReason.BUSY
        self.requests.put_nowait(("cycle", message))
        return None

    async def on_link_up(self, link: FramedLink) -> None:
        if not self.baccarat:  # a baccarat shoe says CardsLoaded when a new shoe starts
            await link.send(p.CardsLoaded(self.deck_size))

    def _load(self) -> None:
        deck = [card_code(rank, suit) for suit in range(4) for rank in range(1, 14)]
        self._deck = [deck[i % 52] for i in range(self.deck_size)]
        self.rng.shuffle(self._deck)
        self._remaining = self.deck_size

    def _take(self, n: int) -> tuple[int, ...]:
        n = min(n, self._remaining)
        taken, self._deck = self._deck[:n], self._deck[n:]
        self._remaining -= n
        return tuple(taken) if self.reads_cards else ()

    async def cycle(
        self, link: FramedLink, n: int, faults: Mapping[str, str | None], request: object
    ) -> None:
        if self.baccarat:
            await self._coup(link, n, faults)
            return
        if not isinstance(request, p.DealRound):
            raise TypeError(f"a shoe deals a DealRound, not {request!r}")
        round_, stacks = request.round, request.stacks
        self._load()
        await link.send(p.CardsLoaded(self.deck_size))
        await self.set_state(link, p.ShoeState.DEALING)
        await link.send(p.DealStarted(round_, stacks))
        dispensed = 0
        # each fault, resolved to the stack (its index in this round's plan) it happens at
        at = {
            name: _place((_stack_fault if name in _STACK_FAULTS else _card_fault)(name, value),
                         stacks)
            for name, value in faults.items() if name in _STACK_FAULTS | _CARD_FAULTS
        }  # fmt: skip
        for index, stack in enumerate(stacks):
            await asyncio.sleep(self.stack_time)
            if index == 1:
                self.disconnect_now(faults)
            for name, code in (("jam", p.ShoeFaultCode.JAM), ("stop", p.ShoeFaultCode.STOPPED),
                               ("door", p.ShoeFaultCode.DOOR_OPEN)):  # fmt: skip
                if name in at and at[name][0] == index:
                    log.info("sim_fault", fault=name, round=round_, before_stack=index)
                    await link.send(p.ShoeFault(round_, code, index, f"simulated {name}"))
                    await self.set_state(link, p.ShoeState.FAULT, code)
                    await asyncio.sleep(self.fault_clear_time)
                    await self.set_state(link, p.ShoeState.IDLE)
                    return
            size = stack.size
            if "short" in at and at["short"][0] == index:
                size = at["short"][1]
            if "extra" in at and at["extra"][0] == index:
                size += at["extra"][1]
            faceups = at["faceup"][1] if "faceup" in at and at["faceup"][0] == index else 0
            for total in range(1, faceups + 1):
                # A face-up card is found and set aside (555.14(b)); the stack is made up.
                shown = self._take(1)
                await link.send(p.FaceUpCard(round_, index, total, shown[0] if shown else 0))
            cards = self._take(size)
            await link.send(p.StackDispensed(round_, index, stack.target, size, cards))
            dispensed += size
        await link.send(p.DealComplete(round_, len(stacks), dispensed))
        await link.send(p.StubRemoved(round_, self._remaining))
        self.rounds_dealt += 1
        await self.set_state(link, p.ShoeState.IDLE)

    # -- baccarat ----------------------------------------------------------------------------

    async def _coup(self, link: FramedLink, n: int, faults: Mapping[str, str | None]) -> None:
        """One coup, as a dealer who knows the drawing rules draws it. The simulated dealer
        follows them on its own (a simulator may not use the rule engine, tests/test_layers.py:
        an independent implementation is what lets the engine be checked against it)."""
        if len(self._deck) < 6:  # a new shoe of `decks` decks
            deck = [card_code(rank, suit) for suit in range(4) for rank in range(1, 14)]
            self._deck = deck * self.decks
            self.rng.shuffle(self._deck)
            self._remaining = len(self._deck)
            await link.send(p.CardsLoaded(len(self._deck)))
            if "no_burn" in faults:
                log.info("sim_fault", fault="no_burn", round=n)
            else:  # 543.5(g): the first card, shown, and as many more as its value (a ten: 10)
                first = self._deck.pop(0)
                burned = min(_value(first) or 10, len(self._deck))
                del self._deck[:burned]
                self._remaining -= 1 + burned
                await link.send(p.FirstCardBurned(first, burned))
        drawn: list[int] = []

        async def draw() -> int:
            card = self._deck.pop(0)
            self._remaining -= 1
            await asyncio.sleep(self.stack_time)
            await link.send(p.CardDrawn(n, len(drawn), card))
            drawn.append(card)
            return _value(card)

        await self.set_state(link, p.ShoeState.DEALING)
        values = [await draw() for _ in range(4)]
        player, banker = (values[0] + values[2]) % 10, (values[1] + values[3]) % 10
        third: int | None = None
        if player < 8 and banker < 8:
            if player <= 5 and "skip_draw" not in faults:
                third = await draw()
            if _banker_draws(banker, third):
                await draw()
        if "extra_card" in faults:
            log.info("sim_fault", fault="extra_card", round=n)
            await draw()
        self.rounds_dealt += 1
        await self.set_state(link, p.ShoeState.IDLE)


_STACK_FAULTS = frozenset({"jam", "stop", "door"})
_CARD_FAULTS = frozenset({"short", "extra", "faceup"})


@dataclass(frozen=True, slots=True)
class _Where:
    """A stack named in a fault: its place in the dealing order (from 0) or its target."""

    index: int | None = None
    target: Target | None = None


def _stack(text: str, fault: str) -> _Where:
    word = text.strip().lower()
    if word.isdigit() and int(word) >= 1:
        return _Where(index=int(word) - 1)
    target = _BY_LETTER.get(word.upper())
    if target is None:
        try:
            target = Target.named(word)
        except ValueError:
            target = None
    if target is not None:
        return _Where(target=target)
    raise ValueError(
        f"fault {fault}: {text!r} is no stack (a place in the dealing order 1, 2, …, or "
        "seat1..seat7, dealer, dealer_extra, community)"
    )


def _stack_fault(name: str, value: str | None) -> tuple[_Where, int]:
    """jam/stop/door: VALUE is the stack it happens before (default 2: after the first)."""
    return (_stack(value, f"{name}={value}") if value else _Where(index=1)), 0


def _card_fault(name: str, value: str | None) -> tuple[_Where, int]:
    """short/extra/faceup: VALUE is K[:STACK] (STACK default 1, K for faceup default 1)."""
    count, _, where = (value or "").partition(":")
    if not count.strip().isdigit():
        if name != "faceup" or count.strip():
            raise ValueError(
                f"fault {name}={value}: K must be a whole number, e.g. {name}=4:dealer"
            )
        count = "1"
    return (_stack(where, f"{name}={value}") if where else _Where(index=0)), int(count)


def _place(fault: tuple[_Where, int], stacks: Plan) -> tuple[int, int]:
    """(index in this round's plan, K); a target the plan does not have: never (index -1)."""
    where, k = fault
    if where.index is not None:
        return where.index, k
    found = [i for i, s in enumerate(stacks) if s.target == where.target]
    return (found[0] if found else -1), k


def _value(card: int) -> int:
    rank = card & 0x0F
    return 0 if rank >= 10 else rank


def _banker_draws(banker: int, player_third: int | None) -> bool:
    if player_third is None:
        return banker <= 5
    table = {0: range(10), 1: range(10), 2: range(10), 3: (0, 1, 2, 3, 4, 5, 6, 7, 9),
             4: range(2, 8), 5: range(4, 8), 6: (6, 7)}  # fmt: skip
    return player_third in table.get(banker, ())
