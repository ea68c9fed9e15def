"""People's requests, from ``<prefix>/<table>/command/<role>`` to their result.

Each request is checked against its declaration (rules/commands.py) in this order — not too
large, readable, a known role, a known command that role may give, its arguments, the device
that carries it out, the table's phase, and for a deal whether a rule halts dealing — and is
carried out by the table (daemon/runtime.py), by a device's driver, or by the journal (the
auditor's ``replay``), or refused with the reason. Either way the result is journaled and
published on ``command_result`` (and, MQTT v5, to the requester's response topic).
"""

from __future__ import annotations

import collections
import json
from collections.abc import Awaitable, Callable, Coroutine, Mapping

import structlog

from tableside.daemon.journal import Journal
from tableside.daemon.publisher import Publisher
from tableside.daemon.runtime import DeviceAction, DeviceRuntime, TableRuntime
from tableside.drivers.base import Driver
from tableside.drivers.commands import DEAL, Deal, StackArg
from tableside.drivers.errors import (
    DeviceRejected,
    DeviceUnavailable,
    LinkError,
    TablesideDriverError,
)
from tableside.errors import Refused
from tableside.mqtt.connection import MqttError
from tableside.rules import evaluate
from tableside.rules.commands import (
    COMMANDS,
    Args,
    Command,
    DealRound,
    Override,
    Replay,
    Role,
    VerifySoftware,
    admit,
)
from tableside.rules.model import Action
from tableside.rules.patterns import dispense_pattern
from tableside.rules.rulings import halting
from tableside.rules.table import step
from tableside.wire.payloads import (
    MAX_NAME_CHARS,
    MAX_REQUEST_BYTES,
    CommandRequest,
    CommandResultBody,
    CommandStatus,
    utc_ms,
)

__all__ = ["CommandRouter", "Spawn"]

log = structlog.get_logger("tableside.daemon")

#: runs a coroutine as a task of the daemon, named; False when the daemon is stopping
Spawn = Callable[[Coroutine[object, object, None], str], bool]

Reply = tuple[str, bytes] | None


class CommandRouter:
    """Routes each request to what carries it out; counts what became of them."""

    def __init__(
        self,
        table: TableRuntime,
        drivers: Mapping[str, Driver],
        publisher: Publisher,
        journal: Journal,
        *,
        spawn: Spawn,
        carry_out: Callable[[list[DeviceAction]], None],
        verify_software: Callable[[str], Awaitable[int]] | None = None,
    ) -> None:
        self.table = table
        #: what carries a device command out (the runtime holds no live driver)
        self.drivers = drivers
        self.publisher = publisher
        self.journal = journal
        self.spawn = spawn
        #: the table's own actions on its devices (the lock-out), done by the daemon
        self.carry_out = carry_out
        #: the software check (daemon/app.py), given who asked; None: this table has none
        self.verify_software = verify_software
        #: what the metrics read (daemon/metrics.py): (command, result)
        self.commands_by_result: collections.Counter[tuple[str, str]] = collections.Counter()

    def route(self, topic: str, payload: bytes, reply: Reply = None) -> None:
        """A request on ``topic``: carried out, or refused with the reason."""
        role = self.publisher.topics.role_of_command(topic)[:MAX_NAME_CHARS]
        request: CommandRequest | None = None
        if len(payload) > MAX_REQUEST_BYTES:
            # refused unread, and not repeated back: the refusal stays small
            error = (f"request of {len(payload)} bytes on {topic[:200]} refused unread: "
                     f"requests are limited to {MAX_REQUEST_BYTES} bytes")  # fmt: skip
            self.result(role, None, error, reply)
            return
        try:  # reading it: nothing has moved
            request = CommandRequest.model_validate(json.loads(payload))
        except (ValueError, RecursionError) as exc:  # not JSON, not UTF-8, not a request
            error = f"malformed request on {topic[:200]}: {str(exc)[:300]}"
            self.result(role, None, error, reply)
            return
        try:  # checking it against its declaration and the table as it is: nothing moves
            command, args = admit(request.command, role, request.args, self.table.state.phase)
            runtime = self._carrier(command, request.device)
            override = self._deal_gate(command, args, role)
        except Refused as exc:
            self.result(role, request, str(exc)[:600], reply)
            return
        except Exception as exc:  # a fault of the table's own checks: nothing has moved
            self._failed(role, request, exc, reply)
            return
        if runtime is None and isinstance(args, Replay):
            self._start_replay(role, request, args, reply)
        elif runtime is None and isinstance(args, VerifySoftware):
            if self.verify_software is None:
                self.result(role, request, "verify_software: no software check here", reply)
            elif not self.spawn(self._verify(role, request, reply), "command.verify_software"):
                self.result(role, request, "the daemon is stopping", reply)
        elif runtime is None:
            self._table_command(role, request, args, reply, override)
        elif not self.spawn(self._device_command(role, request, runtime, args, reply, override),
                            f"command.{request.device}"):  # fmt: skip
            self.result(role, request, "the daemon is stopping", reply)

    def _carrier(self, command: Command, device: str) -> DeviceRuntime | None:
        """The device that carries the command out (None: the table itself), or Refused."""
        if command.target == "table":
            if device != "table":
                raise Refused(f"{command.name!r} is the table's: send it with "
                              f'"device": "table", not {device!r}')  # fmt: skip
            return None
        devices = self.table.devices
        runtime = devices.get(device)
        if runtime is None:
            known = ", ".join(sorted(devices))
            raise Refused(f"no device {device!r} at table {self.publisher.table} "
                          f"(devices: {known})")  # fmt: skip
        cls = runtime.device_class
        has = command.device_command in runtime.commands
        if command.target not in ("device", cls) or not has:
            takes = ", ".join(sorted(runtime.commands))
            raise Refused(f"{device}: a {cls} has no command {command.name!r} (it takes: {takes})")
        return runtime

    def _deal_gate(self, command: Command, args: Args, role: str) -> str | None:
        """A dealing command the rules forbid is refused, not ruled on afterwards, whatever the
        phase (the round in play included: 551.16(m) "may not continue dealing"): an
        unresolved ruling that halts dealing (rules/rulings.py) refuses it with its id and
        clause, and so does a rule that would halt what it deals, tried on the table's state
        as it is (551.16(m), 551.2(e), …: the command itself when the table carries it out, a
        round's start when a device deals it). A floorperson may override with a reason, which
        is returned (and journaled with the result): that one command goes ahead, the rows
        judge its dealing (rules/table.py ``dealt``) and the rulings stay unresolved."""
        facts, state = self.table.facts, self.table.state
        if not command.deals_in(facts.game):
            return None
        now = self.table.clock.now()
        trial = (command.said(args, now) if command.target == "table"
                 else COMMANDS["start_round"].said(Override(), now))  # fmt: skip
        try:
            _, seen = step(facts, state, trial)
        except Refused:
            seen = []  # the table refuses the command itself, saying why
        halts = [r.rule for o in seen for r in evaluate(facts, o)
                 if Action.HALT_DEALING in r.rule.actions]  # fmt: skip
        held = halting(state.rulings)
        if not halts and not held:
            return None
        why = "; ".join(
            [f"ruling {r.id} is {r.state.value} ({r.clause}: {', '.join(r.actions)}; a "
             "floorperson resolves it)" for r in held]
            + [f"{r.citation}: {r.summary}" for r in halts]
        )  # fmt: skip
        override = getattr(args, "override", None)
        if "override" not in type(args).model_fields:
            raise Refused(f"{command.name}: dealing is halted — {why}")
        if override is None:
            raise Refused(f"{command.name}: dealing is halted — {why} (a floorperson may "
                          'override with args "override": "<reason>")')  # fmt: skip
        if role != Role.FLOORPERSON:
            raise Refused(f"{command.name}: dealing is halted — {why}; only a floorperson may "
                          "override")  # fmt: skip
        log.warning("halt_overridden", command=command.name, reason=override, halts=why)
        return f"{override} (overriding {why})"

    def _table_command(
        self, role: str, request: CommandRequest, args: Args, reply: Reply, override: str | None
    ) -> None:
        """A person tells the table something (docs/commands.md, device "table")."""
        try:
            actions = self.table.person(request.command, args)
        except Refused as exc:
            self.result(role, request, str(exc), reply)
            return
        except Exception as exc:  # the table failed, not the person: nothing of it applied
            self._failed(role, request, exc, reply)
            return
        self.carry_out(actions)
        self.result(role, request, None, reply, override)

    async def _device_command(
        self,
        role: str,
        request: CommandRequest,
        runtime: DeviceRuntime,
        args: Args,
        reply: Reply,
        override: str | None,
    ) -> None:
        try:
            name, typed = self._expand(runtime, request.command, args)
            await self.drivers[runtime.name].command(name, typed)
        except DeviceRejected as exc:  # it answered: it will not do it
            self.result(role, request, f"{request.command}: {request.device} refused it, "
                        f"nothing was done ({exc})", reply)  # fmt: skip
        except (DeviceUnavailable, LinkError) as exc:  # no acknowledgement: never "ok"
            self.result(role, request, f"{request.command}: not delivered to "
                        f"{request.device}: it did not acknowledge it ({exc})", reply)  # fmt: skip
        except (TablesideDriverError, Refused) as exc:
            self.result(role, request, str(exc), reply)
        except Exception as exc:  # reported, never allowed to stop the daemon's task group
            self._failed(role, request, exc, reply)
        else:
            self.result(role, request, None, reply, override)

    def _expand(self, rt: DeviceRuntime, name: str, args: Args) -> tuple[str, Args]:
        """Table-level commands become device commands: ``deal_round`` with the positions that
        have a wager becomes the shoe's ``deal`` with the game's dispense pattern. The rest go
        to the driver with their arguments as parsed."""
        if isinstance(args, DealRound):
            try:
                pattern = dispense_pattern(self.table.facts.game, args.positions)
            except ValueError as exc:  # a game no shoe deals: the request's, said as it is
                raise Refused(f"deal_round: {exc}") from exc
            stacks = [StackArg(target=s.target, size=s.size) for s in pattern]
            next_round = args.round if args.round is not None else self.table.state.round + 1
            return DEAL.name, Deal(round=next_round, stacks=stacks)
        return name, args

    # -- the auditor's replay (docs/floor.md) ------------------------------------------------

    async def _verify(self, role: str, request: CommandRequest, reply: Reply) -> None:
        """``verify_software``: the check runs in a thread; its outcome is the ``software``
        record, journaled before this result."""
        assert self.verify_software is not None
        await self.verify_software(role)
        self.result(role, request, None, reply)

    def _start_replay(self, role: str, request: CommandRequest, args: Replay, reply: Reply) -> None:
        newest = self.journal.head[0]
        if args.to_seq > newest:
            error = (f"replay: to_seq {args.to_seq} is beyond the table's newest record, "
                     f"{newest}")  # fmt: skip
            self.result(role, request, error, reply)
        elif not self.spawn(self._replay(role, request, args, reply), "command.replay"):
            self.result(role, request, "the daemon is stopping", reply)

    async def _replay(self, role: str, request: CommandRequest, args: Replay, reply: Reply) -> None:
        """Read the records from the journal and send each again, as it was journaled, on
        ``<prefix>/<table>/replay``; the result (journaled) follows once the broker has them
        all, with ``pruned_before`` when retention deleted the start of the range."""
        try:
            await self.journal.wait_durable(args.to_seq)
            records = await self.journal.read_from(args.from_seq, args.to_seq - args.from_seq + 1)
            first = records[0].seq if records else args.to_seq + 1
            pruned = first if first > args.from_seq else None
            await self.publisher.replay(records)
        except MqttError as exc:
            self.result(role, request, f"replay: not sent ({exc}); ask again", reply)
        except Exception as exc:  # reported, never allowed to stop the daemon's task group
            self._failed(role, request, exc, reply)
        else:
            log.info("replayed", from_seq=args.from_seq, to_seq=args.to_seq, sent=len(records),
                     pruned_before=pruned)  # fmt: skip
            self.result(role, request, None, reply, replayed=len(records),
                        pruned_before=pruned)  # fmt: skip

    # -- the result ----------------------------------------------------------------------------

    def _failed(self, role: str, request: CommandRequest, exc: Exception, reply: Reply) -> None:
        """The table failed while carrying a request out (never the person's mistake): logged
        with its traceback, answered ``internal_error``. When the journal itself failed this
        answer cannot be journaled either, so none goes out (results are journaled records):
        that is raised, and the daemon stops on its journal (daemon/app.py)."""
        log.error("command_failed", role=role, device=request.device, command=request.command,
                  exc_info=exc)  # fmt: skip
        self.result(role, request, f"internal error: {exc!r}"[:600], reply, internal=True)

    def result(
        self,
        role: str,
        request: CommandRequest | None,
        error: str | None,
        reply: Reply = None,
        override: str | None = None,
        *,
        replayed: int | None = None,
        pruned_before: int | None = None,
        internal: bool = False,
    ) -> None:
        """Journal and publish what became of a request (``error``: refused, or with
        ``internal`` the table failed); MQTT v5: a copy to its response topic, with its
        correlation data."""
        status: CommandStatus = (
            "internal_error" if internal else "done" if error is None else "refused"
        )
        if error and not internal:
            log.warning("command_refused", role=role, error=error,
                        command=request.command if request else None)  # fmt: skip
        message = CommandResultBody(
            role=role,
            device=request.device if request else None,
            command=request.command if request else None,
            request_id=request.request_id if request else None,
            ok=error is None,
            status=status,
            error=error,
            override=override,
            replayed=replayed,
            pruned_before=pruned_before,
        )
        topic = self.publisher.topics.command_result
        record = self.publisher.enqueue(topic, message, utc_ms())
        named = (request.command if request else None) or "(unreadable)"
        self.commands_by_result[named, "ok" if error is None else status] += 1
        if reply is not None:
            self.publisher.respond(reply, record.payload)
