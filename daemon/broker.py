"""Finding a broker for ``tableside demo``: the configured one if it answers, otherwise a
Mosquitto of the demo's own when the program is installed (MQTT v5: the floor can check the
chain), otherwise an embedded amqtt broker (MQTT 3.1.1); both bound to 127.0.0.1 only (never
reachable from the network)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Literal

from tableside.errors import ConfigurationError
from tableside.mqtt.client import Client
from tableside.mqtt.connection import Endpoint, MqttError

__all__ = [
    "NoEmbeddedBroker",
    "broker_answers",
    "broker_version",
    "embedded_broker",
    "forget_retained",
    "free_port",
    "mosquitto_broker",
    "mosquitto_program",
]


class NoEmbeddedBroker(ConfigurationError, RuntimeError):
    """No broker answered and the embedded one is not installed."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def broker_answers(url: str, within: float = 1.5) -> bool:
    """True when an MQTT broker accepts a connection at ``url`` within ``within`` seconds."""
    try:
        # 3.1.1: every broker speaks it (the embedded one nothing newer)
        async with Client(Endpoint(url, v5=False), within_s=within):
            return True
    except MqttError:
        return False


async def broker_version(url: str, within: float = 1.5) -> Literal["5", "3.1.1"] | None:
    """The MQTT version the broker at ``url`` takes: "5" when it accepts a v5 CONNECT, else
    "3.1.1" when it accepts that (a 3.1.1 broker refuses v5 with return code 1, or closes the
    connection, or says nothing); None when no broker answers."""
    for version in ("5", "3.1.1"):
        try:
            async with Client(Endpoint(url, v5=version == "5"), within_s=within):
                return version
        except MqttError:
            continue
    return None


async def forget_retained(endpoint: Endpoint, topics: str, within: float = 0.5) -> int:
    """Clear what the broker retains under ``topics`` (a filter): each retained message it
    sends on subscribing is replaced by an empty retained one. How many were cleared."""
    stale: list[str] = []
    async with Client(endpoint) as mqtt:
        await mqtt.subscribe(topics)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):  # retained messages follow the SUBACK at once
                async for message in mqtt.messages():
                    if message.retain and message.payload:
                        stale.append(message.topic)
        for topic in stale:
            await mqtt.publish(topic, b"", retain=True)
    return len(stale)


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


def mosquitto_program() -> str | None:
    """The mosquitto program, when it is installed."""
    found = shutil.which("mosquitto")
    if found is None and Path("/usr/sbin/mosquitto").exists():
        found = "/usr/sbin/mosquitto"
    return found


@asynccontextmanager
async def mosquitto_broker(program: str) -> AsyncIterator[str]:
    """Run a Mosquitto of our own on a free 127.0.0.1 port (no persistence); yields its URL."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="tableside-broker-") as directory:
        conf = Path(directory) / "mosquitto.conf"
        conf.write_text(
            f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
            "log_dest stderr\nlog_type error\n",
            encoding="utf-8",
        )
        proc = await asyncio.create_subprocess_exec(
            program, "-c", str(conf), stdin=subprocess.DEVNULL
        )
        url = f"mqtt://127.0.0.1:{port}"
        try:
            for _ in range(100):
                if await broker_answers(url, within=0.5) or proc.returncode is not None:
                    break
                await asyncio.sleep(0.05)
            if proc.returncode is not None:
                raise NoEmbeddedBroker(f"{program} exited with status {proc.returncode}")
            yield url
        finally:
            if proc.returncode is None:
                proc.terminate()
                try:
                    async with asyncio.timeout(10):
                        await proc.wait()
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
