"""A simulated automated card shuffler: the device side of docs/protocols/shuffler.md.

Built on the same codec and link layer as the driver. Left alone it runs a shuffle cycle every
``interval`` seconds, as a dealer feeding it would; the host can also command one. Faults are
scripted per cycle number (``--fault NAME[=VALUE]@N``); see docs/simulators.md.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
from dataclasses import dataclass, field

import structlog

from tableside.drivers.cards import card_code
from tableside.drivers.errors import LinkError
from tableside.drivers.framing import NakReason
from tableside.drivers.link import ArqPolicy, FramedLink, LineNoise, Notice, ProtocolError
from tableside.drivers.shuffler import protocol as p
from tableside.simulators.faults import FaultPlan, FaultSpec

__all__ = ["FAULTS", "ShufflerSimulator", "SimIdentity"]

log = structlog.get_logger("tableside.sim.shuffler")

#: every fault this simulator can inject, with its help text
FAULTS: dict[str, str] = {
    "count": "shuffle completes with VALUE cards counted (e.g. count=51@3)",
    "jam": "the shuffler jams during the shuffle (fault JAM, no count)",
    "stop": "the shuffler stops shuffling mid-cycle (fault STOPPED)",
    "incomplete": "the shuffle cycle does not complete (fault INCOMPLETE)",
    "door": "the door is opened during the shuffle (fault DOOR_OPEN)",
    "noise": "VALUE garbage bytes (default 64) and a corrupted frame go on the line first",
    "disconnect": "the link drops mid-shuffle; a pty goes silent for VALUE s (default 10)",
}

_FAULT_CODES = {
    "jam": p.FaultCode.JAM,
    "stop": p.FaultCode.STOPPED,
    "incomplete": p.FaultCode.INCOMPLETE,
    "door": p.FaultCode.DOOR_OPEN,
}


@dataclass(frozen=True, slots=True)
class SimIdentity:
    vendor: str = "tableside"
    model: str = "SIM-SHUFFLER-1"
    serial: str = "SIM0001"
    firmware_version: str = "1.0.0"

    def message(self) -> p.Identity:
        image = f"{self.vendor}/{self.model}/{self.firmware_version}".encode()
        return p.Identity(
            self.vendor,
            self.model,
            self.serial,
            self.firmware_version,
            hashlib.sha256(image).digest(),
        )


class _Disconnect(Exception):
    """Raised inside a connection to simulate the cable being pulled."""


@dataclass
class ShufflerSimulator:
    """Device-side shuffler. ``serve(reader, writer)`` runs one connection."""

    interval: float | None = 5.0
    faults: list[FaultSpec] = field(default_factory=list)
    cards: int = 52
    identifies_cards: bool = False
    two_deck: bool = False
    shuffle_time: float = 0.2
    fault_clear_time: float = 0.5
    heartbeat: float = 1.0
    seed: int = 0
    identity: SimIdentity = field(default_factory=SimIdentity)
    #: stop cycling after this many shuffles (None: forever)
    max_shuffles: int | None = None
    #: on a pty there is no connection to drop, so "disconnect" means silence for this long
    silent_disconnect: bool = False
    policy: ArqPolicy = field(default_factory=ArqPolicy)

    def __post_init__(self) -> None:
        for fault in self.faults:
            if fault.name not in FAULTS:
                raise ValueError(
                    f"fault {fault}: the shuffler simulator has no fault {fault.name!r}"
                )
            if fault.name in ("count", "noise", "disconnect") and fault.value is not None:
                try:
                    float(fault.value) if fault.name == "disconnect" else int(fault.value)
                except ValueError:
                    raise ValueError(f"fault {fault}: VALUE must be a number") from None
            if fault.name == "count" and fault.value is None:
                raise ValueError(f"fault {fault}: count needs a value, e.g. count=51@{fault.at}")
        self.shuffles = 0  # cycles begun, across connections
        self.completed = 0
        self.connections = 0
        self._plan = FaultPlan(self.faults)
        self._rng = random.Random(self.seed)
        self._requests: asyncio.Queue[str] = asyncio.Queue()
        self._state = p.ShufflerState.IDLE
        self._fault: p.FaultCode | None = None
        self._started = time.monotonic()
        self.done = asyncio.Event()

    def faults_at(self, cycle: int) -> dict[str, str | None]:
        """The faults scripted for a cycle (name → value)."""
        return self._plan.at(cycle)

    # -- one connection ------------------------------------------------------------------

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._requests = asyncio.Queue()
        link = FramedLink(
            reader, writer, p.PROTOCOL, self._on_message, name="sim-shuffler", policy=self.policy
        )
        silence = 0.0
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(link.run(), name="sim.link")
                await link.send(self.identity.message())
                tg.create_task(self._heartbeats(link), name="sim.heartbeat")
                tg.create_task(self._answers_and_cycles(link), name="sim.cycles")
        except* _Disconnect as group:
            silence = float(str(group.exceptions[0]) or 0)
        except* LinkError as group:
            log.info("sim_link_closed", why=str(group.exceptions[0]))
        finally:
            await link.aclose()
        if silence:
            await asyncio.sleep(silence)

    def _on_message(self, message: Notice) -> NakReason | None:
        match message:
            case p.StartShuffle():
                if self._state != p.ShufflerState.IDLE:
                    return NakReason.BUSY
                self._requests.put_nowait("shuffle")
            case p.QueryStatus():
                self._requests.put_nowait("status")
            case p.QueryIdentity():
                self._requests.put_nowait("identity")
            case ProtocolError() | LineNoise():
                pass  # already NAKed or counted by the link
            case _:
                return NakReason.UNKNOWN_TYPE  # a device-to-host message sent to the device
        return None

    async def _heartbeats(self, link: FramedLink) -> None:
        while True:
            await asyncio.sleep(self.heartbeat)
            uptime = int((time.monotonic() - self._started) * 1000) & 0xFFFFFFFF
            await link.send(p.Heartbeat(uptime))

    def _status(self) -> p.Status:
        return p.Status(self._state, self._fault, self.completed)

    async def _answers_and_cycles(self, link: FramedLink) -> None:
        while True:
            try:
                async with asyncio.timeout(self.interval):
                    request = await self._requests.get()
            except TimeoutError:
                request = "shuffle"  # the dealer fed the next deck
            if request == "status":
                await link.send(self._status())
            elif request == "identity":
                await link.send(self.identity.message())
            elif self.max_shuffles is None or self.shuffles < self.max_shuffles:
                await self._cycle(link)
                if self.max_shuffles is not None and self.shuffles >= self.max_shuffles:
                    self.done.set()

    async def _set_state(
        self, link: FramedLink, state: p.ShufflerState, fault: p.FaultCode | None = None
    ) -> None:
        self._state, self._fault = state, fault
        await link.send(self._status())

    async def _cycle(self, link: FramedLink) -> None:
        self.shuffles += 1
        n = self.shuffles
        faults = self.faults_at(n)
        if "noise" in faults:
            self._noise(link, n, int(faults["noise"] or 64))
        await self._set_state(link, p.ShufflerState.SHUFFLING)
        await link.send(p.ShuffleStarted(n))
        if "disconnect" in faults:
            log.info("sim_fault", fault="disconnect", shuffle=n)
            self._state = p.ShufflerState.IDLE
            raise _Disconnect(
                str(float(faults["disconnect"] or 10)) if self.silent_disconnect else ""
            )
        await asyncio.sleep(self.shuffle_time)
        for name, code in _FAULT_CODES.items():
            if name in faults:
                log.info("sim_fault", fault=name, shuffle=n)
                await link.send(p.Fault(n, code, f"simulated {name}"))
                await self._set_state(link, p.ShufflerState.FAULT, code)
                await asyncio.sleep(self.fault_clear_time)  # the dealer clears it
                await self._set_state(link, p.ShufflerState.IDLE)
                return
        count_fault = faults.get("count")
        count = self.cards if count_fault is None else int(count_fault)
        await link.send(self._complete(n, count))
        self.completed += 1
        await self._set_state(link, p.ShufflerState.IDLE)

    def _complete(self, n: int, count: int) -> p.ShuffleComplete:
        missing: tuple[int, ...] = ()
        extra: tuple[int, ...] = ()
        if self.identifies_cards:
            deck = [card_code(rank, suit) for suit in range(4) for rank in range(1, 14)]
            if count < self.cards:
                missing = tuple(self._rng.sample(deck, min(self.cards - count, 52, 255)))
            elif count > self.cards:
                extra = tuple(self._rng.choice(deck) for _ in range(min(count - self.cards, 255)))
        deck_id = (p.Deck.A if n % 2 else p.Deck.B) if self.two_deck else p.Deck.SINGLE
        colour = {p.Deck.A: "red", p.Deck.B: "blue", p.Deck.SINGLE: ""}[deck_id]
        return p.ShuffleComplete(
            n, count, True, self.identifies_cards, deck_id, colour, missing, extra
        )

    def _noise(self, link: FramedLink, n: int, size: int) -> None:
        log.info("sim_fault", fault="noise", shuffle=n, bytes=size)
        garbage = bytes(self._rng.randrange(256) for _ in range(size))
        damaged = bytearray(p.PROTOCOL.encode(p.ShuffleStarted(n), 0).to_bytes())
        damaged[-1] ^= 0xFF
        link.write_raw(garbage + bytes(damaged))
