"""USB devices as byte streams: ``usb://VID:PID[?serial=S]`` through pyusb.

The device has one interface with a bulk OUT and a bulk IN endpoint carrying the same frames a
serial line would (docs/protocols/card-reader.md). pyusb's calls block, so the port runs in the
threads of ``ThreadedTransport``. What the port does with USB's own errors:

* a read that times out is a quiet device, not an error: read again;
* EPIPE (the endpoint stalled) is cleared with CLEAR_HALT and the transfer tried again;
  the count of stalls is kept;
* ENODEV (unplugged, or re-enumerated) ends the link; the driver reconnects, which finds the
  device again by vendor, product and serial number once it is back;
* a write that times out three times running ends the link.

pyusb finds devices through a backend (libusb by default). ``set_backend`` replaces it, which is
how the simulated USB bus (tableside.simulators.usb) runs the unchanged driver without hardware.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import errno
import threading
from collections.abc import Iterator
from typing import Protocol
from urllib.parse import parse_qs, urlsplit

import usb.core
import usb.util

from tableside.drivers.errors import TransportOpenError
from tableside.drivers.transport import open_threaded

__all__ = ["UsbAddress", "UsbPort", "open_usb", "parse_usb_url", "set_backend"]

_backend: object = None
_READ_TIMEOUT_MS = 100
_WRITE_TIMEOUT_MS = 1000
_WRITE_TRIES = 3
#: how long close waits for a transfer under way: the longest a write can take
_CLOSE_WAIT_S = _WRITE_TRIES * _WRITE_TIMEOUT_MS / 1000 + 1


def set_backend(backend: object) -> None:
    """Use this pyusb backend to find devices (None: pyusb's default, libusb)."""
    global _backend
    _backend = backend


class UsbAddress:
    def __init__(self, vendor: int, product: int, serial: str | None) -> None:
        self.vendor, self.product, self.serial = vendor, product, serial

    def __str__(self) -> str:
        serial = f"?serial={self.serial}" if self.serial else ""
        return f"usb://{self.vendor:04x}:{self.product:04x}{serial}"


def parse_usb_url(url: str) -> UsbAddress:
    parts = urlsplit(url)
    vid, sep, pid = parts.netloc.partition(":")
    try:
        vendor, product = int(vid, 16), int(pid, 16)
    except ValueError:
        raise ValueError(f"{url}: expected usb://VID:PID in hex, e.g. usb://1209:0001") from None
    if not sep or not (0 <= vendor <= 0xFFFF and 0 <= product <= 0xFFFF):
        raise ValueError(f"{url}: expected usb://VID:PID in hex, e.g. usb://1209:0001")
    serial = parse_qs(parts.query).get("serial", [None])[0]
    return UsbAddress(vendor, product, serial)


class _Device(Protocol):
    """What of a pyusb ``usb.core.Device`` the search reads (pyusb has no type hints)."""

    @property
    def serial_number(self) -> str | None: ...


class _Endpoint(Protocol):
    """What of a pyusb ``usb.core.Endpoint`` the port uses."""

    @property
    def bEndpointAddress(self) -> int: ...  # the descriptor fields as USB and pyusb spell them
    @property
    def wMaxPacketSize(self) -> int: ...
    def read(self, size: int, timeout: int) -> array.array[int]: ...
    def write(self, data: bytes, timeout: int) -> int: ...


def _errno(exc: usb.core.USBError) -> int | None:
    return exc.errno if isinstance(exc.errno, int) else None


class UsbPort:
    """One claimed USB interface with a bulk IN and a bulk OUT endpoint."""

    def __init__(self, address: UsbAddress) -> None:
        self.name = str(address)
        self.stalls = 0
        self._lock = threading.Lock()
        self._closed = False
        self._transfers = 0  # under way, in the reader and writer threads
        self._idle = threading.Condition()

        def matches(dev: _Device) -> bool:
            if address.serial is None:
                return True
            try:
                return bool(dev.serial_number == address.serial)
            except (usb.core.USBError, ValueError):
                return False

        dev = usb.core.find(
            idVendor=address.vendor, idProduct=address.product, custom_match=matches,
            backend=_backend,
        )  # fmt: skip
        if dev is None:
            raise TransportOpenError(f"cannot open {address}: no such USB device")
        self._dev = dev
        dev.set_configuration()
        interface = dev.get_active_configuration()[(0, 0)]

        def endpoint(direction: int) -> _Endpoint:
            found: _Endpoint | None = usb.util.find_descriptor(
                interface,
                custom_match=lambda e: (
                    usb.util.endpoint_direction(e.bEndpointAddress) == direction
                    and usb.util.endpoint_type(e.bmAttributes) == usb.util.ENDPOINT_TYPE_BULK
                ),
            )
            if found is None:
                raise TransportOpenError(f"cannot open {address}: no bulk endpoint {direction:#x}")
            return found

        usb.util.claim_interface(dev, interface.bInterfaceNumber)
        try:
            self._in = endpoint(usb.util.ENDPOINT_IN)
            self._out = endpoint(usb.util.ENDPOINT_OUT)
        except BaseException:  # the claimed interface is released, not left to nobody
            with contextlib.suppress(usb.core.USBError):
                usb.util.dispose_resources(dev)
            raise

    def _clear_stall(self, ep: _Endpoint) -> None:
        self.stalls += 1
        with self._lock:
            self._dev.clear_halt(ep.bEndpointAddress)

    @contextlib.contextmanager
    def _transfer(self) -> Iterator[None]:
        """A transfer, only while the port is open: after ``dispose_resources`` pyusb would
        open the device and claim its interface again for it, a handle nobody releases."""
        with self._idle:
            if self._closed:
                raise ConnectionResetError(f"{self.name}: closed")
            self._transfers += 1
        try:
            yield
        finally:
            with self._idle:
                self._transfers -= 1
                self._idle.notify_all()

    def read(self) -> bytes:
        with self._transfer():
            try:
                return bytes(self._in.read(self._in.wMaxPacketSize, timeout=_READ_TIMEOUT_MS))
            except usb.core.USBTimeoutError:
                return b""
            except usb.core.USBError as exc:
                if _errno(exc) == errno.EPIPE:
                    self._clear_stall(self._in)
                    return b""
                raise ConnectionResetError(f"{self.name}: {exc}") from exc

    def write(self, data: bytes) -> None:
        with self._transfer():
            for _ in range(_WRITE_TRIES):
                try:
                    self._out.write(data, timeout=_WRITE_TIMEOUT_MS)
                    return
                except usb.core.USBTimeoutError:
                    continue
                except usb.core.USBError as exc:
                    if _errno(exc) != errno.EPIPE:
                        raise ConnectionResetError(f"{self.name}: {exc}") from exc
                    self._clear_stall(self._out)
            raise ConnectionResetError(f"{self.name}: write timed out {_WRITE_TRIES} times")

    def close(self) -> None:
        """Release the interface and the device, once the transfers under way have ended (each
        within its timeout); no transfer starts after. Blocks: call it from a thread."""
        with self._idle:
            self._closed = True
            self._idle.wait_for(lambda: self._transfers == 0, timeout=_CLOSE_WAIT_S)
        with contextlib.suppress(usb.core.USBError):  # an unplugged device has nothing to release
            usb.util.dispose_resources(self._dev)


async def open_usb(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    try:
        address = parse_usb_url(url)
    except ValueError as exc:
        raise TransportOpenError(f"cannot open {exc}") from exc
    opening = asyncio.ensure_future(asyncio.to_thread(UsbPort, address))
    try:
        port = await asyncio.shield(opening)
    except asyncio.CancelledError:
        # The thread opens the device whatever happens: what it opened is closed again before
        # the cancellation goes on (not whenever the collector happens to dispose of it).
        with contextlib.suppress(Exception):
            await asyncio.to_thread((await opening).close)
        raise
    except usb.core.USBError as exc:
        raise TransportOpenError(f"cannot open {address}: {exc}") from exc
    return await open_threaded(port)
