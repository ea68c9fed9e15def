"""What every simulator of a tableside-framed device shares: the link, identity at connect,
heartbeats, answering queries, a work loop driven by a timer or by host commands, and the
line faults (noise, disconnect). A device simulator supplies its messages and its cycle."""

from __future__ import annotations

import abc
import asyncio
import hashlib
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Generic, TypeVar

import structlog

from tableside.drivers.common import Heartbeat, Identity, QueryIdentity, QueryStatus, WireEnum
from tableside.drivers.errors import LinkError
from tableside.drivers.framing import NakReason
from tableside.drivers.link import (
    ArqPolicy,
    Flooding,
    FramedLink,
    LineNoise,
    Notice,
    ProtocolError,
)
from tableside.drivers.messages import Message, MessageSet
from tableside.errors import WireError
from tableside.simulators.faults import FaultPlan, FaultSpec

__all__ = [
    "LINE_FAULTS",
    "FramedSimulator",
    "SimIdentity",
    "SimulatedDisconnect",
    "StatefulSimulator",
]

log = structlog.get_logger("tableside.sim")

#: faults of the line itself, which every simulator offers
LINE_FAULTS: dict[str, str] = {
    "noise": "VALUE garbage bytes (default 64) and a corrupted frame go on the line first",
    "disconnect": "the link drops mid-cycle; a pty goes silent for VALUE s (default 10)",
    "flood": "valid Status frames back to back for VALUE s (default 10), none waiting for its ACK",
}


@dataclass(frozen=True, slots=True)
class SimIdentity:
    vendor: str = "tableside"
    model: str = "SIM-1"
    serial: str = "SIM0001"
    firmware_version: str = "1.0.0"

    def message(self) -> Identity:
        image = f"{self.vendor}/{self.model}/{self.firmware_version}".encode()
        return Identity(
            self.vendor,
            self.model,
            self.serial,
            self.firmware_version,
            hashlib.sha256(image).digest(),
        )


class SimulatedDisconnect(WireError):
    """Raised inside a connection to simulate the cable being pulled; args[0] = silence (s)."""


@dataclass
class FramedSimulator(abc.ABC):
    """Device-side peer. ``serve(reader, writer)`` runs one connection."""

    #: the device's own faults (name → help); LINE_FAULTS are added
    FAULTS: ClassVar[Mapping[str, str]] = {}
    #: faults whose VALUE must be an integer
    INT_VALUES: ClassVar[frozenset[str]] = frozenset()
    #: faults that need a VALUE
    NEED_VALUE: ClassVar[frozenset[str]] = frozenset()
    protocol: ClassVar[MessageSet]
    #: the model name a simulator reports unless told otherwise
    MODEL: ClassVar[str] = "SIM-1"

    #: seconds between cycles when nobody commands one (None: only on command)
    interval: float | None = 5.0
    faults: list[FaultSpec] = field(default_factory=list)
    heartbeat: float = 1.0
    seed: int = 0
    #: who the device says it is (default: vendor "tableside", model MODEL)
    identity: SimIdentity | None = None
    #: stop cycling after this many cycles (None: forever)
    max_cycles: int | None = None
    #: on a pty there is no connection to drop, so "disconnect" means silence for a while
    silent_disconnect: bool = False
    policy: ArqPolicy = field(default_factory=ArqPolicy)

    def check_fault_value(self, fault: FaultSpec) -> None:
        """Raise ValueError when a fault's VALUE is not what the fault takes (default: a number;
        an integer for INT_VALUES)."""
        try:
            int(fault.value or "") if fault.name in self.INT_VALUES | {"noise"} else float(
                fault.value or ""
            )
        except ValueError:
            raise ValueError(f"fault {fault}: VALUE must be a number") from None

    def __post_init__(self) -> None:
        known = {**self.FAULTS, **LINE_FAULTS}
        for fault in self.faults:
            if fault.name not in known:
                raise ValueError(
                    f"fault {fault}: this simulator has no fault {fault.name!r} "
                    f"(known: {', '.join(known)})"
                )
            if fault.name in self.NEED_VALUE and fault.value is None:
                raise ValueError(
                    f"fault {fault}: {fault.name} needs a value, e.g. {fault.name}=1@{fault.at}"
                )
            if fault.value is not None:
                self.check_fault_value(fault)
        if self.identity is None:
            self.identity = SimIdentity(model=self.MODEL)
        self.cycles = 0  # cycles begun, across connections
        self.flooded = 0  # frames sent by the last "flood" fault
        self._flooding = False
        self.connections = 0
        self._plan = FaultPlan(self.faults)
        self.rng = random.Random(self.seed)
        #: work accepted from the host (ACKed), kept across its connections until it is done
        self.requests: asyncio.Queue[tuple[str, object]] = asyncio.Queue()
        self._started = time.monotonic()
        self.done = asyncio.Event()

    # -- what a device supplies ------------------------------------------------------------

    @abc.abstractmethod
    def status(self) -> Message:
        """The device's Status message as things stand."""

    @abc.abstractmethod
    async def cycle(
        self, link: FramedLink, n: int, faults: Mapping[str, str | None], request: object
    ) -> None:
        """One unit of work (a shuffle, a deal, …), with the faults scripted for it."""

    def on_command(self, message: Message) -> NakReason | None:
        """A host command other than the queries: queue work (``self.requests``) or refuse."""
        return NakReason.UNKNOWN_TYPE

    async def on_request(self, link: FramedLink, kind: str, request: object) -> None:
        """Work queued by ``on_command`` under a kind of its own (not a numbered cycle)."""
        raise ValueError(f"{type(self).__name__}: no such request {kind!r}")

    def default_request(self) -> object:
        """What a timer-driven cycle gets as its request."""
        return None

    async def on_link_up(self, link: FramedLink) -> None:  # noqa: B027  # optional hook
        """After Identity is sent at connect (default: nothing more)."""

    # -- shared machinery ------------------------------------------------------------------

    def who(self) -> SimIdentity:
        assert self.identity is not None  # set in __post_init__
        return self.identity

    def faults_at(self, cycle: int) -> dict[str, str | None]:
        return self._plan.at(cycle)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        # Not a fresh queue: a command the device ACKed was accepted (docs/protocols/: "arrived
        # intact and was accepted") and is carried out, even when the link it came on broke
        # before the work began (a pty's link restarting as the host comes up lost a
        # StartShuffle the host had been told was taken).
        link = FramedLink(
            reader, writer, self.protocol, self._on_message, name=f"sim-{self.protocol.name}",
            policy=self.policy,
        )  # fmt: skip
        silence = 0.0
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(link.run(), name="sim.link")
                await link.send(self.who().message())
                await self.on_link_up(link)
                tg.create_task(self._heartbeats(link), name="sim.heartbeat")
                tg.create_task(self._work(link), name="sim.work")
        except* SimulatedDisconnect as group:
            silence = float(group.exceptions[0].args[0])
        except* LinkError as group:
            log.info("sim_link_closed", why=str(group.exceptions[0]))
        finally:
            await link.aclose()
        if silence:
            await asyncio.sleep(silence)

    def _on_message(self, message: Notice) -> NakReason | None:
        match message:
            case QueryStatus():
                self.requests.put_nowait(("status", None))
            case QueryIdentity():
                self.requests.put_nowait(("identity", None))
            case ProtocolError() | LineNoise() | Flooding():
                pass  # already NAKed or counted by the link (a simulator has no budget)
            case _:
                return self.on_command(message)
        return None

    async def _heartbeats(self, link: FramedLink) -> None:
        while True:
            await asyncio.sleep(self.heartbeat)
            if self._flooding:
                continue
            uptime = int((time.monotonic() - self._started) * 1000) & 0xFFFFFFFF
            await link.send(Heartbeat(uptime))

    async def _work(self, link: FramedLink) -> None:
        while True:
            try:
                async with asyncio.timeout(self.interval):
                    kind, request = await self.requests.get()
            except TimeoutError:
                kind, request = "cycle", self.default_request()  # the dealer's doing
            if kind == "status":
                await link.send(self.status())
            elif kind == "identity":
                await link.send(self.who().message())
            elif kind != "cycle":
                await self.on_request(link, kind, request)
            elif self.max_cycles is None or self.cycles < self.max_cycles:
                self.cycles += 1
                faults = self.faults_at(self.cycles)
                if "noise" in faults:
                    self.noise(link, int(faults["noise"] or 64))
                if "flood" in faults:
                    await self.flood(link, float(faults["flood"] or 10))
                await self.cycle(link, self.cycles, faults, request)
                if self.max_cycles is not None and self.cycles >= self.max_cycles:
                    self.done.set()

    def disconnect_now(self, faults: Mapping[str, str | None]) -> None:
        """Call where the device's cycle should be cut off by a ``disconnect`` fault."""
        if "disconnect" in faults:
            log.info("sim_fault", fault="disconnect", cycle=self.cycles)
            silence = float(faults["disconnect"] or 10) if self.silent_disconnect else 0.0
            raise SimulatedDisconnect(silence)

    async def flood(self, link: FramedLink, seconds: float) -> None:
        """Valid frames as fast as the line takes them, each a Status (an event to the host),
        none waiting for its ACK: a device that ignores stop-and-wait and floods the host."""
        log.info("sim_fault", fault="flood", cycle=self.cycles, seconds=seconds)
        self.flooded = 0
        self._flooding = True  # the flood is its sign of life: no heartbeat lost among it
        end = time.monotonic() + seconds
        try:
            while time.monotonic() < end:
                # seq 128..255: clear of the link's own sends, which count from 0 here
                frame = self.protocol.encode(self.status(), 0x80 | (self.flooded & 0x7F))
                link.write_raw(frame.to_bytes())
                self.flooded += 1
                await link.drain()
                await asyncio.sleep(0)  # the link's reader goes on
        finally:
            self._flooding = False

    def noise(self, link: FramedLink, size: int) -> None:
        log.info("sim_fault", fault="noise", cycle=self.cycles, bytes=size)
        garbage = bytes(self.rng.randrange(256) for _ in range(size))
        damaged = bytearray(self.protocol.encode(Heartbeat(0), 0).to_bytes())
        damaged[-1] ^= 0xFF
        link.write_raw(garbage + bytes(damaged))


_State = TypeVar("_State", bound=WireEnum)
_Fault = TypeVar("_Fault", bound=WireEnum)


class StatefulSimulator(FramedSimulator, Generic[_State, _Fault]):
    """A device whose Status message says its state and its fault, each a code of its protocol
    (the shuffler, the shoe, the card reader)."""

    _state: _State
    _fault: _Fault | None

    async def set_state(self, link: FramedLink, state: _State, fault: _Fault | None = None) -> None:
        """Change the device's state (and fault) and say so with its Status message."""
        self._state, self._fault = state, fault
        await link.send(self.status())
