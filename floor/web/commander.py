"""The page's requests to the tables: each sent with its role's own broker login
(``MqttSender``), and the table's answer waited for (``Commander``), whichever way it comes
first: the MQTT v5 response on the request's response topic, or the ``command_result`` the
floor's store vouches for.
"""

from __future__ import annotations

import asyncio
import functools
import re
import secrets
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import structlog

from tableside.mqtt import codec
from tableside.mqtt.connection import Connection, Endpoint, MqttError, connect
from tableside.wire.payloads import CommandRequest, CommandResult, parse_payload
from tableside.wire.topics import Topics

__all__ = ["Commander", "MqttSender", "Request", "Response", "RoleLogin", "SendCommand"]

log = structlog.get_logger("tableside.floor.web")


@dataclass(frozen=True, slots=True)
class RoleLogin:
    """The broker login the floor uses to speak as a role."""

    username: str
    password: str | None = None


@dataclass(frozen=True, slots=True)
class Request:
    """One request of the page's to a table, as the commander made it."""

    table: str
    role: str
    command: str
    args: dict[str, object]
    #: random: no other client can guess it, and the table's answer names it
    request_id: str
    #: random MQTT v5 correlation data: a response counts only if it carries these back
    correlation: bytes


#: sends a request to its table as its role; returns once the broker has it
SendCommand = Callable[[Request], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Response:
    """A message heard on one of ``MqttSender``'s response topics: the table whose topic it
    came on, the role whose connection subscribed to it, its correlation data and payload, as
    received (``Commander.response`` judges it)."""

    table: str
    role: str
    correlation: bytes | None
    payload: bytes


@dataclass(frozen=True, slots=True)
class _Asked:
    """A request the page is waiting on: whom it asked, as whom, for what."""

    table: str
    role: str
    command: str
    correlation: bytes
    answer: asyncio.Future[dict[str, object]]


class Commander:
    """Sends a table command as a role (each role its own broker login) and waits for the
    table's answer, whichever way it comes first: the MQTT v5 response the table sends to the
    request's response topic (``response``, from ``MqttSender``), or the ``command_result`` the
    floor's store vouches for (``result``, from ``Live.stored``: a table on MQTT 3.1.1 sends
    no response). Either way an answer counts only from the table asked, for the request id
    this commander made (random: no other client can guess it), role and command alike; a
    response also only on that table's response topic of the asking role's connection, with
    this request's correlation data."""

    def __init__(self, send: SendCommand) -> None:
        self._send = send
        self._waiting: dict[str, _Asked] = {}
        if isinstance(send, MqttSender):  # its responses come here
            send.on_response = self.response

    #: how long the page waits for the table's answer
    answer_within_s = 5.0

    async def ask(
        self, table: str, role: str, command: str, args: dict[str, object]
    ) -> dict[str, object]:
        timeout = self.answer_within_s
        request = Request(table, role, command, args, f"floor-{uuid.uuid4().hex}",
                          secrets.token_bytes(16))  # fmt: skip
        waiter: asyncio.Future[dict[str, object]] = asyncio.get_running_loop().create_future()
        self._waiting[request.request_id] = _Asked(table, role, command, request.correlation,
                                                   waiter)  # fmt: skip
        try:
            await self._send(request)
            async with asyncio.timeout(timeout):
                return await waiter
        except TimeoutError:
            return {"ok": False, "error": f"no answer from table {table} in {timeout:g} s"}
        except PermissionError as exc:
            return {"ok": False, "error": str(exc)}
        except MqttError as exc:
            log.warning("floor_web_send_failed", table=table, role=role, error=str(exc))
            return {"ok": False, "error": f"the floor could not reach the broker: {exc}"}
        finally:
            self._waiting.pop(request.request_id, None)

    def result(self, table: str, answer: CommandResult) -> None:
        """``answer``, heard on ``table``'s ``command_result`` and vouched for by the store: the
        answer to a request of this commander's, or nothing."""
        self._answered(table, answer, "command_result")

    def response(self, response: Response) -> None:
        """A message on a response topic of ours: the answer to a request of this commander's
        if it is the table's ``CommandResult`` and carries that request's correlation data back
        on the asking role's connection, or nothing."""
        try:
            answer = parse_payload(CommandResult, response.payload)
        except ValueError as exc:
            log.warning("floor_response_unreadable", table=response.table, error=str(exc))
            return
        self._answered(response.table, answer, "response", response)

    def _answered(
        self, table: str, answer: CommandResult, via: str, response: Response | None = None
    ) -> None:
        """An answer arrived on ``table``'s topic (``via`` which): the waiting request's, if it
        is the one asked (its table, role and command; a ``response`` also on the asking role's
        connection, with its correlation data); whichever comes first is the page's."""
        asked = self._waiting.get(answer.request_id or "")
        if asked is None or asked.answer.done():
            return
        if response is not None and (
            response.role != asked.role
            or not secrets.compare_digest(response.correlation or b"", asked.correlation)
        ):
            log.warning("floor_response_not_the_askeds", table=table, role=response.role,
                        request_id=answer.request_id)  # fmt: skip
            return
        asked_for = (asked.table, asked.table, asked.role, asked.command)
        if (table, answer.table, answer.role, answer.command) != asked_for:
            log.warning("floor_answer_not_the_askeds", table=table, asked=asked.table,
                        request_id=answer.request_id, via=via)  # fmt: skip
            return
        log.debug("floor_answered", table=table, request_id=answer.request_id, via=via)
        asked.answer.set_result(answer.model_dump(mode="json"))


@dataclass(slots=True)
class _RoleLink:
    """A role's kept connection and the response topics it subscribed to (topic -> table)."""

    conn: Connection
    username: str
    #: this connection's random last level of its response topics
    token: str
    topics: dict[str, str] = field(default_factory=dict)
    #: tables whose response topic the broker refused: their requests go without one
    refused: set[str] = field(default_factory=set)


#: what may stand as one level of a topic (a login name in a response topic)
_LEVEL = re.compile(r"[^/+#\x00]+")


class MqttSender:
    """Publishes the page's requests with each role's own broker login, over one connection a
    role, opened at its first request and kept (``aclose`` ends them): a click costs a PUBLISH
    and its PUBACK, not a connection. A connection the broker dropped is opened again once for
    the request that found it gone.

    MQTT v5 request and response (docs/commands.md): each request names the response topic
    ``<prefix>/<table>/response/<login>/<token>`` (``token`` random, one per connection) with
    its correlation data; the connection subscribes to that topic the first time it asks that
    table (a topic with no wildcard: whatever a broker checks a subscription against, the
    ACL's ``pattern read <prefix>/+/response/%u/#`` grants it), and what arrives there goes to
    ``on_response`` (the commander's) with the table and role it came for."""

    def __init__(self, broker_url: str, prefix: str, logins: dict[str, RoleLogin]) -> None:
        if urlsplit(broker_url).scheme not in ("mqtt", "mqtts"):
            raise ValueError(f"{broker_url}: not an mqtt:// or mqtts:// broker URL")
        self._url = broker_url
        self._prefix = prefix
        self._logins = logins
        self._open: dict[str, _RoleLink] = {}
        self._lock = asyncio.Lock()
        #: where what arrives on a response topic goes (``Commander`` sets it)
        self.on_response: Callable[[Response], None] | None = None

    async def __call__(self, request: Request) -> None:
        body = CommandRequest(command=request.command, device="table", args=request.args,
                              request_id=request.request_id).model_dump_json()  # fmt: skip
        topic = Topics(self._prefix, request.table).command(request.role)
        async with self._lock:  # a floorperson acts a few times an hour: one at a time
            for attempt in (1, 2):
                link = await self._connection(request.role)
                try:
                    reply_to = await self._reply_to(link, request.table)
                    await link.conn.publish(
                        topic, body.encode(), response_topic=reply_to,
                        correlation=request.correlation if reply_to else None,
                    )  # fmt: skip
                    return
                except MqttError:
                    self._drop(request.role)
                    if attempt == 2:
                        raise

    async def _reply_to(self, link: _RoleLink, table: str) -> str | None:
        """This connection's response topic for ``table``, subscribed to; None where there can
        be none (a login that cannot be a topic level, a subscription the broker refused): the
        answer then comes from the store (``Commander.result``)."""
        if not _LEVEL.fullmatch(link.username) or table in link.refused:
            return None
        topic = Topics(self._prefix, table).response(link.username, link.token)
        if topic in link.topics:
            return topic
        try:
            await link.conn.subscribe([(topic, 1)])
        except MqttError as exc:
            if not link.conn.is_open:
                raise
            log.warning("floor_web_response_refused", topic=topic, error=str(exc))
            link.refused.add(table)
            return None
        link.topics[topic] = table
        return topic

    async def _connection(self, role: str) -> _RoleLink:
        opened = self._open.get(role)
        if opened is not None and opened.conn.is_open:
            return opened
        login = self._logins.get(role)
        if login is None:
            raise PermissionError(f"the floor has no broker login for the role {role}")
        endpoint = Endpoint(self._url, login.username, login.password)
        conn = await connect(endpoint, f"{login.username}-{secrets.token_hex(4)}")
        link = _RoleLink(conn, login.username, secrets.token_hex(8))
        # nothing is subscribed yet (a clean start), so nothing arrived before this
        conn.on_messages = functools.partial(self._heard, link, role)
        self._open[role] = link
        return link

    def _heard(self, link: _RoleLink, role: str, messages: list[codec.Publish]) -> None:
        """Messages on ``role``'s connection: each on one of its response topics to
        ``on_response``, with the table that topic is for; nothing else is subscribed to."""
        for m in messages:
            table = link.topics.get(m.topic)
            if table is None:
                log.warning("floor_web_unasked_message", topic=m.topic, role=role)
            elif self.on_response is not None:
                self.on_response(Response(table, role, m.correlation, m.payload))

    def _drop(self, role: str) -> None:
        opened = self._open.pop(role, None)
        if opened is not None:
            opened.conn.close()

    async def aclose(self) -> None:
        for role in list(self._open):
            self._drop(role)
