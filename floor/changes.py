"""A table's changes on the record, for an auditor: which records are changes, and each as one
row (pure: stored records and enrolments in, rows out; floor/web/records.py serves them).

What is a change is data, one row per record kind (``CHANGES``): the topic kind the table
publishes it on (``<prefix>/<table>/<kind>``, docs/mqtt.md), and for device events the event.
A kind the tables publish later (``software``, a retained record on its own topic) is one row
here and shows on the page and in the export with no page code: every row is drawn the same
way, its fields as the table recorded them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from pydantic import BaseModel

from tableside.floor.store import Enrolment, Message
from tableside.wire.payloads import ConfigPayload, DeviceEventPayload, model_of, parse_payload
from tableside.wire.proof import unmarked
from tableside.wire.topics import TopicKind, Topics

__all__ = ["CHANGES", "COLUMNS", "Change", "ChangeKind", "changes", "topics"]


@dataclass(frozen=True, slots=True)
class ChangeKind:
    """A kind of record that is a change: its name on the page, the topic kind it comes on,
    and for device events which event."""

    name: str
    topic_kind: TopicKind
    event: str | None = None


#: every kind of record that is a change, in the order the page names them
CHANGES = (
    ChangeKind("software", TopicKind.SOFTWARE),  # the daemon's own (docs/mqtt.md, once published)
    ChangeKind("config", TopicKind.CONFIG),  # docs/configuration.md, "Changes on the record"
    ChangeKind("device identity", TopicKind.DEVICE_EVENT, "identity"),
    ChangeKind("acceptor identity", TopicKind.DEVICE_EVENT, "acceptor_identity"),
    ChangeKind("firmware", TopicKind.DEVICE_EVENT, "firmware_changed"),  # daemon/firmware.py
)
#: what the floor itself records (``Store.enrolments``)
ENROLMENT = "enrolment"

#: what every row carries (the export's columns)
COLUMNS = ("time", "seq", "kind", "subject", "by", "summary", "detail")

#: the topic kinds a change comes on
_KINDS = frozenset(k.topic_kind for k in CHANGES)

#: a payload's envelope: not what changed
_ENVELOPE = {"table", "ts", "seq", "republished", "redelivered", "test_clock"}


@dataclass(frozen=True, slots=True)
class Change:
    #: the table's journal time (a record), or the floor's (an enrolment), ISO 8601 UTC
    time: str
    #: the record's seq (None: the floor's own record)
    seq: int | None
    kind: str
    #: what changed: a device, the table's key, the configuration
    subject: str
    #: who, where the record says
    by: str
    summary: str
    #: the record's fields as the table (or the floor) recorded them
    detail: dict[str, object]

    def as_dict(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in COLUMNS}


def topics(prefix: str, table: str) -> tuple[list[str], list[str]]:
    """The topics (exact, and SQL LIKE patterns) the changes of a table come on."""
    exact, like, at = [], [], Topics(prefix, table)
    for kind in dict.fromkeys(k.topic_kind for k in CHANGES):
        if kind is TopicKind.DEVICE_EVENT:
            like.append(at.device_event("%"))  # (the store matches the table too)
        else:
            exact.append(at.of(kind))
    return exact, like


def changes(records: Iterable[Message], enrolments: Iterable[Enrolment]) -> list[Change]:
    """The rows, oldest first: each record that is a change, and each enrolment."""
    rows = list(_records(records))
    rows.extend(_enrolment(e) for e in enrolments)
    return sorted(rows, key=lambda c: (c.time, c.seq if c.seq is not None else -1))


def _records(records: Iterable[Message]) -> Iterator[Change]:
    for m in records:
        message = _read(m)
        if message is None:
            continue
        event = message.event if isinstance(message, DeviceEventPayload) else None
        kind = next((k for k in CHANGES if k.topic_kind is m.what and k.event in (None, event)),
                    None)  # fmt: skip
        if kind is None:
            continue
        detail: dict[str, object]
        if isinstance(message, DeviceEventPayload):  # the event's data, and whose it is
            subject, detail = message.device, {"device": message.device, **message.data}
        else:
            subject, detail = kind.name, message.model_dump(mode="json", exclude=_ENVELOPE)
        by = (message.started_by or "") if isinstance(message, ConfigPayload) else ""
        when = m.chain_ts if m.chain_ts is not None else m.arrival
        yield Change(_iso(when), m.seq, kind.name, subject, by, _summary(message, detail), detail)


def _read(m: Message) -> BaseModel | None:
    """A stored record of a kind that can be a change, as its topic's model; None for another
    kind, or a payload that is not its model."""
    if m.what is None or m.what not in _KINDS:
        return None
    try:
        return parse_payload(model_of(m.what), unmarked(m.payload))
    except ValueError:
        return None


def _enrolment(e: Enrolment) -> Change:
    summary = f"key {e.key_hex} {e.action} ({e.via})" + (f": {e.reason}" if e.reason else "")
    detail: dict[str, object] = {"key": e.key_hex, "action": e.action, "via": e.via,
                                 "reason": e.reason}  # fmt: skip
    return Change(_iso(e.at), None, ENROLMENT, "key", e.by, summary, detail)


def _summary(message: BaseModel, detail: dict[str, object]) -> str:
    """One line of what the record says: a config record's changed keys; otherwise its plain
    fields, as they are."""
    if isinstance(message, ConfigPayload):
        keys = [c.key for c in message.changed]
        return f"{len(keys)} key(s) changed: {', '.join(keys)}" if keys else "no key changed"
    parts = [f"{k}={v}" for k, v in detail.items()
             if k != "device" and isinstance(v, str | int | float | bool)]  # fmt: skip
    return ", ".join(parts)


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
