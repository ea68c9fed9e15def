"""A null modem on loopback TCP: two real sockets, with a hook that can drop, corrupt or split
the bytes going each way (after pymodbus' test null modem)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

Mangle = Callable[[str, bytes], list[bytes]]  # direction ("h2d" | "d2h"), chunk → chunks


def passthrough(direction: str, data: bytes) -> list[bytes]:
    return [data]


def byte_by_byte(direction: str, data: bytes) -> list[bytes]:
    return [bytes((b,)) for b in data]


Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def _accept_one() -> tuple[asyncio.Server, asyncio.Future[Streams]]:
    """A loopback server whose future gets the first connection's streams."""
    accepted: asyncio.Future[Streams] = asyncio.get_running_loop().create_future()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.set_result((reader, writer))

    return await asyncio.start_server(accept, "127.0.0.1", 0), accepted


@contextlib.asynccontextmanager
async def null_modem(mangle: Mangle = passthrough) -> AsyncIterator[tuple[Streams, Streams]]:
    """Yields ((host_reader, host_writer), (device_reader, device_writer))."""
    server, device_side = await _accept_one()
    relay, relay_in = await _accept_one()
    host = await asyncio.open_connection("127.0.0.1", relay.sockets[0].getsockname()[1])
    from_host = await relay_in
    to_device = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
    device = await device_side

    async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, direction: str) -> None:
        while data := await src.read(4096):
            for chunk in mangle(direction, data):
                dst.write(chunk)
                await dst.drain()
                if len(chunk) == 1:
                    await asyncio.sleep(0)  # really deliver one byte at a time
        dst.close()

    pumps = [
        asyncio.create_task(pump(from_host[0], to_device[1], "h2d"), name="nullmodem.h2d"),
        asyncio.create_task(pump(to_device[0], from_host[1], "d2h"), name="nullmodem.d2h"),
    ]
    try:
        yield host, device
    finally:
        for task in pumps:
            task.cancel()
        await asyncio.wait(pumps)
        for writer in (host[1], device[1], from_host[1], to_device[1]):
            writer.close()
        server.close()
        relay.close()
        await server.wait_closed()
        await relay.wait_closed()
