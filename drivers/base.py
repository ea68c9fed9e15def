"""The one base class of every device driver: connection supervision lives here, once.

A driver subclass supplies its protocol's MessageSet, what to say when a link comes up, and how
a message becomes a typed event. The base opens the URL, runs the link, watches for silence,
and reconnects with capped, jittered backoff forever. It never returns because a device went
away; it only ends when cancelled.
"""

from __future__ import annotations

import abc
import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, NoReturn

import structlog

from tableside.drivers.backoff import Backoff
from tableside.drivers.errors import DeviceUnavailable, LinkLost, TablesideDriverError
from tableside.drivers.events import (
    ConnectionEvent,
    ConnectionState,
    DeviceEvent,
    LineNoiseEvent,
    ProtocolErrorEvent,
)
from tableside.drivers.framing import NakReason
from tableside.drivers.link import ArqPolicy, FramedLink, LineNoise, Notice, ProtocolError
from tableside.drivers.messages import Message, MessageSet
from tableside.drivers.transport import DEFAULT_BAUDRATE, open_transport

__all__ = ["Driver", "DriverSettings", "EventSink"]

log = structlog.get_logger("tableside.driver")

EventSink = Callable[[DeviceEvent], None]


@dataclass(frozen=True, slots=True)
class DriverSettings:
    """What every driver needs to reach its device (from the table config)."""

    url: str
    baudrate: int = DEFAULT_BAUDRATE
    heartbeat_timeout: float = 3.0
    # After this many heartbeat timeouts of silence the link is closed and opened again.
    stale_reconnect_after: int = 3
    arq: ArqPolicy = field(default_factory=ArqPolicy)
    backoff_initial: float = 0.1
    backoff_max: float = 10.0
    options: dict[str, Any] = field(default_factory=dict)


class Driver(abc.ABC):
    """Base of every device driver."""

    #: device class this driver speaks for ("shuffler", "shoe", …)
    device_class: ClassVar[str]
    protocol: ClassVar[MessageSet]

    def __init__(self, name: str, settings: DriverSettings, sink: EventSink) -> None:
        self.name = name
        self.settings = settings
        self._sink = sink
        self.state = ConnectionState.DISCONNECTED
        self.connects = 0
        self._link: FramedLink | None = None
        self._backoff = Backoff(initial=settings.backoff_initial, maximum=settings.backoff_max)

    # -- what a subclass provides ------------------------------------------------------------

    @abc.abstractmethod
    async def on_link_up(self, link: FramedLink) -> None:
        """Called once per connection, before messages are awaited (e.g. ask for identity)."""

    @abc.abstractmethod
    def translate(self, message: Message) -> DeviceEvent | None:
        """Turn one message from the device into an event (None: nothing to report)."""

    @abc.abstractmethod
    async def command(self, name: str) -> None:
        """Carry out a named command; raise DeviceUnavailable, DeviceRejected or LinkError."""

    # -- supervision -----------------------------------------------------------------------

    def _set_state(self, state: ConnectionState, detail: str = "") -> None:
        if state == self.state:
            return
        self.state = state
        log.info("device_connection", device=self.name, state=state.value, detail=detail)
        self._sink(ConnectionEvent(device=self.name, state=state, detail=detail))

    def _on_message(self, message: Notice) -> NakReason | None:
        if self.state == ConnectionState.STALE:
            self._set_state(ConnectionState.CONNECTED, "frames resumed")
        if isinstance(message, LineNoise):
            event: DeviceEvent | None = LineNoiseEvent(
                device=self.name,
                crc_errors=message.crc_errors,
                discarded_bytes=message.discarded_bytes,
            )
        elif isinstance(message, ProtocolError):
            event = ProtocolErrorEvent(
                device=self.name,
                frame_type=message.type,
                reason=message.reason.name.lower(),
                detail=message.detail,
            )
        else:
            event = self.translate(message)
        if event is not None:
            self._sink(event)
        return None

    def require_link(self) -> FramedLink:
        link = self._link
        if link is None or self.state not in (ConnectionState.CONNECTED, ConnectionState.STALE):
            raise DeviceUnavailable(f"{self.name}: device is {self.state.value}")
        return link

    async def run(self) -> NoReturn:
        """Connect, serve, reconnect; forever. Only cancellation ends it."""
        while True:
            self._set_state(ConnectionState.CONNECTING, self.settings.url)
            detail = ""
            try:
                await self._serve_once()
            except TablesideDriverError as exc:  # the device went away or broke the protocol
                detail = str(exc)
            except Exception as exc:
                # A bug of ours, or of a plug-in driver. The table must not lose every device
                # over it: say so loudly, and treat it like a broken link.
                log.exception("driver_failed", device=self.name)
                detail = f"internal error: {exc!r}"
            self._set_state(ConnectionState.DISCONNECTED, detail)
            delay = self._backoff.next()
            log.info("device_reconnect", device=self.name, delay_s=round(delay, 3), why=detail)
            await asyncio.sleep(delay)

    async def _serve_once(self) -> None:
        reader, writer = await open_transport(self.settings.url, baudrate=self.settings.baudrate)
        link = FramedLink(
            reader,
            writer,
            self.protocol,
            self._on_message,
            name=f"{self.name}@{self.settings.url}",
            policy=self.settings.arq,
        )
        try:
            async with asyncio.TaskGroup() as tg:
                reading = tg.create_task(link.run(), name=f"{self.name}.link")
                self._link = link
                self.connects += 1
                self._set_state(ConnectionState.CONNECTED, self.settings.url)
                await self.on_link_up(link)
                self._backoff.reset()
                tg.create_task(self._watch_silence(link, reading), name=f"{self.name}.watchdog")
        except* TablesideDriverError as group:
            raise group.exceptions[0] from None
        finally:
            self._link = None
            await link.aclose()

    async def _watch_silence(self, link: FramedLink, reading: asyncio.Task[NoReturn]) -> None:
        timeout = self.settings.heartbeat_timeout
        while True:
            await asyncio.sleep(timeout / 4)
            silent = time.monotonic() - link.last_rx
            if silent > timeout * self.settings.stale_reconnect_after:
                reading.cancel()
                raise LinkLost(f"{self.name}: silent for {silent:.1f} s; reopening the link")
            if silent > timeout and self.state == ConnectionState.CONNECTED:
                self._set_state(ConnectionState.STALE, f"no frame for {silent:.1f} s")
