"""MQTT payloads, as pydantic models. docs/schemas/*.json are generated from these
(``tableside schemas docs/schemas``); docs/mqtt.md describes the topics."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, WithJsonSchema
from pydantic_core import to_json

from tableside.drivers.events import ConnectionState
from tableside.rules.model import Action
from tableside.rules.rulings import MAX_UNRESOLVED, RulingState
from tableside.rules.vocabulary import Game, Phase
from tableside.wire.topics import TopicKind

__all__ = [
    "MAX_NAME_CHARS",
    "MAX_REQUEST_BYTES",
    "PAYLOAD_MODELS",
    "Body",
    "CheckpointBody",
    "CheckpointPayload",
    "ClockBody",
    "ClockPayload",
    "CommandRequest",
    "CommandResult",
    "CommandResultBody",
    "CommandStatus",
    "ConfigBody",
    "ConfigChange",
    "ConfigPayload",
    "DeviceEventBody",
    "DeviceEventPayload",
    "DeviceIdentity",
    "DeviceStateBody",
    "DeviceStatePayload",
    "Envelope",
    "Message",
    "ReplayPayload",
    "RulingBody",
    "RulingPayload",
    "RulingStateBody",
    "RulingStatePayload",
    "SoftwareBody",
    "SoftwarePayload",
    "SourceEvent",
    "StatusBody",
    "StatusPayload",
    "TableBody",
    "TablePayload",
    "Undelivered",
    "WithheldBody",
    "WithheldPayload",
    "model_of",
    "parse_payload",
    "utc_ms",
]


def utc_ms(moment: datetime | None = None) -> str:
    """UTC timestamp with milliseconds: ``2026-11-29T14:43:13.123Z``."""
    if moment is not None:
        return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + (
            f"{moment.microsecond // 1000:03d}Z"
        )
    second, milli = divmod(time.time_ns() // 1_000_000, 1000)
    if second != _second[0]:  # the formatted second, kept: strftime costs more than the rest
        _second[:] = second, time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(second))
    return f"{_second[1]}{milli:03d}Z"


_second: list[object] = [None, ""]


class Envelope(BaseModel):
    """Fields every payload carries."""

    # each payload model is built at its first use, not at import (most kinds are rare)
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    table: str = Field(description="table id from the config")
    ts: str = Field(description="UTC time the daemon produced this message, ms precision")
    seq: int = Field(
        ge=0,
        description="per-table sequence number: never repeats or goes backwards, across "
        "restarts; a gap means messages were lost",
    )
    republished: bool = Field(
        default=False,
        description="true when retained state is sent again after a reconnect; it then "
        "carries its original seq and ts",
    )
    redelivered: bool = Field(
        default=False,
        description="true when the table sends a journaled message again because the broker's "
        "acknowledgement of an earlier send never came (a dropped connection, a restart): it "
        "may be a duplicate; drop it if you already have its seq",
    )
    test_clock: str | None = Field(
        default=None,
        description="only from a lab table running a test clock ([test_clock]: its speed and "
        "offset, e.g. 'x3600 +0s'): the table's times (deck age, the gaming day) are not real",
    )
    untrusted_time: int | None = Field(
        default=None,
        ge=0,
        exclude_if=lambda seq: seq is None,
        description="present only on a record made while the table did not trust its wall "
        "clock (not synchronised, or its estimated error past [clock] max_error_s): the seq "
        "of the clock record that said so; its ts may be off by more than that bound",
    )


class Body(BaseModel):
    """A payload's own fields, without the envelope: the message as the table builds it where
    it is made. The publisher puts the envelope in front once the journal numbers it
    (``Publisher.enqueue``); each ``XPayload`` is ``XBody`` behind the ``Envelope``, the
    envelope's fields first, and is what a reader parses."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    def to_json(self) -> bytes:
        """The fields as JSON, as ``model_dump_json`` gives them."""
        return self.__pydantic_serializer__.to_json(self)


class Message(Protocol):
    """What ``Publisher.enqueue`` takes: a payload's own fields that write themselves as one
    JSON object (a ``Body``, or ``DeviceEventBody`` on the per-event path)."""

    def to_json(self) -> bytes: ...


class Undelivered(BaseModel):
    """A record the broker refuses to take (docs/mqtt.md, "When the broker says no")."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    seq: int = Field(ge=0, description="the oldest record the broker refuses")
    topic: str = Field(description="the topic it goes to")
    reason: str = Field(description="the broker's reason code and its name, e.g. '0x87 (not "
                        "authorized)'")  # fmt: skip


class StatusBody(Body):
    """``<prefix>/<table>/status`` (retained). The offline form is also the last will."""

    status: Literal["online", "offline"]
    version: str
    will: bool = Field(
        default=False,
        description="true on the last will, sent by the broker when the daemon vanished; it "
        "repeats the seq of the last message queued before that connection was made",
    )
    undelivered: Undelivered | None = Field(
        default=None,
        description="set while the broker refuses a record (it stays in the journal and goes "
        "again; every later seq waits behind it for the acknowledged mark); null once it has "
        "taken it",
    )


class StatusPayload(StatusBody, Envelope):
    __doc__ = StatusBody.__doc__


class WithheldBody(Body):
    """``<prefix>/<table>/withheld``: in place of a record larger than the broker's Maximum
    Packet Size, under the record's own seq and chain entry, so that no seq goes missing; the
    record itself stays in the journal (``tableside journal export``)."""

    topic: str = Field(description="the topic the record was for")
    retain: bool = Field(description="whether it was retained state")
    size: int = Field(ge=0, description="the PUBLISH's size in bytes")
    limit: int = Field(ge=0, description="the broker's Maximum Packet Size")


class WithheldPayload(WithheldBody, Envelope):
    __doc__ = WithheldBody.__doc__


class DeviceIdentity(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    vendor: str
    model: str
    serial: str
    firmware_version: str
    firmware_sha256: str


class DeviceStateBody(Body):
    """``<prefix>/<table>/device/<device>/state`` (retained)."""

    device: str
    device_class: str
    driver: str
    connection: ConnectionState
    connection_detail: str = ""
    since: str = Field(description="when the connection state last changed")
    identity: DeviceIdentity | None = None
    device_state: str | None = Field(
        default=None, description="what the device last said of itself (idle, shuffling, …)"
    )
    fault: str | None = Field(default=None, description="the fault the device reports, if any")
    connects: int = Field(description="links opened since the daemon started")
    parts: dict[str, dict[str, object]] = Field(
        default_factory=dict,
        description="identities of the device's parts: the acceptor at each seat of a ccTalk "
        "bus (manufacturer, product, serial, software, rom_checksum, address)",
    )
    last_event: str | None = None


class DeviceStatePayload(DeviceStateBody, Envelope):
    __doc__ = DeviceStateBody.__doc__


class DeviceEventPayload(Envelope):
    """``<prefix>/<table>/device/<device>/event``: every device event."""

    device: str
    device_class: str
    event: str = Field(description="event kind, e.g. shuffle_complete, fault, connection")
    data: dict[str, object]


@dataclass(frozen=True, slots=True)
class DeviceEventBody:
    """A device event's message as the table makes it, once per event: ``DeviceEventPayload``
    without the envelope, as a plain dataclass with its own ``to_json``, since validating it
    would check nothing (strings, and the device's own data the model takes as ``object``)
    and copy everything. Its fields are the model's, in order (tests/test_payloads.py)."""

    device: str
    device_class: str
    event: str
    data: dict[str, object]

    def to_json(self) -> bytes:
        """Byte for byte what ``DeviceEventPayload`` dumps of these fields (a float that is not
        finite as null, as pydantic's own default)."""
        return to_json(
            {"device": self.device, "device_class": self.device_class, "event": self.event,
             "data": self.data}, inf_nan_mode="null",
        )  # fmt: skip


class SourceEvent(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    device: str = Field(description='the device, or "table" for what the table\'s state shows')
    event: str
    seq: int = Field(
        description="seq of the message this ruling came from: the device event, or for the "
        "table the table state (or command result) that carried the change"
    )
    data: dict[str, object]


#: a game and a phase (rules/vocabulary.py) as a message carries them: their names, a string in
#: the schema as it always was
_Game = Annotated[Game, WithJsonSchema({"title": "Game", "type": "string"})]
_Phase = Annotated[Phase, WithJsonSchema({"type": "string"})]


class TableBody(Body):
    """``<prefix>/<table>/table`` (retained): the table's phase, round and what the rules
    count (rules/table.py); journaled, and taken back from the journal after a restart."""

    game: _Game
    phase: _Phase = Field(title="Phase", description="closed, open, betting, no_more_bets, "
                          "dealing, decisions, settlement, complete")  # fmt: skip
    round: int = Field(description="rounds begun since the table was first opened")
    rounds_since_stub_count: int
    deck_age_h: float | None = Field(description="hours the cards in play have been in play")
    meter_cents: int | None = Field(
        default=None, description="the progressive meter (555.13), when the table has one"
    )
    state: dict[str, object] = Field(description="the whole state, as rules/table.py keeps it")
    cause: str = Field(description="the event that changed it (a command or a device event)")


class TablePayload(TableBody, Envelope):
    __doc__ = TableBody.__doc__


class RulingBody(Body):
    """``<prefix>/<table>/ruling``: every ruling, with the clause behind it."""

    rule_id: str
    game: _Game
    clause: str = Field(description="citation, e.g. 58 Pa. Code § 555.5(b)")
    words: str = Field(description="the clause's own words")
    summary: str
    actions: list[Action]
    affected: list[str] = Field(
        description='the hands it affects: ["all"], ["dealer"] or a seat, e.g. ["seat3"]'
    )
    event: SourceEvent
    round: int | None = Field(default=None, description="the table's round when it was given")
    halts: bool = Field(
        default=False,
        description="it halts dealing until a floorperson resolves it (its actions include "
        "halt_dealing or remove_deck): deals are refused meanwhile",
    )


class RulingPayload(RulingBody, Envelope):
    __doc__ = RulingBody.__doc__


#: a ruling's state (rules/rulings.py) as the message carries it: its name, described inline as
#: the schema always had it (an enum of the names), not as a definition of its own
_Lifecycle = Annotated[
    RulingState, WithJsonSchema({"enum": [s.value for s in RulingState], "type": "string"})
]


class RulingStateBody(Body):
    """``<prefix>/<table>/ruling_state``: a ruling's lifecycle moved (rules/rulings.py). Its id
    is the ``seq`` of the ruling message that gave it, which is the ruling's ``open``."""

    ruling: int = Field(description="the ruling's id: the seq of the ruling message")
    rule_id: str
    clause: str
    actions: list[Action] = Field(description="what the ruling requires")
    state: _Lifecycle = Field(
        title="State",  # pydantic titles no enum's field by itself
        description="open: still open, its halt ended (the clause's own condition was met, "
        "e.g. 551.2(e)'s inspection; halts is false); "
        "escalated: nobody acknowledged it within [rulings] escalate_after_s; "
        "acknowledged: a floorperson has seen it; resolved: done; lapsed: left unresolved "
        f"while {MAX_UNRESOLVED} newer ones came, no longer tracked (never one that halts "
        "dealing)",
    )
    halts: bool = Field(description="it still halts dealing after this change")
    open_s: float = Field(
        description="seconds from the ruling to this change, by the table's clock"
    )
    by: str | None = Field(default=None, description="who acknowledged or resolved it")
    action: Action | None = Field(default=None, description="resolved: what was done")
    note: str | None = Field(default=None, description="resolved: the floorperson's note")


class RulingStatePayload(RulingStateBody, Envelope):
    __doc__ = RulingStateBody.__doc__


#: what became of a request (``CommandResult.status``)
CommandStatus = Literal["done", "refused", "internal_error"]

#: a request larger than this is refused unread (docs/commands.md); no command needs 1 KiB
MAX_REQUEST_BYTES = 64 * 1024
#: the longest command or device name, and request id, a result repeats
MAX_NAME_CHARS = 128


class CommandRequest(BaseModel):
    """``<prefix>/<table>/command/<role>``: ask the table to do something (docs/commands.md)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    command: str = Field(max_length=MAX_NAME_CHARS)
    device: str = Field(
        max_length=MAX_NAME_CHARS, description="the device that carries it out, e.g. shuffler"
    )
    args: dict[str, object] = Field(default_factory=dict, description="the command's arguments")
    request_id: str | None = Field(
        default=None, max_length=MAX_NAME_CHARS, description="yours; the result repeats it"
    )


class CommandResultBody(Body):
    """``<prefix>/<table>/command_result``: what became of a request, refused ones included."""

    role: str = Field(description="the role the request came as (its topic)")
    device: str | None
    command: str | None
    request_id: str | None
    ok: bool
    status: CommandStatus | None = Field(
        default=None,
        description="done (ok), refused (the request or the table's state: error says why), or "
        "internal_error (the table failed while carrying it out: not the requester's mistake, "
        "and nothing of it was applied to the table's state; error says what failed); null "
        "only in results journaled before it was added",
    )
    error: str | None = None
    #: a deal a rule would have refused, carried out on a floorperson's word: the reason given
    override: str | None = None
    #: a ``replay``: how many records were sent again on ``<prefix>/<table>/replay``
    replayed: int | None = None
    #: a ``replay`` that asked for records retention has deleted: the first seq the journal
    #: still has (those before it are gone, and were not sent)
    pruned_before: int | None = None


class CommandResult(CommandResultBody, Envelope):
    __doc__ = CommandResultBody.__doc__


# -- proof across the wire (wire/proof.py, docs/floor.md) ---------------------------------


class ConfigChange(BaseModel):
    """One key of the table's configuration that differs from the last start's."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    key: str = Field(description="its path, e.g. 'journal.retain_days', 'devices.shoe.url'")
    old: object = Field(description="the value at the last start (null: not set then)")
    new: object = Field(description="the value now (null: not set now)")


class ConfigBody(Body):
    """``<prefix>/<table>/config`` (retained): the configuration the daemon runs, journaled at
    each start with what changed since the last start's (docs/configuration.md). Secrets
    (passwords) appear only as a digest, so that a change shows and the value does not."""

    hash: str = Field(pattern=r"^[0-9a-f]{64}$", description="SHA-256 of the configuration "
                      "as recorded here (canonical JSON, secrets as digests), hex")  # fmt: skip
    config: dict[str, object] = Field(description="every key, as its path, with its value")
    changed: list[ConfigChange] = Field(
        description="the keys that differ from the last start's configuration; all of them at "
        "a first start"
    )
    started_by: str | None = Field(
        description="the login that started the daemon, where the system says (SUDO_USER, "
        "LOGNAME); null when it does not"
    )


class ConfigPayload(ConfigBody, Envelope):
    __doc__ = ConfigBody.__doc__


class SoftwareBody(Body):
    """``<prefix>/<table>/software`` (retained): the installed software held to its release
    manifest, before any device opens and at a technician's ``verify_software``
    (docs/software.md). A mismatch also gives a ruling that halts dealing."""

    result: Literal["ok", "mismatch", "unverified"] = Field(
        description="ok: every file matches the manifest; mismatch: a file differs, or the "
        "configured manifest cannot be read; unverified: no manifest (a checkout, the demo)"
    )
    version: str = Field(description="the tableside version running")
    manifest: str | None = Field(description="the manifest's path on the table; null: none")
    manifest_sha256: str | None = Field(
        pattern=r"^[0-9a-f]{64}$",
        description="SHA-256 of the manifest file, hex (what the floor approves); null when it "
        "could not be read",
    )
    files: int = Field(ge=0, description="files the manifest names")
    differ: int = Field(ge=0, description="files changed, missing or added, in all")
    changed: list[str] = Field(description="files whose SHA-256 differs (the first 50)")
    missing: list[str] = Field(description="files the manifest names that are not there")
    added: list[str] = Field(description="files there that the manifest does not name")
    problem: str | None = Field(description="why the check could not be made, or says more")
    checked_by: str = Field(description="'start', or the role that asked (verify_software)")
    seconds: float = Field(ge=0, description="how long the check took")


class SoftwarePayload(SoftwareBody, Envelope):
    __doc__ = SoftwareBody.__doc__


class ClockBody(Body):
    """``<prefix>/<table>/clock`` (retained): the wall clock's discipline as the kernel has it
    (``adjtimex``), journaled at each start and whenever the verdict changes (daemon/
    discipline.py, docs/journal.md "Time")."""

    synchronised: bool = Field(description="a time service disciplines the clock (the "
                               "kernel's STA_UNSYNC is clear)")  # fmt: skip
    trusted: bool = Field(
        description="synchronised, and the estimated error within bound_s: records made while "
        "it is false carry untrusted_time"
    )
    esterror_us: int = Field(description="the estimated error, microseconds (-1: unknown)")
    maxerror_us: int = Field(description="the error's bound, microseconds (-1: unknown)")
    bound_s: float = Field(description="[clock] max_error_s: the estimated error trusted")
    source: str = Field(
        description="where it was read: 'adjtimex' (the kernel), or 'file <path>', a lab's "
        "test hook; with why it could not be read, if so"
    )


class ClockPayload(ClockBody, Envelope):
    __doc__ = ClockBody.__doc__


class CheckpointBody(Body):
    """``<prefix>/<table>/checkpoint``: the table's newest record, signed with its key. The
    checkpoint is itself a journal record (its own seq, the next after ``upto_seq``)."""

    upto_seq: int = Field(ge=0, description="the seq of the newest record before this one")
    head: str = Field(
        pattern=r"^[0-9a-f]{64}$", description="that record's hash (its chain-hash), hex"
    )
    key: str = Field(
        pattern=r"^[0-9a-f]{64}$",
        description="the table's Ed25519 public key, hex (`tableside key`): trust it only as "
        "enrolled, never because a message says so",
    )
    signature: str = Field(
        pattern=r"^[0-9a-f]{128}$",
        description="Ed25519 over proof.checkpoint_message(table, upto_seq, head), hex",
    )


class CheckpointPayload(CheckpointBody, Envelope):
    __doc__ = CheckpointBody.__doc__


class ReplayPayload(BaseModel):
    """``<prefix>/<table>/replay``: a journal record sent again for the ``auditor``'s
    ``replay`` command; not a journal record itself (a repeat, not a new message)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    table: str
    replayed: Literal[True] = True
    seq: int = Field(ge=0, description="the record's seq")
    topic: str = Field(description="the topic it was sent on")
    retain: bool
    ts: float = Field(description="the record's journal time, the float its hash covers")
    prev: str = Field(pattern=r"^[0-9a-f]{64}$", description="the previous record's hash, hex")
    hash: str = Field(
        pattern=r"^[0-9a-f]{64}$",
        description="SHA-256(prev ‖ seq ‖ ts ‖ topic ‖ retain ‖ payload), hex",
    )
    payload: str = Field(description="the journaled payload, exactly, as a UTF-8 string")


PAYLOAD_MODELS: dict[str, type[BaseModel]] = {
    "status": StatusPayload,
    "device-state": DeviceStatePayload,
    "device-event": DeviceEventPayload,
    "ruling": RulingPayload,
    "ruling-state": RulingStatePayload,
    "table": TablePayload,
    "command": CommandRequest,
    "command-result": CommandResult,
    "checkpoint": CheckpointPayload,
    "config": ConfigPayload,
    "software": SoftwarePayload,
    "clock": ClockPayload,
    "replay": ReplayPayload,
    "withheld": WithheldPayload,
}


_MODEL_OF: dict[TopicKind, type[BaseModel]] = {
    TopicKind.STATUS: StatusPayload,
    TopicKind.DEVICE_STATE: DeviceStatePayload,
    TopicKind.DEVICE_EVENT: DeviceEventPayload,
    TopicKind.RULING: RulingPayload,
    TopicKind.RULING_STATE: RulingStatePayload,
    TopicKind.TABLE: TablePayload,
    TopicKind.CHECKPOINT: CheckpointPayload,
    TopicKind.CONFIG: ConfigPayload,
    TopicKind.SOFTWARE: SoftwarePayload,
    TopicKind.CLOCK: ClockPayload,
    TopicKind.REPLAY: ReplayPayload,
    TopicKind.WITHHELD: WithheldPayload,
    TopicKind.COMMAND: CommandRequest,
    TopicKind.COMMAND_RESULT: CommandResult,
    TopicKind.RESPONSE: CommandResult,
}


def model_of(kind: TopicKind) -> type[BaseModel]:
    """The payload model a topic of this kind carries."""
    return _MODEL_OF[kind]


_M = TypeVar("_M", bound=BaseModel)


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON (RFC 8259 has no NaN or Infinity)")


def parse_payload(model: type[_M], payload: bytes) -> _M:
    """The payload as its model; ValueError says what is wrong and where (the field's path).
    NaN and Infinity are refused anywhere in it (JSON has neither; a browser's parser refuses
    them), not only where the model wants a finite number."""
    try:
        found = model.model_validate_json(payload)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "payload"
        raise ValueError(f"not a {model.__name__}: {where}: {first['msg']}") from None
    if b"NaN" in payload or b"Infinity" in payload:  # rare: then parsed again, to be sure
        json.loads(payload, parse_constant=_no_constant)
    return found
