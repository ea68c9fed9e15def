"""Where a simulator listens: ``socket://host:port`` or a fresh pseudo-terminal.

The pty is the device end of a serial line: the daemon opens the printed path exactly as it
would open /dev/ttyUSB0. The simulator keeps the slave side open itself so the line does not
hang up while the daemon is away (bytes written then wait in the line, as on a real UART with
a FIFO; the driver flushes them on open).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tty
from collections.abc import AsyncIterator, Callable, Coroutine
from urllib.parse import urlsplit

import structlog

__all__ = ["Connection", "PtyEndpoint", "serve_pty", "serve_socket"]

log = structlog.get_logger("tableside.sim")

Connection = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Coroutine[object, object, None]]


async def serve_socket(
    url: str, handler: Connection, ready: Callable[[str], None] | None = None
) -> None:
    """Accept connections on ``socket://host:port`` one at a time, forever.

    A new connection while one is served replaces it (the host reconnected).
    Port 0 picks a free port; ``ready`` gets the URL actually bound.
    """
    parts = urlsplit(url)
    if parts.scheme != "socket" or not parts.hostname or parts.port is None:
        raise ValueError(f"listen URL {url!r}: expected socket://host:port")
    current: asyncio.Task[None] | None = None

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal current
        if current is not None and not current.done():
            current.cancel()
            await asyncio.wait({current})
        task = current = asyncio.create_task(handler(reader, writer), name=f"serve {url}")
        try:
            await asyncio.wait({task})
            if not task.cancelled() and (exc := task.exception()) is not None:
                log.error("simulator_connection_failed", url=url, error=repr(exc))
        finally:
            writer.close()

    server = await asyncio.start_server(on_connect, parts.hostname, parts.port)
    async with server:
        host, port = server.sockets[0].getsockname()[:2]
        if ready is not None:
            ready(f"socket://{host}:{port}")
        try:
            await server.serve_forever()
        finally:
            if current is not None and not current.done():
                current.cancel()
                await asyncio.wait({current})


class PtyEndpoint:
    """A pty pair; ``path`` is what the daemon opens."""

    def __init__(self) -> None:
        self.master, self._slave = os.openpty()
        tty.setraw(self._slave)  # no echo, no line editing: a clean 8-bit line
        self.path = os.ttyname(self._slave)

    def close(self) -> None:
        for fd in (self.master, self._slave):
            with contextlib.suppress(OSError):
                os.close(fd)

    @contextlib.asynccontextmanager
    async def streams(self) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(loop=loop)
        rproto = asyncio.StreamReaderProtocol(reader, loop=loop)
        rtrans, _ = await loop.connect_read_pipe(
            lambda: rproto, os.fdopen(os.dup(self.master), "rb", buffering=0)
        )
        wtrans, wproto = await loop.connect_write_pipe(
            lambda: asyncio.StreamReaderProtocol(asyncio.StreamReader(loop=loop), loop=loop),
            os.fdopen(os.dup(self.master), "wb", buffering=0),
        )
        writer = asyncio.StreamWriter(wtrans, wproto, reader, loop)
        try:
            yield reader, writer
        finally:
            rtrans.close()
            wtrans.close()


async def serve_pty(handler: Connection, ready: Callable[[str], None] | None = None) -> None:
    """Serve one pty forever (the handler is called again whenever it returns)."""
    endpoint = PtyEndpoint()
    try:
        if ready is not None:
            ready(endpoint.path)
        while True:
            async with endpoint.streams() as (reader, writer):
                await handler(reader, writer)
    finally:
        endpoint.close()
