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
import contextlib
import enum
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated, ClassVar

import structlog
from pydantic import Field, Strict, field_validator

from tableside.drivers.base import Driver, DriverOptions, DriverSettings, EventSink
from tableside.drivers.cctalk import events as ev
from tableside.drivers.cctalk.book import SeatBook
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
from tableside.drivers.commands import LOCK_OUT, QUERY_STATUS, RELEASE, Args, names
from tableside.drivers.errors import (
    DeviceRejected,
    DeviceUnavailable,
    LinkLost,
    LinkTimeout,
    TablesideDriverError,
)
from tableside.drivers.events import (
    ConnectionState,
    DeviceEvent,
    LineNoiseEvent,
    ProtocolErrorEvent,
)

__all__ = ["AcceptorBusOptions", "AcceptorBusy", "CcTalkAcceptorsDriver", "NoReply"]

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
#: how long the lock-out (or a release) keeps trying a seat that does not confirm its inhibit
#: before it publishes the failure (and goes on trying at every poll)
LOCKOUT_BUDGET_S = 1.0
#: pause between rounds of tries at seats that did not confirm (a BUSY acceptor needs a moment)
CONFIRM_RETRY_S = 0.02
#: header 231's two bytes: every coin (credit) 1..16 enabled (bit set: enabled)
COINS_ENABLED = b"\xff\xff"
#: header 249's units byte → seconds (0 means "special": use the default)
_POLL_UNITS = {1: 0.001, 2: 0.01, 3: 1.0, 4: 60.0}


class LockPhase(enum.Enum):
    """Where the acceptors' lock-out stands (555.2(f)(2), 559.2(f))."""

    OPEN = "open"  # betting open: no lock-out held
    ASKED = "asked"  # "no more bets" asked: the inhibits going out, the last polls not read
    EFFECTIVE = "effective"  # every seat inhibited and read once after it: in effect


@dataclass(frozen=True, slots=True)
class LockOut:
    """The lock-out as one state: its phase and when the table asked for it (the identity a
    lock-out in progress checks to see it was not released, or asked again, meanwhile)."""

    phase: LockPhase = LockPhase.OPEN
    asked_at: float | None = None

    @property
    def locked(self) -> bool:
        return self.phase is not LockPhase.OPEN

    @property
    def effective(self) -> bool:
        return self.phase is LockPhase.EFFECTIVE


class NoReply(LinkTimeout):
    """An acceptor did not answer validly after every try."""


class AcceptorBusy(DeviceRejected):
    """The acceptor answered BUSY (ccTalk header 6): it did not act on the request."""


class Overtaken(TablesideDriverError):
    """A request no longer wanted before it went out (a release overtaken by a lock-out)."""


class _Cut:
    """A routine try was cut short for an urgent request (the line was quiet): not a try."""


_CUT = _Cut()


class _Bus:
    """Request/reply on the ccTalk bus: one transaction at a time.

    An urgent request (the inhibit) goes before every routine request not yet on the wire, and
    cuts short a routine request that is waiting for a reply of which no byte has come (an
    absent seat): the line is quiet then, so the inhibit goes out at once, and that routine try
    is made again afterwards. A reply already coming is read to its end first: transmitting
    over it would be a collision on the single wire."""

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
        self._urgent = 0
        self._no_urgent = asyncio.Event()
        self._no_urgent.set()
        #: the timeout of a routine request's wait for the first byte of its reply
        self._cuttable: asyncio.Timeout | None = None
        self.bad_checksums = 0
        self.echo_mismatches = 0
        self.timeouts = 0
        self.cut_short = 0

    async def _read(self, deadline: float, *, cuttable: bool = False) -> bytes:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        async with asyncio.timeout(remaining) as timeout:
            if cuttable:
                self._cuttable = timeout
            try:
                data = await self._reader.read(256)
            except OSError as exc:  # the connection was reset: the bus is gone, as at EOF
                raise LinkLost(f"ccTalk bus: {exc}") from exc
            finally:
                self._cuttable = None
        if not data:
            raise LinkLost("ccTalk bus: end of stream")
        return data

    async def _strip_echo(self, sent: bytes, deadline: float) -> bool:
        """Read the host's own message back. Bytes before it (a reply that came after its
        request was cut short) are dropped; False when what came back is not the message."""
        got = bytearray()
        while (at := got.find(sent)) < 0:
            if len(got) > 256 + len(sent):
                self.echo_mismatches += 1
                return False
            got += await self._read(deadline)
        self.decoder.discarded_bytes += at
        self.decoder.feed(got[at + len(sent) :])
        return True

    async def _reply(
        self, address: int, deadline: float, *, cuttable: bool
    ) -> CcTalkFrame | _Cut | None:
        while True:
            item = self.decoder.next_event()
            if isinstance(item, CcTalkFrame):
                if item.dest == HOST and item.source == address:
                    return item
                continue  # not for us, or not from whom we asked: ignore it
            if isinstance(item, BadChecksum):
                self.bad_checksums += 1
                continue
            quiet = cuttable and not self.decoder.buffered
            try:
                self.decoder.feed(await self._read(deadline, cuttable=quiet))
            except TimeoutError:
                if quiet and self._urgent:
                    return _CUT
                return None

    async def request(
        self,
        address: int,
        header: int,
        data: bytes = b"",
        *,
        urgent: bool = False,
        retries: int | None = None,
        unless: Callable[[], bool] | None = None,
    ) -> bytes:
        """Send and return the reply's data (b"" for a broadcast); raise NoReply,
        AcceptorBusy (BUSY) or DeviceRejected (NAK). ``unless`` is asked just before each try
        goes on the wire: True raises Overtaken instead."""
        if not urgent:
            return await self._transact(address, header, data, urgent, retries, unless)
        with self.urgent():
            return await self._transact(address, header, data, urgent, retries, unless)

    @contextlib.contextmanager
    def urgent(self) -> Iterator[None]:
        """While inside, routine requests wait (the lock-out keeps the bus from its broadcast
        to its last confirmation); entering cuts short a routine wait on a quiet line."""
        self._urgent += 1
        self._no_urgent.clear()
        waiting = self._cuttable
        if waiting is not None and not waiting.expired():
            self.cut_short += 1
            waiting.reschedule(asyncio.get_running_loop().time())
        try:
            yield
        finally:
            self._urgent -= 1
            if not self._urgent:
                self._no_urgent.set()

    async def _transact(
        self,
        address: int,
        header: int,
        data: bytes,
        urgent: bool,
        retries: int | None,
        unless: Callable[[], bool] | None,
    ) -> bytes:
        frame = CcTalkFrame(address, HOST, header, data).to_bytes()
        tries = 1 + (self.retries if retries is None else retries)
        tried = 0
        while tried < tries:
            if not urgent:
                while self._urgent:  # routine requests wait, try by try, for urgent ones
                    await self._no_urgent.wait()
            async with self.lock:
                if not urgent and self._urgent:
                    continue  # an urgent request came while this one waited for the bus
                if unless is not None and unless():
                    raise Overtaken(f"ccTalk address {address}: header {header} overtaken")
                reply = await self._try(frame, address, cuttable=not urgent)
            if isinstance(reply, _Cut):
                continue  # cut short for an urgent request: not a try of this one
            tried += 1
            if isinstance(reply, CcTalkFrame):
                if reply.header == Header.ACK:
                    return reply.data
                if reply.header == Header.NAK:
                    raise DeviceRejected(f"ccTalk address {address}: header {header} NAKed")
                if reply.header == Header.BUSY:
                    raise AcceptorBusy(f"ccTalk address {address}: BUSY to header {header}")
                self.bad_checksums += 1  # a reply header that is none of these: noise
            elif reply is not None:  # the broadcast went out whole
                return b""
        raise NoReply(
            f"ccTalk address {address}: no valid reply to header {header} after {tried} tries"
        )

    async def _try(
        self, frame: bytes, address: int, *, cuttable: bool
    ) -> CcTalkFrame | _Cut | bool | None:
        """One try: the reply frame, True for a broadcast that went out, _CUT, or None."""
        self.decoder.reset()
        self._writer.write(frame)
        deadline = time.monotonic() + self.reply_timeout + len(frame) * 0.0011
        try:
            if self.echo and not await self._strip_echo(frame, deadline):
                return None
        except TimeoutError:
            self.timeouts += 1
            return None
        if address == BROADCAST:
            return True
        reply = await self._reply(address, deadline + self.reply_timeout, cuttable=cuttable)
        if reply is None:
            self.timeouts += 1
        return reply


class AcceptorBusOptions(DriverOptions):
    """``tableside.acceptors``: the ccTalk bus of the seat acceptors."""

    #: betting position → ccTalk address (2..255; 0 is the broadcast, 1 the host)
    seats: dict[
        Annotated[int, Strict(False), Field(ge=1, le=7)],  # a TOML table's keys are strings
        Annotated[int, Field(ge=2, le=255)],
    ]
    #: the host hears its own bytes (single-wire bus)
    echo: bool = True
    #: seconds between polls of the acceptors (unset: as the acceptors ask, header 249)
    poll_interval_s: Annotated[float, Field(gt=0, le=10)] | None = None
    #: how long an acceptor may take to start its reply
    reply_timeout_s: Annotated[float, Field(gt=0, le=5)] = 0.1

    @field_validator("seats")
    @classmethod
    def _one_address_a_seat(cls, seats: dict[int, int]) -> dict[int, int]:
        if not seats:
            raise ValueError("an acceptor bus needs seats = {1 = ADDRESS, …}")
        if len(set(seats.values())) != len(seats):
            raise ValueError("two seats share one ccTalk address")
        return seats


class CcTalkAcceptorsDriver(Driver):
    device_class: ClassVar[str] = "acceptors"
    commands: ClassVar[frozenset[str]] = names(LOCK_OUT, RELEASE, QUERY_STATUS)
    Options: ClassVar[type[DriverOptions]] = AcceptorBusOptions

    def __init__(self, name: str, settings: DriverSettings, sink: EventSink) -> None:
        super().__init__(name, settings, sink)
        options = self.options
        assert isinstance(options, AcceptorBusOptions)  # Driver.__init__ checked it
        self.seats = dict(options.seats)
        self.echo = options.echo
        self.reply_timeout = options.reply_timeout_s
        #: None: poll at the interval the acceptors ask for (header 249), 0.2 s if they do not say
        self.configured_poll_interval = options.poll_interval_s
        self.poll_interval = self.configured_poll_interval or DEFAULT_POLL_INTERVAL
        self._noise_reported = (0, 0)
        self._noise_at = 0.0
        self._asked: list[float] = []
        #: the lock-out, one state (its phase and when it was asked)
        self.lockout = LockOut()
        #: each seat's counter, reach and inhibit, and the counter arithmetic (no I/O). Kept
        #: across reconnections: what a seat took while out of reach is read when it is back.
        self.book = SeatBook.of(self.seats)
        self._bus: _Bus | None = None
        #: the bus while it is open but its seats are still being identified
        self._opening: _Bus | None = None

    def restore(self, kind: str, data: Mapping[str, object]) -> None:
        # Locked out when the daemon stopped: still locked out when the bus comes back.
        if kind == "status" and data.get("state") == "locked_out":
            self.hold_lock_out()

    def hold_lock_out(self) -> None:
        self.lockout = LockOut(LockPhase.EFFECTIVE, time.monotonic())

    @property
    def holds_lock_out(self) -> bool:
        return self.lockout.locked

    # -- connection -------------------------------------------------------------------------

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        bus = _Bus(reader, writer, echo=self.echo, reply_timeout=self.reply_timeout,
                   retries=self.settings.arq.retries)  # fmt: skip
        self.book.bus_opened()  # every seat read before: its next read follows a gap
        self._opening = bus
        try:
            if self.lockout.locked:
                # Locked out while the bus was down (or before a restart): the broadcast inhibit
                # before anything else; confirmed seat by seat once the seats are identified.
                await self._broadcast_inhibit(bus)
            self._asked = []
            answered = [seat for seat in self.seats if await self._identify(bus, seat)]
            if self.configured_poll_interval is None:
                # Poll as often as the most demanding acceptor asks.
                self.poll_interval = min(self._asked, default=DEFAULT_POLL_INTERVAL)
            if not answered:
                raise LinkTimeout(f"{self.name}: no acceptor answers on the bus")
            for seat in answered:
                await self._enable_coins(bus, seat)
            self._bus = bus
            self.connected()
            if self.lockout.locked:
                # Asked while the bus was down (or before a restart): the whole lock-out now,
                # confirmed seat by seat, as if the button were pressed this moment.
                await self.lock_out(bus, asked_at=self.lockout.asked_at)
            else:
                await self._set_inhibits(bus, answered, urgent=False)
            self._status()
            while True:
                await self._poll_all(bus)
                await asyncio.sleep(self.poll_interval)
        finally:
            self._bus = self._opening = None

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
            # Where its event counter stands: the baseline, or what it took while out of reach
            credits = await bus.request(address, Header.READ_BUFFERED_CREDIT)
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
        await self._process(bus, seat, credits)
        return True

    async def _enable_coins(self, bus: _Bus, seat: int) -> None:
        """Enable every coin (header 231): an acceptor may power up, or come out of a reset,
        with every coin inhibited, and would then refuse wagers with betting open."""
        try:
            await bus.request(self.seats[seat], Header.MODIFY_INHIBIT_STATUS, COINS_ENABLED)
        except (NoReply, DeviceRejected) as exc:
            self.emit(_protocol_error(self.name, Header.MODIFY_INHIBIT_STATUS, str(exc)))

    def _go_offline(self, seat: int, detail: str) -> None:
        if self.book.went_offline(seat, time.monotonic()):
            self.emit(ev.AcceptorOffline(device=self.name, seat=seat, detail=detail))
            self._status()

    def _status(self) -> None:
        book = self.book
        fault = ("lockout_unconfirmed" if book.unconfirmed
                 else "acceptor_offline" if book.offline else None)  # fmt: skip
        self.emit(
            AcceptorBusStatus(
                device=self.name,
                state="locked_out" if self.lockout.locked else "accepting",
                fault=fault,
                seats_online=book.online,
                seats_offline=book.offline,
                seats_unconfirmed=book.unconfirmed,
            )
        )

    # -- polling ---------------------------------------------------------------------------

    async def _poll_all(self, bus: _Bus) -> None:
        for seat, address in self.seats.items():
            absent = self.book[seat].offline
            if not self.book.probe_due(seat, time.monotonic()):
                continue  # an absent seat is probed on a slower schedule, with one try
            try:
                data = await bus.request(
                    address, Header.READ_BUFFERED_CREDIT, retries=0 if absent else None
                )
            except NoReply as exc:
                self._go_offline(seat, str(exc))
                continue
            except DeviceRejected as exc:  # BUSY or NAK: read again next time
                self.emit(_protocol_error(self.name, Header.READ_BUFFERED_CREDIT, str(exc)))
                continue
            if self.book.came_back(seat):
                self.emit(ev.AcceptorOnline(device=self.name, seat=seat))
                self._status()
            await self._process(bus, seat, data)
            if self.book[seat].unconfirmed:  # the inhibit (or release) again, once a poll
                confirmed, _ = await self._set_inhibits(
                    bus, [seat], urgent=False, retries=0, budget=0.0
                )
                if confirmed:
                    log.info("inhibit_confirmed_late", device=self.name, seat=seat,
                             locked_out=self.lockout.locked)  # fmt: skip
                    self._status()
        self._report_noise(bus)
        everyone_gone = self.book.all_offline
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
        reading = self.book.read(seat, counter, results, time.monotonic())
        held, last = reading.held, reading.last
        if held:  # the baseline's backlog: said, not lost
            self.emit(
                ev.BacklogAtStart(
                    device=self.name,
                    seat=seat,
                    event_counter=counter,
                    credits=sum(1 for a, _ in held if a),
                    errors=tuple(ERRORS.get(b, f"code_{b}") for a, b in held if not a and b),
                )
            )
        if reading.reset and last is not None:
            self.emit(ev.CounterReset(device=self.name, seat=seat, last_counter=last))
            self.emit(ev.EventsLost(device=self.name, seat=seat, lost=None, from_counter=last,
                                    to_counter=counter, reason="reset"))  # fmt: skip
            await self._after_reset(bus, seat)
        elif reading.lost and last is not None:
            self.emit(ev.EventsLost(device=self.name, seat=seat, lost=reading.lost,
                                    from_counter=last, to_counter=counter))  # fmt: skip
        for a, b, number in reading.events:
            self._event(seat, a, b, number, read_at=reading.read_at, gap=reading.gap)

    async def _after_reset(self, bus: _Bus, seat: int) -> None:
        """A reset acceptor forgets its inhibits: its coins, and the lock-out if one holds."""
        await self._enable_coins(bus, seat)
        await self._set_inhibits(bus, [seat], urgent=self.lockout.locked)

    def _event(
        self, seat: int, a: int, b: int, number: int, *, read_at: float, gap: float | None
    ) -> None:
        d = self.name
        if a:
            # Counted unless the lock-out was in effect at this seat: a seat out of reach when
            # it was applied took its wagers uninhibited.
            unconfirmed = self.book[seat].unconfirmed
            if not self.lockout.effective or (unconfirmed and gap is not None):
                timing = ev.WagerTiming.BEFORE_LOCKOUT
                if self.lockout.asked_at is not None:
                    asked_in_gap = gap is not None and self.lockout.asked_at > read_at
                    timing = ev.WagerTiming.BEFORE_INHIBIT
                    if asked_in_gap:  # taken while out of reach: before or after, unknown
                        timing = ev.WagerTiming.UNKNOWN
                self.emit(ev.WagerAccepted(device=d, seat=seat, credit=a, event_counter=number,
                                           during_lockout=self.lockout.asked_at is not None,
                                           timing=timing, read_after_gap_s=gap))  # fmt: skip
            else:
                late = (time.monotonic() - (self.lockout.asked_at or time.monotonic())) * 1000
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

    async def _set_inhibits(
        self,
        bus: _Bus,
        seats: list[int],
        *,
        urgent: bool,
        budget: float = LOCKOUT_BUDGET_S,
        retries: int | None = None,
        after_broadcast: bool = False,
    ) -> tuple[list[int], dict[int, str]]:
        """Set each seat's master inhibit to what the table wants and read it back (header
        227); a seat that answers BUSY, NAK or nothing, or reads back otherwise, is tried again
        until ``budget`` is spent. Returns the confirmed seats and why each other one is not.
        ``after_broadcast``: the broadcast has set them all, so each is first only read back
        (half the bus time); one that does not read back as asked is then set on its own."""
        locked = self.lockout.locked

        def overtaken() -> bool:
            return self.lockout.locked != locked

        value = b"\x00" if locked else b"\x01"  # bit 0 set: accept
        deadline = time.monotonic() + budget
        pending, confirmed = list(seats), list[int]()
        failed: dict[int, str] = {}
        read_only = set(seats) if after_broadcast else set()
        while pending:
            for seat in list(pending):
                if self.lockout.locked != locked:
                    return confirmed, failed  # a lock-out overtook this release (or reverse)
                address = self.seats[seat]
                # a seat already known absent gets one try a round, not the bus's retries
                tries = 0 if self.book[seat].offline else retries
                try:
                    if seat in read_only:
                        read_only.discard(seat)
                    else:
                        await bus.request(
                            address,
                            Header.MODIFY_MASTER_INHIBIT,
                            value,
                            urgent=urgent,
                            retries=tries,
                            unless=overtaken,
                        )
                    status = await bus.request(
                        address,
                        Header.REQUEST_MASTER_INHIBIT,
                        urgent=urgent,
                        retries=tries,
                        unless=overtaken,
                    )
                except Overtaken:
                    return confirmed, failed
                except AcceptorBusy:
                    failed[seat] = "busy (ccTalk header 6)"
                except DeviceRejected:
                    failed[seat] = "NAK (ccTalk header 5)"
                except NoReply as exc:
                    failed[seat] = "no reply"
                    self._go_offline(seat, str(exc))
                else:
                    if status[:1] == value:
                        confirmed.append(seat)
                        pending.remove(seat)
                        failed.pop(seat, None)
                        self.book.confirmed(seat)
                    else:
                        failed[seat] = f"master inhibit reads back {status.hex() or 'nothing'}"
            if not pending or time.monotonic() >= deadline:
                break
            await asyncio.sleep(CONFIRM_RETRY_S)
        if self.lockout.locked == locked:
            self.book.not_confirmed(failed)
        return confirmed, failed

    async def command(self, name: str, args: Args) -> None:
        bus = self._bus
        if name not in self.commands:
            raise self.unknown_command(name)
        if name in ("lock_out", "release") and bus is None:
            # Remember what the table wants: it is applied as soon as the bus is back.
            self.lockout = (LockOut(LockPhase.ASKED, time.monotonic()) if name == "lock_out"
                         else LockOut())  # fmt: skip
            if self._opening is not None and self.lockout.locked:
                # The bus is open, its seats not yet identified: the broadcast now; the seats
                # are confirmed once identified.
                await self._broadcast_inhibit(self._opening)
        if bus is None or self.state not in (ConnectionState.CONNECTED, ConnectionState.STALE):
            raise DeviceUnavailable(f"{self.name}: bus is {self.state.value}")
        if name == "lock_out":
            # Never waits for a release in progress: the lock-out overtakes it.
            await self.lock_out(bus)
        elif name == "release":
            await self.release(bus)
        else:
            self._status()

    async def release(self, bus: _Bus) -> None:
        self.lockout = LockOut()
        self.book.forget_unconfirmed()
        confirmed, failed = await self._set_inhibits(bus, list(self.seats), urgent=False)
        if not self.lockout.locked:
            self.emit(ev.LockoutReleased(device=self.name, seats=tuple(confirmed),
                                         unconfirmed=tuple(sorted(failed))))  # fmt: skip
            self._status()

    async def _broadcast_inhibit(self, bus: _Bus) -> None:
        try:
            await bus.request(BROADCAST, Header.MODIFY_MASTER_INHIBIT, b"\x00", urgent=True)
        except NoReply as exc:  # the echo never came back whole: each seat is inhibited next
            log.warning("broadcast_inhibit_failed", device=self.name, why=str(exc))

    async def lock_out(self, bus: _Bus, *, asked_at: float | None = None) -> None:
        """The broadcast inhibit first, ahead of everything; then each seat confirmed (ACK and
        read back); then every seat read once more. ``asked_at``: when the table asked, if
        before now (the bus was down)."""
        started = time.monotonic()
        asked = started if asked_at is None else asked_at
        self.lockout = LockOut(LockPhase.ASKED, asked)
        self.book.forget_unconfirmed()
        with bus.urgent():
            await self._broadcast_inhibit(bus)
            broadcast = time.monotonic()
            confirmed, failed = await self._set_inhibits(
                bus, list(self.seats), urgent=True, after_broadcast=True
            )
        if self.lockout.asked_at != asked:
            return  # released meanwhile
        done = time.monotonic()
        self.emit(
            ev.LockoutApplied(
                device=self.name,
                broadcast_ms=round((broadcast - started) * 1000, 2),
                confirmed_ms=round((done - started) * 1000, 2),
                seats=tuple(confirmed),
                unconfirmed=tuple(sorted(failed)),
            )
        )
        for seat, why in sorted(failed.items()):
            self.emit(ev.LockoutFailed(device=self.name, seat=seat, address=self.seats[seat],
                                       detail=why, budget_ms=LOCKOUT_BUDGET_S * 1000))  # fmt: skip
        # What the acceptors took before the inhibit reached them is read now, and counts;
        # from here on the lock-out is in effect.
        await self._poll_all(bus)
        if self.lockout.asked_at == asked:  # not released (or asked again) meanwhile
            self.lockout = LockOut(LockPhase.EFFECTIVE, asked)
        self._status()


def _protocol_error(device: str, header: int, detail: str) -> DeviceEvent:
    return ProtocolErrorEvent(device=device, frame_type=header, reason="malformed", detail=detail)
