"""The table itself: a device's event or a person's word in, the records it makes out.

No I/O and no tasks of its own (tests/test_layers.py checks it imports nothing that does I/O;
what it knows across restarts, a device's firmware included, is what the journal kept). What
it makes goes to the outbox, ``Publisher.enqueue``, which only journals it (the seq is the
journal's; the publisher's own task sends it), in the order made: the device's event, its
retained state when it changed, the rulings the rules give, the table's new state, the
rulings' lifecycle. What the table must then do to its devices (the lock-out on "no more
bets") is returned as ``DeviceAction``s for the daemon (daemon/app.py) to carry out.
tests/test_runtime.py runs it with a journal and no broker.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import structlog

from tableside.daemon.clock import RunClock
from tableside.daemon.config import DeviceConfig
from tableside.daemon.discipline import CLOCK_ALERT, ClockRecord
from tableside.daemon.firmware import firmware_change
from tableside.daemon.shuffles import INTEGRITY_ALERT, ShuffleIntegrity, alert_rule
from tableside.daemon.software import SOFTWARE_MISMATCH, SoftwareResult, SoftwareVerdict
from tableside.drivers.cctalk.events import AcceptorIdentity
from tableside.drivers.events import (
    ConnectionEvent,
    ConnectionState,
    DeviceEvent,
    FaultReport,
    IdentityEvent,
    StatusReport,
)
from tableside.drivers.progressive.events import ButtonPressed
from tableside.drivers.shuffler.events import ShuffleCompleted, ShuffleOrdered
from tableside.errors import Refused
from tableside.rules import Observation, Rule, TableFacts, evaluate
from tableside.rules.commands import COMMANDS, Args
from tableside.rules.model import Action
from tableside.rules.rulings import HALTING, RulingRecord, RulingState
from tableside.rules.seen import Noted
from tableside.rules.table import (
    DeviceReport,
    EscalateRulings,
    Halt,
    HaltEnded,
    RulingsOpened,
    TableEvent,
    TableState,
    step,
)
from tableside.rules.vocabulary import Game
from tableside.wire.events import ShuffleAlert
from tableside.wire.payloads import (
    ClockBody,
    DeviceEventBody,
    DeviceIdentity,
    DeviceStateBody,
    RulingBody,
    RulingStateBody,
    SourceEvent,
    TableBody,
    utc_ms,
)

if TYPE_CHECKING:  # the outbox's type: the runtime calls ``enqueue`` and nothing else
    from tableside.daemon.publisher import Publisher
    from tableside.wire.topics import Topics

__all__ = ["DeviceAction", "DeviceRuntime", "TableActionFailed", "TableRuntime"]

log = structlog.get_logger("tableside.daemon")

#: the states a person moved a ruling to: its ruling_state message names them (``by``)
_BY_SOMEONE = frozenset({RulingState.ACKNOWLEDGED, RulingState.RESOLVED})

#: what "no more bets" and "bets open" (the control device's buttons, or a person's command)
#: make every device that takes it do: 555.2(f)(2), 559.2(f)
BUTTON_ACTIONS = {"no_more_bets": "lock_out", "bets_open": "release"}


@dataclass(frozen=True, slots=True, kw_only=True)
class TableActionFailed(DeviceEvent):
    """Something the table does by itself (the lock-out on "no more bets") did not happen."""

    kind: ClassVar[str] = "table_action_failed"
    action: str
    detail: str


@dataclass(frozen=True, slots=True)
class DeviceAction:
    """A command the table gives a device by itself (``lock_out``, ``release``)."""

    device: str
    action: str


def ruling_message(
    rule: Rule, game: Game, observation: Observation, source: SourceEvent, round: int
) -> RulingBody:
    """A ruling given, as its message says it (a table's, and bench/fleet.py's tables')."""
    return RulingBody(
        rule_id=rule.id,
        game=game,
        clause=rule.citation,
        words=rule.words,
        summary=rule.summary,
        actions=list(rule.actions),
        affected=rule.affected(observation),
        event=source,
        round=round or None,
        halts=any(a in HALTING for a in rule.actions),
    )


@dataclass
class DeviceRuntime:
    """One configured device: its driver and what the table knows of it now."""

    name: str
    config: DeviceConfig
    device_class: str
    #: the device commands its driver takes (rules/commands.py names them)
    commands: frozenset[str]
    connection: ConnectionState = ConnectionState.DISCONNECTED
    connection_detail: str = ""
    since: str = field(default_factory=utc_ms)
    identity: DeviceIdentity | None = None
    device_state: str | None = None
    fault: str | None = None
    events: int = 0
    #: times its link came up, this run
    connects: int = 0
    #: identities of a device's parts (the acceptor at each seat of a ccTalk bus)
    parts: dict[str, dict[str, object]] = field(default_factory=dict)

    def apply(self, event: DeviceEvent, ts: str) -> bool:
        """Update from an event; True when the state changed."""
        before = (self.device_state, self.fault)
        match event:
            case ConnectionEvent():
                self.connection, self.connection_detail, self.since = event.state, event.detail, ts
                self.connects += event.state is ConnectionState.CONNECTED
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


class TableRuntime:
    """One table's devices, facts and state, and the rulings it has given."""

    def __init__(
        self,
        topics: Topics,
        facts: TableFacts,
        devices: dict[str, DeviceRuntime],
        outbox: Publisher,
        clock: RunClock,
        *,
        publish_card_identities: bool = False,
        on_rulings_moved: Callable[[], None] = lambda: None,
    ) -> None:
        self.topics = topics
        self.facts = facts
        self.devices = devices
        self.outbox = outbox
        self.clock = clock
        self.publish_card_identities = publish_card_identities
        #: called whenever the rulings' lifecycle moves (the escalation timer looks again)
        self.on_rulings_moved = on_rulings_moved
        self.state = TableState(devices=frozenset(rt.device_class for rt in devices.values()))
        self.rulings = 0
        #: recognising shufflers' orders, sealed until their deck is out of play, and tested
        self.shuffles = ShuffleIntegrity()
        #: what the metrics read (daemon/metrics.py): (rule id, clause)
        self.rulings_by_clause: collections.Counter[tuple[str, str]] = collections.Counter()

    # -- a device's event -------------------------------------------------------------------

    def handle(self, rt: DeviceRuntime, event: DeviceEvent) -> list[DeviceAction]:
        """Journal ``event`` from ``rt`` and all it makes; returns what the devices must do."""
        actions: list[DeviceAction] = []
        if isinstance(event, ShuffleOrdered):  # the order of a deck that may still be dealt:
            self.shuffles.seal(event)  # a secret, journaled once released (_test_shuffle)
        else:
            self._handle(rt, event, actions)
        return actions

    def _handle(self, rt: DeviceRuntime, event: DeviceEvent, actions: list[DeviceAction]) -> None:
        # One reading of each clock for the event and all it makes: the wall clock for the
        # messages' ``ts``, the run's clock for the journal, the rules and the table.
        ts, now = utc_ms(), self.clock.now()
        rt.events += 1
        # The rules read the typed event, card identities included; the wire has them only
        # when the table may publish them.
        data = event.data(include_cards=self.publish_card_identities)
        topic = self.topics.device_event(rt.name)
        message = DeviceEventBody(rt.name, rt.device_class, event.kind, data)
        seq = self.outbox.enqueue(topic, message, ts, key=f"{topic}#{event.kind}", now=now).seq
        # against what the table knew before this event (restored from the journal)
        known = rt.identity.firmware_sha256 if rt.identity is not None else None
        changed = firmware_change(rt.name, known, rt.parts, event)
        if rt.apply(event, ts):
            self.publish_device(rt, ts, now)
        if changed is not None:
            log.warning("firmware_changed", device=rt.name, part=changed.part,
                        previous=changed.previous, current=changed.current)  # fmt: skip
            self._handle(rt, changed, actions)
        if isinstance(event, ButtonPressed):
            actions += self.button_actions(event.button)
        observation = Observation(f"{rt.device_class}.{event.kind}", rt.name, event)
        source: SourceEvent | None = None  # what a ruling cites: made when one is given
        halts = False
        given = []
        rules = [ruling.rule for ruling in evaluate(self.facts, observation)]
        if isinstance(event, ShuffleAlert) and not self._alert_open(rt.name):
            rules.append(alert_rule(event))  # a surveillance alert, with the ruling's lifecycle
        for rule in rules:
            if source is None:
                source = SourceEvent(device=rt.name, event=event.kind, seq=seq, data=data)
            given.append(self._ruling(rule, observation, source, ts, now))
            if rule.id == INTEGRITY_ALERT.id:
                self.shuffles.ruled[rt.name] = given[-1].id
            halts = halts or Action.HALT_DEALING in rule.actions
        self._open_rulings(given, ts, now)
        # The table's state machine takes what moves the table (a shuffle, a deal, the dealer's
        # buttons, …), typed as the driver reported it, and leaves the rest; a device that
        # halts dealing stops the table.
        self.step(DeviceReport(observation.kind, now, event), ts)
        if halts:
            self.step(Halt(rt.device_class, now), ts)
        if isinstance(event, ShuffleCompleted):
            self._test_shuffle(rt, event, actions)

    def _alert_open(self, device: str) -> bool:
        """An integrity ruling on ``device`` not yet resolved: a new alert is journaled (its
        ``shuffle_alert``) but opens no second ruling, so a flagged shuffler's alerts, one
        every few shuffles while it is in use, never crowd out the table's other rulings."""
        ruled = self.shuffles.ruled.get(device)
        return any(r.id == ruled and r.unresolved for r in self.state.rulings)

    def _test_shuffle(
        self, rt: DeviceRuntime, completed: ShuffleCompleted, actions: list[DeviceAction]
    ) -> None:
        """The shuffler shuffled ``completed.deck`` again: the order it made of that deck
        before is out of play. Journal it, then its statistics and any alert
        (daemon/shuffles.py)."""
        order = self.shuffles.release(rt.name, completed.deck, completed.shuffle_id)
        if order is None:
            return
        self._handle(rt, order, actions)
        statistics, alert = self.shuffles.observe(order)
        self._handle(rt, statistics, actions)
        if alert is not None:
            log.warning("shuffle_alert", device=rt.name, test=alert.test, p_value=alert.p_value,
                        shuffles=alert.shuffles)  # fmt: skip
            self._handle(rt, alert, actions)

    # -- the wall clock's verdict (daemon/discipline.py) --------------------------------------

    def record_clock(self, record: ClockRecord) -> int:
        """Journal a reading of the clock's discipline (retained ``clock``); every record after
        it says whether the clock is trusted (``untrusted_time``). A clock not trusted gives an
        alert ruling, unless one given earlier is still unresolved. Returns the record's seq."""
        ts, now = utc_ms(), self.clock.now()
        data = record.data()
        message = ClockBody(synchronised=record.synchronised, trusted=record.trusted,
                            esterror_us=record.esterror_us, maxerror_us=record.maxerror_us,
                            bound_s=record.bound_s, source=record.source)  # fmt: skip
        seq = self.outbox.enqueue(self.topics.clock, message, ts, retain=True, now=now).seq
        self.outbox.untrusted_time(None if record.trusted else seq)
        if record.trusted or any(
            r.rule_id == CLOCK_ALERT.id and r.unresolved for r in self.state.rulings
        ):
            return seq
        observation = Observation(f"table.{record.kind}", "table", record)
        source = SourceEvent(device="table", event=record.kind, seq=seq, data=data)
        self._open_rulings([self._ruling(record.rule(), observation, source, ts, now)], ts, now)
        return seq

    def button_actions(self, button: str) -> list[DeviceAction]:
        """ "No more bets" locks every acceptor out; "bets open" releases them."""
        action = BUTTON_ACTIONS.get(button)
        if action is None:
            return []
        return [DeviceAction(name, action) for name, rt in self.devices.items()
                if action in rt.commands]  # fmt: skip

    # -- a person's word ---------------------------------------------------------------------

    def person(self, command: str, args: Args) -> list[DeviceAction]:
        """A person tells the table something (docs/commands.md, device "table"), its
        arguments as parsed (rules/commands.py); raises ``Refused`` when the table does not
        take it. "No more bets" said by a person locks the acceptors out as the button does
        (and "bets open" releases them).

        Journaled or not applied: the command and everything it makes (the table's state, its
        rulings and their lifecycle) are journaled together (``Publisher.atomic``), and any
        failure on the way (the journal's, or a fault of the table's own) leaves the table as
        it was, with none of it journaled, and is raised as it is: never as a refusal."""
        declared = COMMANDS.get(command)
        if declared is None:
            raise Refused(f"unknown command {command!r}")
        said = declared.said(args, self.clock.now())
        kept = self.state, self.rulings, collections.Counter(self.rulings_by_clause)
        try:
            with self.outbox.atomic():
                self.step(said, utc_ms())
        except BaseException:
            self.state, self.rulings = kept[0], kept[1]
            self.rulings_by_clause.clear()
            self.rulings_by_clause.update(kept[2])
            raise
        return self.button_actions(command)

    # -- the software it runs (daemon/software.py) ---------------------------------------------

    def software(self, verdict: SoftwareVerdict, checked_by: str) -> int:
        """Journal a check of the installed software (the retained ``software`` record); a
        mismatch gives the ruling that halts dealing (one at a time: none while another still
        halts), a check that passes ends that halt. Returns the record's seq."""
        ts, now = utc_ms(), self.clock.now()
        message = verdict.message(checked_by)
        seq = self.outbox.enqueue(self.topics.software, message, ts, retain=True, now=now).seq
        if verdict.result is SoftwareResult.OK:
            self.step(HaltEnded(SOFTWARE_MISMATCH.id, now), ts)
        elif verdict.result is SoftwareResult.MISMATCH:
            log.warning("software_mismatch", manifest=message.manifest, differ=message.differ,
                        problem=verdict.problem)  # fmt: skip
            held = any(r.rule_id == SOFTWARE_MISMATCH.id and r.halts for r in self.state.rulings)
            if not held:
                data = message.model_dump(include={"result", "manifest_sha256", "differ",
                                                   "problem"})  # fmt: skip
                source = SourceEvent(device="table", event="software", seq=seq, data=data)
                observation = Observation("table.software", "table", Noted())
                given = self._ruling(SOFTWARE_MISMATCH, observation, source, ts, now)
                self._open_rulings([given], ts, now)
        return seq

    # -- the table: phase, round, and what the rules count -------------------------------------

    def step(self, event: TableEvent, ts: str) -> None:
        """Move the table by ``event`` (rules/table.py: a device's, a person's or the daemon's
        own; raises ``Refused`` for a person's it does not take, before anything moved);
        publish its state when it changed, and the rulings its rows give."""
        now = event.at
        before = self.state
        self.state, seen = step(self.facts, before, event)
        # Published when what is published changed (a coup's cards change the state, unseen);
        # a state that did not move is the same object (no field by field comparison).
        moved = self.state is not before and self.state != before
        shown = moved and self.state.to_dict() != before.to_dict()
        if not shown and not seen:
            return
        self._lifecycle(before, ts, now)
        seq = self.publish_table(event.kind, ts, now)
        given = []
        for observation in seen:
            source = SourceEvent(device="table", event=observation.kind.removeprefix("table."),
                                 seq=seq, data=observation.seen.data())  # fmt: skip
            for ruling in evaluate(self.facts, observation):
                given.append(self._ruling(ruling.rule, observation, source, ts, now))
        self._open_rulings(given, ts, now)

    def escalate(self, after_s: float) -> None:
        """Rulings nobody acknowledged within ``after_s`` (the table's clock) are escalated."""
        self.step(EscalateRulings(after_s, self.clock.now()), utc_ms())

    # -- the records -------------------------------------------------------------------------

    def publish_device(self, rt: DeviceRuntime, ts: str, now: float | None = None) -> None:
        """A device's retained state."""
        message = DeviceStateBody(
            device=rt.name,
            device_class=rt.device_class,
            driver=rt.config.driver,
            connection=rt.connection,
            connection_detail=rt.connection_detail,
            since=rt.since,
            identity=rt.identity,
            device_state=rt.device_state,
            fault=rt.fault,
            connects=rt.connects,
            parts=rt.parts,
        )
        self.outbox.enqueue(self.topics.device_state(rt.name), message, ts, retain=True, now=now)

    def publish_table(self, cause: str, ts: str, now: float | None = None) -> int:
        """The table's retained state; returns its seq."""
        state = self.state
        if now is None:
            now = self.clock.now()
        message = TableBody(
            game=self.facts.game,
            phase=state.phase,
            round=state.round,
            rounds_since_stub_count=state.rounds_since_stub_count,
            deck_age_h=state.deck_age_h(now),
            meter_cents=state.meter_cents,
            state=state.to_dict(),
            cause=cause,
        )
        return self.outbox.enqueue(self.topics.table_state, message, ts, retain=True, now=now).seq

    def _ruling(
        self, rule: Rule, observation: Observation, source: SourceEvent, ts: str, now: float
    ) -> RulingRecord:
        """Publish a ruling; returns it as the table tracks it (its id: the message's seq)."""
        self.rulings += 1
        self.rulings_by_clause[rule.id, rule.citation] += 1
        log.warning("ruling", rule=rule.id, clause=rule.citation, device=source.device)
        message = ruling_message(rule, self.facts.game, observation, source, self.state.round)
        seq = self.outbox.enqueue(self.topics.ruling, message, ts, now=now).seq
        return RulingRecord(seq, rule.id, rule.citation, rule.actions, now)

    def _open_rulings(self, given: list[RulingRecord], ts: str, now: float) -> None:
        """The rulings just published join the table's state, each open (rules/rulings.py)."""
        if given:
            self.step(RulingsOpened(tuple(given), now), ts)

    def _lifecycle(self, before: TableState, ts: str, now: float) -> None:
        """A ``ruling_state`` message for each ruling whose lifecycle moved (a ruling just
        given is its own ruling message)."""
        if before.rulings == self.state.rulings:
            return
        self.on_rulings_moved()
        was = {r.id: (r.state, r.halts) for r in before.rulings}
        for r in self.state.rulings:
            if r.id not in was or was[r.id] == (r.state, r.halts):
                continue
            if was[r.id][0] is r.state:  # only its halt ended (the clause's own condition)
                at = r.halt_ended_at
            else:
                at = {
                    RulingState.ESCALATED: r.escalated_at,
                    RulingState.ACKNOWLEDGED: r.acknowledged_at,
                }.get(r.state, r.resolved_at)
            by = r.resolved_by if r.resolved_by is not None else r.acknowledged_by
            log.info("ruling_state", ruling=r.id, state=r.state.value, by=by)
            message = RulingStateBody(
                ruling=r.id,
                rule_id=r.rule_id,
                clause=r.clause,
                actions=list(r.actions),
                state=r.state,
                halts=r.halts,
                open_s=round((at if at is not None else now) - r.opened_at, 3),
                by=by if r.state in _BY_SOMEONE else None,
                action=r.action,
                note=r.note,
            )
            self.outbox.enqueue(self.topics.ruling_state, message, ts, now=now)
