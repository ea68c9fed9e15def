"""The seat acceptors of a table game progressive / bonus wager system, on one ccTalk bus.

One acceptor per betting position, each at its own ccTalk address (config: ``seats``). The
driver is the bus master. It reads each acceptor's identity, serial number, software revision
and ROM checksum at start-up; polls "read buffered credit or error codes" (header 229) at the
acceptors' polling interval; and proves from the event counter that no accepted wager was
missed: a counter that moved further than the five-event buffer is reported as lost events, a
counter back at 0 as a reset or power cycle. Master inhibit (header 228) is the lock-out.

Lock-out: "no more bets" inhibits every acceptor with one broadcast (address 0: every slave
acts, none answers), confirms seat by seat, then polls every seat once more. A wager in that
final poll was accepted before the inhibit reached its acceptor: it counts
(``wager_accepted`` with ``during_lockout``). Once the final poll is done the lock-out is in
effect, and a credit seen after it is ``wager_late`` and does not count (555.2(f)(2): an
acceptor that accepts while inhibited is itself an irregularity); a wager the inhibited
acceptor refused is ``wager_refused``.

Wire rules honoured: simple checksum; on a single-wire bus the host's own bytes come back first
and are stripped (``echo``, default true); a reply must start within ``reply_timeout_s`` and
the decoder drops a partial frame after the inter-byte gap; a request gets up to
``retries`` more tries before the seat counts as not responding.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any, ClassVar

import structlog

from tableside.drivers.base import Driver, DriverSettings, EventSink
from tableside.drivers.cctalk import events as ev
from tableside.drivers.cctalk.protocol import (
    BROADCAST,
    HOST,
    BadChecksum,
    CcTalkDecoder,
    CcTalkFrame,
    Header,
    decode_credit_buffer,
)
from tableside.drivers.cctalk.status import AcceptorBusStatus
from tableside.drivers.errors import DeviceRejected, DeviceUnavailable, LinkLost, LinkTimeout
from tableside.drivers.events import (
    ConnectionState,
    DeviceEvent,
    LineNoiseEvent,
    ProtocolErrorEvent,
)

__all__ = ["CcTalkAcceptorsDriver", "NoReply"]

log = structlog.get_logger("tableside.cctalk")

#: ccTalk error codes (result B when result A is 0) that tableside names
ERRORS = {
    1: "reject",
    2: "inhibited",
    14: "jam",  # credit sensor blocked
    20: "cos_mechanism",
    254: "return_mechanism",
    255: "unspecified_alarm",
}
INHIBITED = 2
DEFAULT_POLL_INTERVAL = 0.2
#: header 249's units byte → seconds (0 means "special": use the default)
_POLL_UNITS = {1: 0.001, 2: 0.01, 3: 1.0, 4: 60.0}


class NoReply(LinkTimeout):
    """An acceptor did not answer validly after every try."""


class _Bus:
    """Request/reply on the ccTalk bus: one transaction at a time."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        echo: bool,
        reply_timeout: float,
        retries: int,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self.echo = echo
        self.reply_timeout = reply_timeout
        self.retries = retries
        self.decoder = CcTalkDecoder()
        self.lock = asyncio.Lock()
        # Urgent requests (the lock-out) go before any routine request not yet on the wire.
        self._urgent = 0
        self._no_urgent = asyncio.Event()
        self._no_urgent.set()
        self.bad_checksums = 0
        self.echo_mismatches = 0
        self.timeouts = 0

    async def _read(self, deadline: float) -> bytes:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        async with asyncio.timeout(remaining):
            data = await self._reader.read(256)
        if not data:
            raise LinkLost("ccTalk bus: end of stream")
        return data

    async def _strip_echo(self, sent: bytes, deadline: float) -> bool:
        got = bytearray()
        while len(got) < len(sent):
            got += await self._read(deadline)
        if bytes(got[: len(sent)]) != sent:
            self.echo_mismatches += 1
            return False
        self.decoder.feed(got[len(sent) :])
        return True

    async def _reply(self, address: int, deadline: float) -> CcTalkFrame | None:
        while True:
            item = self.decoder.next_event()
            if isinstance(item, CcTalkFrame):
                if item.dest == HOST and item.source == address:
                    return item
                continue  # not for us, or not from whom we asked: ignore it
            if isinstance(item, BadChecksum):
                self.bad_checksums += 1
                continue
            try:
                self.decoder.feed(await self._read(deadline))
            except TimeoutError:
                return None

    async def request(
        self, address: int, header: int, data: bytes = b"", *, urgent: bool = False
    ) -> bytes:
        """Send and return the reply's data (b"" for a broadcast); raise NoReply or
        DeviceRejected (NAK)."""
        if not urgent:
            while self._urgent:
                await self._no_urgent.wait()
            return await self._transact(address, header, data)
        self._urgent += 1
        self._no_urgent.clear()
        try:
            return await self._transact(address, header, data)
        finally:
            self._urgent -= 1
            if not self._urgent:
                self._no_urgent.set()

    async def _transact(self, address: int, header: int, data: bytes) -> bytes:
        frame = CcTalkFrame(address, HOST, header, data).to_bytes()
        async with self.lock:
            for _ in range(1 + self.retries):
                self.decoder.reset()
                self._writer.write(frame)
                deadline = time.monotonic() + self.reply_timeout + len(frame) * 0.0011
                try:
                    if self.echo and not await self._strip_echo(frame, deadline):
                        continue
                except TimeoutError:
                    self.timeouts += 1
                    continue
                if address == BROADCAST:
                    return b""
                reply = await self._reply(address, deadline + self.reply_timeout)
                if reply is None:
                    self.timeouts += 1
                    continue
                if reply.header == Header.NAK:
                    raise DeviceRejected(f"ccTalk address {address}: header {header} NAKed")
                return reply.data
        raise NoReply(
            f"ccTalk address {address}: no valid reply to header {header} "
            f"after {1 + self.retries} tries"
        )


class CcTalkAcceptorsDriver(Driver):
    device_class: ClassVar[str] = "acceptors"
    commands: ClassVar[frozenset[str]] = frozenset({"lock_out", "release", "query_status"})

    def __init__(self, name: str, settings: DriverSettings, sink: EventSink) -> None:
        super().__init__(name, settings, sink)
        options = settings.options
        raw_seats = options.get("seats")
        if not isinstance(raw_seats, Mapping) or not raw_seats:
            raise ValueError(f"{name}: option seats must map seat numbers to ccTalk addresses")
        self.seats = {int(seat): int(addr) for seat, addr in raw_seats.items()}
        self.echo = bool(options.get("echo", True))
        self.reply_timeout = float(options.get("reply_timeout_s", 0.1))
        configured = options.get("poll_interval_s")
        #: None: poll at the interval the acceptors ask for (header 249), 0.2 s if they do not say
        self.configured_poll_interval = None if configured is None else float(configured)
        self.poll_interval = self.configured_poll_interval or DEFAULT_POLL_INTERVAL
        self._noise_reported = (0, 0)
        self._noise_at = 0.0
        self._asked: list[float] = []
        self.locked_out = False
        self.lockout_at: float | None = None
        self.lockout_effective = False
        self._counters: dict[int, int] = {}
        self._offline: set[int] = set()
        self._bus: _Bus | None = None

    def restore(self, kind: str, data: Mapping[str, Any]) -> None:
        # Locked out when the daemon stopped: still locked out when the bus comes back.
        if kind == "status" and data.get("state") == "locked_out":
            self.locked_out, self.lockout_at, self.lockout_effective = True, time.monotonic(), True

    # -- connection -------------------------------------------------------------------------

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        bus = _Bus(reader, writer, echo=self.echo, reply_timeout=self.reply_timeout,
                   retries=self.settings.arq.retries)  # fmt: skip
        self._bus = bus
        self._counters.clear()
        try:
            self._asked = []
            answered = [seat for seat in self.seats if await self._identify(bus, seat)]
            if self.configured_poll_interval is None:
                # Poll as often as the most demanding acceptor asks.
                self.poll_interval = min(self._asked, default=DEFAULT_POLL_INTERVAL)
            if not answered:
                raise LinkTimeout(f"{self.name}: no acceptor answers on the bus")
            self.connected()
            await self._apply_inhibit(bus, list(self.seats))
            self._status()
            while True:
                await self._poll_all(bus)
                await asyncio.sleep(self.poll_interval)
        finally:
            self._bus = None

    async def _identify(self, bus: _Bus, seat: int) -> bool:
        address = self.seats[seat]
        try:
            await bus.request(address, Header.SIMPLE_POLL)
            text = {
                h: (await bus.request(address, h)).decode("ascii", "replace")
                for h in (Header.REQUEST_MANUFACTURER_ID, Header.REQUEST_PRODUCT_CODE,
                          Header.REQUEST_SOFTWARE_REVISION)
            }  # fmt: skip
            serial = await bus.request(address, Header.REQUEST_SERIAL_NUMBER)
            rom = await bus.request(address, Header.CALCULATE_ROM_CHECKSUM)
            if self.configured_poll_interval is None:
                units, value = (await bus.request(address, Header.REQUEST_POLLING_PRIORITY))[:2]
                if units in _POLL_UNITS and value:
                    self._asked.append(min(2.0, max(0.02, _POLL_UNITS[units] * value)))
        except (NoReply, DeviceRejected) as exc:
            self._go_offline(seat, str(exc))
            return False
        self.emit(
            ev.AcceptorIdentity(
                device=self.name,
                seat=seat,
                address=address,
                manufacturer=text[Header.REQUEST_MANUFACTURER_ID],
                product=text[Header.REQUEST_PRODUCT_CODE],
                serial=str(int.from_bytes(serial, "little")),
                software=text[Header.REQUEST_SOFTWARE_REVISION],
                rom_checksum=rom.hex(),
            )
        )
        return True

    def _go_offline(self, seat: int, detail: str) -> None:
        if seat not in self._offline:
            self._offline.add(seat)
            self.emit(ev.AcceptorOffline(device=self.name, seat=seat, detail=detail))
            self._status()

    def _status(self) -> None:
        self.emit(
            AcceptorBusStatus(
                device=self.name,
                state="locked_out" if self.locked_out else "accepting",
                fault="acceptor_offline" if self._offline else None,
                seats_online=tuple(sorted(set(self.seats) - self._offline)),
                seats_offline=tuple(sorted(self._offline)),
            )
        )

    # -- polling ---------------------------------------------------------------------------

    async def _poll_all(self, bus: _Bus) -> None:
        for seat, address in self.seats.items():
            try:
                data = await bus.request(address, Header.READ_BUFFERED_CREDIT)
            except NoReply as exc:
                self._go_offline(seat, str(exc))
                continue
            if seat in self._offline:
                self._offline.discard(seat)
                self.emit(ev.AcceptorOnline(device=self.name, seat=seat))
                self._status()
            await self._process(bus, seat, data)
        self._report_noise(bus)
        everyone_gone = self._offline == set(self.seats)
        if everyone_gone and self.state == ConnectionState.CONNECTED:
            self._set_state(ConnectionState.STALE, "no acceptor answers")
        elif not everyone_gone and self.state == ConnectionState.STALE:
            self._set_state(ConnectionState.CONNECTED, "acceptors answer again")

    def _report_noise(self, bus: _Bus) -> None:
        """Bad checksums and garbled echoes, as a line_noise event (at most once a second)."""
        totals = (bus.bad_checksums + bus.echo_mismatches, bus.decoder.discarded_bytes)
        now = time.monotonic()
        if totals[0] == self._noise_reported[0] or now - self._noise_at < 1.0:
            return
        self._noise_reported, self._noise_at = totals, now
        self.emit(LineNoiseEvent(device=self.name, crc_errors=totals[0], discarded_bytes=totals[1]))

    async def _process(self, bus: _Bus, seat: int, data: bytes) -> None:
        try:
            counter, results = decode_credit_buffer(data)
        except ValueError as exc:
            self.emit(_protocol_error(self.name, Header.READ_BUFFERED_CREDIT, str(exc)))
            return
        last = self._counters.get(seat)
        self._counters[seat] = counter
        if last is None:
            # The first read after connecting is the baseline; what it holds is said, not lost.
            held = [results[age] for age in range(min(counter, len(results)))]
            if held:
                self.emit(
                    ev.BacklogAtStart(
                        device=self.name,
                        seat=seat,
                        event_counter=counter,
                        credits=sum(1 for a, _ in held if a),
                        errors=tuple(ERRORS.get(b, f"code_{b}") for a, b in held if not a and b),
                    )
                )
            return
        if counter == 0 and last != 0:
            self.emit(ev.CounterReset(device=self.name, seat=seat, last_counter=last))
            await self._apply_inhibit(bus, [seat])  # a reset acceptor forgets its inhibit
            return
        # The counter runs 1..255 and wraps to 1 (0 only after a reset).
        new = counter - last if counter >= last else counter + 255 - last
        if new > len(results):
            self.emit(ev.EventsLost(device=self.name, seat=seat, lost=new - len(results),
                                    from_counter=last, to_counter=counter))  # fmt: skip
            new = len(results)
        for age in reversed(range(new)):  # oldest first
            a, b = results[age]
            number = (counter - age - 1) % 255 + 1
            self._event(seat, a, b, number)

    def _event(self, seat: int, a: int, b: int, number: int) -> None:
        d = self.name
        if a:
            if not self.lockout_effective:
                during = self.lockout_at is not None
                self.emit(ev.WagerAccepted(device=d, seat=seat, credit=a, event_counter=number,
                                           during_lockout=during))  # fmt: skip
            else:
                late = (time.monotonic() - (self.lockout_at or time.monotonic())) * 1000
                self.emit(ev.WagerLate(device=d, seat=seat, credit=a, event_counter=number,
                                       after_lockout_ms=round(late, 1)))  # fmt: skip
        elif b == INHIBITED:
            self.emit(ev.WagerRefused(device=d, seat=seat, event_counter=number))
        elif b:
            error = ERRORS.get(b, f"code_{b}")
            self.emit(
                ev.AcceptorError(device=d, seat=seat, code=b, error=error, event_counter=number)
            )

    # -- lock-out ---------------------------------------------------------------------------

    async def _apply_inhibit(
        self, bus: _Bus, seats: list[int], *, urgent: bool = False
    ) -> tuple[list[int], list[int]]:
        locked = self.locked_out
        value = b"\x00" if locked else b"\x01"  # bit 0 set: accept
        confirmed, unconfirmed = [], []
        for seat in seats:
            if self.locked_out != locked:
                break  # a lock-out overtook this release (or the reverse): stop here
            try:
                await bus.request(
                    self.seats[seat], Header.MODIFY_MASTER_INHIBIT, value, urgent=urgent
                )
                confirmed.append(seat)
            except (NoReply, DeviceRejected):
                unconfirmed.append(seat)
        return confirmed, unconfirmed

    async def command(self, name: str, args: Mapping[str, Any]) -> None:
        bus = self._bus
        if name not in self.commands:
            raise self.unknown_command(name)
        if name in ("lock_out", "release") and bus is None:
            # Remember what the table wants: it is applied as soon as the bus is back.
            self.locked_out = name == "lock_out"
            self.lockout_at = time.monotonic() if self.locked_out else None
        if bus is None or self.state not in (ConnectionState.CONNECTED, ConnectionState.STALE):
            raise DeviceUnavailable(f"{self.name}: bus is {self.state.value}")
        if name == "lock_out":
            # Never waits for a release in progress: the lock-out overtakes it.
            await self.lock_out(bus)
        elif name == "release":
            self.locked_out, self.lockout_at, self.lockout_effective = False, None, False
            confirmed, _ = await self._apply_inhibit(bus, list(self.seats))
            if not self.locked_out:
                self.emit(ev.LockoutReleased(device=self.name, seats=tuple(confirmed)))
                self._status()
        else:
            self._status()

    async def lock_out(self, bus: _Bus) -> None:
        started = time.monotonic()
        self.locked_out, self.lockout_at, self.lockout_effective = True, started, False
        await bus.request(BROADCAST, Header.MODIFY_MASTER_INHIBIT, b"\x00", urgent=True)
        broadcast = time.monotonic()
        confirmed, unconfirmed = await self._apply_inhibit(bus, list(self.seats), urgent=True)
        done = time.monotonic()
        self.emit(
            ev.LockoutApplied(
                device=self.name,
                broadcast_ms=round((broadcast - started) * 1000, 2),
                confirmed_ms=round((done - started) * 1000, 2),
                seats=tuple(confirmed),
                unconfirmed=tuple(unconfirmed),
            )
        )
        # What the acceptors took before the inhibit reached them is read now, and counts;
        # from here on the lock-out is in effect.
        await self._poll_all(bus)
        if self.lockout_at == started:  # not released meanwhile
            self.lockout_effective = True
        self._status()


def _protocol_error(device: str, header: int, detail: str) -> DeviceEvent:
    return ProtocolErrorEvent(device=device, frame_type=header, reason="malformed", detail=detail)
