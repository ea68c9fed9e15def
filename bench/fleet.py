"""A fleet of tables for the floor: N simulated tables publishing what real tables publish, at a
set rate, without N daemons; and a few real daemons with simulated devices mixed in.

Each simulated table is what a table's daemon is on the wire, built from the daemon's own parts:

* its own MQTT v5 connection (client id ``tableside-<table>``, its login if ``--password``), a
  retained ``online`` status (``offline`` on a clean stop, and as its last will);
* a Caribbean Stud round after round, run through the real rule engine and table state machine
  (rules/): the shuffler's ``shuffle_started`` and ``shuffle_complete`` (every
  ``--bad-deck-every``-th shuffle counts 51 cards: a real 555.5(b) ruling), people's commands
  (``bets_open``, ``no_more_bets``, ``round_settled``, a stub count every fourth round) with
  their ``command_result``, the shoe's ``deal_started``, a ``stack_dispensed`` per hand and
  ``deal_complete`` sent back to back at the round's end (the burst), the table's retained state
  whenever it changes, the rulings the rows give, and retained device states;
* a seq per table from 0, each message with its chain entry as MQTT v5 user properties
  (``proof.Chain``: ``record_hash`` over the exact payload bytes, payloads from
  wire/payloads.py's models, so they match docs/schemas/), and a signed checkpoint
  (``proof.sign_checkpoint``) every ``--checkpoint-interval`` seconds and on stop, with a key per
  table written to ``<out>/keys/<table>.pem``; ``<out>/keys.json`` holds every table's public
  key, to enrol on the floor;
* after a lost connection it connects again (backing off, at most 5 s apart), sends again the
  message whose acknowledgement never came, marked ``"redelivered": true`` (``proof.marked``:
  its chain entry still holds), and journals a new ``online`` (on every connection: the daemon
  does so after a connection that lived ``STABLE_S``, and sends the same one again after a flap);
* it answers the floor's ``replay`` (``<prefix>/<table>/command/auditor``, docs/floor.md) from
  its journal, kept in memory: each record asked for, again, on ``<prefix>/<table>/replay``
  (``ReplayPayload``, QoS 1), as the daemon sends them, and refuses what the daemon refuses
  (more than 5,000, or beyond its newest record). Unlike the daemon it journals no
  ``command_result`` for it (its journal is never pruned: there is no ``pruned_before`` to say).

``--rate`` is messages per second per table, on average over a round (a round is ~20
messages: most spread evenly, the end-of-round burst at once). Tables start spread over the
first seconds (``--ramp``), so their bursts do not line up.

``--daemons K`` also runs K real table daemons (daemon/app.py) in this process, each with a
simulated shuffler on a loopback socket with faults (rulings), under ``<out>/daemons/``; their
keys (made as a daemon makes its own, ``proof.load_or_create_key``) are in keys.json too.

At the end ``<out>/fleet.json`` says, per table, the first and the last seq of this run (every
seq from one to the other was acknowledged by the broker; a simulated table starts at 0, a
daemon whose journal is kept in ``<out>`` from an earlier run goes on from it), the messages,
redeliveries and reconnections: what a checker needs to confirm the floor lost nothing.

    .venv/bin/python bench/fleet.py --tables 1000 --rate 2 --duration 60 \\
        --broker mqtt://127.0.0.1:1883 --out /tmp/fleet [--daemons 2]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import random
import resource
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import aiomqtt
import structlog
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions
from provenance import machine

from tableside import __version__
from tableside.daemon.app import TableDaemon
from tableside.daemon.config import BrokerConfig, Config, DeviceConfig, TableConfig
from tableside.daemon.logging import configure_logging
from tableside.daemon.runtime import ruling_message
from tableside.drivers.backoff import Backoff
from tableside.drivers.catalog import event_type, read_event
from tableside.drivers.events import ConnectionState
from tableside.drivers.named import spelt
from tableside.errors import Refused
from tableside.rules import Observation, TableFacts, evaluate
from tableside.rules.commands import COMMANDS
from tableside.rules.model import Game
from tableside.rules.patterns import dispense_pattern
from tableside.rules.table import DeviceReport, TableEvent, TableState, step
from tableside.simulators.listen import serve_socket
from tableside.simulators.registry import build_simulator
from tableside.wire import proof
from tableside.wire.payloads import (
    CheckpointPayload,
    CommandResult,
    DeviceEventPayload,
    DeviceStatePayload,
    Envelope,
    ReplayPayload,
    RulingPayload,
    SourceEvent,
    StatusPayload,
    TablePayload,
    utc_ms,
)
from tableside.wire.topics import Topics

GAME = Game.CARIBBEAN_STUD
#: the seats with a wager every round
SEATS = (1, 2, 3, 4, 5)
#: a real daemon's shuffler faults, repeating: each gives a ruling
DAEMON_FAULTS = ("count=51@3", "jam@6", "count=51@9", "incomplete@12", "count=51@15")


@dataclass(slots=True)
class Record:
    """One journal record of a simulated table: what goes on the wire, with its chain entry."""

    seq: int
    topic: str
    payload: bytes
    retain: bool
    chain: proof.Chain
    #: sent at least once (a resend is marked redelivered)
    attempted: bool = False


class SimulatedJournal:
    """What a table's journal gives the wire: seqs in order, and the hash chain over them."""

    def __init__(self) -> None:
        self.next_seq = 0
        self.head = proof.GENESIS
        #: every record, by seq (what a replay is answered from)
        self.records: list[Record] = []

    def append(self, topic: str, payload: Envelope, retain: bool) -> Record:
        if payload.seq != self.next_seq:
            raise ValueError(f"payload seq {payload.seq}, journal at {self.next_seq}")
        data = payload.model_dump_json().encode()
        ts = time.time()
        digest = proof.record_hash(self.head, payload.seq, ts, topic, retain, data)
        record = Record(payload.seq, topic, data, retain, proof.Chain(self.head, digest, ts))
        self.head = digest
        self.next_seq += 1
        self.records.append(record)
        return record

    def replay(self, first: int, last: int) -> list[Record]:
        """The records ``first``..``last`` (as many of them as are journaled)."""
        return self.records[max(0, first) : max(0, last + 1)]


@dataclass
class TableStats:
    last_seq: int = -1
    messages: int = 0
    redelivered: int = 0
    connections: int = 0
    #: replay requests answered, records sent again for them
    replay_requests: int = 0
    replayed: int = 0
    rulings: int = 0
    checkpoints: int = 0
    #: (when a send was due, loop time; how far behind it the send began, s)
    lag: list[tuple[float, float]] = field(default_factory=list)
    #: when its last message was acknowledged (loop time)
    finished: float = 0.0


class SimulatedTable:
    """One table without a daemon: the rule engine and table state of rules/, a journal in
    memory, its own MQTT connection."""

    def __init__(
        self, table: str, prefix: str, key: Ed25519PrivateKey, *, bad_deck_every: int
    ) -> None:
        self.table = table
        self.topics = Topics(prefix, table)
        self.checkpoint_topic = f"{self.topics.base}/checkpoint"
        self.key = key
        self.public = proof.public_key_hex(key)
        self.journal = SimulatedJournal()
        self.facts = TableFacts(game=GAME, shuffler_counts=True)
        self.state = TableState(devices=frozenset({"shuffler", "shoe"}))
        self.bad_deck_every = bad_deck_every
        self.shuffles = 0
        self.stats = TableStats()
        self.outbox: collections.deque[Record] = collections.deque()

    # -- what the table journals -------------------------------------------------------------

    def _add(self, topic: str, payload: Envelope, retain: bool = False) -> int:
        self.outbox.append(self.journal.append(topic, payload, retain))
        return payload.seq

    def _seq(self) -> int:
        return self.journal.next_seq

    def status(self, status: Literal["online", "offline"]) -> None:
        self._add(
            self.topics.status,
            StatusPayload(
                table=self.table, ts=utc_ms(), seq=self._seq(), status=status, version=__version__
            ),
            retain=True,
        )

    def will(self) -> aiomqtt.Will:
        payload = StatusPayload(
            table=self.table,
            ts=utc_ms(),
            seq=max(self._seq() - 1, 0),
            status="offline",
            version=__version__,
            will=True,
        )
        return aiomqtt.Will(self.topics.status, payload.model_dump_json().encode(), 1, True)

    def device_state(self, device: str, device_state: str) -> None:
        self._add(
            self.topics.device_state(device),
            DeviceStatePayload(
                table=self.table,
                ts=utc_ms(),
                seq=self._seq(),
                device=device,
                device_class=device,
                driver=f"tableside.{device}",
                connection=ConnectionState.CONNECTED,
                since=utc_ms(),
                device_state=device_state,
                connects=1,
            ),
            retain=True,
        )

    def table_state(self, cause: str) -> int:
        s = self.state
        return self._add(
            self.topics.table_state,
            TablePayload(
                table=self.table,
                ts=utc_ms(),
                seq=self._seq(),
                game=GAME,
                phase=s.phase,
                round=s.round,
                rounds_since_stub_count=s.rounds_since_stub_count,
                deck_age_h=s.deck_age_h(time.time()),
                meter_cents=s.meter_cents,
                state=s.to_dict(),
                cause=cause,
            ),
            retain=True,
        )

    def _rulings(self, observation: Observation, source: SourceEvent) -> None:
        for ruling in evaluate(self.facts, observation):
            rule = ruling.rule
            self.stats.rulings += 1
            message = ruling_message(rule, GAME, observation, source, self.state.round)
            payload = RulingPayload(table=self.table, ts=utc_ms(), seq=self._seq(), **dict(message))
            self._add(self.topics.ruling, payload)

    def _step(self, event: TableEvent) -> None:
        """The table moves (as TableRuntime.step): its state when it changed, and the rulings
        of what it saw."""
        before = self.state
        self.state, seen = step(self.facts, before, event)
        if self.state.to_dict() == before.to_dict() and not seen:
            return
        seq = self.table_state(event.kind)
        for observation in seen:
            source = SourceEvent(
                device="table",
                event=observation.kind.removeprefix("table."),
                seq=seq,
                data=observation.seen.data(),
            )
            self._rulings(observation, source)

    def event(self, device: str, kind: str, data: dict[str, Any]) -> None:
        """A device event (as TableDaemon._handle): journaled, judged, and the table moved."""
        topic = self.topics.device_event(device)
        seq = self._add(
            topic,
            DeviceEventPayload(
                table=self.table,
                ts=utc_ms(),
                seq=self._seq(),
                device=device,
                device_class=device,
                event=kind,
                data=data,
            ),
        )
        event_cls = event_type(f"{device}.{kind}")
        assert event_cls is not None, kind
        reported = read_event(event_cls, device, data)
        observation = Observation(f"{device}.{kind}", device, reported)
        self._rulings(observation, SourceEvent(device=device, event=kind, seq=seq, data=data))
        self._step(DeviceReport(observation.kind, time.time(), reported))

    def command(self, role: str, command: str, args: dict[str, Any] | None = None) -> None:
        """A person's command to the table (as TableDaemon._table_command)."""
        error = None
        try:
            declared = COMMANDS[command]
            self._step(declared.said(declared.parse(args or {}), time.time()))
        except Refused as exc:
            error = str(exc)
        self._add(
            self.topics.command_result,
            CommandResult(
                table=self.table,
                ts=utc_ms(),
                seq=self._seq(),
                role=role,
                device="table",
                command=command,
                request_id=None,
                ok=error is None,
                error=error,
            ),
        )

    def checkpoint(self) -> None:
        upto = self.journal.next_seq - 1
        head = self.journal.head
        signature = proof.sign_checkpoint(self.key, self.table, upto, head)
        self.stats.checkpoints += 1
        self._add(
            self.checkpoint_topic,
            CheckpointPayload(
                table=self.table,
                ts=utc_ms(),
                seq=self._seq(),
                upto_seq=upto,
                head=head.hex(),
                key=self.public,
                signature=signature.hex(),
            ),
        )

    # -- a round, as groups sent back to back ------------------------------------------------

    def opening(self) -> None:
        self.device_state("shuffler", "idle")
        self.device_state("shoe", "idle")
        self.table_state("start")
        self.command("floorperson", "open_table")

    def rounds(self) -> Iterator[None]:
        """Each step journals a group of messages (sent back to back); the last is the
        end-of-round burst."""
        while True:
            self.shuffles += 1
            bad = self.bad_deck_every > 0 and self.shuffles % self.bad_deck_every == 0
            self.event("shuffler", "shuffle_started", {"shuffle_id": self.shuffles})
            yield
            self.event(
                "shuffler",
                "shuffle_complete",
                {
                    "shuffle_id": self.shuffles,
                    "card_count": 51 if bad else 52,
                    "counted": True,
                    "deck": "single",
                    "back_colour": "blue",
                    "missing_count": int(bad),
                    "extra_count": 0,
                },
            )
            yield
            self.command("dealer", "bets_open")
            yield
            self.command("dealer", "no_more_bets")
            yield
            round_no = self.state.round + 1
            plan = dispense_pattern(GAME, SEATS)
            self.event("shoe", "deal_started", {"round": round_no, "plan": spelt(plan)})
            for index, stack in enumerate(plan):
                size = stack.size
                self.event(
                    "shoe",
                    "stack_dispensed",
                    {
                        "round": round_no,
                        "index": index,
                        "target": stack.target.spelt(),
                        "count": size,
                        "expected": size,
                    },
                )
            cards = sum(s.size for s in plan)
            self.event(
                "shoe",
                "deal_complete",
                {
                    "round": round_no,
                    "stacks": len(plan),
                    "cards": cards,
                    "expected_stacks": len(plan),
                    "expected_cards": cards,
                },
            )
            self.command("dealer", "round_settled")
            if round_no % 4 == 0:
                self.command("dealer", "stub_count", {"count": 52})
            yield


class Link:
    """A simulated table's MQTT connection: connects (again) when needed, sends the outbox in
    order, QoS 1, each message acknowledged before the next."""

    def __init__(self, table: SimulatedTable, host: str, port: int, password: str | None) -> None:
        self.table, self.host, self.port, self.password = table, host, port, password
        self.client: aiomqtt.Client | None = None
        self.backoff = Backoff(initial=0.2, maximum=5.0)
        self._serving: asyncio.Task[None] | None = None

    async def _connect(self) -> aiomqtt.Client:
        while True:
            client = aiomqtt.Client(
                self.host,
                self.port,
                identifier=f"tableside-{self.table.table}",
                username=self.table.table if self.password else None,
                password=self.password,
                protocol=aiomqtt.ProtocolVersion.V5,
                clean_start=True,
                keepalive=30,
                timeout=10,
                will=self.table.will(),
                max_inflight_messages=20,
            )
            try:
                await client.__aenter__()
            except aiomqtt.MqttError:
                await asyncio.sleep(self.backoff.next())
                continue
            self.backoff.reset()
            self.table.stats.connections += 1
            with contextlib.suppress(aiomqtt.MqttError):
                await client.subscribe(f"{self.table.topics.base}/command/auditor", qos=1)
            self._serving = asyncio.create_task(
                self._serve(client), name=f"replays.{self.table.table}"
            )
            # "online" takes its place behind what is queued, as the daemon's does after an
            # outage (after a flap the daemon sends its last one again instead)
            self.table.status("online")
            return client

    async def _serve(self, client: aiomqtt.Client) -> None:
        """Answer the auditor's ``replay`` requests on this connection, from the journal."""
        table = self.table
        with contextlib.suppress(aiomqtt.MqttError):
            async for message in client.messages:
                try:
                    body = json.loads(bytes(message.payload))
                    args = body["args"]
                    first, last = int(args["from_seq"]), int(args["to_seq"])
                except (ValueError, TypeError, KeyError):
                    continue
                if body.get("command") != "replay" or not 0 <= first <= last < first + 5_000:
                    continue
                if last >= table.journal.next_seq:
                    continue  # the daemon refuses a range beyond its newest record, too
                table.stats.replay_requests += 1
                for record in table.journal.replay(first, last):
                    replay = ReplayPayload(
                        table=table.table, seq=record.seq, topic=record.topic,
                        retain=record.retain, ts=record.chain.ts,
                        prev=record.chain.prev.hex(), hash=record.chain.hash.hex(),
                        payload=record.payload.decode(),
                    )  # fmt: skip
                    await client.publish(
                        table.topics.replay, replay.model_dump_json(), qos=1, retain=False
                    )
                    table.stats.replayed += 1

    async def _drop(self) -> None:
        client, self.client = self.client, None
        serving, self._serving = self._serving, None
        if serving is not None:
            serving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await serving
        if client is not None:
            with contextlib.suppress(Exception):
                await client.__aexit__(None, None, None)

    async def flush(self) -> None:
        table = self.table
        while table.outbox:
            if self.client is None:
                self.client = await self._connect()
            record = table.outbox[0]
            payload = record.payload
            if record.attempted:
                payload = proof.marked(payload, redelivered=True)
            properties = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
            properties.UserProperty = record.chain.properties()
            redelivery = record.attempted
            record.attempted = True
            try:
                await self.client.publish(
                    record.topic, payload, qos=1, retain=record.retain, properties=properties
                )
            except aiomqtt.MqttError:
                await self._drop()
                continue
            table.outbox.popleft()
            table.stats.last_seq = record.seq
            table.stats.messages += 1
            table.stats.redelivered += redelivery

    async def close(self) -> None:
        await self._drop()


async def run_table(
    table: SimulatedTable,
    link: Link,
    *,
    rate: float,
    start_at: float,
    stop_at: float,
    checkpoint_interval: float,
    grace: float,
) -> None:
    """Round after round at ``rate`` messages/s until ``stop_at`` (loop time); then a last
    checkpoint and "offline", and a clean disconnect. What the broker has not acknowledged
    ``grace`` seconds after ``stop_at`` (a broker that never came back) stays unsent, and the
    report says so."""
    loop = asyncio.get_running_loop()
    await asyncio.sleep(max(0.0, start_at - loop.time()))
    try:
        async with asyncio.timeout_at(stop_at + grace):
            table.opening()
            due = loop.time()
            next_checkpoint = due + checkpoint_interval
            rounds = table.rounds()
            while due < stop_at:
                next(rounds)
                if checkpoint_interval > 0 and loop.time() >= next_checkpoint:
                    table.checkpoint()
                    next_checkpoint += checkpoint_interval
                group = len(table.outbox)
                table.stats.lag.append((due, max(0.0, loop.time() - due)))
                await link.flush()
                due += group / rate
                await asyncio.sleep(max(0.0, min(due, stop_at) - loop.time()))
            table.checkpoint()
            table.status("offline")
            await link.flush()
            table.stats.finished = loop.time()
    except TimeoutError:
        pass  # left in the outbox: reported as unsent
    finally:
        await link.close()


# -- real daemons ------------------------------------------------------------------------------


async def start_daemon(
    table_id: str, broker: str, state_dir: Path, password: str | None
) -> tuple[TableDaemon, asyncio.Task[None], asyncio.Task[None]]:
    """A real TableDaemon with a simulated shuffler on a loopback socket: the daemon, the
    simulator's task and the daemon's task (both running)."""
    sim = build_simulator(
        "shuffler", {"interval": 1.0, "heartbeat": 0.5, "shuffle_time": 0.2}, DAEMON_FAULTS
    )
    where: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    sim_task = asyncio.create_task(
        serve_socket("socket://127.0.0.1:0", sim.serve, where.set_result), name=f"sim.{table_id}"
    )
    url = await asyncio.wait_for(where, 10)
    config = Config(
        table=TableConfig(id=table_id, game=GAME, state_dir=state_dir),
        broker=BrokerConfig(url=broker, username=table_id if password else None, password=password),
        devices={
            "shuffler": DeviceConfig(driver="tableside.shuffler", url=url, heartbeat_timeout_s=1.5)
        },
    )
    daemon = TableDaemon(config)
    return daemon, sim_task, asyncio.create_task(daemon.run(), name=f"daemon.{table_id}")


async def run_daemon(
    table_id: str, broker: str, state_dir: Path, stop_at: float, password: str | None
) -> dict[str, Any]:
    """A real TableDaemon with a simulated shuffler on a loopback socket, until ``stop_at``."""
    loop = asyncio.get_running_loop()
    daemon, sim_task, task = await start_daemon(table_id, broker, state_dir, password)
    first = daemon.journal.next_seq  # a journal kept from an earlier run goes on from there
    try:
        await asyncio.sleep(max(0.0, stop_at - loop.time()))
    finally:
        task.cancel()
        sim_task.cancel()
        await asyncio.gather(task, sim_task, return_exceptions=True)
    return {
        "daemon": True,
        "first_seq": first,
        "last_seq": daemon.journal.next_seq - 1,
        "acked_seq": daemon.journal.acked,
        "messages": daemon.publisher.published,
        "redelivered": daemon.publisher.redelivered,
        "connections": daemon.publisher.connections,
        "rulings": daemon.runtime.rulings,
    }


# -- the check: a subscriber that looks for every seq -------------------------------------------


class Checker:
    """A subscriber (MQTT v5, a persistent session, Retain As Published, no retained messages of
    earlier runs) on ``--check-at``: which seqs of which table arrived, how many twice, and the
    time from each message's journaling (its chain-ts) to its arrival here."""

    def __init__(self, url: str, prefix: str) -> None:
        parts = urlsplit(url)
        if parts.scheme != "mqtt" or not parts.hostname:
            raise SystemExit(f"fleet: --check-at: expected mqtt://host[:port], got {url!r}")
        self.host, self.port = parts.hostname, parts.port or 1883
        self.prefix = prefix
        self.seqs: dict[str, set[int]] = collections.defaultdict(set)
        self.received = 0
        self.duplicates = 0
        self.lag: list[float] = []
        self.subscribed = asyncio.Event()
        self.changed = asyncio.Event()

    async def run(self) -> None:
        identifier = f"fleet-check-{os.getpid()}"
        while True:
            properties = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
            properties.SessionExpiryInterval = 600
            client = aiomqtt.Client(
                self.host, self.port, identifier=identifier, clean_start=False,
                protocol=aiomqtt.ProtocolVersion.V5, properties=properties,
            )  # fmt: skip
            try:
                async with client:
                    options = SubscribeOptions(qos=1, retainAsPublished=True, retainHandling=2)
                    await client.subscribe(f"{self.prefix}/#", options=options)
                    self.subscribed.set()
                    async for message in client.messages:
                        self._take(message)
            except aiomqtt.MqttError:
                await asyncio.sleep(0.5)

    def _take(self, message: aiomqtt.Message) -> None:
        now = time.time()
        if not isinstance(message.payload, bytes) or "/command/" in str(message.topic):
            return
        try:
            data = json.loads(message.payload)
            table, seq = str(data["table"]), int(data["seq"])
        except (ValueError, KeyError, TypeError):
            return
        if data.get("will") or data.get("replayed") or data.get("republished"):
            return  # repeats of a seq by design: the last will, a replay, republished state
        chain = proof.Chain.from_properties(getattr(message.properties, "UserProperty", None))
        if chain is not None:
            self.lag.append(now - chain.ts)
        self.received += 1
        if seq in self.seqs[table]:
            self.duplicates += 1
        self.seqs[table].add(seq)
        self.changed.set()

    def missing(self, tables: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
        """Per table, the seqs between its first and last that have not arrived (only those
        with any)."""
        gaps = {}
        for name, row in tables.items():
            wanted = range(int(row["first_seq"]), int(row["last_seq"]) + 1)
            lost = len(wanted) - len(self.seqs[name].intersection(wanted))
            if lost:
                gaps[name] = lost
        return gaps

    async def wait_for(self, tables: Mapping[str, Mapping[str, Any]], within: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within):
                while self.missing(tables):
                    self.changed.clear()
                    await self.changed.wait()

    def report(self, url: str, tables: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        missing = self.missing(tables)
        return {
            "at": url,
            "received": self.received,
            "duplicates": self.duplicates,
            "missing": sum(missing.values()),
            "tables_missing_some": dict(sorted(missing.items())[:50]),
            "journaled_to_received_ms": {
                "p50": round(percentile(self.lag, 50) * 1000, 1),
                "p99": round(percentile(self.lag, 99) * 1000, 1),
                "max": round(max(self.lag, default=0.0) * 1000, 1),
            },
        }


async def check_only(url: str, prefix: str, grace: float) -> int:
    """The checker in a process of its own (``--check-only``): "ready" on stdout once
    subscribed; then the tables' seq ranges (one JSON line on stdin); then its report (one
    JSON line on stdout). Its own process, because in the fleet's event loop, among a thousand
    connections, paho reads one packet per turn of the loop and falls behind."""
    checker = Checker(url, prefix)
    task = asyncio.create_task(checker.run(), name="check")
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader(limit=2**26)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    try:
        await asyncio.wait_for(checker.subscribed.wait(), 15)
        print("ready", flush=True)
        line = await stdin.readline()
        if not line:
            return 1  # the fleet went away
        tables = json.loads(line)
        await checker.wait_for(tables, grace)
        print(json.dumps(checker.report(url, tables)), flush=True)
        return 0
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class CheckProcess:
    """The fleet's side of ``--check-only``."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(cls, args: argparse.Namespace) -> CheckProcess:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--check-only", args.check_at, "--prefix", args.prefix,
            "--grace", str(args.grace),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert proc.stdout is not None
        try:
            ready = await asyncio.wait_for(proc.stdout.readline(), 20)
        except TimeoutError:
            ready = b""
        if ready.strip() != b"ready":
            proc.kill()
            await proc.wait()
            raise SystemExit(f"fleet: --check-at: no subscription at {args.check_at}")
        return cls(proc)

    async def result(self, tables: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        ranges = {name: {"first_seq": row["first_seq"], "last_seq": row["last_seq"]}
                  for name, row in tables.items()}  # fmt: skip
        self.proc.stdin.write(json.dumps(ranges).encode() + b"\n")
        await self.proc.stdin.drain()
        line = await self.proc.stdout.readline()
        await self.proc.wait()
        if not line:
            raise SystemExit(f"fleet: the check process ended with status {self.proc.returncode}")
        report: dict[str, Any] = json.loads(line)
        return report


# -- the fleet ---------------------------------------------------------------------------------


def write_key(directory: Path, table: str, key: Ed25519PrivateKey) -> None:
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    path = directory / f"{table}.pem"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(pem)


def percentile(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def _raise_fd_limit(tables: int) -> None:
    """Three descriptors a connection (paho's socket and its wake-up pair)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 3 * tables + 256
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))
        if hard < wanted:
            print(f"fleet: only {hard} file descriptors for {tables} tables", file=sys.stderr)


async def run_fleet(args: argparse.Namespace) -> dict[str, Any]:
    parts = urlsplit(args.broker)
    if parts.scheme != "mqtt" or not parts.hostname:
        raise SystemExit(f"fleet: --broker: expected mqtt://host[:port], got {args.broker!r}")
    out: Path = args.out
    keys_dir = out / "keys"
    keys_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    loop = asyncio.get_running_loop()
    ramp = min(args.ramp, args.duration / 4)
    tables: list[SimulatedTable] = []
    public: dict[str, str] = {}
    for i in range(args.tables):
        name = f"{args.name}-{i + 1:04d}"
        key = Ed25519PrivateKey.generate()
        write_key(keys_dir, name, key)
        table = SimulatedTable(name, args.prefix, key, bad_deck_every=args.bad_deck_every)
        tables.append(table)
        public[name] = table.public
    daemon_names = [f"{args.name}-d{i + 1:02d}" for i in range(args.daemons)]
    for name in daemon_names:  # the key the daemon finds (or makes) in its state directory
        public[name] = proof.public_key_hex(proof.load_or_create_key(out / "daemons" / name))
    (out / "keys.json").write_text(json.dumps(public, indent=1) + "\n", encoding="utf-8")
    checker = await CheckProcess.start(args) if args.check_at else None
    t0 = loop.time()  # the keys are made: the clock starts
    stop_at = t0 + args.duration
    jobs: list[asyncio.Task[Any]] = []
    for table in tables:
        link = Link(table, parts.hostname, parts.port or 1883, args.password)
        jobs.append(
            asyncio.create_task(
                run_table(
                    table,
                    link,
                    rate=args.rate,
                    start_at=t0 + rng.uniform(0, ramp),
                    stop_at=stop_at,
                    checkpoint_interval=args.checkpoint_interval,
                    grace=args.grace,
                ),
                name=f"table.{table.table}",
            )
        )
    daemons = {
        name: asyncio.create_task(
            run_daemon(name, args.broker, out / "daemons", stop_at, args.password),
            name=f"daemon.{name}",
        )
        for name in daemon_names
    }
    await asyncio.gather(*jobs, *daemons.values())
    elapsed = loop.time() - t0  # the disconnects included
    finished = [t.stats.finished for t in tables if t.stats.finished]
    sending = max(finished) - t0 if finished else elapsed
    lags = [lag for t in tables for _, lag in t.stats.lag]
    # after the ramp: every table connected, none still starting
    steady = [lag for t in tables for due, lag in t.stats.lag if due > t0 + ramp + 1]
    report_tables: dict[str, Any] = {
        t.table: {
            "first_seq": 0,
            "last_seq": t.stats.last_seq,
            "messages": t.stats.messages,
            "redelivered": t.stats.redelivered,
            "connections": t.stats.connections,
            "rulings": t.stats.rulings,
            "checkpoints": t.stats.checkpoints,
            "unsent": len(t.outbox),
        }
        for t in tables
    }
    for name, task in daemons.items():
        report_tables[name] = task.result()
    check = await checker.result(report_tables) if checker is not None else None
    sent = sum(t.stats.messages for t in tables)
    return {
        "what": "bench/fleet.py",
        "machine": machine(),
        "broker": args.broker,
        "prefix": args.prefix,
        "simulated_tables": args.tables,
        "daemons": args.daemons,
        "rate_per_table": args.rate,
        "duration_s": args.duration,
        "elapsed_s": round(elapsed, 3),
        "messages": sent,
        "sending_s": round(sending, 3),
        "messages_per_s": round(sent / sending, 1) if sending > 0 else 0.0,
        "schedule_lag_ms": {
            "p50": round(percentile(lags, 50) * 1000, 1),
            "p99": round(percentile(lags, 99) * 1000, 1),
            "max": round(max(lags, default=0.0) * 1000, 1),
            "p99_after_ramp": round(percentile(steady, 99) * 1000, 1),
        },
        "keys": str(out / "keys.json"),
        "check": check,
        "tables": report_tables,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--tables", type=int, default=100, help="simulated tables (default 100)")
    p.add_argument("--rate", type=float, default=2.0, help="messages/s per table (default 2)")
    p.add_argument("--duration", type=float, default=60.0, help="seconds (default 60)")
    p.add_argument("--broker", default="mqtt://127.0.0.1:1883", help="mqtt://host:port")
    p.add_argument("--password", help="each table logs in as its table id with this password")
    p.add_argument("--prefix", default="tableside", help="topic prefix (default tableside)")
    p.add_argument("--name", default="fleet", help="table ids are <name>-0001, … (default fleet)")
    p.add_argument("--daemons", type=int, default=0, help="real daemons to run as well")
    p.add_argument(
        "--checkpoint-interval",
        type=float,
        default=10.0,
        help="seconds between signed checkpoints (default 10; 0: only on stop)",
    )
    p.add_argument(
        "--bad-deck-every",
        type=int,
        default=5,
        help="every Nth shuffle counts 51 cards: a ruling (0: never; default 5)",
    )
    p.add_argument(
        "--grace",
        type=float,
        default=30.0,
        help="after the run, seconds to wait for the broker to take what is unsent (default 30)",
    )
    p.add_argument(
        "--check-at",
        metavar="URL",
        help="mqtt://host:port: subscribe there too (before the start) and report every seq "
        "that did not arrive, and the time from journaling to arrival (e.g. a floor broker)",
    )
    p.add_argument("--check-only", metavar="URL", help=argparse.SUPPRESS)  # the check's process
    p.add_argument("--ramp", type=float, default=5.0, help="tables start over this many s")
    p.add_argument("--seed", type=int, default=None, help="for the start times")
    p.add_argument(
        "--out",
        type=Path,
        default=Path(tempfile.gettempdir()) / "tableside-fleet",
        help="the keys and the report go here (default: tableside-fleet in the temp directory)",
    )
    args = p.parse_args(argv)
    for name in ("tables", "daemons"):
        if getattr(args, name) < 0:
            p.error(f"--{name} must be 0 or more")
    if args.tables + args.daemons == 0:
        p.error("no tables: give --tables or --daemons")
    for name in ("rate", "duration"):
        if getattr(args, name) <= 0:
            p.error(f"--{name} must be more than 0")
    for name in ("broker", "check_at", "check_only"):
        url = getattr(args, name)
        if url is not None and (urlsplit(url).scheme != "mqtt" or not urlsplit(url).hostname):
            p.error(f"--{name.replace('_', '-')}: expected mqtt://host[:port], got {url!r}")
    if min(args.checkpoint_interval, args.ramp, args.bad_deck_every, args.grace) < 0:
        p.error("--checkpoint-interval, --ramp, --bad-deck-every and --grace must be 0 or more")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.check_only:
        return asyncio.run(check_only(args.check_only, args.prefix, args.grace))
    configure_logging("warning")
    _raise_fd_limit(args.tables)
    report = asyncio.run(run_fleet(args))
    path = args.out / "fleet.json"
    path.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    unsent = sum(t.get("unsent", 0) for t in report["tables"].values())
    never = sum(t["connections"] == 0 for t in report["tables"].values())
    if never:
        print(f"fleet: {never} tables never connected to {args.broker}", file=sys.stderr)
    if report["check"] is not None:
        c = report["check"]
        print(f"check at {c['at']}: {c['received']} received, {c['missing']} missing, "
              f"{c['duplicates']} twice, journaled → received p99 "
              f"{c['journaled_to_received_ms']['p99']} ms")  # fmt: skip
    print(
        f"{report['messages']} messages from {args.tables} simulated tables in "
        f"{report['elapsed_s']} s ({report['messages_per_s']}/s), schedule lag p99 "
        f"{report['schedule_lag_ms']['p99']} ms, {unsent} unsent; report {path}"
    )
    structlog.get_logger("tableside.fleet").info("fleet_done", report=str(path))
    lost = report["check"]["missing"] if report["check"] is not None else 0
    return 1 if unsent or lost else 0


if __name__ == "__main__":
    sys.exit(main())
