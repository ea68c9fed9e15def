"""The table daemon: drivers → rule engine and table state → journal → publisher, under one
TaskGroup.

Device events are handled synchronously as the driver reports them (no queue hop): each gets
its seq from the journal, is journaled as an event, updates the device's retained state, is put
to the rule engine, and moves the table's state (rules/table.py); rulings and the table's new
state follow it into the journal in the same order. The publisher sends what the journal has
committed. People's requests (commands by role, docs/commands.md) take the same path.

Proof for the floor (daemon/proof.py, docs/floor.md): the table's Ed25519 key is loaded (made at
the first start) before anything is sent; a signed checkpoint of the journal's head is journaled
every ``[proof] checkpoint_interval_s`` and on a clean stop; the auditor's ``replay`` sends
journal records again, unjournaled, on ``<prefix>/<table>/replay``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import gc
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

import aiomqtt
import structlog
from pydantic import ValidationError

from tableside.daemon import proof
from tableside.daemon.config import Config, DeviceConfig
from tableside.daemon.firmware import FirmwareChanged, FirmwareRecord
from tableside.daemon.journal import Journal
from tableside.daemon.payloads import (
    MAX_NAME_CHARS,
    MAX_REQUEST_BYTES,
    CheckpointPayload,
    CommandRequest,
    CommandResult,
    DeviceEventPayload,
    DeviceIdentity,
    DeviceStatePayload,
    Lifecycle,
    ReplayPayload,
    RulingPayload,
    RulingStatePayload,
    SourceEvent,
    TablePayload,
    utc_ms,
)
from tableside.daemon.publisher import Publisher
from tableside.daemon.sdnotify import Notifier, NotifyError
from tableside.drivers.base import Driver, DriverSettings, EventSink
from tableside.drivers.cctalk.events import AcceptorIdentity
from tableside.drivers.errors import TablesideDriverError
from tableside.drivers.events import (
    ConnectionEvent,
    ConnectionState,
    DeviceEvent,
    FaultReport,
    IdentityEvent,
    StatusReport,
)
from tableside.drivers.link import ArqPolicy, FrameBudget
from tableside.drivers.progressive.events import ButtonPressed
from tableside.drivers.registry import get_driver
from tableside.rules import Observation, Rule, TableFacts, evaluate
from tableside.rules.commands import Args, Command, Refused, Replay, Role, admit
from tableside.rules.model import Action
from tableside.rules.patterns import dispense_pattern
from tableside.rules.rulings import HALTING, RulingRecord, due, halting
from tableside.rules.table import TableEvent, TableState, step

__all__ = ["DeviceRuntime", "KeyUnreadable", "TableDaemon"]

log = structlog.get_logger("tableside.daemon")


@dataclass(frozen=True, slots=True, kw_only=True)
class TableActionFailed(DeviceEvent):
    """Something the table does by itself (the lock-out on "no more bets") did not happen."""

    kind: ClassVar[str] = "table_action_failed"
    action: str
    detail: str


@dataclass
class DeviceRuntime:
    """One configured device: its driver and what the table knows of it now."""

    name: str
    config: DeviceConfig
    driver: Driver
    facts: TableFacts
    connection: ConnectionState = ConnectionState.DISCONNECTED
    connection_detail: str = ""
    since: str = field(default_factory=utc_ms)
    identity: DeviceIdentity | None = None
    device_state: str | None = None
    fault: str | None = None
    events: int = 0
    #: identities of a device's parts (the acceptor at each seat of a ccTalk bus)
    parts: dict[str, dict[str, Any]] = field(default_factory=dict)

    def apply(self, event: DeviceEvent, ts: str) -> bool:
        """Update from an event; True when the state changed."""
        before = (self.device_state, self.fault)
        match event:
            case ConnectionEvent():
                self.connection, self.connection_detail, self.since = event.state, event.detail, ts
                return True
            case IdentityEvent():
                identity = DeviceIdentity(
                    vendor=event.vendor,
                    model=event.model,
                    serial=event.serial,
                    firmware_version=event.firmware_version,
                    firmware_sha256=event.firmware_sha256,
                )
                changed = identity != self.identity
                self.identity = identity
                return changed
            case AcceptorIdentity(seat=seat):
                part = {k: v for k, v in event.data().items() if k != "seat"}
                changed = self.parts.get(f"seat{seat}") != part
                self.parts[f"seat{seat}"] = part
                return changed
            # Every device class reports itself with a status event and its faults with a
            # fault event (drivers/events.py StatusReport, FaultReport).
            case StatusReport():
                self.device_state, self.fault = event.state, event.fault
            case FaultReport():
                self.fault = event.fault
        return before != (self.device_state, self.fault)


def _counts_cards(driver: Driver) -> bool:
    """A shuffler's ``counts_cards`` option (drivers/shuffler ``ShufflerOptions``; a plug-in
    shuffler's options subclass it); true for any other device, as the rules have it."""
    if driver.device_class != "shuffler":
        return True
    # imported here: a shuffler is configured, so its driver module is loaded anyway
    from tableside.drivers.shuffler.driver import ShufflerOptions

    options = driver.options
    return options.counts_cards if isinstance(options, ShufflerOptions) else True


def _bonus_pays(config: Config) -> dict[str, float] | None:
    table = config.pay_tables.get("let_it_ride_bonus")
    return dict(table) if isinstance(table, dict) else None


class KeyUnreadable(RuntimeError):
    """The table's signing key file is there but is no Ed25519 key: the daemon does not start."""


async def _raise_when(failed: asyncio.Future[None]) -> None:
    """Re-raise in the task group what failed in another thread (the journal's writer)."""
    await failed


class TableDaemon:
    """Everything one table needs; ``run()`` until cancelled."""

    def __init__(
        self, config: Config, *, shutdown_grace: float = 5.0, notifier: Notifier | None = None
    ) -> None:
        self.config = config
        self.notifier = notifier or Notifier()
        self.table = config.table.id
        self.shutdown_grace = shutdown_grace
        state_dir = config.table.state_dir / config.table.id
        # Opened (and checked) here: a journal that fails its checks stops the daemon before
        # it touches a device, with the way to recover in the message.
        self.journal = Journal(
            state_dir / "journal.sqlite",
            self.table,
            retain_days=config.journal.retain_days,
            max_mb=config.journal.max_mb,
            test_clock=config.test_clock.clock() if config.test_clock else None,
        )
        self.journal.open()
        # before going online: a table whose key cannot be read or made does not start
        try:
            self.key = proof.load_or_create_key(state_dir)
        except ValueError as exc:
            self.journal.close()
            raise KeyUnreadable(
                f"the table's key {state_dir / proof.KEY_FILE} cannot be read ({exc}). The "
                "floor trusts this key: put back a good copy, or move it aside (a new key is "
                "made at the next start) and enrol the new one (`tableside key`)"
            ) from exc
        self.public_key = proof.public_key_hex(self.key)
        #: the seq of the newest checkpoint journaled (-1: none this run)
        self.checkpointed = -1
        self.firmware = FirmwareRecord(state_dir / "firmware.json")
        self.publisher = Publisher(
            config.broker, self.table, config.client_id, self.journal, on_command=self._on_command
        )
        self.topics = self.publisher.topics
        self.devices: dict[str, DeviceRuntime] = {}
        for name, device in config.devices.items():
            driver_cls = get_driver(device.driver)
            settings = DriverSettings(
                url=device.url,
                baudrate=device.baudrate,
                heartbeat_timeout=device.heartbeat_timeout_s,
                arq=ArqPolicy(ack_timeout=device.ack_timeout_s, retries=device.retries),
                budget=FrameBudget(
                    per_s=device.max_frames_per_s, burst=max(1, math.ceil(device.max_frames_per_s))
                ),
                options=device.options,
                settle=self._settle,
            )
            driver = driver_cls(name, settings, self._sink(name))
            facts = TableFacts(
                game=config.table.game,
                shuffler_counts=_counts_cards(driver),
                decks=config.table.decks,
            )
            self.devices[name] = DeviceRuntime(name, device, driver, facts)
        shufflers = [rt.driver for rt in self.devices.values()
                     if rt.driver.device_class == "shuffler"]  # fmt: skip
        self.table_facts = TableFacts(
            game=config.table.game,
            shuffler_counts=any(_counts_cards(d) for d in shufflers),
            decks=config.table.decks,
            progressive=config.progressive.pay_table() if config.progressive else None,
            bonus_pays=_bonus_pays(config),
            gaming_day=config.table.gaming_day,
        )
        self.table_state = TableState(
            devices=frozenset(rt.driver.device_class for rt in self.devices.values())
        )
        self.restored = self._restore()
        if self.table_facts.progressive is not None and self.table_state.meter_millicents is None:
            initial = self.table_facts.progressive.initial_cents * 1000
            self.table_state = dataclasses.replace(self.table_state, meter_millicents=initial)
        self.ready = asyncio.Event()
        self.rulings = 0
        #: what the metrics read (daemon/metrics.py): (rule id, clause) and (command, result)
        self.rulings_by_clause: collections.Counter[tuple[str, str]] = collections.Counter()
        self.commands_by_result: collections.Counter[tuple[str, str]] = collections.Counter()
        self.handling_errors = 0
        #: set whenever the rulings' lifecycle moves: the escalation timer looks again
        self._rulings_moved = asyncio.Event()
        self._tasks: asyncio.TaskGroup | None = None

    # -- lifecycle ------------------------------------------------------------------------

    async def run(self) -> None:
        """Until cancelled; with ``[metrics]``, /metrics is served while it runs (an address
        it cannot listen on stops it before it starts: MetricsUnavailable)."""
        async with contextlib.AsyncExitStack() as stack:
            if self.config.metrics is not None:
                # imported only for a table that serves them: prometheus_client and the
                # http.server it brings are 1.5 MiB of a daemon idling without them
                from tableside.daemon.metrics import MetricsUnavailable, serving

                try:
                    await stack.enter_async_context(serving(self, self.config.metrics.listen))
                except MetricsUnavailable:
                    self.journal.close()
                    raise
            await self._run()

    async def _run(self) -> None:
        clean = False
        self.journal.start()
        try:
            async with asyncio.TaskGroup() as tg:
                self._tasks = tg
                assert self.journal.failed is not None
                tg.create_task(_raise_when(self.journal.failed), name="journal.watch")
                publisher = tg.create_task(self.publisher.run(), name="mqtt.publisher")
                for rt in self.devices.values():
                    self._publish_state(rt, utc_ms())
                self._publish_table("start", utc_ms())
                drivers = [
                    tg.create_task(rt.driver.run(), name=f"device.{name}")
                    for name, rt in self.devices.items()
                ]
                tg.create_task(self._escalations(), name="rulings.escalate")
                if self.notifier.watchdog_interval:
                    tg.create_task(self._watchdog(self.notifier.watchdog_interval), name="watchdog")
                tg.create_task(
                    self._checkpoints(self.config.proof.checkpoint_interval_s),
                    name="proof.checkpoints",
                )
                await asyncio.sleep(0)  # the device and broker tasks have started
                # What start-up made (modules, models, the restored table) lives as long as the
                # daemon: out of the collector's sight, so that a full collection scans only
                # what came since (measured: a 13 ms pause every few thousand events before).
                # Collected first, so that no garbage is frozen with it (a process that runs
                # the daemon more than once, as the tests do, would keep it for good).
                gc.collect()
                gc.freeze()
                self.ready.set()
                self._notify(self.notifier.ready, f"table {self.table}: started")
                log.info("daemon_started", table=self.table, devices=list(self.devices))
                try:
                    await asyncio.Future()  # until cancelled
                except asyncio.CancelledError:
                    self._notify(self.notifier.stopping)
                    for task in drivers:
                        task.cancel()
                    # What the drivers say as they stop goes out before "offline", the last word.
                    await asyncio.wait(drivers, timeout=self.shutdown_grace)
                    self.checkpoint()  # the head signed, then "offline"
                    self.publisher.stop()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(self.shutdown_grace):
                            await self.publisher.flush()
                    publisher.cancel()
                    clean = True
                    raise
        finally:
            self._tasks = None
            self.journal.close()
            log.info(
                "daemon_stopped", table=self.table, clean=clean, pending=self.publisher.pending
            )

    async def _settle(self) -> None:
        """Everything journaled so far is committed (a driver acknowledges its device's frame
        only after this: the device may then forget the event, the table will not)."""
        await self.journal.wait_committed(self.journal.next_seq - 1)

    def _restore(self) -> dict[str, int]:
        """The table as the journal last saw it: retained state to send again, what each device
        last reported, and a lock-out in force. Returns what was restored, for the log."""
        latest = self.journal.latest()
        counts = {"retained": 0, "devices": 0, "locked_out": 0, "table_state": 0}
        raw_table = latest.get(self.topics.table_state)
        if raw_table is not None:
            try:
                saved = TablePayload.model_validate_json(raw_table)
                self.table_state = TableState.from_dict(saved.state)
                counts["table_state"] = 1
            except (ValidationError, ValueError, TypeError) as exc:
                log.warning("restore_skipped", what="table", error=str(exc)[:300])
        for key, payload in latest.items():
            if "#" not in key:
                self.publisher.restore_retained(key, payload)
                counts["retained"] += 1
        last_button: str | None = None
        for name, rt in self.devices.items():
            raw = latest.get(self.topics.device_state(name))
            try:
                if raw is not None:
                    state = DeviceStatePayload.model_validate_json(raw)
                    rt.identity, rt.device_state = state.identity, state.device_state
                    rt.fault, rt.parts = state.fault, dict(state.parts)
                    counts["devices"] += 1
                prefix = self.topics.device_event(name) + "#"
                for key, payload in latest.items():
                    if key.startswith(prefix):
                        event = DeviceEventPayload.model_validate_json(payload)
                        rt.driver.restore(event.event, event.data)
                        if event.event == "button":
                            last_button = str(event.data.get("button"))
            except ValidationError as exc:  # written by another version: said, and skipped
                log.warning("restore_skipped", device=name, error=str(exc)[:300])
        # "No more bets" pressed before a crash holds after it: the acceptors stay locked out
        # (a lock-out errs on the safe side: a restored table never reopens betting by itself).
        # So after `journal recover`, whose table may be older than the table was: betting
        # opens again only when the dealer opens it.
        if self.journal.fresh_from_recovery:
            log.warning("table_held_after_recovery", table=self.table,
                        after_seq=self.journal.next_seq - 1)  # fmt: skip
        if last_button == "no_more_bets" or self.journal.fresh_from_recovery:
            for rt in self.devices.values():
                if "lock_out" in rt.driver.commands:
                    rt.driver.restore("status", {"state": "locked_out"})
        counts["locked_out"] = sum(
            bool(getattr(rt.driver, "locked_out", False)) for rt in self.devices.values()
        )
        if latest:
            log.info("table_restored", table=self.table, next_seq=self.journal.next_seq,
                     unsent=self.publisher.pending, **counts)  # fmt: skip
        return counts

    # -- proof: signed checkpoints (docs/floor.md) -------------------------------------------

    def checkpoint(self) -> int:
        """Journal a checkpoint: the newest record's seq and hash, signed with the table's key.
        Returns its seq."""
        upto, head = self.journal.head
        signature = proof.sign_checkpoint(self.key, self.table, upto, head)
        fields = {"upto_seq": upto, "head": head.hex(), "key": self.public_key,
                  "signature": signature.hex()}  # fmt: skip
        seq = self.publisher.enqueue(self.topics.checkpoint, CheckpointPayload, utc_ms(),
                                     fields).seq  # fmt: skip
        self.checkpointed = seq
        return seq

    async def _checkpoints(self, interval: float) -> None:
        """A checkpoint every ``interval`` seconds, when anything was journaled since the last
        one (an idle table does not sign its own checkpoints over and over)."""
        while True:
            await asyncio.sleep(interval)
            if self.journal.head[0] not in (self.checkpointed, -1):
                self.checkpoint()

    def _notify(self, send: Any, *args: Any) -> None:
        try:
            send(*args)
        except NotifyError as exc:  # said, never swallowed; the daemon goes on
            log.error("sd_notify_failed", error=str(exc))

    async def _watchdog(self, interval: float) -> None:
        """Ping systemd from the event loop itself: if the loop hangs, the pings stop."""
        while True:
            self._notify(self.notifier.watchdog)
            connected = sum(rt.connection.value == "connected" for rt in self.devices.values())
            broker = "up" if self.publisher.connected.is_set() else "down"
            self._notify(
                self.notifier.status,
                f"table {self.table}: {connected}/{len(self.devices)} devices connected, "
                f"broker {broker}, {self.publisher.pending} queued",
            )
            await asyncio.sleep(interval)

    # -- device events --------------------------------------------------------------------

    def _sink(self, name: str) -> EventSink:
        def sink(event: DeviceEvent) -> None:
            try:
                self._handle(self.devices[name], event)
            except Exception:
                # A bug here must not take the driver down with it; it is logged and counted.
                self.handling_errors += 1
                log.exception("event_handling_failed", device=name, event=event.kind)

        return sink

    def _publish_state(self, rt: DeviceRuntime, ts: str, now: float | None = None) -> None:
        fields = {
            "device": rt.name,
            "device_class": rt.driver.device_class,
            "driver": rt.config.driver,
            "connection": rt.connection,
            "connection_detail": rt.connection_detail,
            "since": rt.since,
            "identity": rt.identity,
            "device_state": rt.device_state,
            "fault": rt.fault,
            "connects": rt.driver.connects,
            "parts": rt.parts,
        }
        self.publisher.enqueue(self.topics.device_state(rt.name), DeviceStatePayload, ts, fields,
                               retain=True, now=now)  # fmt: skip

    def _handle(self, rt: DeviceRuntime, event: DeviceEvent) -> None:
        # One reading of each clock for the event and all it makes: the wall clock for the
        # messages' ``ts``, the run's clock for the journal, the rules and the table.
        ts, now = utc_ms(), self.journal.clock.now()
        rt.events += 1
        # Computed once: every field for the rules; without card identities for the wire,
        # unless the table may publish them.
        full = event.data(include_cards=True)
        if self.config.table.publish_card_identities or not event.card_fields:
            data = full
        else:
            data = {k: v for k, v in full.items() if k not in event.card_fields}
        topic = self.topics.device_event(rt.name)
        fields = {"device": rt.name, "device_class": rt.driver.device_class,
                  "event": event.kind, "data": data}  # fmt: skip
        seq = self.publisher.enqueue(topic, DeviceEventPayload, ts, fields,
                                     key=f"{topic}#{event.kind}", now=now).seq  # fmt: skip
        if rt.apply(event, ts):
            self._publish_state(rt, ts, now)
        changed = self._firmware_change(rt, event)
        if changed is not None:
            log.warning("firmware_changed", device=rt.name, part=changed.part,
                        previous=changed.previous, current=changed.current)  # fmt: skip
            self._handle(rt, changed)
        if isinstance(event, ButtonPressed):
            self._on_button(event.button)
        observation = Observation(
            kind=f"{rt.driver.device_class}.{event.kind}",
            device=rt.name,
            data=full,
        )
        source: SourceEvent | None = None  # what a ruling cites: made when one is given
        halts = False
        given = []
        for ruling in evaluate(rt.facts, observation):
            if source is None:
                source = SourceEvent(device=rt.name, event=event.kind, seq=seq, data=data)
            given.append(self._publish_ruling(ruling.rule, observation, source, ts, now))
            halts = halts or Action.HALT_DEALING in ruling.rule.actions
        self._open_rulings(given, ts, now)
        # The table's state machine takes what moves the table (a shuffle, a deal, the dealer's
        # buttons, …), typed as the driver reported it, and leaves the rest; a device that
        # halts dealing stops the table.
        self._table_step(observation.kind, {}, ts, now, device=event)
        if halts:
            self._table_step("halt", {"device_class": rt.driver.device_class}, ts, now)

    def _publish_ruling(
        self, rule: Rule, observation: Observation, source: SourceEvent, ts: str, now: float
    ) -> RulingRecord:
        """Publish a ruling; returns it as the table tracks it (its id: the message's seq)."""
        self.rulings += 1
        self.rulings_by_clause[rule.id, rule.citation] += 1
        log.warning("ruling", rule=rule.id, clause=rule.citation, device=source.device)
        fields = {
            "rule_id": rule.id,
            "game": self.table_facts.game.value,
            "clause": rule.citation,
            "words": rule.words,
            "summary": rule.summary,
            "actions": list(rule.actions),
            "affected": rule.affected(observation),
            "event": source,
            "round": self.table_state.round or None,
            "halts": any(a in HALTING for a in rule.actions),
        }
        seq = self.publisher.enqueue(self.topics.ruling, RulingPayload, ts, fields, now=now).seq
        return RulingRecord(seq, rule.id, rule.citation, rule.actions, now)

    def _open_rulings(self, given: list[RulingRecord], ts: str, now: float) -> None:
        """The rulings just published join the table's state, each open (rules/rulings.py)."""
        if given:
            self._table_step("rulings_opened", {"rulings": given}, ts, now)

    def _publish_lifecycle(self, before: TableState, ts: str, now: float) -> None:
        """A ``ruling_state`` message for each ruling whose lifecycle moved (a ruling just
        given is its own ruling message); the escalation timer looks again."""
        if before.rulings == self.table_state.rulings:
            return
        self._rulings_moved.set()
        was = {r.id: r.state for r in before.rulings}
        for r in self.table_state.rulings:
            if r.id not in was or was[r.id] is r.state:
                continue
            at = {"escalated": r.escalated_at, "acknowledged": r.acknowledged_at}.get(
                r.state.value, r.resolved_at
            )
            by = r.resolved_by if r.resolved_by is not None else r.acknowledged_by
            log.info("ruling_state", ruling=r.id, state=r.state.value, by=by)
            fields = {
                "ruling": r.id,
                "rule_id": r.rule_id,
                "clause": r.clause,
                "actions": list(r.actions),
                "state": cast(Lifecycle, r.state.value),
                "halts": r.halts,
                "open_s": round((at if at is not None else now) - r.opened_at, 3),
                "by": by if r.state.value in ("acknowledged", "resolved") else None,
                "action": r.action,
                "note": r.note,
            }
            self.publisher.enqueue(self.topics.ruling_state, RulingStatePayload, ts, fields,
                                   now=now)  # fmt: skip

    async def _escalations(self) -> None:
        """A ruling nobody acknowledged within ``[rulings] escalate_after_s`` (the table's
        clock) is escalated: its state says so, journaled and published."""
        after = self.config.rulings.escalate_after_s
        clock = self.journal.clock
        while True:
            self._rulings_moved.clear()
            when = due(self.table_state.rulings, after)
            wait = None if when is None else (when - clock.now()) / clock.speed
            if wait is None or wait > 0:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._rulings_moved.wait()
                continue
            try:
                self._table_step("escalate_rulings", {"after_s": after}, utc_ms())
            except Exception:  # a bug here must not stop the table; said, counted
                self.handling_errors += 1
                log.exception("escalation_failed")
                await asyncio.sleep(1.0)

    # -- the table: phase, round, and what the rules count ----------------------------------

    def _table_step(
        self,
        kind: str,
        data: Mapping[str, Any],
        ts: str,
        now: float | None = None,
        *,
        device: DeviceEvent | None = None,
    ) -> None:
        """Move the table by a person's (or the daemon's) ``kind`` with its ``data``, or by a
        ``device``'s typed event (raises ValueError for a person's event it cannot take);
        publish its state when it changed, and the rulings its rows give. ``now``: the run's
        clock as read for the event (read here when not given)."""
        if now is None:
            now = self.journal.clock.now()
        before = self.table_state
        event = TableEvent(kind, now, dict(data), device)
        self.table_state, seen = step(self.table_facts, before, event)
        # Published when what is published changed (a coup's cards change the state, unseen).
        shown = self.table_state != before and self.table_state.to_dict() != before.to_dict()
        if not shown and not seen:
            return
        self._publish_lifecycle(before, ts, now)
        seq = self._publish_table(kind, ts, now)
        given = []
        for observation in seen:
            source = SourceEvent(device="table", event=observation.kind.removeprefix("table."),
                                 seq=seq, data=dict(observation.data))  # fmt: skip
            for ruling in evaluate(self.table_facts, observation):
                given.append(self._publish_ruling(ruling.rule, observation, source, ts, now))
        self._open_rulings(given, ts, now)

    def _publish_table(self, cause: str, ts: str, now: float | None = None) -> int:
        state = self.table_state
        if now is None:
            now = self.journal.clock.now()
        fields = {
            "game": self.table_facts.game.value,
            "phase": state.phase.value,
            "round": state.round,
            "rounds_since_stub_count": state.rounds_since_stub_count,
            "deck_age_h": state.deck_age_h(now),
            "meter_cents": state.meter_cents,
            "state": state.to_dict(),
            "cause": cause,
        }
        return self.publisher.enqueue(self.topics.table_state, TablePayload, ts, fields,
                                      retain=True, now=now).seq  # fmt: skip

    def _firmware_change(self, rt: DeviceRuntime, event: DeviceEvent) -> FirmwareChanged | None:
        match event:
            case IdentityEvent():
                return self.firmware.check(rt.name, "", event.firmware_sha256)
            case AcceptorIdentity():
                return self.firmware.check(rt.name, f"seat{event.seat}", event.rom_checksum)
        return None

    # -- the progressive system: "no more bets" locks every acceptor out --------------------

    def _on_button(self, button: str) -> None:
        """The control device's button or a person's command: "no more bets" locks every
        acceptor out; "bets open" releases them."""
        action = {"no_more_bets": "lock_out", "bets_open": "release"}.get(button)
        if action is None or self._tasks is None:
            return
        for rt in self.devices.values():
            if action in rt.driver.commands:
                self._tasks.create_task(self._table_action(rt, action), name=f"{action}.{rt.name}")

    async def _table_action(self, rt: DeviceRuntime, action: str) -> None:
        try:
            await rt.driver.command(action, {})
        except Exception as exc:  # e.g. the bus is down: applied when it is back; said now
            if isinstance(exc, TablesideDriverError):
                log.warning("table_action_failed", device=rt.name, action=action, why=str(exc))
            else:
                log.exception("table_action_failed", device=rt.name, action=action)
            self._sink(rt.name)(TableActionFailed(device=rt.name, action=action, detail=str(exc)))

    # -- commands -------------------------------------------------------------------------

    def _on_command(
        self, topic: str, payload: bytes, reply: tuple[str, bytes] | None = None
    ) -> None:
        """A request on ``<prefix>/<table>/command/<role>``, checked against its declaration
        (rules/commands.py) in this order — not too large, readable, a known role, a known
        command that role may give, its arguments, the device that carries it out, the table's
        phase, and for a deal whether a rule halts dealing — and carried out, or refused with
        the reason. Either way the result is journaled and published."""
        role = self.topics.role_of_command(topic)[:MAX_NAME_CHARS]
        request: CommandRequest | None = None
        if len(payload) > MAX_REQUEST_BYTES:
            # refused unread, and not repeated back: the refusal stays small
            error = (f"request of {len(payload)} bytes on {topic[:200]} refused unread: "
                     f"requests are limited to {MAX_REQUEST_BYTES} bytes")  # fmt: skip
            self._command_result(role, None, error, reply)
            return
        try:
            request = CommandRequest.model_validate(json.loads(payload))
            command, args = admit(request.command, role, request.args, self.table_state.phase)
            runtime = self._carrier(command, request.device)
            override = self._deal_gate(command, args, role)
        except (ValueError, ValidationError, RecursionError) as exc:
            error = str(exc)[:600]
            if request is None:
                error = f"malformed request on {topic[:200]}: {error[:300]}"
            self._command_result(role, request, error, reply)
            return
        if runtime is None and isinstance(args, Replay):
            self._start_replay(role, request, args, reply)
            return
        if runtime is None:
            self._table_command(role, request, args, reply, override)
            return
        if self._tasks is None:
            self._command_result(role, request, "the daemon is stopping", reply)
            return
        self._tasks.create_task(
            self._run_command(role, request, runtime, args, reply, override),
            name=f"command.{request.device}",
        )

    def _carrier(self, command: Command, device: str) -> DeviceRuntime | None:
        """The device that carries the command out (None: the table itself), or Refused."""
        if command.target == "table":
            if device != "table":
                raise Refused(f"{command.name!r} is the table's: send it with "
                              f'"device": "table", not {device!r}')  # fmt: skip
            return None
        runtime = self.devices.get(device)
        if runtime is None:
            known = ", ".join(sorted(self.devices))
            raise Refused(f"no device {device!r} at table {self.table} (devices: {known})")
        cls = runtime.driver.device_class
        has = command.device_command in runtime.driver.commands
        if command.target not in ("device", cls) or not has:
            takes = ", ".join(sorted(runtime.driver.commands))
            raise Refused(f"{device}: a {cls} has no command {command.name!r} (it takes: {takes})")
        return runtime

    def _deal_gate(self, command: Command, args: Args, role: str) -> str | None:
        """A deal the rules forbid is refused, not ruled on afterwards: an unresolved ruling
        that halts dealing (rules/rulings.py) refuses it with its id and clause, and so does a
        rule that would halt the round it starts, tried on the table's state as it is
        (551.16(m), 551.2(e), …). A floorperson may override with a reason, which is returned
        (and journaled with the result): one deal goes ahead, the rulings stay unresolved."""
        if not command.deals:
            return None
        _, seen = step(self.table_facts, self.table_state,
                       TableEvent("start_round", self.journal.clock.now()))  # fmt: skip
        halts = [r.rule for o in seen for r in evaluate(self.table_facts, o)
                 if Action.HALT_DEALING in r.rule.actions]  # fmt: skip
        held = halting(self.table_state.rulings)
        if not halts and not held:
            return None
        why = "; ".join(
            [f"ruling {r.id} is {r.state.value} ({r.clause}: {', '.join(r.actions)}; a "
             "floorperson resolves it)" for r in held]
            + [f"{r.citation}: {r.summary}" for r in halts]
        )  # fmt: skip
        override = getattr(args, "override", None)
        if override is None:
            raise Refused(f"{command.name}: dealing is halted — {why} (a floorperson may "
                          'override with args "override": "<reason>")')  # fmt: skip
        if role != Role.FLOORPERSON:
            raise Refused(f"{command.name}: dealing is halted — {why}; only a floorperson may "
                          "override")  # fmt: skip
        log.warning("halt_overridden", command=command.name, reason=override, halts=why)
        return f"{override} (overriding {why})"

    def _table_command(
        self,
        role: str,
        request: CommandRequest,
        args: Args,
        reply: tuple[str, bytes] | None,
        override: str | None,
    ) -> None:
        """A person tells the table something (docs/commands.md, device "table")."""
        try:
            self._table_step(request.command, args.data(), utc_ms())
        except ValueError as exc:
            self._command_result(role, request, str(exc), reply)
            return
        # "No more bets" said by a person locks the acceptors out as the button does (and
        # "bets open", a floorperson's, releases them): 555.2(f)(2).
        self._on_button(request.command)
        self._command_result(role, request, None, reply, override)

    async def _run_command(
        self,
        role: str,
        request: CommandRequest,
        runtime: DeviceRuntime,
        args: Args,
        reply: tuple[str, bytes] | None,
        override: str | None,
    ) -> None:
        try:
            name, data = self._expand(runtime, request.command, args)
            await runtime.driver.command(name, data)
        except (TablesideDriverError, ValueError) as exc:
            self._command_result(role, request, str(exc), reply)
        except Exception as exc:  # reported, never allowed to stop the daemon's task group
            log.exception("command_failed", device=request.device, command=request.command)
            self._command_result(role, request, f"internal error: {exc!r}", reply)
        else:
            self._command_result(role, request, None, reply, override)

    def _expand(self, rt: DeviceRuntime, name: str, args: Args) -> tuple[str, Mapping[str, Any]]:
        """Table-level commands become device commands: ``deal_round`` with the positions that
        have a wager becomes the shoe's ``deal`` with the game's dispense pattern."""
        data = args.data()
        if name == "deal_round":
            stacks = dispense_pattern(rt.facts.game, data["positions"])
            return "deal", {"round": data.get("round", self.table_state.round + 1),
                            "stacks": stacks}  # fmt: skip
        return name, data

    # -- the auditor's replay (docs/floor.md) ----------------------------------------------------

    def _start_replay(
        self, role: str, request: CommandRequest, args: Replay, reply: tuple[str, bytes] | None
    ) -> None:
        newest = self.journal.head[0]
        if args.to_seq > newest:
            error = (f"replay: to_seq {args.to_seq} is beyond the table's newest record, "
                     f"{newest}")  # fmt: skip
            self._command_result(role, request, error, reply)
            return
        if self._tasks is None:
            self._command_result(role, request, "the daemon is stopping", reply)
            return
        self._tasks.create_task(self._replay(role, request, args, reply), name="command.replay")

    async def _replay(
        self, role: str, request: CommandRequest, args: Replay, reply: tuple[str, bytes] | None
    ) -> None:
        """Read the records from the journal and send each again, as it was journaled, on
        ``<prefix>/<table>/replay``; the result (journaled) follows once the broker has them
        all, with ``pruned_before`` when retention deleted the start of the range."""
        try:
            await self.journal.wait_durable(args.to_seq)
            records = await self.journal.read_from(args.from_seq, args.to_seq - args.from_seq + 1)
            first = records[0].seq if records else args.to_seq + 1
            pruned = first if first > args.from_seq else None
            payloads = [
                ReplayPayload(table=self.table, seq=r.seq, topic=r.topic, retain=r.retain,
                              ts=r.ts, prev=r.prev_hash.hex(), hash=r.hash.hex(),
                              payload=r.payload.decode()).model_dump_json().encode()
                for r in records
            ]  # fmt: skip
            await self.publisher.send_unjournaled(self.topics.replay, payloads)
        except aiomqtt.MqttError as exc:
            self._command_result(role, request, f"replay: not sent ({exc}); ask again", reply)
        except Exception as exc:  # reported, never allowed to stop the daemon's task group
            log.exception("command_failed", device=request.device, command=request.command)
            self._command_result(role, request, f"internal error: {exc!r}", reply)
        else:
            log.info("replayed", from_seq=args.from_seq, to_seq=args.to_seq, sent=len(records),
                     pruned_before=pruned)  # fmt: skip
            self._command_result(role, request, None, reply, replayed=len(records),
                                 pruned_before=pruned)  # fmt: skip

    def _command_result(
        self,
        role: str,
        request: CommandRequest | None,
        error: str | None,
        reply: tuple[str, bytes] | None = None,
        override: str | None = None,
        *,
        replayed: int | None = None,
        pruned_before: int | None = None,
    ) -> None:
        """Journal and publish what became of a request; MQTT v5: a copy to its response
        topic, with its correlation data."""
        if error:
            log.warning("command_refused", role=role, error=error,
                        command=request.command if request else None)  # fmt: skip
        fields = {
            "role": role,
            "device": request.device if request else None,
            "command": request.command if request else None,
            "request_id": request.request_id if request else None,
            "ok": error is None,
            "error": error,
            "override": override,
            "replayed": replayed,
            "pruned_before": pruned_before,
        }
        record = self.publisher.enqueue(self.topics.command_result, CommandResult, utc_ms(), fields)
        named = (request.command if request else None) or "(unreadable)"
        self.commands_by_result[named, "ok" if error is None else "refused"] += 1
        if reply is not None:
            self.publisher.respond(reply, record.payload)
