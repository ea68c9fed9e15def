"""The simple clients' way to the broker (the monitor, ``tableside command``, the demo's broker
helpers): ``async with Client(endpoint) as client``, then ``subscribe``, ``publish`` (QoS 1,
returns on its PUBACK) and ``messages()`` (each acknowledged on receipt). Underneath, the one
connection every tableside client uses (mqtt/connection.py)."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from types import TracebackType

from tableside.mqtt import codec
from tableside.mqtt.connection import Connection, Endpoint, MqttError, connect

__all__ = ["Client"]


class Client:
    """Connected for the life of an ``async with``. ``client_id`` None: a random one, each
    connection a clean session; given, ``clean_start`` and ``session_expiry`` (seconds, v5)
    say whether the broker keeps the session across connections."""

    def __init__(
        self,
        endpoint: Endpoint,
        client_id: str | None = None,
        *,
        clean_start: bool = True,
        session_expiry: int = 0,
        keepalive: int = 30,
        within_s: float = 10.0,
    ) -> None:
        self.endpoint = endpoint
        self.client_id = client_id or f"tableside-{secrets.token_hex(6)}"
        self.clean_start = clean_start
        self.session_expiry = session_expiry
        self.keepalive = keepalive
        self.within_s = within_s
        #: None: the connection ended
        self._queue: asyncio.Queue[codec.Publish | None] = asyncio.Queue()
        self._conn: Connection | None = None

    async def __aenter__(self) -> Client:
        self._conn = await connect(
            self.endpoint, self.client_id, keepalive=self.keepalive,
            clean_start=self.clean_start, session_expiry=self.session_expiry,
            on_messages=self._received, within_s=self.within_s,
        )  # fmt: skip
        self._conn.closed.add_done_callback(lambda _: self._queue.put_nowait(None))
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _received(self, messages: list[codec.Publish]) -> None:
        for message in messages:
            self._queue.put_nowait(message)

    @property
    def conn(self) -> Connection:
        if self._conn is None:
            raise MqttError("not connected (use the client in `async with`)")
        return self._conn

    @property
    def session_present(self) -> bool:
        """Whether the broker kept a session for this client id (its CONNACK, 3.2.2.1.1)."""
        return self.conn.limits.session_present

    async def subscribe(self, topic: str, options: int = 1) -> None:
        """QoS 1 unless ``options`` says otherwise (codec.subscribe's options byte)."""
        await self.conn.subscribe([(topic, options)])

    async def publish(self, topic: str, payload: bytes | str, *, retain: bool = False) -> None:
        data = payload.encode() if isinstance(payload, str) else payload
        await self.conn.publish(topic, data, retain=retain)

    async def messages(self) -> AsyncIterator[codec.Publish]:
        """Every message, in the order received; ends with ``MqttError`` when the connection
        does (what was queued before is delivered first)."""
        conn = self.conn
        while (message := await self._queue.get()) is not None:
            yield message
        conn.closed.result()  # raises why it ended
        raise MqttError("connection closed")
