"""A simulated USB bus for pyusb: the unchanged USB driver runs against simulated devices.

pyusb finds and drives devices through a backend; ``SimulatedUsbBackend`` is one. Each
``SimulatedUsbDevice`` has real descriptors (one configuration, one vendor-class interface, a
bulk OUT and a bulk IN endpoint) and string descriptors, and carries its bulk traffic over a
socket pair to a device simulator's ``serve(reader, writer)`` running in the event loop.

Faults, as a real bus shows them to libusb:

* ``unplug(seconds)``: the device leaves the bus; every call on an open handle fails with
  ENODEV; after ``seconds`` it comes back as a new device (old handles stay dead);
* ``stall(n)``: the next ``n`` bulk reads fail with EPIPE and the endpoint stays halted until
  the host sends CLEAR_HALT;
* ``time_out_writes(n)``: the next ``n`` bulk writes time out.

pyusb walks alternate settings until the backend raises IndexError, so every descriptor lookup
past the last one raises IndexError (without it pyusb would loop forever).
"""

from __future__ import annotations

import array
import asyncio
import errno
import socket
import threading
import time
from types import SimpleNamespace

import structlog
import usb.backend
import usb.core

from tableside.simulators.listen import Connection

__all__ = ["SimulatedUsbBackend", "SimulatedUsbDevice"]

log = structlog.get_logger("tableside.sim.usb")

EP_OUT, EP_IN = 0x01, 0x81
_MAX_PACKET = 64


def _enodev() -> usb.core.USBError:
    return usb.core.USBError("No such device (it may have been disconnected)", -4, errno.ENODEV)


class SimulatedUsbDevice:
    """One device on the simulated bus, served by a simulator's ``serve``."""

    def __init__(
        self,
        vendor: int,
        product: int,
        serial: str,
        serve: Connection,
        loop: asyncio.AbstractEventLoop,
        *,
        manufacturer: str = "tableside",
        product_name: str = "simulated device",
    ) -> None:
        self.vendor, self.product, self.serial = vendor, product, serial
        self.strings = {1: manufacturer, 2: product_name, 3: serial}
        self._serve = serve
        self._loop = loop
        self._lock = threading.Lock()
        self.plugged = True
        self.generation = 0  # a re-plugged device is a new device: old handles are dead
        self.halted: set[int] = set()
        self.pending_stalls = 0
        self.pending_write_timeouts = 0
        self.sessions = 0
        #: how long the firmware takes to power up when the host claims the interface
        self.power_up_s = 0.0
        self._host: socket.socket | None = None
        self._sessions: set[asyncio.Task[None]] = set()
        self._closed = False

    # -- faults ----------------------------------------------------------------------------

    def unplug(self, seconds: float | None = None) -> None:
        """Pull the cable (call from the loop); plug back in after ``seconds`` if given."""
        log.info("usb_unplug", device=f"{self.vendor:04x}:{self.product:04x}", back_in_s=seconds)
        with self._lock:
            self.plugged = False
            self.generation += 1
            host, self._host = self._host, None
        if host is not None:
            host.shutdown(socket.SHUT_RDWR)
        if seconds is not None:
            self._loop.call_later(seconds, self.plug)

    def plug(self) -> None:
        with self._lock:
            self.plugged = True
            self.halted.clear()
        log.info("usb_plug", device=f"{self.vendor:04x}:{self.product:04x}")

    def stall(self, reads: int = 1) -> None:
        with self._lock:
            self.pending_stalls += reads

    def time_out_writes(self, writes: int = 1) -> None:
        with self._lock:
            self.pending_write_timeouts += writes

    # -- the session: host socket ↔ simulator ---------------------------------------------

    @property
    def running(self) -> int:
        """Sessions still being served (a host that closed its port ends its session)."""
        return len(self._sessions)

    def start_session(self, generation: int) -> socket.socket:
        """Power the firmware: the simulator starts serving. Called from a pyusb thread."""
        if self.power_up_s:
            time.sleep(self.power_up_s)
        host, device = socket.socketpair()
        with self._lock:
            if not self.plugged or generation != self.generation:
                host.close()
                device.close()
                raise _enodev()
            old, self._host = self._host, host
        if old is not None:
            old.shutdown(socket.SHUT_RDWR)
        self.sessions += 1

        async def run() -> None:
            reader, writer = await asyncio.open_connection(sock=device)
            try:
                await self._serve(reader, writer)
            finally:
                writer.close()

        def start() -> None:
            if self._closed:  # the bus was closed meanwhile: this session never starts
                device.close()
                return
            session = self._loop.create_task(run(), name="sim.usb.session")
            self._sessions.add(session)
            session.add_done_callback(self._sessions.discard)

        self._loop.call_soon_threadsafe(start)
        return host

    async def aclose(self) -> None:
        """Stop every session still running (one a host left behind too); none starts after."""
        self._closed = True
        if self._host is not None:
            self._host.shutdown(socket.SHUT_RDWR)
        sessions = set(self._sessions)
        for session in sessions:
            session.cancel()
        if sessions:
            await asyncio.wait(sessions)

    def host_socket(self, generation: int) -> socket.socket:
        with self._lock:
            if not self.plugged or generation != self.generation or self._host is None:
                raise _enodev()
            return self._host


class _Handle:
    def __init__(self, device: SimulatedUsbDevice) -> None:
        self.device = device
        self.generation = device.generation
        self.socket: socket.socket | None = None

    def live(self) -> SimulatedUsbDevice:
        d = self.device
        if not d.plugged or d.generation != self.generation:
            raise _enodev()
        return d


class SimulatedUsbBackend(usb.backend.IBackend):  # type: ignore[misc]  # pyusb is untyped
    def __init__(self, *devices: SimulatedUsbDevice) -> None:
        self.devices = list(devices)

    def enumerate_devices(self) -> object:
        return [d for d in self.devices if d.plugged]

    def get_device_descriptor(self, dev: SimulatedUsbDevice) -> object:
        return SimpleNamespace(
            bLength=18, bDescriptorType=1, bcdUSB=0x0200, bDeviceClass=0, bDeviceSubClass=0,
            bDeviceProtocol=0, bMaxPacketSize0=64, idVendor=dev.vendor, idProduct=dev.product,
            bcdDevice=0x0100, iManufacturer=1, iProduct=2, iSerialNumber=3, bNumConfigurations=1,
            address=self.devices.index(dev) + 2, bus=1, port_number=1, port_numbers=(1,), speed=3,
        )  # fmt: skip

    def get_configuration_descriptor(self, dev: SimulatedUsbDevice, config: int) -> object:
        if config != 0:
            raise IndexError(config)
        return SimpleNamespace(
            bLength=9, bDescriptorType=2, wTotalLength=32, bNumInterfaces=1, bConfigurationValue=1,
            iConfiguration=0, bmAttributes=0x80, bMaxPower=50, extra_descriptors=[],
        )  # fmt: skip

    def get_interface_descriptor(
        self, dev: SimulatedUsbDevice, intf: int, alt: int, config: int
    ) -> object:
        if (intf, alt, config) != (0, 0, 0):
            raise IndexError((intf, alt, config))
        return SimpleNamespace(
            bLength=9, bDescriptorType=4, bInterfaceNumber=0, bAlternateSetting=0, bNumEndpoints=2,
            bInterfaceClass=0xFF, bInterfaceSubClass=0, bInterfaceProtocol=0, iInterface=0,
            extra_descriptors=[],
        )  # fmt: skip

    def get_endpoint_descriptor(
        self, dev: SimulatedUsbDevice, ep: int, intf: int, alt: int, config: int
    ) -> object:
        if (intf, alt, config) != (0, 0, 0) or ep not in (0, 1):
            raise IndexError((ep, intf, alt, config))
        return SimpleNamespace(
            bLength=7, bDescriptorType=5, bEndpointAddress=(EP_OUT, EP_IN)[ep], bmAttributes=2,
            wMaxPacketSize=_MAX_PACKET, bInterval=0, bRefresh=0, bSynchAddress=0,
            extra_descriptors=[],
        )  # fmt: skip

    def open_device(self, dev: SimulatedUsbDevice) -> _Handle:
        if not dev.plugged:
            raise _enodev()
        return _Handle(dev)

    def close_device(self, handle: _Handle) -> None:
        handle.socket = None

    def set_configuration(self, handle: _Handle, config_value: int) -> None:
        handle.live()

    def get_configuration(self, handle: _Handle) -> int:
        handle.live()
        return 1

    def set_interface_altsetting(self, handle: _Handle, intf: int, altsetting: int) -> None:
        handle.live()

    def claim_interface(self, handle: _Handle, intf: int) -> None:
        handle.socket = handle.live().start_session(handle.generation)

    def release_interface(self, handle: _Handle, intf: int) -> None:
        handle.live()

    def is_kernel_driver_active(self, handle: _Handle, intf: int) -> bool:
        return False

    def clear_halt(self, handle: _Handle, ep: int) -> None:
        handle.live().halted.discard(ep)

    def ctrl_transfer(
        self, handle: _Handle, bmRequestType: int, bRequest: int, wValue: int, wIndex: int,
        data: array.array[int], timeout: int,
    ) -> int:  # fmt: skip
        dev = handle.live()
        if bmRequestType != 0x80 or bRequest != 6 or wValue >> 8 != 3:
            raise usb.core.USBError("Pipe error (request not supported)", -9, errno.EPIPE)
        index = wValue & 0xFF
        if index == 0:
            body = b"\x09\x04"  # language: English (United States)
        elif index in dev.strings:
            body = dev.strings[index].encode("utf-16-le")
        else:
            raise usb.core.USBError("Pipe error (no such string)", -9, errno.EPIPE)
        descriptor = bytes((2 + len(body), 3)) + body
        n = min(len(descriptor), len(data))
        data[:n] = type(data)(data.typecode, descriptor[:n])
        return n

    def bulk_write(
        self, handle: _Handle, ep: int, intf: int, data: array.array[int], timeout: int
    ) -> int:
        dev = handle.live()
        with dev._lock:
            if dev.pending_write_timeouts:
                dev.pending_write_timeouts -= 1
                raise usb.core.USBTimeoutError("Operation timed out", -7, errno.ETIMEDOUT)
        host = dev.host_socket(handle.generation)
        try:
            host.sendall(bytes(data))
        except OSError as exc:
            raise _enodev() from exc
        return len(data)

    def bulk_read(
        self, handle: _Handle, ep: int, intf: int, buff: array.array[int], timeout: int
    ) -> int:
        dev = handle.live()
        with dev._lock:
            if dev.pending_stalls:
                dev.pending_stalls -= 1
                dev.halted.add(ep)
            halted = ep in dev.halted
        if halted:
            raise usb.core.USBError("Pipe error", -9, errno.EPIPE)
        host = dev.host_socket(handle.generation)
        host.settimeout(max(timeout, 1) / 1000)
        try:
            data = host.recv(len(buff))
        except TimeoutError:
            raise usb.core.USBTimeoutError("Operation timed out", -7, errno.ETIMEDOUT) from None
        except OSError as exc:
            raise _enodev() from exc
        if not data:
            raise _enodev()
        buff[: len(data)] = type(buff)(buff.typecode, data)
        return len(data)
