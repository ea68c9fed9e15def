"""The topics of docs/mqtt.md, made and parsed in one place for the table, the floor and the
tools: ``Topics`` spells every topic of one table, ``parse_topic`` reads one back."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tableside.rules.commands import Role

__all__ = [
    "Topic",
    "TopicKind",
    "Topics",
    "every_table",
    "parse_topic",
    "split_topic",
    "table_named",
]


class TopicKind(enum.StrEnum):
    """What a topic under ``<prefix>/<table>/`` carries (docs/mqtt.md's table)."""

    STATUS = "status"
    DEVICE_STATE = "device_state"
    DEVICE_EVENT = "device_event"
    RULING = "ruling"
    RULING_STATE = "ruling_state"
    TABLE = "table"
    CHECKPOINT = "checkpoint"
    CONFIG = "config"
    SOFTWARE = "software"
    CLOCK = "clock"
    REPLAY = "replay"
    WITHHELD = "withheld"
    COMMAND = "command"
    COMMAND_RESULT = "command_result"
    RESPONSE = "response"


#: the kinds whose topic has levels after ``<prefix>/<table>/<kind>`` (a device, a role)
_DEEPER = (TopicKind.DEVICE_STATE, TopicKind.DEVICE_EVENT, TopicKind.COMMAND, TopicKind.RESPONSE)
_ONE_LEVEL = {k.value: k for k in TopicKind if k not in _DEEPER}


@dataclass(frozen=True, slots=True)
class Topic:
    """A topic of one table, parsed (``parse_topic``)."""

    table: str
    kind: TopicKind
    #: the device of ``device/<device>/state|event``; the role of ``command/<role>``
    name: str | None = None


def parse_topic(prefix: str, topic: str) -> Topic | None:
    """``<prefix>/<table>/…`` as a ``Topic``; None for a topic that is no table's (another
    prefix, no table, or a kind docs/mqtt.md does not list)."""
    head = f"{prefix}/"
    if not topic.startswith(head):
        return None
    table, sep, rest = topic[len(head) :].partition("/")
    if not table or not sep or not rest:
        return None
    kind = _ONE_LEVEL.get(rest)
    if kind is not None:
        return Topic(table, kind)
    first, _, tail = rest.partition("/")
    if first == "device":
        device, _, what = tail.partition("/")
        if device and what in ("state", "event"):
            which = TopicKind.DEVICE_STATE if what == "state" else TopicKind.DEVICE_EVENT
            return Topic(table, which, device)
    elif first == "command" and tail and "/" not in tail:
        return Topic(table, TopicKind.COMMAND, tail)
    elif first == "response" and tail:
        return Topic(table, TopicKind.RESPONSE, tail)
    return None


def split_topic(table: str, topic: str) -> tuple[str, Topic] | None:
    """A topic of ``table`` as its prefix and ``Topic``, for a reader that knows the table but
    not the prefix (a stored record; a prefix may have levels of its own); None when no split
    of it names ``table`` as ``parse_topic`` reads topics."""
    levels = topic.split("/")
    for depth in (1, 2, 3):  # status … checkpoint; command/<role>; device/<device>/<what>
        at = len(levels) - depth - 1
        if at >= 1 and levels[at] == table:
            prefix = "/".join(levels[:at])
            where = parse_topic(prefix, topic)
            if where is not None and where.table == table:
                return prefix, where
    return None


class Topics:
    """Every topic of one table, under the configured prefix (docs/mqtt.md)."""

    def __init__(self, prefix: str, table: str) -> None:
        self.prefix, self.table = prefix, table
        self.base = f"{prefix}/{table}"
        #: everything the table sends (a subscription)
        self.everything = f"{self.base}/#"
        self.status = f"{self.base}/status"
        self.ruling = f"{self.base}/ruling"
        self.ruling_state = f"{self.base}/ruling_state"
        self.table_state = f"{self.base}/table"
        self.command_filter = f"{self.base}/command/+"
        self.command_result = f"{self.base}/command_result"
        self.response_prefix = f"{self.base}/response/"
        self.checkpoint = f"{self.base}/checkpoint"
        self.replay = f"{self.base}/replay"
        self.withheld = f"{self.base}/withheld"
        self.config = f"{self.base}/config"
        self.software = f"{self.base}/software"
        self.clock = f"{self.base}/clock"
        #: each role's request topic, for a broker that takes no wildcard subscription
        self.command_topics = [self.command(role) for role in Role]

    def of(self, kind: TopicKind) -> str:
        """The topic of a kind with nothing after it (status, ruling, …, command_result)."""
        if kind in _DEEPER:
            raise ValueError(f"a {kind} topic names a device or a role: not one topic")
        return f"{self.base}/{kind}"

    def command(self, role: str) -> str:
        """Where a request as ``role`` goes."""
        return f"{self.base}/command/{role}"

    def response(self, *levels: str) -> str:
        """A requester's response topic under the table's ``response/`` subtree."""
        return self.response_prefix + "/".join(levels)

    def device_state(self, device: str) -> str:
        return f"{self.base}/device/{device}/state"

    def device_event(self, device: str) -> str:
        return f"{self.base}/device/{device}/event"

    def role_of_command(self, topic: str) -> str:
        """The role a request came as: the last level of ``<base>/command/<role>``
        (``parse_topic``); "" for a topic that is not this table's request."""
        where = parse_topic(self.prefix, topic)
        if where is None or where.table != self.table or where.kind is not TopicKind.COMMAND:
            return ""
        return where.name or ""


def every_table(prefix: str, kind: TopicKind | None = None) -> str:
    """A subscription to every table's messages under ``prefix``, or to one kind of them
    (with nothing after it: replay, command_result, …)."""
    if kind is None:
        return f"{prefix}/+/#"
    if kind in _DEEPER:
        raise ValueError(f"a {kind} topic names a device or a role: not one level")
    return f"{prefix}/+/{kind}"


def table_named(prefix: str, topic: str) -> str:
    """The table a topic under ``prefix`` names at its first level, even one ``parse_topic``
    does not take (a kind docs/mqtt.md does not list); "" when it names none."""
    table, sep, rest = topic.removeprefix(f"{prefix}/").partition("/")
    return table if topic.startswith(f"{prefix}/") and sep and rest else ""
