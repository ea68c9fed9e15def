"""The baseline for bench/latency.py: a bare pty → MQTT forwarder, no rules, no models.

It does only what any bridge must: read the line, find frames (the same sans-IO decoder), ACK
them so the device goes on, and publish each one. Whatever tableside adds on top of this is
the cost of the product.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from urllib.parse import urlsplit

import aiomqtt

from tableside.drivers.framing import ACK, Frame, FrameDecoder, NeedData
from tableside.drivers.messages import MessageSet
from tableside.drivers.shuffler import protocol as p
from tableside.drivers.transport import open_transport


async def forward(pty: str, broker: str, topic: str, protocol: MessageSet) -> None:
    parts = urlsplit(broker)
    reader, writer = await open_transport(pty)
    decoder = FrameDecoder()
    async with aiomqtt.Client(parts.hostname or "127.0.0.1", parts.port or 1883) as client:
        while data := await reader.read(4096):
            decoder.feed(data)
            while not isinstance(frame := decoder.next_event(), NeedData):
                if not isinstance(frame, Frame) or frame.type in (ACK, 0x15):
                    continue
                writer.write(Frame(seq=frame.seq, type=ACK).to_bytes())
                message = protocol.decode(frame)
                shuffle_id = getattr(message, "shuffle_id", None)
                await client.publish(topic, json.dumps({"shuffle_id": shuffle_id}), qos=1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pty", required=True)
    parser.add_argument("--broker", required=True)
    parser.add_argument("--topic", default="bench/raw")
    args = parser.parse_args()
    asyncio.run(forward(args.pty, args.broker, args.topic, p.PROTOCOL))


if __name__ == "__main__":
    main()
