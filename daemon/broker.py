"""Finding a broker for ``tableside demo``: the configured one if it answers, otherwise an
embedded amqtt broker bound to 127.0.0.1 only (never reachable from the network)."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

import aiomqtt

__all__ = ["NoEmbeddedBroker", "broker_answers", "embedded_broker", "free_port"]


class NoEmbeddedBroker(RuntimeError):
    """No broker answered and the embedded one is not installed."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def broker_answers(url: str, within: float = 1.5) -> bool:
    """True when an MQTT broker accepts a connection at ``url`` within ``within`` seconds."""
    parts = urlsplit(url)
    try:
        async with asyncio.timeout(within):
            async with aiomqtt.Client(
                parts.hostname or "127.0.0.1", parts.port or 1883, timeout=within
            ):
                return True
    except (aiomqtt.MqttError, TimeoutError, OSError):
        return False


@asynccontextmanager
async def embedded_broker(port: int | None = None) -> AsyncIterator[str]:
    """Run an amqtt broker on 127.0.0.1; yields its mqtt:// URL."""
    try:
        from amqtt.broker import Broker  # imported here: only the demo needs it
    except ImportError as exc:
        raise NoEmbeddedBroker(
            "no MQTT broker answered, and the embedded one needs the demo extra: "
            "pip install 'tableside[demo]' (./dev.sh installs it), or pass --broker URL"
        ) from exc

    for name in ("amqtt", "transitions"):
        logging.getLogger(name).setLevel(logging.WARNING)
    port = port or free_port()
    broker = Broker(
        {
            "listeners": {"default": {"type": "tcp", "bind": f"127.0.0.1:{port}"}},
            "plugins": {
                "amqtt.plugins.authentication.AnonymousAuthPlugin": {"allow_anonymous": True}
            },
        }
    )
    await broker.start()
    try:
        yield f"mqtt://127.0.0.1:{port}"
    finally:
        await broker.shutdown()
