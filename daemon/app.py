"""The table daemon: the wiring that runs one table under one TaskGroup.

What runs, and where it lives:

- the drivers (drivers/), one task each, report each device event synchronously to
  ``TableRuntime.handle`` (daemon/runtime.py: the table itself, no I/O), which journals the event
  and all it makes, in order: the device's retained state, the rulings, the table's new state;
- the publisher (daemon/publisher.py) sends what the journal (daemon/journal/) has committed,
  and hands people's requests to ``CommandRouter`` (daemon/routing.py);
- the daemon carries out what the table does to its devices by itself (the lock-out on "no
  more bets"), escalates rulings nobody acknowledged, signs checkpoints, and pings systemd;
- at start, the table is restored from the journal (daemon/restore.py).

Proof for the floor (wire/proof.py, docs/floor.md): the table's Ed25519 key is loaded (made at
the first start) before anything is sent; a signed checkpoint of the journal's head is journaled
every ``[proof] checkpoint_interval_s`` and on a clean stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import math
import os
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import TypeVarTuple

import structlog

from tableside.daemon.changes import config_message
from tableside.daemon.config import Config, DeviceConfig
from tableside.daemon.discipline import DISCIPLINE_FILE_ENV, POLL_S, ClockWatch, read_discipline
from tableside.daemon.integrity import verify_software
from tableside.daemon.journal import Journal
from tableside.daemon.publisher import Publisher
from tableside.daemon.restore import restore
from tableside.daemon.routing import CommandRouter
from tableside.daemon.runtime import (
    DeviceAction,
    DeviceRuntime,
    TableActionFailed,
    TableRuntime,
)
from tableside.daemon.sdnotify import Notifier, NotifyError
from tableside.daemon.software import SoftwareResult
from tableside.drivers.base import Driver, DriverSettings, EventSink
from tableside.drivers.commands import NoArgs
from tableside.drivers.errors import TablesideDriverError
from tableside.drivers.events import ConnectionState, DeviceEvent
from tableside.drivers.link import ArqPolicy, FrameBudget
from tableside.drivers.registry import get_driver
from tableside.errors import ConfigurationError
from tableside.rules import TableFacts
from tableside.rules.rulings import due
from tableside.wire import proof
from tableside.wire.payloads import CheckpointBody, utc_ms
from tableside.wire.topics import Topics

__all__ = ["FREEZE_WITHIN_S", "KeyUnreadable", "TableDaemon", "table_facts", "table_runtime"]

log = structlog.get_logger("tableside.daemon")

#: what a systemd notification takes (``Notifier.ready``'s status; nothing, for a ping)
_Args = TypeVarTuple("_Args")

#: start-up's objects are frozen once ``online`` is sent, or this long after start at most
FREEZE_WITHIN_S = 2.0


def _counts_cards(device: DeviceConfig) -> bool:
    """A shuffler's ``counts_cards`` option (drivers/shuffler ``ShufflerOptions``; a plug-in
    shuffler's options subclass it); true for any other device, as the rules have it."""
    # imported here: a shuffler is configured, so its driver module is loaded anyway
    from tableside.drivers.shuffler.driver import ShufflerOptions

    options = device.options
    return options.counts_cards if isinstance(options, ShufflerOptions) else True


def _bonus_pays(config: Config) -> dict[str, float] | None:
    table = config.pay_tables.get("let_it_ride_bonus")
    return dict(table) if isinstance(table, dict) else None


def table_facts(config: Config, classes: Mapping[str, str]) -> TableFacts:
    """What the rules know of the table from its configuration (``classes``: each device's
    class, by name): one for the whole table."""
    shufflers = {name: _counts_cards(config.devices[name])
                 for name, of in classes.items() if of == "shuffler"}  # fmt: skip
    return TableFacts(
        game=config.table.game,
        shuffler_counts=any(shufflers.values()),
        not_counting=frozenset(name for name, counts in shufflers.items() if not counts),
        decks=config.table.decks,
        progressive=config.progressive.pay_table() if config.progressive else None,
        bonus_pays=_bonus_pays(config),
        gaming_day=config.table.gaming_day,
    )


def table_runtime(
    config: Config, outbox: Publisher, *, on_rulings_moved: Callable[[], None] = lambda: None
) -> TableRuntime:
    """The table itself, from its config: each device known by its driver's declaration (its
    class and the commands it takes; no driver is made, no device opened), one
    ``TableFacts``, records to ``outbox`` on its journal's clock. The daemon builds its own
    with this; a test calls it with a journal and a publisher that never runs. What the
    journal last saw is put back by ``restore`` (daemon/restore.py)."""
    declared = {name: get_driver(device.driver) for name, device in config.devices.items()}
    devices = {name: DeviceRuntime(name, config.devices[name], cls.device_class,
                                   frozenset(cls.commands))
               for name, cls in declared.items()}  # fmt: skip
    facts = table_facts(config, {name: cls.device_class for name, cls in declared.items()})
    return TableRuntime(
        outbox.topics,
        facts,
        devices,
        outbox,
        outbox.journal.clock,
        publish_card_identities=config.table.publish_card_identities,
        on_rulings_moved=on_rulings_moved,
    )


class KeyUnreadable(ConfigurationError, RuntimeError):
    """The table's signing key file is there but is no Ed25519 key, or it is missing beside a
    journal that holds records: the daemon does not start."""


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
        # before going online: a table whose key cannot be read or made does not start, and one
        # whose journal holds records never makes a new key by itself (an identity the floor
        # never enrolled, in place of the one its records were signed with)
        key_file = state_dir / proof.KEY_FILE
        if self.journal.next_seq > 0 and not key_file.exists():
            self.journal.close()
            raise KeyUnreadable(
                f"the table's key {key_file} is missing, and its journal holds records up to "
                f"seq {self.journal.next_seq - 1} signed with it. Put back a copy of the key; to "
                "give the table a new identity on purpose, make one with `tableside key "
                "--create --config …` and enrol it on the floor"
            )
        try:
            self.key = proof.load_or_create_key(state_dir)
        except ValueError as exc:
            self.journal.close()
            raise KeyUnreadable(
                f"the table's key {state_dir / proof.KEY_FILE} cannot be read ({exc}). The "
                "floor trusts this key: put back a good copy, or move it aside, make a new one "
                "(`tableside key --create`) and enrol the new one on the floor"
            ) from exc
        self.public_key = proof.public_key_hex(self.key)
        #: the last start's config record, read before the journal's threads start
        self._last_config = self.journal.latest().get(
            Topics(config.broker.topic_prefix, self.table).config
        )
        #: the seq of the newest checkpoint journaled (-1: none this run)
        self.checkpointed = -1
        self.publisher = Publisher(
            config.broker, self.table, config.client_id, self.journal, on_command=self._on_command
        )
        self.topics = self.publisher.topics
        #: the live drivers; the runtime knows each device by its class and commands only
        self.drivers = {name: self._driver(name, device) for name, device in config.devices.items()}
        #: set whenever the rulings' lifecycle moves: the escalation timer looks again
        self._rulings_moved = asyncio.Event()
        self.runtime = table_runtime(config, self.publisher,
                                     on_rulings_moved=self._rulings_moved.set)  # fmt: skip
        facts = self.runtime.facts
        self.router = CommandRouter(self.runtime, self.drivers, self.publisher, self.journal,
                                    spawn=self._spawn, carry_out=self._carry_out,
                                    verify_software=self.verify_software)  # fmt: skip
        self.restored = restore(self.runtime, self.drivers, self.journal, self.publisher)
        if facts.progressive is not None and self.runtime.state.meter_millicents is None:
            initial = facts.progressive.initial_cents * 1000
            self.runtime.state = dataclasses.replace(self.runtime.state, meter_millicents=initial)
        #: the wall clock's verdict, journaled at start and whenever it changes
        self.clock_watch = ClockWatch(config.clock.max_error_s)
        lab_file = os.environ.get(DISCIPLINE_FILE_ENV)  # a lab's hook (daemon/discipline.py)
        self._discipline_file = Path(lab_file) if lab_file else None
        self.ready = asyncio.Event()
        self.handling_errors = 0
        self._tasks: asyncio.TaskGroup | None = None

    def _driver(self, name: str, device: DeviceConfig) -> Driver:
        """The configured device's driver (not started: ``run`` starts it)."""
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
        return get_driver(device.driver)(name, settings, self._sink(name))

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
                self._journal_config()
                # the software is held to its manifest before any device opens (docs/software.md)
                await self.verify_software("start")
                self._read_clock()
                for rt in self.runtime.devices.values():
                    self.runtime.publish_device(rt, utc_ms())
                self.runtime.publish_table("start", utc_ms())
                drivers = [
                    tg.create_task(driver.run(), name=f"device.{name}")
                    for name, driver in self.drivers.items()
                ]
                tg.create_task(self._escalations(), name="rulings.escalate")
                tg.create_task(self._clock_polls(), name="clock.discipline")
                if self.notifier.watchdog_interval:
                    tg.create_task(self._watchdog(self.notifier.watchdog_interval), name="watchdog")
                tg.create_task(
                    self._checkpoints(self.config.proof.checkpoint_interval_s),
                    name="proof.checkpoints",
                )
                tg.create_task(self._freeze_start_up(), name="gc.freeze")
                await asyncio.sleep(0)  # the device and broker tasks have started
                self.ready.set()
                self._notify(self.notifier.ready, f"table {self.table}: started")
                log.info("daemon_started", table=self.table, devices=list(self.runtime.devices))
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

    def _journal_config(self) -> None:
        """The configuration this start runs, and what changed since the last start's, on the
        record (retained: the next start compares with it)."""
        topic = self.publisher.topics.config
        message = config_message(self.config, self._last_config)
        record = self.publisher.enqueue(topic, message, utc_ms(), retain=True)
        log.info("config_recorded", seq=record.seq, hash=message.hash,
                 changed=[change.key for change in message.changed])  # fmt: skip

    async def verify_software(self, checked_by: str) -> int:
        """Hold the installed software to its manifest (in a thread: it reads every file) and
        journal the outcome (daemon/software.py); returns the record's seq."""
        manifest = self.config.table.software_manifest
        verdict = await asyncio.to_thread(verify_software, manifest)
        said = log.info if verdict.result is SoftwareResult.OK else log.warning
        said("software_checked", result=verdict.result.value, manifest=str(verdict.manifest),
             seconds=round(verdict.seconds, 3), checked_by=checked_by)  # fmt: skip
        return self.runtime.software(verdict, checked_by)

    def _read_clock(self) -> None:
        """Read the clock's discipline; journal it when its verdict changed (and at start)."""
        record = self.clock_watch.observe(read_discipline(self._discipline_file))
        if record is None:
            return
        seq = self.runtime.record_clock(record)
        said = log.info if record.trusted else log.warning
        said("clock", seq=seq, trusted=record.trusted, synchronised=record.synchronised,
             esterror_us=record.esterror_us, maxerror_us=record.maxerror_us,
             source=record.source)  # fmt: skip

    async def _clock_polls(self) -> None:
        """The kernel asked every ``POLL_S`` (daemon/discipline.py)."""
        while True:
            await asyncio.sleep(POLL_S)
            try:
                self._read_clock()
            except Exception:  # a bug here must not stop the table; said, counted
                self.handling_errors += 1
                log.exception("clock_read_failed")

    def _settle(self) -> asyncio.Future[None]:
        """Done once everything journaled so far is durable (a driver acknowledges its
        device's frame only after this: the device may then forget the event, the table will
        not)."""
        return self.journal.durable(self.journal.next_seq - 1)

    # -- proof: signed checkpoints (docs/floor.md) -------------------------------------------

    def checkpoint(self) -> int:
        """Journal a checkpoint: the newest record's seq and hash, signed with the table's key.
        Returns its seq."""
        upto, head = self.journal.head
        signature = proof.sign_checkpoint(self.key, self.table, upto, head)
        message = CheckpointBody(upto_seq=upto, head=head.hex(), key=self.public_key,
                                 signature=signature.hex())  # fmt: skip
        seq = self.publisher.enqueue(self.topics.checkpoint, message, utc_ms()).seq
        self.checkpointed = seq
        return seq

    async def _freeze_start_up(self) -> None:
        """What start-up made (modules, models, the restored table) lives as long as the
        daemon: out of the collector's sight, so that a full collection scans only what came
        since (measured: a 13 ms pause every few thousand events before). Collected first, so
        that no garbage is frozen with it (a process that runs the daemon more than once, as
        the tests do, would keep it for good). That collection takes some 20 ms: it waits until
        the table's ``online`` is on its way to the broker (``FREEZE_WITHIN_S`` at most), which
        it would delay.

        ``tableside run`` keeps the collector off through start-up (cli/__init__.py); it is on
        once this has run, or once the daemon stops before it could, whoever started the
        daemon."""
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(FREEZE_WITHIN_S):
                    await self.publisher.connected.wait()  # "online" is in the journal
                    await self.journal.wait_durable(self.journal.next_seq - 1)
                    # Woken with the devices' ACKs, before the publisher is told (the journal's
                    # Progress): one more turn of the loop and it has sent what is durable.
                    await asyncio.sleep(0)
            gc.collect()
            gc.freeze()
        finally:
            gc.enable()

    async def _checkpoints(self, interval: float) -> None:
        """A checkpoint every ``interval`` seconds, when anything was journaled since the last
        one (an idle table does not sign its own checkpoints over and over)."""
        while True:
            await asyncio.sleep(interval)
            if self.journal.head[0] not in (self.checkpointed, -1):
                self.checkpoint()

    def _notify(self, send: Callable[[*_Args], None], *args: *_Args) -> None:
        try:
            send(*args)
        except NotifyError as exc:  # said, never swallowed; the daemon goes on
            log.error("sd_notify_failed", error=str(exc))

    async def _watchdog(self, interval: float) -> None:
        """Ping systemd from the event loop itself: if the loop hangs, the pings stop."""
        while True:
            self._notify(self.notifier.watchdog)
            devices = self.runtime.devices.values()
            connected = sum(rt.connection is ConnectionState.CONNECTED for rt in devices)
            broker = "up" if self.publisher.connected.is_set() else "down"
            self._notify(
                self.notifier.status,
                f"table {self.table}: {connected}/{len(devices)} devices connected, "
                f"broker {broker}, {self.publisher.pending} queued",
            )
            await asyncio.sleep(interval)

    # -- device events, and what the table does to its devices by itself -------------------

    def _sink(self, name: str) -> EventSink:
        def sink(event: DeviceEvent) -> None:
            try:
                self._carry_out(self.runtime.handle(self.runtime.devices[name], event))
            except Exception:
                # A bug here must not take the driver down with it; it is logged and counted.
                self.handling_errors += 1
                log.exception("event_handling_failed", device=name, event=event.kind)

        return sink

    def _carry_out(self, actions: list[DeviceAction]) -> None:
        """The lock-out on "no more bets" (and the release on "bets open"), on every acceptor
        at once: 555.2(f)(2), 559.2(f)."""
        for action in actions:
            rt = self.runtime.devices[action.device]
            self._spawn(self._table_action(rt, action.action), f"{action.action}.{rt.name}")

    async def _table_action(self, rt: DeviceRuntime, action: str) -> None:
        try:
            await self.drivers[rt.name].command(action, NoArgs())
        except Exception as exc:  # e.g. the bus is down: applied when it is back; said now
            if isinstance(exc, TablesideDriverError):
                log.warning("table_action_failed", device=rt.name, action=action, why=str(exc))
            else:
                log.exception("table_action_failed", device=rt.name, action=action)
            self._sink(rt.name)(TableActionFailed(device=rt.name, action=action, detail=str(exc)))

    def _spawn(self, coro: Coroutine[object, object, None], name: str) -> bool:
        """Run ``coro`` as one of the daemon's tasks; False (and not run) when it is not
        running or is stopping."""
        if self._tasks is None:
            coro.close()
            return False
        self._tasks.create_task(coro, name=name)
        return True

    def _on_command(self, topic: str, payload: bytes, reply: tuple[str, bytes] | None) -> None:
        self.router.route(topic, payload, reply)

    async def _escalations(self) -> None:
        """A ruling nobody acknowledged within ``[rulings] escalate_after_s`` (the table's
        clock) is escalated: its state says so, journaled and published."""
        after = self.config.rulings.escalate_after_s
        clock = self.journal.clock
        while True:
            self._rulings_moved.clear()
            when = due(self.runtime.state.rulings, after)
            wait = None if when is None else (when - clock.now()) / clock.speed
            if wait is None or wait > 0:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._rulings_moved.wait()
                continue
            try:
                self.runtime.escalate(after)
            except Exception:  # a bug here must not stop the table; said, counted
                self.handling_errors += 1
                log.exception("escalation_failed")
                await asyncio.sleep(1.0)
