"""``open_transport(url)``: one way to open any device byte stream.

* ``/dev/ttyUSB0`` (any path): a local serial port opened by pyserial, its file descriptor
  polled by the event loop (SerialTransport, our own: no library's internals).
* ``socket://host:port``: raw TCP (a terminal server, or a simulator).
* ``usb://VID:PID[?serial=S]``: a USB device with a bulk IN and a bulk OUT endpoint, through
  pyusb (tableside.drivers.usb), which is blocking, so it runs in threads too.
* ``rfc2217://host:port``: a remote serial port over Telnet with RFC 2217 port control.
  pyserial's RFC 2217 client has no file descriptor the event loop could poll (it runs its own
  reader thread to handle Telnet negotiation), so the event loop cannot poll it; it runs here
  in two threads of its own, bridged into the loop.

Every kind returns the stdlib (StreamReader, StreamWriter) pair, so drivers and simulators take
exactly the same code path whatever the wire is.
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
from collections.abc import Callable
from typing import Protocol
from urllib.parse import urlsplit

import serial
import structlog

from tableside.drivers.errors import TransportOpenError

__all__ = [
    "DEFAULT_BAUDRATE",
    "BlockingPort",
    "SerialTransport",
    "ThreadedTransport",
    "open_threaded",
    "open_transport",
]

DEFAULT_BAUDRATE = 9600
_READ_LIMIT = 64 * 1024
#: a serial read takes at most this much (about a second of a 9600 baud line)
_MAX_READ = 1024
#: unsent bytes above which the protocol is paused (asyncio's default; resumed at a quarter)
_HIGH_WATER = 64 * 1024

log = structlog.get_logger("tableside.transport")


async def open_transport(
    url: str, *, baudrate: int = DEFAULT_BAUDRATE
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Open ``url``; raise TransportOpenError saying what and why when it cannot be opened."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        if scheme == "socket":
            host, port = _host_port(url)
            return await asyncio.open_connection(host, port, limit=_READ_LIMIT)
        if scheme == "rfc2217":
            _host_port(url)
            return await _open_threaded(url, baudrate)
        if scheme == "usb":
            from tableside.drivers.usb import open_usb  # pyusb is only loaded when used

            return await open_usb(url)
        if scheme in ("", "file"):
            return await _open_serial(parts.path if scheme == "file" else url, baudrate)
    except (OSError, serial.SerialException, ValueError) as exc:
        raise TransportOpenError(f"cannot open {url}: {exc}") from exc
    raise TransportOpenError(
        f"cannot open {url}: unknown scheme {scheme!r} "
        "(use a tty path, socket://host:port, rfc2217://host:port or usb://VID:PID)"
    )


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    if not parts.hostname or parts.port is None:
        raise TransportOpenError(f"cannot open {url}: expected {parts.scheme}://host:port")
    return parts.hostname, parts.port


def _streams(
    loop: asyncio.AbstractEventLoop,
) -> tuple[asyncio.StreamReader, asyncio.StreamReaderProtocol]:
    reader = asyncio.StreamReader(limit=_READ_LIMIT, loop=loop)
    return reader, asyncio.StreamReaderProtocol(reader, loop=loop)


class SerialTransport(asyncio.Transport):
    """A local serial port driven by the event loop: ``loop.add_reader``/``add_writer`` on its
    file descriptor, ``os.read``/``os.write`` on it (non-blocking), so no call ever waits.

    pyserial opens and configures the port; only its public API is used (``fileno``, ``port``,
    ``close``). Unsent bytes queue here; above the high-water mark the protocol is paused
    (``StreamWriter.drain`` waits) and resumed below the low one, as asyncio's own transports
    do. A read or write error (EIO: a pty whose other end went away, an adapter unplugged)
    ends the link: ``connection_lost(exc)``. POSIX only (the loop must poll a tty's fd).
    """

    def __init__(
        self, loop: asyncio.AbstractEventLoop, protocol: asyncio.Protocol, port: serial.Serial
    ) -> None:
        super().__init__({"serial": port})
        self._loop = loop
        self._protocol = protocol
        self._port = port
        self._fd: int = port.fileno()
        os.set_blocking(self._fd, False)
        self._buffer = bytearray()
        self._high, self._low = _HIGH_WATER, _HIGH_WATER // 4
        self._writing_paused = False  # the protocol's writing, paused by us
        self._reading_paused = False  # our reading, paused by the protocol
        self._reading = False  # the fd's reader is registered with the loop
        self._closing = False
        loop.call_soon(protocol.connection_made, self)
        loop.call_soon(self._update_reader)  # after connection_made, as asyncio's transports do

    def _update_reader(self) -> None:
        want = not (self._closing or self._reading_paused)
        if want and not self._reading:
            self._loop.add_reader(self._fd, self._read_ready)
        elif self._reading and not want:
            self._loop.remove_reader(self._fd)
        self._reading = want

    def _read_ready(self) -> None:
        try:
            data = os.read(self._fd, _MAX_READ)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._shutdown(exc)
            return
        if not data:  # a hang-up
            self._shutdown(ConnectionResetError(f"{self._port.port}: the line hung up"))
            return
        self._protocol.data_received(data)

    def is_reading(self) -> bool:
        return not (self._closing or self._reading_paused)

    def pause_reading(self) -> None:
        self._reading_paused = True
        self._update_reader()

    def resume_reading(self) -> None:
        self._reading_paused = False
        self._update_reader()

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or not data:
            return
        if not self._buffer:  # nothing queued: straight to the line, the rest waits
            try:
                sent = os.write(self._fd, data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as exc:
                self._shutdown(exc)
                return
            data = memoryview(data)[sent:]
            if not data:
                return
            self._loop.add_writer(self._fd, self._write_ready)
        self._buffer += data
        self._maybe_pause_protocol()

    def _write_ready(self) -> None:
        try:
            sent = os.write(self._fd, self._buffer)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._shutdown(exc)
            return
        del self._buffer[:sent]
        if not self._buffer:
            self._loop.remove_writer(self._fd)
        self._maybe_resume_protocol()

    def can_write_eof(self) -> bool:
        return False  # a serial line has no end of file

    def get_write_buffer_size(self) -> int:
        return len(self._buffer)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._low, self._high

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if high is None:
            high = _HIGH_WATER if low is None else 4 * low
        if low is None:
            low = high // 4
        if not high >= low >= 0:
            raise ValueError(f"high ({high!r}) must be >= low ({low!r}) must be >= 0")
        self._high, self._low = high, low
        self._maybe_pause_protocol()

    def _maybe_pause_protocol(self) -> None:
        if len(self._buffer) > self._high and not self._writing_paused:
            self._writing_paused = True
            self._call_protocol(self._protocol.pause_writing)

    def _maybe_resume_protocol(self) -> None:
        if self._writing_paused and len(self._buffer) <= self._low:
            self._writing_paused = False
            self._call_protocol(self._protocol.resume_writing)

    def _call_protocol(self, method: Callable[[], object]) -> None:
        try:
            method()
        except Exception as exc:  # the protocol's bug: reported, the transport goes on
            self._loop.call_exception_handler(
                {"message": f"protocol.{method.__name__}() failed", "exception": exc,
                 "transport": self, "protocol": self._protocol}
            )  # fmt: skip

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        """Let go of the device now. Unsent bytes are dropped, not drained: a device we are
        leaving may never read them (a drain would wait for ever)."""
        self._shutdown(None)

    def abort(self) -> None:
        self._shutdown(None)

    def _shutdown(self, exc: OSError | None) -> None:
        """Stop polling, drop the queue, close the port, then ``connection_lost(exc)``."""
        if self._closing:
            return
        self._closing = True
        self._update_reader()
        if self._buffer:
            self._loop.remove_writer(self._fd)
            self._buffer.clear()
        # Closing a tty waits for its driver to send what it still holds (up to 30 s on a
        # UART whose flow control holds it back): not on the loop. The port is released
        # before connection_lost, so wait_closed() means it can be opened again.
        try:
            closing = self._loop.run_in_executor(None, self._port.close)
        except RuntimeError:  # the loop's executor is already shut down: the loop is ending
            self._port.close()
            self._loop.call_soon(self._protocol.connection_lost, exc)
            return
        closing.add_done_callback(lambda done: self._closed(done, exc))

    def _closed(self, done: asyncio.Future[None], exc: OSError | None) -> None:
        if not done.cancelled() and (error := done.exception()) is not None:
            log.debug("serial_close_failed", port=self._port.port, error=repr(error))
        self._protocol.connection_lost(exc)


async def _open_serial(
    path: str, baudrate: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    loop = asyncio.get_running_loop()
    port = serial.Serial(path, baudrate=baudrate, timeout=0, exclusive=True)
    # Bytes that sat in the driver's buffer while nobody listened are stale.
    port.reset_input_buffer()
    reader, protocol = _streams(loop)
    transport = SerialTransport(loop, protocol, port)
    await asyncio.sleep(0)  # let connection_made run
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)


class BlockingPort(Protocol):
    """A device port with blocking calls, for ports the event loop cannot poll."""

    name: str

    def read(self) -> bytes:
        """Wait a short while (about 0.1 s) for bytes; b"" when none came."""

    def write(self, data: bytes) -> None: ...

    def close(self) -> None: ...


class ThreadedTransport(asyncio.Transport):
    """Drives a BlockingPort with a reader and a writer thread, bridged into the loop."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, protocol: asyncio.Protocol, port: BlockingPort
    ) -> None:
        super().__init__()
        self._loop = loop
        self._protocol = protocol
        self._port = port
        self._closing = False
        self._out: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._reader = threading.Thread(target=self._read_loop, name=f"rx {port.name}", daemon=True)
        self._writer = threading.Thread(
            target=self._write_loop, name=f"tx {port.name}", daemon=True
        )
        loop.call_soon(protocol.connection_made, self)
        self._reader.start()
        self._writer.start()

    def _read_loop(self) -> None:
        exc: Exception | None = None
        try:
            while not self._closing:
                data = self._port.read()
                if data:
                    self._loop.call_soon_threadsafe(self._protocol.data_received, data)
        except Exception as err:  # any failure of the port ends the link; reported below
            exc = err
        if not self._closing:
            self._loop.call_soon_threadsafe(self._lost, exc)

    def _write_loop(self) -> None:
        while (data := self._out.get()) is not None:
            try:
                self._port.write(data)
            except Exception as err:  # reported to the protocol as a lost connection
                self._loop.call_soon_threadsafe(self._lost, err)
                return

    def _lost(self, exc: Exception | None) -> None:
        self._shutdown(exc or ConnectionResetError(f"{self._port.name} closed"))

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._closing:
            self._out.put(bytes(data))

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        self._shutdown(None)

    def _shutdown(self, exc: Exception | None) -> None:
        if self._closing:
            return
        self._closing = True
        self._out.put(None)
        threading.Thread(target=self._port.close, name="close port", daemon=True).start()
        self._loop.call_soon(self._protocol.connection_lost, exc)

    def abort(self) -> None:
        self.close()

    def get_write_buffer_size(self) -> int:
        return self._out.qsize()


class _SerialForUrl(Protocol):
    """What of pyserial's ``serial_for_url`` port (a ``SerialBase``) the threaded transport
    uses: pyserial has no type hints."""

    @property
    def name(self) -> object: ...
    @property
    def in_waiting(self) -> int: ...
    def read(self, size: int) -> bytes: ...
    def write(self, data: bytes) -> object: ...
    def close(self) -> None: ...


class _PyserialPort:
    """A pyserial URL handler without a file descriptor (rfc2217://)."""

    def __init__(self, port: _SerialForUrl) -> None:
        self._port = port
        self.name = str(port.name)

    def read(self) -> bytes:
        return self._port.read(max(1, self._port.in_waiting))

    def write(self, data: bytes) -> None:
        self._port.write(data)

    def close(self) -> None:
        self._port.close()


async def open_threaded(port: BlockingPort) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Streams over a port that only offers blocking calls."""
    loop = asyncio.get_running_loop()
    reader, protocol = _streams(loop)
    transport = ThreadedTransport(loop, protocol, port)
    await asyncio.sleep(0)
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)


async def _open_threaded(
    url: str, baudrate: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    def _open() -> _SerialForUrl:
        port: _SerialForUrl = serial.serial_for_url(url, baudrate=baudrate, timeout=0.1)
        return port

    return await open_threaded(_PyserialPort(await asyncio.to_thread(_open)))
