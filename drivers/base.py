"""Driver base classes: connection supervision lives here, once.

``Driver`` opens the device URL, hands the byte streams to ``serve``, and when that ends
(the link broke, the device went silent, the device broke the protocol) reconnects with capped,
jittered backoff, forever. It never returns because a device went away; only cancellation ends
it. ``FramedDriver`` adds everything a device speaking tableside's framing needs (the link
layer, ACK/NAK, silence watch): its subclasses only translate messages and carry out commands.
A driver for another framing (ccTalk) subclasses ``Driver`` and implements ``serve``.
"""

from __future__ import annotations

import abc
import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar, NoReturn

import structlog
from pydantic import BaseModel, ConfigDict

from tableside.drivers.backoff import Backoff
from tableside.drivers.commands import QUERY_IDENTITY, QUERY_STATUS, Args
from tableside.drivers.common import (
    HOST_TO_DEVICE,
    Heartbeat,
    Identity,
    QueryIdentity,
    QueryStatus,
)
from tableside.drivers.errors import (
    DeviceRejected,
    DeviceUnavailable,
    LinkLost,
    LinkTimeout,
    TablesideDriverError,
)
from tableside.drivers.events import (
    ConnectionEvent,
    ConnectionState,
    DeviceEvent,
    FloodingEvent,
    IdentityEvent,
    LineNoiseEvent,
    ProtocolErrorEvent,
)
from tableside.drivers.framing import NakReason
from tableside.drivers.link import (
    ArqPolicy,
    Flooding,
    FrameBudget,
    FramedLink,
    LineNoise,
    Notice,
    ProtocolError,
)
from tableside.drivers.messages import Message, MessageSet
from tableside.drivers.tasks import first_to_end
from tableside.drivers.transport import DEFAULT_BAUDRATE, open_transport
from tableside.errors import Refused

__all__ = ["Driver", "DriverOptions", "DriverSettings", "EventSink", "FramedDriver"]

log = structlog.get_logger("tableside.driver")

EventSink = Callable[[DeviceEvent], None]


class DriverOptions(BaseModel):
    """A driver's own keys in its ``[devices.<name>]`` table, besides the ones every device has
    (``driver``, ``url``, ``baudrate``, …: daemon/config.py ``DeviceConfig``). A driver that
    takes any declares a subclass as its ``Options``; the config is checked against it, so a
    misspelt or mistyped key is refused with its file, line and device (docs/drivers.md).

    Strict, like the rest of the config: ``"30"`` is no number and ``"yes"`` no bool."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


@dataclass(frozen=True, slots=True)
class DriverSettings:
    """What every driver needs to reach its device (from the table config)."""

    url: str
    baudrate: int = DEFAULT_BAUDRATE
    heartbeat_timeout: float = 3.0
    # After this many heartbeat timeouts of silence the link is closed and opened again.
    stale_reconnect_after: int = 3
    arq: ArqPolicy = field(default_factory=ArqPolicy)
    #: data frames a second the host takes from the device before slowing it (None: no limit)
    budget: FrameBudget | None = field(default_factory=FrameBudget)
    backoff_initial: float = 0.1
    backoff_max: float = 10.0
    #: the driver's own options from the config (its ``Options`` model; e.g. ccTalk addresses
    #: per seat); left out: the model's defaults
    options: DriverOptions | None = None
    #: awaited before a device's frame is acknowledged: the daemon's "everything reported so
    #: far is in the journal", so a device never deletes an event the table could still lose
    settle: Callable[[], Awaitable[None]] | None = None


class Driver(abc.ABC):
    """Base of every device driver: supervision, connection state, events."""

    #: device class this driver speaks for ("shuffler", "shoe", …)
    device_class: ClassVar[str]
    #: the commands ``command()`` takes (drivers/commands.py declares each), for routing,
    #: error messages and docs
    commands: ClassVar[frozenset[str]] = frozenset()
    #: the options this driver takes in its ``[devices.<name>]`` table (none by default)
    Options: ClassVar[type[DriverOptions]] = DriverOptions

    def __init__(self, name: str, settings: DriverSettings, sink: EventSink) -> None:
        self.name = name
        self.settings = settings
        given = settings.options
        if given is not None and not isinstance(given, self.Options):
            raise TypeError(f"{name}: options of {type(self).__name__} are "
                            f"{self.Options.__name__}, not {type(given).__name__}")  # fmt: skip
        #: this driver's options (its ``Options``), the defaults where the config has none
        self.options: DriverOptions = given if given is not None else self.Options()
        self._sink = sink
        self.state = ConnectionState.DISCONNECTED
        self._detail = ""
        self.connects = 0
        self._backoff = Backoff(initial=settings.backoff_initial, maximum=settings.backoff_max)
        self._connected_at: float | None = None
        self._lost_at: float | None = None

    # -- what a subclass provides ------------------------------------------------------------

    @abc.abstractmethod
    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one open connection until it fails (raise a driver error) or is cancelled.

        Call ``self.connected()`` once the device has answered."""

    @abc.abstractmethod
    async def command(self, name: str, args: Args) -> None:
        """Carry out a named command (drivers/commands.py) with its arguments as they were
        parsed; raise ``Refused`` (tableside/errors.py) for one it does not take, or a driver
        error. Anything else is a fault of the driver's, answered as an internal error."""

    def restore(self, kind: str, data: Mapping[str, object]) -> None:  # noqa: B027
        """Before ``run()``, after a restart: the last event of this kind the device reported
        (from the journal). A driver that holds table state the device cannot tell it (the
        acceptors' lock-out) takes it back here; most need nothing."""

    def hold_lock_out(self) -> None:  # noqa: B027
        """Before ``run()``, after a restart: "no more bets" holds (daemon/restore.py). A
        driver that carries out ``lock_out`` starts locked out; the others have none to hold."""

    @property
    def holds_lock_out(self) -> bool:
        """Whether the driver holds its devices locked out (only one that takes ``lock_out``)."""
        return False

    # -- for subclasses --------------------------------------------------------------------

    def emit(self, event: DeviceEvent) -> None:
        self._sink(event)

    def connected(self) -> None:
        self.connects += 1
        self._connected_at = time.monotonic()
        self._set_state(ConnectionState.CONNECTED, self.settings.url)

    def _connected_for(self) -> float:
        return 0.0 if self._connected_at is None else time.monotonic() - self._connected_at

    def unknown_command(self, name: str) -> Refused:
        known = ", ".join(sorted(self.commands)) or "none"
        return Refused(
            f"{self.name}: unknown {self.device_class} command {name!r} (known: {known})"
        )

    def _set_state(self, state: ConnectionState, detail: str = "") -> None:
        # A device that stays unreachable is said once, and again only when why changes: a
        # record per attempt would be some 2,000 an hour of one device retrying, written to
        # the controller's flash for nothing (docs/journal.md, what a record costs the storage)
        if state == self.state and (state is not ConnectionState.DISCONNECTED
                                    or detail == self._detail):  # fmt: skip
            return
        now = time.monotonic()
        gap: float | None = None
        if self.state is ConnectionState.CONNECTED:
            self._lost_at = now  # from here until it is back, nothing came from the device
        elif state is ConnectionState.CONNECTED and self._lost_at is not None:
            gap, self._lost_at = round(now - self._lost_at, 3), None
        self.state, self._detail = state, detail
        log.info("device_connection", device=self.name, state=state.value, detail=detail,
                 gap_s=gap)  # fmt: skip
        self._sink(ConnectionEvent(device=self.name, state=state, detail=detail, gap_s=gap))

    # -- supervision -----------------------------------------------------------------------

    async def run(self) -> NoReturn:
        """Connect, serve, reconnect; forever. Only cancellation ends it.

        While the device stays unreachable, an attempt that fails as the last one did changes
        nothing on the record: no ``connecting``, no second ``disconnected``."""
        retrying = False  # the last attempt never reached the device
        while True:
            if not retrying:
                self._set_state(ConnectionState.CONNECTING, self.settings.url)
            self._connected_at = None
            detail = ""
            try:
                reader, writer = await open_transport(
                    self.settings.url, baudrate=self.settings.baudrate
                )
                try:
                    await self.serve(reader, writer)
                    detail = "connection ended"
                finally:
                    writer.close()
            except* TablesideDriverError as group:  # the device went away or broke the protocol
                detail = str(group.exceptions[0])
            except* Exception as group:
                # A bug of ours, or of a plug-in driver. The table must not lose every device
                # over it: say so loudly, and treat it like a broken link.
                log.error("driver_failed", device=self.name, exc_info=group.exceptions[0])
                detail = f"internal error: {group.exceptions[0]!r}"
            again = retrying and detail == self._detail
            self._set_state(ConnectionState.DISCONNECTED, detail)
            retrying = self._connected_at is None
            if self._connected_for() > 10:
                self._backoff.reset()  # it worked for a while: try again soon
            delay = self._backoff.next()
            (log.debug if again else log.info)(
                "device_reconnect", device=self.name, delay_s=round(delay, 3), why=detail
            )
            await asyncio.sleep(delay)


class FramedDriver(Driver):
    """A driver for a device speaking a tableside-framed protocol (docs/protocols/)."""

    protocol: ClassVar[MessageSet]
    #: commands that are one argument-less message each: name → message class
    simple_commands: ClassVar[Mapping[str, type[Message]]] = {
        QUERY_STATUS.name: QueryStatus,
        QUERY_IDENTITY.name: QueryIdentity,
    }
    commands: ClassVar[frozenset[str]] = frozenset(simple_commands)

    def __init__(self, name: str, settings: DriverSettings, sink: EventSink) -> None:
        super().__init__(name, settings, sink)
        self._link: FramedLink | None = None
        #: the identity the device gave on this link (reported once per link unless it changes)
        self._identity: Identity | None = None

    async def on_link_up(self, link: FramedLink) -> None:
        """Called once per connection: ask who the device is and how it stands. A device that
        refuses a query is reported, not disconnected."""
        await self.query(link, QueryIdentity(), QueryStatus())

    async def command(self, name: str, args: Args) -> None:
        message_class = self.simple_commands.get(name)
        if message_class is None:
            raise self.unknown_command(name)
        await self.send(message_class())

    @abc.abstractmethod
    def translate(self, message: Message) -> DeviceEvent | None:
        """Turn one of the device's own messages into an event (None: nothing to report).

        Identity, Heartbeat and host-to-device types arriving from the device are handled
        before this is called."""

    def refuse(self, message: Message) -> NakReason | None:
        """A reason to NAK an intact message instead of ACKing it (default: accept all)."""
        return None

    def require_link(self) -> FramedLink:
        link = self._link
        if link is None or self.state not in (ConnectionState.CONNECTED, ConnectionState.STALE):
            raise DeviceUnavailable(f"{self.name}: device is {self.state.value}")
        return link

    async def send(self, message: Message) -> None:
        """Send a message to the device and wait for its ACK: returns only once the device
        acknowledged it (took it). A message not acknowledged after every retry fails the link
        (docs/protocols/shuffler.md): it is closed here and opened again by ``run``."""
        link = self.require_link()
        try:
            await link.send(message)
        except LinkTimeout:
            link.close()
            raise

    async def query(self, link: FramedLink, *messages: Message) -> None:
        """Send queries on a link coming up (before the device counts as connected); a device
        that refuses one is reported, not disconnected."""
        for message in messages:
            try:
                await link.send(message)
            except DeviceRejected as exc:
                self.emit(
                    ProtocolErrorEvent(
                        device=self.name,
                        frame_type=message.TYPE,
                        reason="query_refused",
                        detail=str(exc),
                    )
                )

    def _on_message(self, message: Notice) -> NakReason | None:
        if self.state == ConnectionState.STALE:
            self._set_state(ConnectionState.CONNECTED, "frames resumed")
        event: DeviceEvent | None
        if isinstance(message, LineNoise):
            event = LineNoiseEvent(
                device=self.name,
                crc_errors=message.crc_errors,
                discarded_bytes=message.discarded_bytes,
            )
        elif isinstance(message, Flooding):
            event = FloodingEvent(
                device=self.name,
                active=message.active,
                per_s=message.per_s,
                held=message.held,
                unacknowledged=message.unacknowledged,
            )
        elif isinstance(message, ProtocolError):
            event = ProtocolErrorEvent(
                device=self.name,
                frame_type=message.type,
                reason=message.reason.name.lower(),
                detail=message.detail,
            )
        elif isinstance(message, Heartbeat):
            event = None  # liveness only: it keeps the device from going stale
        elif isinstance(message, Identity):
            # A device says who it is unasked at connect and again when asked (the protocol
            # docs): the same identity twice on one link is one event; a changed one is news.
            event = (
                None
                if message == self._identity
                else IdentityEvent(
                    device=self.name,
                    vendor=message.vendor,
                    model=message.model,
                    serial=message.serial,
                    firmware_version=message.firmware_version,
                    firmware_sha256=message.firmware_sha256.hex(),
                )
            )
            self._identity = message
        elif message.TYPE >= HOST_TO_DEVICE:
            event = ProtocolErrorEvent(
                device=self.name,
                frame_type=message.TYPE,
                reason="unexpected_direction",
                detail=f"{type(message).__name__} is a host-to-device message",
            )
        else:
            verdict = self.refuse(message)
            if verdict is not None:
                return verdict
            event = self.translate(message)
        if event is not None:
            self._sink(event)
        return None

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link = FramedLink(
            reader,
            writer,
            self.protocol,
            self._on_message,
            name=f"{self.name}@{self.settings.url}",
            policy=self.settings.arq,
            settle=self.settings.settle,
            budget=self.settings.budget,
        )
        try:
            # not a TaskGroup: Driver.run catches the link's errors, and a 3.11 TaskGroup can
            # absorb the daemon's cancellation into one of them (drivers/tasks.py)
            self._identity = None  # a new link: the device says who it is again
            await first_to_end(
                {f"{self.name}.link": link.run(), f"{self.name}.watchdog": self._up(link)}
            )
        finally:
            self._link = None
            await link.aclose()

    async def _up(self, link: FramedLink) -> NoReturn:
        self._link = link
        # Connected once the device has answered (its ACKs or NAKs to the queries): a port
        # that opens with nothing behind it (a serial device switched off) is not a device
        await self.on_link_up(link)
        self.connected()
        await self._watch_silence(link)

    async def _watch_silence(self, link: FramedLink) -> NoReturn:
        timeout = self.settings.heartbeat_timeout
        while True:
            await asyncio.sleep(timeout / 4)
            silent = time.monotonic() - link.last_rx
            if silent > timeout * self.settings.stale_reconnect_after:
                raise LinkLost(f"{self.name}: silent for {silent:.1f} s; reopening the link")
            if silent > timeout and self.state == ConnectionState.CONNECTED:
                self._set_state(ConnectionState.STALE, f"no frame for {silent:.1f} s")
