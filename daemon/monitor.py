"""``tableside monitor``: subscribe to one table and print its life, one line per message.

Each message is read as its topic's payload model (wire/payloads.py); one that does not read
is printed as ``BAD`` and counts for nothing. It checks the sequence numbers as it goes and
prints a ``GAP`` line when numbers are missing (``counted_seq``: retained and republished state,
the last will, an auditor's replay and a requester's response are repeats by design).

It connects with a persistent session (a stable client id, QoS 1), so what the table publishes
while the monitor is away from the broker (a broker restart, a network blip) is kept for it by
a broker with persistence on and arrives when it is back. A gap it still sees across one of its
own reconnects on which the broker had no session for it (CONNACK's session present) is its
own, said as such with the command that fetches the range from the table's journal; a gap while
it stayed connected, or across a reconnect to a kept session, is a loss before or at the broker.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

from pydantic import BaseModel, ValidationError

from tableside.drivers.backoff import Backoff
from tableside.mqtt.client import Client
from tableside.mqtt.connection import Endpoint, MqttError
from tableside.wire.events import ShuffleStatistics
from tableside.wire.payloads import (
    CheckpointPayload,
    CommandResult,
    DeviceEventPayload,
    DeviceStatePayload,
    Envelope,
    ReplayPayload,
    RulingPayload,
    RulingStatePayload,
    StatusPayload,
    TablePayload,
    model_of,
)
from tableside.wire.topics import Topic, TopicKind, Topics, parse_topic

__all__ = [
    "SESSION_EXPIRY_S",
    "Monitor",
    "counted_seq",
    "default_client_id",
    "format_message",
    "read_message",
]

#: MQTT v5: how long the broker keeps a monitor's session (and queues for it) while it is away
SESSION_EXPIRY_S = 24 * 3600


def default_client_id(table: str) -> str:
    """One stable id per person, machine and table: the same session every time they watch."""
    return f"tableside-monitor-{table}-{getpass.getuser()}-{socket.gethostname()}"


def _clock(ts: str) -> str:
    return ts[11:23] if len(ts) >= 23 else ts


def _level(test: dict[str, object]) -> float:
    level = test.get("level", 0)
    return level if isinstance(level, int | float) and not isinstance(level, bool) else 0


def format_message(topic: str, message: BaseModel, prefix: str = "tableside") -> str:
    """One readable line for one tableside payload, read as its topic's model
    (``read_message``)."""
    if isinstance(message, ReplayPayload):
        return (f"#{message.seq:>6} REPLAY  {message.topic} "
                f"(sent again from the journal for the auditor)")  # fmt: skip
    if not isinstance(message, Envelope):  # a request: not the table's own
        return f"{topic} {message.model_dump_json()}"
    head = f"{_clock(message.ts)} #{message.seq:>6}"
    flags = " (republished)" if message.republished else ""
    match message:
        case StatusPayload():
            will = " (last will)" if message.will else ""
            return f"{head} TABLE {message.table} is {message.status}{will}{flags}"
        case TablePayload():
            what = f"{message.phase}: {_table(message)} (after {message.cause})"
            return f"{head} TABLE   {what}{flags}"
        case RulingPayload():
            return _ruling(head, message)
        case RulingStatePayload():
            return _ruling_state(head, message)
        case DeviceStatePayload():
            return _device_state(head, message, flags)
        case DeviceEventPayload(event=ShuffleStatistics.kind):
            return _statistics(head, message)
        case DeviceEventPayload():
            detail = " ".join(f"{k}={v}" for k, v in message.data.items()
                              if v not in ("", [], None))  # fmt: skip
            return f"{head} {message.device!s:<10} {message.event}: {detail}"
        case CheckpointPayload():
            return (f"{head} TABLE   checkpoint: signed up to #{message.upto_seq} "
                    f"(head {message.head[:16]}…)")  # fmt: skip
        case CommandResult() if _kind(prefix, topic) is TopicKind.COMMAND_RESULT:
            outcome = "ok" if message.ok else f"refused: {message.error}"
            who = f"{message.device or '?':<10} {message.role}"
            return f"{head} {who} command {message.command} {outcome}"
    return f"{head} {topic} {json.dumps(message.model_dump(mode='json'))}"


def _kind(prefix: str, topic: str) -> TopicKind | None:
    where = parse_topic(prefix, topic)
    return where.kind if where is not None else None


def _table(message: TablePayload) -> str:
    parts = [f"round {message.round}",
             f"rounds since stub count {message.rounds_since_stub_count}"]  # fmt: skip
    if message.deck_age_h is not None:
        parts.append(f"deck age {message.deck_age_h:.2f} h")
    if message.meter_cents is not None:
        parts.append(f"meter ${message.meter_cents / 100:,.2f}")
    return ", ".join(parts)


def _ruling(head: str, message: RulingPayload) -> str:
    actions = ", ".join(message.actions)
    affected = f" [{', '.join(message.affected)}]" if message.affected != ["all"] else ""
    source = f"{message.event.device} {message.event.event} #{message.event.seq}"
    return (f"{head} RULING  {message.clause} → {actions}{affected}\n"
            f"{'':>20}{message.summary} (from {source})")  # fmt: skip


def _ruling_state(head: str, message: RulingStatePayload) -> str:
    by = f" by {message.by}" if message.by else ""
    done = f": {message.action}" if message.action else ""
    note = f" — {message.note}" if message.note else ""
    halt = "; dealing halted" if message.halts else ""
    return (f"{head} RULING  #{message.ruling} {message.state.upper()}{by}{done}{note} "
            f"({message.clause}, {message.open_s} s after it{halt})")  # fmt: skip


def _device_state(head: str, message: DeviceStatePayload, flags: str) -> str:
    ident = message.identity
    who = f" {ident.model} s/n {ident.serial} fw {ident.firmware_version}" if ident else ""
    extra = " ".join(f"{name}={value}" for name, value in
                     (("device_state", message.device_state), ("fault", message.fault))
                     if value is not None)  # fmt: skip
    line = f"{head} {message.device!s:<10} state {message.connection}{who} {extra}{flags}"
    return line.rstrip()


def _statistics(head: str, message: DeviceEventPayload) -> str:
    data = message.data  # the device's own data, which the payload model takes as any object
    tests = data.get("tests")
    rows = [t for t in tests if isinstance(t, dict)] if isinstance(tests, list) else []
    top = max(rows, key=_level, default={})
    highest = f"highest level {_level(top)} ({top.get('test', '-')})"
    return (f"{head} {message.device!s:<10} shuffle_statistics: {data.get('shuffles')} "
            f"tested ({data.get('with_input')} with the order fed), {data.get('alerts')} "
            f"alerts; {highest}")  # fmt: skip


#: kinds whose messages repeat a record rather than being one: the records an auditor's replay
#: sends again (``"replayed": true``, each with its record's seq), and the copy of a result the
#: table sends at once to the requester's response topic, ahead of the journal's queue
_COPIES = frozenset({TopicKind.REPLAY, TopicKind.RESPONSE})


def read_message(prefix: str, topic: str, payload: bytes) -> tuple[Topic, BaseModel]:
    """The message as its topic's payload model; ValueError says why it is not one. Strict: the
    loss rule reads ``seq`` and flags, and a lax reading (``parse_payload``'s) would take
    ``"7"``, ``7.0`` or ``true`` for a seq and ``1`` or ``"true"`` for ``republished``."""
    where = parse_topic(prefix, topic)
    if where is None:
        raise ValueError("not a topic docs/mqtt.md lists")
    model = model_of(where.kind)
    try:
        return where, model.model_validate_json(payload, strict=True)
    except ValidationError as exc:
        first = exc.errors()[0]
        at = ".".join(str(x) for x in first["loc"]) or "payload"
        raise ValueError(f"{at}: {first['msg']}") from None


def counted_seq(kind: TopicKind, message: BaseModel, retained: bool) -> int | None:
    """The seq the loss rule counts for this message (docs/mqtt.md, "How to check for loss");
    None for a repeat by design: retained or republished state, the last will, a copy."""
    if retained or kind in _COPIES or not isinstance(message, Envelope):
        return None
    if message.republished or (isinstance(message, StatusPayload) and message.will):
        return None
    return message.seq


@dataclass
class Monitor:
    url: str
    table: str
    prefix: str = "tableside"
    out: TextIO | None = None
    #: each message the monitor reads, as its topic and its model (``read_message``)
    on_message: Callable[[Topic, BaseModel], None] | None = None
    #: credentials, TLS and MQTT version (BrokerConfig.endpoint()) when the broker wants them;
    #: None: MQTT v5 at ``url``, no login
    endpoint: Endpoint | None = None
    #: the session's client id; None: a clean session each time (what comes while away is lost)
    client_id: str | None = None
    #: take up the session a previous run left (False: end it first, then keep a new one
    #: across reconnects)
    resume: bool = True
    seen: set[int] = field(default_factory=set)
    #: seq ranges missing while the monitor stayed connected: lost before or at the broker
    gaps: list[tuple[int, int]] = field(default_factory=list)
    #: seq ranges missing across one of the monitor's own reconnects: its session was not kept
    missed: list[tuple[int, int]] = field(default_factory=list)
    connections: int = 0
    #: (how to fetch a range from the table's journal) e.g. "--config /etc/tableside/cs-01.toml"
    journal_hint: str = "--config <the table's config>"
    _high: int | None = None
    #: connected again to a broker that had no session for it: a gap before the next new seq
    #: is the monitor's own
    _session_lost: bool = False

    def _count(self, seq: int) -> str | None:
        """The loss rule for one counted seq: the GAP line when numbers before it are missing."""
        if seq in self.seen:  # a repeat: the table's redelivered, or the broker's DUP
            return None
        self.seen.add(seq)
        high = self._high
        if high is not None and seq < high:  # late, behind a higher one: decides nothing
            return None
        self._high = seq
        session_lost, self._session_lost = self._session_lost, False
        if high is None or seq == high + 1:
            return None
        first, last = high + 1, seq - 1
        if session_lost:
            self.missed.append((first, last))
            return (
                f"GAP (this monitor's): seq {first}..{last} not received while the monitor "
                "was away from the broker (the broker did not keep its session: restarted "
                "without persistence, or the session expired); the table has them: "
                f"tableside journal export {self.journal_hint} --from-seq {first} "
                f"--to-seq {last}"
            )
        self.gaps.append((first, last))
        return f"GAP: seq {first}..{last} not received (lost before or at the broker)"

    def _on_connection(self, session_present: bool) -> None:
        """A connection is made: when the broker had no session for the monitor (CONNACK), what
        the table published since the last one is lost to it, and a gap before the next new
        message is its own."""
        self._session_lost = self.connections > 0 and not session_present
        self.connections += 1

    def _print(self, line: str) -> None:
        if self.out is not None:
            print(line, file=self.out, flush=True)

    def _session(self) -> Client:
        """This connection's client: with a client id, the session kept across the monitor's
        reconnects and broker restarts. Its CONNECT never asks for a clean start: Mosquitto
        saves to disk only the sessions whose CONNECT did not (persist__client_save), so one
        begun clean lives only until the broker restarts."""
        endpoint = self.endpoint or Endpoint(self.url)
        if self.client_id is None:
            return Client(endpoint)
        return Client(endpoint, self.client_id, clean_start=False,
                      session_expiry=SESSION_EXPIRY_S)  # fmt: skip

    async def _end_old_session(self, client_id: str) -> None:
        """Not resuming: the session a previous run left (and what it queued) ends with a
        clean connection that keeps nothing; the monitor's own session then begins."""
        endpoint = self.endpoint or Endpoint(self.url)
        async with Client(endpoint, client_id, clean_start=True, session_expiry=0):
            pass

    async def run(self) -> None:
        backoff = Backoff(initial=0.2, maximum=5.0)  # small again after a working connection
        loop = asyncio.get_running_loop()
        while True:
            subscribed = False
            try:
                if self.client_id is not None and not self.resume and self.connections == 0:
                    await self._end_old_session(self.client_id)
                async with self._session() as c:
                    backoff.connected(loop.time())
                    self._on_connection(c.session_present)
                    await c.subscribe(Topics(self.prefix, self.table).everything)
                    subscribed = True
                    async for message in c.messages():
                        self._handle(message.topic, message.payload, message.retain)
            except MqttError as exc:
                self._print(f"-- broker {self.url}: {exc}; reconnecting")
                backoff.ended(loop.time(), worked=subscribed)
                await asyncio.sleep(backoff.next())

    def _handle(self, topic: str, payload: bytes, retained: bool) -> None:
        where = parse_topic(self.prefix, topic)
        if where is not None and where.kind is TopicKind.COMMAND:
            return  # requests, not the table's own messages
        try:
            where, message = read_message(self.prefix, topic, payload)
        except ValueError as exc:
            self._print(f"BAD {topic}: {exc}: {payload!r:.80}")
            return
        seq = counted_seq(where.kind, message, retained)
        note = self._count(seq) if seq is not None else None
        if note:
            self._print(note)
        self._print(format_message(topic, message, self.prefix))
        if self.on_message is not None:
            self.on_message(where, message)
