"""``tableside record``: a tap between the daemon and its devices that writes a capture.

The recorder changes nothing in the daemon: the table's config points a device's ``url`` at the
recorder's pty or socket, and the recorder opens the real device through the same
``open_transport(url)`` the drivers use, forwards every byte both ways unchanged, and writes
each chunk, with its time and direction, to the capture (simulators/capture.py). Each record is
written and flushed as it happens, so a recorder that is killed keeps what it saw.

A session begins when the host opens the line: on a socket, when it connects; on a pty, which
has no connection, at the host's first byte (every tableside driver speaks first). The device
is opened then, and closed when the host goes away; a device that closes ends the session too
(the host sees the line drop, as it would have without the recorder).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TextIO

import structlog

from tableside.drivers.errors import TransportOpenError
from tableside.drivers.transport import open_transport
from tableside.simulators.capture import LinkInfo, Record, What, format_record, write_header
from tableside.simulators.listen import serve_pty, serve_socket

__all__ = ["RecordedLink", "Recorder"]

log = structlog.get_logger("tableside.record")

_CHUNK = 4096


@dataclass(frozen=True, slots=True)
class RecordedLink:
    """One link to record: the capture's description of it, and where the host connects."""

    info: LinkInfo
    #: "pty" or socket://host:port
    listen: str


class Recorder:
    """Forwards and records the links given; ``run()`` until cancelled."""

    def __init__(
        self,
        links: Sequence[RecordedLink],
        out: TextIO,
        *,
        comment: str = "",
        version: str,
    ) -> None:
        names = [link.info.name for link in links]
        if len(set(names)) != len(names):
            raise ValueError(f"link names must differ: {names}")
        self.links = list(links)
        self._out = out
        self._t0 = time.monotonic()
        #: records written, by link (tests and the CLI's summary read it)
        self.counts: dict[str, int] = dict.fromkeys(names, 0)
        write_header(out, [link.info for link in links], comment, version=version)
        out.flush()

    def _write(self, link: str, what: What, data: bytes = b"", by: str = "") -> None:
        t_ms = (time.monotonic() - self._t0) * 1000
        self._out.write(format_record(Record(t_ms, link, what, data, by)) + "\n")
        self._out.flush()
        self.counts[link] += 1

    async def run(self, ready: Callable[[str, str], None] | None = None) -> None:
        """Serve every link; ``ready(name, where)`` as each one listens."""
        async with asyncio.TaskGroup() as tg:
            for link in self.links:

                def on_ready(where: str, name: str = link.info.name) -> None:
                    if ready is not None:
                        ready(name, where)

                session = functools.partial(self._session, link)
                if link.listen == "pty":
                    tg.create_task(serve_pty(session, on_ready), name=f"record {link.info.name}")
                else:
                    tg.create_task(
                        serve_socket(link.listen, session, on_ready),
                        name=f"record {link.info.name}",
                    )

    async def _session(
        self, link: RecordedLink, host_r: asyncio.StreamReader, host_w: asyncio.StreamWriter
    ) -> None:
        name = link.info.name
        first = b""
        if link.listen == "pty":
            first = await host_r.read(_CHUNK)  # the host opened the line and spoke
            if not first:
                return
        try:
            dev_r, dev_w = await open_transport(link.info.device, baudrate=link.info.baudrate)
        except TransportOpenError as exc:
            # Nothing to forward to: the host sees a silent line, as with the device unplugged.
            log.error("record_device_open_failed", link=name, error=str(exc))
            self._out.write(f"# {name}: {exc}\n")
            await asyncio.sleep(1.0)
            return
        self._write(name, What.OPEN)
        try:
            if first:
                self._write(name, What.HOST, first)
                dev_w.write(first)
            to_dev = asyncio.create_task(
                self._pump(name, What.HOST, host_r, dev_w), name=f"record {name} host"
            )
            to_host = asyncio.create_task(
                self._pump(name, What.DEV, dev_r, host_w), name=f"record {name} dev"
            )
            try:
                done, _ = await asyncio.wait({to_dev, to_host}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (to_dev, to_host):
                    task.cancel()
                await asyncio.wait({to_dev, to_host})
            self._write(name, What.CLOSE, by="host" if to_dev in done else "dev")
            for task in done:
                if not task.cancelled() and (error := task.exception()) is not None:
                    log.info("record_session_ended", link=name, why=repr(error))
        finally:
            dev_w.close()
            with contextlib.suppress(ConnectionError, OSError):
                await dev_w.wait_closed()

    async def _pump(
        self, name: str, what: What, src: asyncio.StreamReader, dst: asyncio.StreamWriter
    ) -> None:
        """Copy until end of stream; each chunk is recorded before it is forwarded."""
        while data := await src.read(_CHUNK):
            self._write(name, what, data)
            dst.write(data)
            await dst.drain()
