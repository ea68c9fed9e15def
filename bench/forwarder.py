"""The baseline for bench/latency.py: a bare pty → MQTT forwarder, no rules, no models.

It does only what any bridge must: read the line, find frames, ACK each one so the device goes
on, and publish it (QoS 1, up to ``WINDOW`` awaiting their PUBACKs while the next frames are
read, as tableside's publisher does; awaiting each PUBACK before reading on held one device to
one frame per broker round trip, which made this twin slower than an independent one:
../shared/perf/fwd.py). Whatever tableside adds on top of this is the
cost of the product. Independent of tableside: its own minimal framing (start byte 0xA5, LEN,
SEQ, TYPE, payload, CRC-16/CCITT-FALSE: docs/protocols/shuffler.md), nothing imported from
the daemon, so a change to the daemon's decoder cannot move the baseline.

One task per ``--pty``; frames from the n-th go to ``<topic>/<n>``. ``--ready-topic``: publish
``online`` there once connected (for cold-start timing).

``--journal DIR``: the journal twin: each frame journaled in tableside's own journal
(``daemon/journal``: numbered, chained, one log sync per batch, SQLite behind) and waited for
before it is ACKed or published: the limit for "journaled in SQLite, synced, then sent", with
nothing of the rest of the daemon (no drivers, rules, models or its MQTT client).

``--durable FILE``: the durable twin, the honest limit for a daemon that journals before it
sends (issue 20). The same code, but every frame of one read is appended to FILE and made durable
with one ``fdatasync`` before any of them is ACKed or published: on the event loop for one
device (no thread hop: the least a journal can do, as the independent twin does), on a worker
thread for several (so other devices' reads go on).
"""

from __future__ import annotations

import argparse
import asyncio
import binascii
import json
import os
import termios
import tty
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import aiomqtt

if TYPE_CHECKING:
    from tableside.daemon.journal import Journal

START, ACK, NAK, SHUFFLE_COMPLETE = 0xA5, 0x06, 0x15, 0x23


def frame(seq: int, kind: int, payload: bytes = b"") -> bytes:
    body = bytes((len(payload), seq, kind)) + payload
    return bytes((START,)) + body + binascii.crc_hqx(body, 0xFFFF).to_bytes(2, "big")


def frames(buffer: bytearray) -> list[tuple[int, int, bytes]]:
    """Whole intact frames at the front of ``buffer`` (taken out of it): (seq, type, payload).
    Garbage and damaged frames are skipped a byte at a time."""
    found: list[tuple[int, int, bytes]] = []
    while True:
        start = buffer.find(START)
        if start < 0:
            buffer.clear()
            return found
        del buffer[:start]
        if len(buffer) < 6 or len(buffer) < 6 + buffer[1]:
            return found
        end = 6 + buffer[1]
        body, crc = bytes(buffer[1 : end - 2]), int.from_bytes(buffer[end - 2 : end], "big")
        if binascii.crc_hqx(body, 0xFFFF) != crc:
            del buffer[:1]
            continue
        found.append((body[1], body[2], body[3:]))
        del buffer[:end]


async def open_pty(path: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    fd = os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
    tty.setraw(fd)
    termios.tcflush(fd, termios.TCIOFLUSH)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(os.dup(fd), "rb", buffering=0)
    )
    transport, protocol = await loop.connect_write_pipe(
        asyncio.Protocol, os.fdopen(fd, "wb", buffering=0)
    )
    writer = asyncio.StreamWriter(transport, protocol, reader, loop)
    return reader, writer


def append_durably(fd: int, data: bytes) -> None:
    """Append ``data`` and return once it is on the disk (one fdatasync)."""
    os.write(fd, data)
    os.fdatasync(fd)


#: QoS 1 publishes awaiting their PUBACK at once (aiomqtt's own default window is 20)
WINDOW = 100


def _raw(data: bytes) -> Callable[[int], bytes]:
    return lambda _seq: data


async def forward_one(path: str, client: aiomqtt.Client, topic: str, durable: int | None,
                      *, threaded: bool, journal: Journal | None = None) -> None:  # fmt: skip
    reader, writer = await open_pty(path)
    buffer = bytearray()
    window = asyncio.Semaphore(WINDOW)
    publishing: set[asyncio.Task[None]] = set()

    async def publish(payload: str) -> None:
        try:
            await client.publish(topic, payload, qos=1)
        finally:
            window.release()

    while data := await reader.read(4096):
        buffer += data
        found = [(seq, kind, payload) for seq, kind, payload in frames(buffer)
                 if kind not in (ACK, NAK)]  # fmt: skip
        if journal is not None and found:  # the journal twin: tableside's journal, nothing else
            for seq, kind, payload in found:
                last = journal.append(topic, _raw(frame(seq, kind, payload)))
            await journal.wait_durable(last.seq)
        elif durable is not None and found:
            record = b"".join(frame(seq, kind, payload) for seq, kind, payload in found)
            if threaded:
                await asyncio.to_thread(append_durably, durable, record)
            else:
                append_durably(durable, record)
        for seq, kind, payload in found:
            writer.write(frame(seq, ACK))
            if kind == SHUFFLE_COMPLETE and len(payload) >= 4:
                shuffle_id = int.from_bytes(payload[:4], "big")
                await window.acquire()
                task = asyncio.create_task(publish(json.dumps({"shuffle_id": shuffle_id})))
                publishing.add(task)
                task.add_done_callback(publishing.discard)


async def forward(
    ptys: list[str],
    broker: str,
    topic: str,
    ready_topic: str | None,
    durable: str | None,
    journal_dir: str | None = None,
) -> None:
    fd = None if durable is None else os.open(durable, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    journal = None
    if journal_dir is not None:  # imported here: the other sides import nothing of tableside
        from tableside.daemon.journal import Journal

        journal = Journal(Path(journal_dir) / "journal.sqlite", "bench")
        journal.open()
        journal.start()
    parts = urlsplit(broker)
    async with aiomqtt.Client(parts.hostname or "127.0.0.1", parts.port or 1883,
                              max_inflight_messages=WINDOW) as client:  # fmt: skip
        client.pending_calls_threshold = WINDOW + 10
        if ready_topic:
            await client.publish(ready_topic, "online", qos=1, retain=True)
        async with asyncio.TaskGroup() as tg:
            for n, path in enumerate(ptys):
                tg.create_task(forward_one(path, client, f"{topic}/{n}", fd,
                                           threaded=len(ptys) > 1, journal=journal))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pty", required=True, action="append")
    parser.add_argument("--broker", required=True)
    parser.add_argument("--topic", default="bench/raw")
    parser.add_argument("--ready-topic")
    parser.add_argument("--durable", metavar="FILE", help="append and fdatasync each read first")
    parser.add_argument("--journal", metavar="DIR", help="journal each frame in tableside's "
                        "journal first, and wait for it (the journal twin)")  # fmt: skip
    args = parser.parse_args()
    asyncio.run(forward(args.pty, args.broker, args.topic, args.ready_topic, args.durable,
                        args.journal))  # fmt: skip


if __name__ == "__main__":
    main()
