"""A simulated automated card shuffler: the device side of docs/protocols/shuffler.md.

Left alone it runs a shuffle cycle every ``interval`` seconds, as a dealer feeding it would;
the host can also command one. Faults are scripted per cycle (``--fault NAME[=VALUE]@N``);
see docs/simulators.md. With ``shuffle`` (``--shuffle shelf:10``: a model of shuffle/models.py)
it shuffles a real deck as that machine would and recognises its cards: after each complete
cycle it reports the order it made and the order it was fed (ShuffleOrder), the deck it is fed
next being the one it made (dealt and gathered in order).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import structlog

from tableside.drivers.cards import card_code
from tableside.drivers.errors import DeviceRejected
from tableside.drivers.framing import NakReason
from tableside.drivers.link import FramedLink
from tableside.drivers.messages import Message, MessageSet
from tableside.drivers.shuffler import protocol as p
from tableside.shuffle.deck import new_deck
from tableside.shuffle.models import Model, parse_shuffle
from tableside.simulators.base import LINE_FAULTS, SimIdentity, StatefulSimulator

__all__ = ["FAULTS", "ShufflerSimulator", "SimIdentity"]

log = structlog.get_logger("tableside.sim.shuffler")

_OWN_FAULTS: dict[str, str] = {
    "count": "shuffle completes with VALUE cards counted (e.g. count=51@3)",
    "jam": "the shuffler jams during the shuffle (fault JAM, no count)",
    "stop": "the shuffler stops shuffling mid-cycle (fault STOPPED)",
    "incomplete": "the shuffle cycle does not complete (fault INCOMPLETE)",
    "door": "the door is opened during the shuffle (fault DOOR_OPEN)",
}
#: every fault this simulator can inject, with its help text
FAULTS: dict[str, str] = {**_OWN_FAULTS, **LINE_FAULTS}

_FAULT_CODES = {
    "jam": p.FaultCode.JAM,
    "stop": p.FaultCode.STOPPED,
    "incomplete": p.FaultCode.INCOMPLETE,
    "door": p.FaultCode.DOOR_OPEN,
}


@dataclass
class ShufflerSimulator(StatefulSimulator[p.ShufflerState, p.FaultCode]):
    """Device-side shuffler."""

    FAULTS: ClassVar[Mapping[str, str]] = _OWN_FAULTS
    INT_VALUES: ClassVar[frozenset[str]] = frozenset({"count"})
    NEED_VALUE: ClassVar[frozenset[str]] = frozenset({"count"})
    protocol: ClassVar[MessageSet] = p.PROTOCOL

    MODEL: ClassVar[str] = "SIM-SHUFFLER-1"
    cards: int = 52
    identifies_cards: bool = False
    two_deck: bool = False
    shuffle_time: float = 0.2
    fault_clear_time: float = 0.5
    #: how it shuffles, when it recognises cards (``fair``, ``riffle:7``, ``shelf:10``,
    #: ``rig:keep=3/10``: shuffle/models.py); None: it sends no ShuffleOrder
    shuffle: str | None = None
    #: the shuffles' own seed (``--set shuffle_seed=7``: they repeat); None: the OS's CSPRNG,
    #: as a real machine's random source (``seed`` drives the rest of the simulator)
    shuffle_seed: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self.completed = 0
        self._state = p.ShufflerState.IDLE
        self._fault = None
        self.model: Model | None = None
        if self.shuffle is not None:
            if self.cards != 52:
                raise ValueError(f"shuffle {self.shuffle!r}: a model shuffles one 52-card deck "
                                 f"(cards is {self.cards})")  # fmt: skip
            self.model = parse_shuffle(self.shuffle)
        self._shuffling = (
            random.SystemRandom() if self.shuffle_seed is None else random.Random(self.shuffle_seed)
        )
        #: each deck's order as it will be fed next
        self.decks: dict[p.Deck, tuple[int, ...]] = {}
        #: ShuffleOrders the host acknowledged
        self.orders_sent = 0
        #: the link whose host NAKed a ShuffleOrder (docs/protocols/shuffler.md): it gets no more
        self._refused_by: FramedLink | None = None

    @property
    def shuffles(self) -> int:
        """Shuffle cycles begun, across connections."""
        return self.cycles

    def on_command(self, message: Message) -> NakReason | None:
        if not isinstance(message, p.StartShuffle):
            return NakReason.UNKNOWN_TYPE  # e.g. a device-to-host message sent to the device
        if self._state != p.ShufflerState.IDLE:
            return NakReason.BUSY
        self.requests.put_nowait(("cycle", None))
        return None

    def status(self) -> p.Status:
        return p.Status(self._state, self._fault, self.completed)

    async def cycle(
        self, link: FramedLink, n: int, faults: Mapping[str, str | None], request: object
    ) -> None:
        await self.set_state(link, p.ShufflerState.SHUFFLING)
        await link.send(p.ShuffleStarted(n))
        self._state = p.ShufflerState.IDLE  # if the cable is pulled now, it comes back idle
        self.disconnect_now(faults)
        self._state = p.ShufflerState.SHUFFLING
        await asyncio.sleep(self.shuffle_time)
        for name, code in _FAULT_CODES.items():
            if name in faults:
                log.info("sim_fault", fault=name, shuffle=n)
                await link.send(p.Fault(n, code, f"simulated {name}"))
                await self.set_state(link, p.ShufflerState.FAULT, code)
                await asyncio.sleep(self.fault_clear_time)  # the dealer clears it
                await self.set_state(link, p.ShufflerState.IDLE)
                return
        count_fault = faults.get("count")
        count = self.cards if count_fault is None else int(count_fault)
        complete = self._complete(n, count)
        await link.send(complete)
        if self.model is not None and count == self.cards:
            fed = self.decks.get(complete.deck, new_deck())
            made = self.model.shuffle(fed, self._shuffling)
            self.decks[complete.deck] = made
            if link is not self._refused_by:
                try:
                    await link.send(p.ShuffleOrder(n, made, fed, complete.deck))
                    self.orders_sent += 1  # acknowledged: the host has it
                except DeviceRejected as exc:  # a host without recognition: none again on it
                    self._refused_by = link
                    log.info("sim_orders_refused", shuffle=n, why=str(exc))
        self.completed += 1
        await self.set_state(link, p.ShufflerState.IDLE)

    def _complete(self, n: int, count: int) -> p.ShuffleComplete:
        missing: tuple[int, ...] = ()
        extra: tuple[int, ...] = ()
        if self.identifies_cards:
            deck = [card_code(rank, suit) for suit in range(4) for rank in range(1, 14)]
            if count < self.cards:
                missing = tuple(self.rng.sample(deck, min(self.cards - count, 52, 255)))
            elif count > self.cards:
                extra = tuple(self.rng.choice(deck) for _ in range(min(count - self.cards, 255)))
        deck_id = (p.Deck.A if n % 2 else p.Deck.B) if self.two_deck else p.Deck.SINGLE
        colour = {p.Deck.A: "red", p.Deck.B: "blue", p.Deck.SINGLE: ""}[deck_id]
        return p.ShuffleComplete(
            n, count, True, self.identifies_cards, deck_id, colour, missing, extra
        )
