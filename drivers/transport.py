"""``open_transport(url)``: one way to open any device byte stream.

* ``/dev/ttyUSB0`` (any path): a local serial port through pyserial, polled by the event loop.
* ``socket://host:port``: raw TCP (a terminal server, or a simulator).
* ``usb://VID:PID[?serial=S]``: a USB device with a bulk IN and a bulk OUT endpoint, through
  pyusb (tableside.drivers.usb), which is blocking, so it runs in threads too.
* ``rfc2217://host:port``: a remote serial port over Telnet with RFC 2217 port control.
  pyserial's RFC 2217 client has no file descriptor the event loop could poll (it runs its own
  reader thread to handle Telnet negotiation), so the asyncio serial wrappers cannot drive it;
  it runs here in two threads of its own, bridged into the loop.

Every kind returns the stdlib (StreamReader, StreamWriter) pair, so drivers and simulators take
exactly the same code path whatever the wire is.
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
from typing import Any, Protocol
from urllib.parse import urlsplit

import serial
import serial_asyncio_fast

from tableside.drivers.errors import TransportOpenError

__all__ = [
    "DEFAULT_BAUDRATE",
    "BlockingPort",
    "SafeSerialTransport",
    "ThreadedTransport",
    "open_threaded",
    "open_transport",
]

DEFAULT_BAUDRATE = 9600
_READ_LIMIT = 64 * 1024


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


class SafeSerialTransport(serial_asyncio_fast.SerialTransport):
    """pyserial-asyncio-fast's transport with its deferred-write bugs fixed (upstream PR #36).

    In 0.16, after a partial write the transport registers a writer with the loop and never
    removes it once the buffer drains: the loop then spins calling ``_write_ready`` on an empty
    buffer, which fails an assertion on every turn. And a direct write into a full kernel buffer
    goes through ``Serial.write``, which retries EAGAIN in a busy loop and blocks the event loop.
    Here writes go straight to the non-blocking fd with ``os.write`` and the writer is removed
    as soon as the buffer is empty. tests/test_transport.py proves both.
    """

    def close(self) -> None:
        # Unsent bytes to a device we are leaving are dropped, not drained: the base class
        # runs tcdrain() in an executor thread, which never returns on a line nobody reads.
        if not self._closing:
            self._abort(None)

    def _write_ready(self) -> None:
        if not self._write_buffer:
            self._remove_writer()
            return
        data = b"".join(self._write_buffer)
        self._write_buffer.clear()
        self._write_data(data)
        if not self._write_buffer:
            self._remove_writer()
        self._maybe_resume_protocol()

    def _write_data(self, data: bytes | bytearray | memoryview) -> None:
        try:
            n = os.write(self._serial.fileno(), data)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError as exc:
            self._fatal_error(exc, "Fatal write error on serial transport")
            return
        if n == len(data):
            if self._closing and not self._write_buffer:
                self._close()
            return
        self._write_buffer.append(bytes(data[n:]))
        self._maybe_pause_protocol()
        self._ensure_writer()


async def _open_serial(
    path: str, baudrate: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    loop = asyncio.get_running_loop()
    ser = serial.serial_for_url(path, baudrate=baudrate, timeout=0, exclusive=True)
    # Bytes that sat in the driver's buffer while nobody listened are stale.
    ser.reset_input_buffer()
    reader, protocol = _streams(loop)
    transport = SafeSerialTransport(loop, protocol, ser)
    await asyncio.sleep(0)  # let connection_made run, as create_serial_connection does
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


class _PyserialPort:
    """A pyserial URL handler without a file descriptor (rfc2217://)."""

    def __init__(self, port: Any) -> None:
        self._port = port
        self.name = str(port.name)

    def read(self) -> bytes:
        data: bytes = self._port.read(max(1, self._port.in_waiting))
        return data

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
    def _open() -> object:
        return serial.serial_for_url(url, baudrate=baudrate, timeout=0.1)

    return await open_threaded(_PyserialPort(await asyncio.to_thread(_open)))
