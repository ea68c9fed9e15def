"""A simulated table game progressive / bonus wager system: a ccTalk bus of seat acceptors and
the dealer's control device, sharing one table.

Each round (every ``interval`` seconds, the control device's cycle): the dealer opens betting,
the players in ``players`` put a $1 wager in their seat's acceptor at moments spread over
``betting_time``, then the dealer presses "no more bets". The daemon answers that with the
lock-out; what an acceptor does with a wager depends on whether the inhibit has reached it.

The bus simulator keeps ccTalk's line timing: every byte takes 10 bit times at ``baud`` (9600
by default) to cross the wire, requests are echoed on the single wire, and a reply starts a
couple of milliseconds after its request ends.

Faults are ``NAME[=ROUND]@SEAT`` (round 1 when not given):
jam, late_wager, ignore_inhibit, no_reply, absent, busy, clears_inhibits, power_cycle,
bad_checksum (acceptors); stuck_light (the control device's lamp for that seat does not change).
``CcTalkBusSimulator.cut(seconds)`` takes the whole bus off the line for a while (the host's
connection is dropped and new ones are closed at once), as a pulled cable does.
"""

from __future__ import annotations

import asyncio
import collections
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar, TypedDict, Unpack

import structlog

from tableside.drivers.cctalk.protocol import (
    BROADCAST,
    HOST,
    CcTalkDecoder,
    CcTalkFrame,
    Header,
)
from tableside.drivers.framing import NakReason
from tableside.drivers.link import ArqPolicy, FramedLink
from tableside.drivers.messages import Message, MessageSet
from tableside.drivers.progressive import protocol as p
from tableside.simulators.base import FramedSimulator, SimIdentity
from tableside.simulators.faults import FaultSpec, parse_fault

__all__ = [
    "FAULTS",
    "CcTalkBusSimulator",
    "ControllerSettings",
    "ProgressiveControllerSimulator",
    "SimAcceptor",
    "progressive_table",
]

log = structlog.get_logger("tableside.sim.progressive")

FAULTS: dict[str, str] = {
    "jam": "the seat's acceptor jams (credit sensor blocked) in round VALUE",
    "late_wager": "a wager goes into the seat's acceptor after no more bets (it must be refused)",
    "ignore_inhibit": "the seat's acceptor keeps accepting while inhibited (a broken lock-out)",
    "no_reply": "the seat's acceptor stops answering for round VALUE",
    "absent": "no acceptor at the seat's address, from the start (VALUE ignored)",
    "busy": "the seat's acceptor answers its master inhibit (228, 227) with BUSY (header 6) "
    "from round VALUE on",
    "clears_inhibits": "the seat's acceptor inhibits every coin (header 231) when it is reset or "
    "power-cycled, as some do; with power_cycle, its wagers are then refused",
    "power_cycle": "the seat's acceptor loses power at the start of round VALUE",
    "bad_checksum": "the seat's acceptor's next reply in round VALUE has a bad checksum",
    "stuck_light": "the control device's lamp for the seat does not change from round VALUE on",
}


@dataclass
class SimAcceptor:
    """One ccTalk coin/token acceptor at a betting position."""

    seat: int
    address: int
    serial: int
    counter: int = 0
    accepting: bool = False  # master inhibit after power-up: inhibited
    jammed: bool = False
    ignores_inhibit: bool = False
    silent: bool = False
    busy: bool = False
    corrupt_next: bool = False
    #: header 231, coins 1..16: bit set = enabled. Kept across a reset unless clears_inhibits.
    coins: int = 0xFFFF
    clears_inhibits: bool = False
    buffer: collections.deque[tuple[int, int]] = field(
        default_factory=lambda: collections.deque([(0, 0)] * 5, maxlen=5)
    )

    def _event(self, a: int, b: int) -> None:
        self.counter = self.counter % 255 + 1
        self.buffer.appendleft((a, b))

    def insert_wager(self) -> str:
        if self.jammed:
            self._event(0, 14)
            return "jam"
        if (not self.accepting or not self.coins & 1) and not self.ignores_inhibit:
            self._event(0, 2)  # ccTalk error 2: inhibited coin
            return "refused"
        self._event(1, 0)
        return "accepted"

    def power_cycle(self) -> None:
        self.counter = 0
        self.accepting = False
        self.buffer.extend([(0, 0)] * 5)
        if self.clears_inhibits:
            self.coins = 0

    def answer(self, frame: CcTalkFrame) -> bytes | None:
        h, data = frame.header, frame.data
        reply: bytes | None = b""
        if h == Header.SIMPLE_POLL or h == Header.RESET_DEVICE:
            if h == Header.RESET_DEVICE:
                self.power_cycle()
        elif h == Header.REQUEST_MANUFACTURER_ID:
            reply = b"TBS"
        elif h == Header.REQUEST_EQUIPMENT_CATEGORY:
            reply = b"Coin Acceptor"
        elif h == Header.REQUEST_PRODUCT_CODE:
            reply = b"SIM-ACCEPTOR"
        elif h == Header.REQUEST_SERIAL_NUMBER:
            reply = self.serial.to_bytes(3, "little")
        elif h == Header.REQUEST_SOFTWARE_REVISION:
            reply = b"1.0"
        elif h == Header.CALCULATE_ROM_CHECKSUM:
            reply = (0x5EA70000 + self.seat).to_bytes(4, "big")
        elif h == Header.REQUEST_POLLING_PRIORITY:
            reply = bytes((2, 20))  # units of 10 ms: poll every 200 ms
        elif h == Header.READ_BUFFERED_CREDIT:
            reply = bytes((self.counter,)) + bytes(b for pair in self.buffer for b in pair)
        elif h == Header.MODIFY_MASTER_INHIBIT and len(data) == 1:
            self.accepting = bool(data[0] & 1)
        elif h == Header.REQUEST_MASTER_INHIBIT:
            reply = bytes((int(self.accepting),))
        elif h == Header.MODIFY_INHIBIT_STATUS and len(data) == 2:
            self.coins = int.from_bytes(data, "little")
        else:
            return None  # NAK
        return reply


class CcTalkBusSimulator:
    """The single-wire ccTalk bus with its acceptors; ``serve`` is one host connection."""

    def __init__(self, seats: Mapping[int, int], *, baud: int = 9600, echo: bool = True) -> None:
        self.acceptors = {
            addr: SimAcceptor(seat, addr, serial=100_000 + seat) for seat, addr in seats.items()
        }
        self.by_seat = {a.seat: a for a in self.acceptors.values()}
        self.byte_time = 10 / baud
        self.echo = echo
        self.inhibited_at: dict[int, float] = {}  # seat → when its inhibit took effect
        #: when the last broadcast master inhibit had crossed the wire
        self.broadcast_at: float | None = None
        self._line_free = 0.0
        self._down_until = 0.0
        self._connections: set[asyncio.StreamWriter] = set()

    def cut(self, seconds: float) -> None:
        """Off the line for ``seconds``: the host's connection drops, new ones close at once."""
        self._down_until = time.monotonic() + seconds
        for writer in self._connections:
            writer.close()

    async def _on_wire(self, n: int) -> None:
        """Wait while n bytes cross the wire (after whatever is on it already)."""
        start = max(time.monotonic(), self._line_free)
        self._line_free = start + n * self.byte_time
        await asyncio.sleep(max(0.0, self._line_free - time.monotonic()))

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if time.monotonic() < self._down_until:
            writer.close()
            return
        self._connections.add(writer)
        try:
            await self._serve(reader, writer)
        finally:
            self._connections.discard(writer)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = CcTalkDecoder()
        while True:
            try:
                async with asyncio.timeout(0.05 if decoder.buffered else None):
                    data = await reader.read(256)
            except TimeoutError:
                decoder.reset()  # the inter-byte gap ends a partial message
                continue
            if not data:
                return
            decoder.feed(data)
            while isinstance(frame := decoder.next_event(), CcTalkFrame):
                raw = frame.to_bytes()
                await self._on_wire(len(raw))
                if self.echo:
                    writer.write(raw)  # the host hears its own bytes on the single wire
                reply = self._dispatch(frame)
                if reply is not None:
                    await asyncio.sleep(0.002)  # the acceptor's response delay
                    await self._on_wire(len(reply))
                    writer.write(reply)
                await writer.drain()

    def _dispatch(self, frame: CcTalkFrame) -> bytes | None:
        if frame.source != HOST:
            return None
        targets = (
            list(self.acceptors.values()) if frame.dest == BROADCAST
            else [self.acceptors[frame.dest]] if frame.dest in self.acceptors else []
        )  # fmt: skip
        reply = None
        if frame.dest == BROADCAST and frame.header == Header.MODIFY_MASTER_INHIBIT:
            self.broadcast_at = time.monotonic()
        for acc in targets:
            if acc.silent:
                continue
            answer: bytes | None
            if acc.busy and frame.header in (
                Header.MODIFY_MASTER_INHIBIT,
                Header.REQUEST_MASTER_INHIBIT,
            ):
                if frame.dest == BROADCAST:
                    continue  # busy: it does not act on it
                answer, header = b"", Header.BUSY
            else:
                answer = acc.answer(frame)
                header = Header.NAK if answer is None else Header.ACK
            if frame.header == Header.MODIFY_MASTER_INHIBIT and not acc.accepting:
                self.inhibited_at.setdefault(acc.seat, time.monotonic())
            if frame.header == Header.MODIFY_MASTER_INHIBIT and acc.accepting:
                self.inhibited_at.pop(acc.seat, None)
            if frame.dest == BROADCAST:
                continue  # a broadcast gets no reply
            raw = bytearray(CcTalkFrame(HOST, acc.address, header, answer or b"").to_bytes())
            if acc.corrupt_next:
                acc.corrupt_next = False
                raw[-1] ^= 0x5A
            reply = bytes(raw)
        return reply


@dataclass
class ProgressiveControllerSimulator(FramedSimulator):
    """The dealer's control device; each cycle is a betting round on the shared bus."""

    FAULTS: ClassVar[Mapping[str, str]] = {}  # its faults are seat faults (progressive_table)
    MODEL: ClassVar[str] = "SIM-PROGRESSIVE-1"
    protocol: ClassVar[MessageSet] = p.PROTOCOL

    bus: CcTalkBusSimulator | None = None
    players: tuple[int, ...] = (1, 2, 3)
    betting_time: float = 0.4
    #: how long after "no more bets" a late wager comes (after the lock-out has taken effect)
    late_wager_delay: float = 0.25
    seat_faults: list[FaultSpec] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.locked = False
        self.lights = 0
        self.stuck: set[int] = set()
        self.meter = 0
        self.no_more_bets_at: float | None = None
        self.rounds_played = 0
        self.wagers: list[tuple[int, int, str]] = []  # (round, seat, what the acceptor did)
        self.rng = random.Random(self.seed)
        #: seats with no acceptor on the bus (fault absent@SEAT), from the start
        self.absent = {f.at for f in self.seat_faults if f.name == "absent"}
        if self.bus is not None:
            for seat in self.absent:
                self.bus.by_seat[seat].silent = True

    def status(self) -> p.ControllerStatus:
        return p.ControllerStatus(self.locked, self.lights, False, False, self.meter)

    def on_command(self, message: Message) -> NakReason | None:
        if isinstance(message, p.SetLights):
            self.requests.put_nowait(("lights", message.lights))
        elif isinstance(message, p.SetMeter):
            self.meter = message.cents
        else:
            return NakReason.UNKNOWN_TYPE
        return None

    async def on_request(self, link: FramedLink, kind: str, request: object) -> None:
        if kind != "lights":
            await super().on_request(link, kind, request)
            return
        if not isinstance(request, int):
            raise TypeError(f"lights: SetLights' lamps (a bit a seat), not {request!r}")
        keep = sum(1 << (s - 1) for s in self.stuck)
        self.lights = (request & ~keep) | (self.lights & keep)
        await link.send(p.LightsState(self.lights))

    def _seat_faults(self, round_: int) -> dict[str, set[int]]:
        out: dict[str, set[int]] = {}
        for f in self.seat_faults:
            if int(f.value or 1) == round_:
                out.setdefault(f.name, set()).add(f.at)
        return out

    async def cycle(
        self, link: FramedLink, n: int, faults: Mapping[str, str | None], request: object
    ) -> None:
        bus = self.bus
        assert bus is not None, "a progressive controller needs its bus"
        seat_faults = self._seat_faults(n)
        for seat, acc in bus.by_seat.items():
            acc.jammed = seat in seat_faults.get("jam", ())
            acc.ignores_inhibit = seat in seat_faults.get("ignore_inhibit", ())
            acc.silent = seat in seat_faults.get("no_reply", ()) or seat in self.absent
            acc.busy = acc.busy or seat in seat_faults.get("busy", ())
            acc.clears_inhibits = acc.clears_inhibits or seat in seat_faults.get(
                "clears_inhibits", ()
            )
            acc.corrupt_next = seat in seat_faults.get("bad_checksum", ())
            if seat in seat_faults.get("power_cycle", ()):
                log.info("sim_fault", fault="power_cycle", seat=seat, round=n)
                acc.power_cycle()
        self.stuck |= seat_faults.get("stuck_light", set())
        self.locked = False
        await link.send(p.ButtonPressed(p.Button.BETS_OPEN))
        self.disconnect_now(faults)
        await link.send(self.status())
        await asyncio.sleep(0.05)  # the host releases the lock-out
        moments = sorted((self.rng.uniform(0.05, self.betting_time), seat) for seat in self.players)
        started = time.monotonic()
        for moment, seat in moments:
            await asyncio.sleep(max(0.0, started + moment - time.monotonic()))
            if seat in bus.by_seat:
                self.wagers.append((n, seat, bus.by_seat[seat].insert_wager()))
        await asyncio.sleep(max(0.0, started + self.betting_time - time.monotonic()))
        self.locked = True
        self.no_more_bets_at = time.monotonic()
        await link.send(p.ButtonPressed(p.Button.NO_MORE_BETS))
        for seat in sorted(
            seat_faults.get("late_wager", set()) | seat_faults.get("ignore_inhibit", set())
        ):
            await asyncio.sleep(self.late_wager_delay)
            what = bus.by_seat[seat].insert_wager()
            log.info("sim_fault", fault="late_wager", seat=seat, round=n, acceptor=what)
            self.wagers.append((n, seat, f"late:{what}"))
        await link.send(self.status())
        self.rounds_played += 1


class ControllerSettings(TypedDict, total=False):
    """The control device's own settings (``ProgressiveControllerSimulator``'s fields but its
    bus and faults, which ``progressive_table`` makes; tests/test_progressive.py ties them)."""

    interval: float | None
    heartbeat: float
    seed: int
    identity: SimIdentity | None
    max_cycles: int | None
    silent_disconnect: bool
    policy: ArqPolicy
    players: tuple[int, ...]
    betting_time: float
    late_wager_delay: float


def progressive_table(
    seats: Mapping[int, int],
    faults: list[str],
    *,
    baud: int = 9600,
    echo: bool = True,
    **controller: Unpack[ControllerSettings],
) -> tuple[ProgressiveControllerSimulator, CcTalkBusSimulator]:
    """The control device and the acceptor bus of one table; faults as ``NAME[=ROUND]@SEAT``."""
    bus = CcTalkBusSimulator(seats, baud=baud, echo=echo)
    line = [f for f in faults if f.split("@")[0].split("=")[0] in ("noise", "disconnect")]
    seat_faults = [parse_fault(f, FAULTS) for f in faults if f not in line]
    for fault in seat_faults:
        if fault.at not in bus.by_seat:
            raise ValueError(
                f"fault {fault}: no acceptor at seat {fault.at} (seats: {sorted(bus.by_seat)})"
            )
        if fault.value is not None and not fault.value.isdigit():
            raise ValueError(f"fault {fault}: VALUE is the round number, e.g. jam=2@{fault.at}")
    sim = ProgressiveControllerSimulator(
        bus=bus,
        seat_faults=seat_faults,
        faults=[parse_fault(f, {"noise": "", "disconnect": ""}) for f in line],
        **controller,
    )
    return sim, bus
