"""The publisher writes a message (a payload's own fields, built where it is made) behind the
envelope; its bytes must be its payload model's, byte for byte, for every event any driver can
make (the chain's hash covers them, and ``marked`` relies on their layout)."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tableside.daemon.clock import LabClock
from tableside.daemon.config import BrokerConfig
from tableside.daemon.journal import Journal
from tableside.daemon.publisher import Publisher
from tableside.drivers.cards import Card
from tableside.drivers.events import DeviceEvent
from tableside.drivers.registry import available_drivers, get_driver
from tableside.shuffle.deck import new_deck
from tableside.wire import payloads
from tableside.wire.payloads import (
    Body,
    CommandResult,
    CommandResultBody,
    DeviceEventBody,
    DeviceEventPayload,
    Envelope,
    StatusBody,
    StatusPayload,
    Undelivered,
    utc_ms,
)


def _every_event_class() -> list[type[DeviceEvent]]:
    for name in available_drivers():
        get_driver(name)  # imports the driver and its events

    def below(cls: type[DeviceEvent]) -> Iterator[type[DeviceEvent]]:
        for sub in cls.__subclasses__():
            yield sub
            yield from below(sub)

    return sorted(set(below(DeviceEvent)), key=lambda c: (c.__module__, c.__qualname__))


EVENTS = _every_event_class()

#: what a device's data may hold where a driver types it ``Any``
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


def _strategy(hint: Any) -> st.SearchStrategy[Any]:
    """``st.from_type``, with JSON values where the type says ``Any`` (which it cannot draw)."""
    if hint is Any:
        return JSON
    if hint is Card:  # a card is one of 52 (a byte that is none is refused by its decoder)
        return st.sampled_from([Card.of(code) for code in new_deck()])
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is dict:
        return st.dictionaries(_strategy(args[0]), _strategy(args[1]), max_size=3)
    if origin in (list, tuple) and args and args[-1] is Ellipsis:
        return st.lists(_strategy(args[0]), max_size=3).map(origin)
    if origin is list:
        return st.lists(_strategy(args[0]), max_size=3)
    if origin in (typing.Union, types.UnionType):
        return st.one_of(*(_strategy(a) for a in args))
    return st.from_type(hint)


def _events(cls: type[DeviceEvent]) -> st.SearchStrategy[DeviceEvent]:
    hints = typing.get_type_hints(cls)
    return st.builds(cls, **{f.name: _strategy(hints[f.name]) for f in dataclasses.fields(cls)})


@pytest.fixture(params=[LabClock(speed=3600, offset_s=-5), None], ids=["test-clock", "real"])
async def publisher(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Publisher]:
    journal = Journal(tmp_path / "journal.sqlite", "cs-01", test_clock=request.param)
    journal.open()
    journal.start()
    try:
        yield Publisher(BrokerConfig(url="mqtt://127.0.0.1:1"), "cs-01", "t", journal)
    finally:
        journal.close()


def _payload_of(body: type[object]) -> type[Envelope]:
    """The payload model a message class is the body of (``XBody`` → ``XPayload``)."""
    name = body.__name__.removesuffix("Body")
    found: type[Envelope] = getattr(payloads, name + "Payload", None) or getattr(payloads, name)
    return found


BODIES: list[type[object]] = [*Body.__subclasses__(), DeviceEventBody]


@pytest.mark.parametrize("body", BODIES, ids=lambda c: c.__name__)
def test_each_message_is_its_payload_without_the_envelope(body: type[object]) -> None:
    """A payload's fields are the envelope's, then its message's, in order: the publisher
    writes the envelope in front of the message's JSON."""
    payload = _payload_of(body)
    own = ([f.name for f in dataclasses.fields(body)] if dataclasses.is_dataclass(body)
           else list(typing.cast(type[Body], body).model_fields))  # fmt: skip
    assert list(payload.model_fields) == [*Envelope.model_fields, *own]
    assert len(EVENTS) > 10  # every driver's events were found


@pytest.mark.parametrize("cls", EVENTS, ids=lambda c: c.__qualname__)
@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(data=st.data(), untrusted=st.none() | st.integers(0, 2**40))
async def test_a_device_event_is_serialised_as_its_model_would(
    publisher: Publisher, cls: type[DeviceEvent], data: st.DataObject, untrusted: int | None
) -> None:
    event = data.draw(_events(cls))
    message = DeviceEventBody(event.device, "shoe", event.kind, event.data(include_cards=True))
    ts = utc_ms()
    publisher.untrusted_time(untrusted)
    record = publisher.enqueue("tableside/cs-01/device/x/event", message, ts)
    model = DeviceEventPayload(
        table="cs-01", ts=ts, seq=record.seq, test_clock=publisher._test_clock,
        untrusted_time=untrusted, device=message.device, device_class=message.device_class,
        event=message.event, data=message.data,
    )  # fmt: skip
    assert record.payload == model.model_dump_json().encode()
    again = DeviceEventPayload.model_validate_json(record.payload)
    assert again.seq == record.seq and again.event == event.kind
    assert again.test_clock == publisher._test_clock and again.untrusted_time == untrusted


async def test_a_message_is_built_and_checked_where_it_is_made(publisher: Publisher) -> None:
    """A message is its model, checked when it is built: a field it does not know is refused
    there, before anything is journaled; what is journaled is its payload model's dump."""
    from pydantic import ValidationError

    fields: dict[str, Any] = {"role": "dealer", "device": None, "command": None,
                              "request_id": None, "ok": True}  # fmt: skip
    with pytest.raises(ValidationError):
        CommandResultBody.model_validate({**fields, "unknown": 1})
    message = CommandResultBody(**fields)
    ts = utc_ms()
    for untrusted in (None, 7):
        publisher.untrusted_time(untrusted)
        record = publisher.enqueue("tableside/cs-01/command_result", message, ts)
        model = CommandResult(table="cs-01", ts=ts, seq=record.seq, untrusted_time=untrusted,
                              test_clock=publisher._test_clock, **fields)  # fmt: skip
        assert record.payload == model.model_dump_json().encode()
    status = StatusBody(status="online", version="1",
                        undelivered=Undelivered(seq=3, topic="t", reason="0x87"))  # fmt: skip
    record = publisher.enqueue("tableside/cs-01/status", status, ts, retain=True)
    said = StatusPayload(table="cs-01", ts=ts, seq=record.seq, untrusted_time=7,
                         test_clock=publisher._test_clock, **status.model_dump())  # fmt: skip
    assert record.payload == said.model_dump_json().encode()


def test_one_topic_parser_names_every_topic_the_table_uses() -> None:
    """wire/payloads.py ``parse_topic``, against the daemon's own topics (publisher.Topics)."""
    from tableside.wire.topics import Topic, TopicKind, Topics, parse_topic

    t = Topics("tableside", "cs-01")
    expected = {
        t.status: Topic("cs-01", TopicKind.STATUS),
        t.ruling: Topic("cs-01", TopicKind.RULING),
        t.ruling_state: Topic("cs-01", TopicKind.RULING_STATE),
        t.table_state: Topic("cs-01", TopicKind.TABLE),
        t.command_result: Topic("cs-01", TopicKind.COMMAND_RESULT),
        t.checkpoint: Topic("cs-01", TopicKind.CHECKPOINT),
        t.replay: Topic("cs-01", TopicKind.REPLAY),
        t.device_state("shoe"): Topic("cs-01", TopicKind.DEVICE_STATE, "shoe"),
        t.device_event("shoe"): Topic("cs-01", TopicKind.DEVICE_EVENT, "shoe"),
        f"{t.base}/command/dealer": Topic("cs-01", TopicKind.COMMAND, "dealer"),
        f"{t.response_prefix}floor/7": Topic("cs-01", TopicKind.RESPONSE, "floor/7"),
    }
    for topic, parsed in expected.items():
        assert parse_topic("tableside", topic) == parsed, topic
    for other in ("other/cs-01/status", "tableside/cs-01", "tableside//status",
                  "tableside/cs-01/statuses", "tableside/cs-01/device/shoe",
                  "tableside/cs-01/device/shoe/fault", "tableside/cs-01/command/a/b"):  # fmt: skip
        assert parse_topic("tableside", other) is None, other


@pytest.mark.parametrize("prefix", ["tableside", "casino/east/tableside"])
def test_a_stored_topic_is_read_by_the_same_parser_knowing_only_its_table(prefix: str) -> None:
    """``split_topic`` (the floor's stored records: ``Message.what``, ``floor verify``'s
    prefix) and ``Topics.role_of_command``: every topic of the table, under a prefix of one
    level or of three (the floor's verify read ``casino`` as the prefix of every record)."""
    from tableside.wire.topics import TopicKind, Topics, parse_topic, split_topic

    t = Topics(prefix, "cs-01")
    topics = [t.status, t.ruling, t.ruling_state, t.table_state, t.command_result,
              t.checkpoint, t.replay, t.device_state("cs-01"), t.device_event("shoe"),
              f"{t.base}/command/dealer"]  # fmt: skip
    for topic in topics:
        assert split_topic("cs-01", topic) == (prefix, parse_topic(prefix, topic)), topic
    assert split_topic("cs-02", t.status) is None
    assert t.role_of_command(f"{t.base}/command/dealer") == "dealer"
    assert t.role_of_command(f"{prefix}/cs-02/command/dealer") == ""  # another table's
    assert t.role_of_command(t.status) == ""
    assert parse_topic(prefix, t.checkpoint).kind is TopicKind.CHECKPOINT  # type: ignore[union-attr]


@pytest.mark.parametrize("bad", [b"NaN", b"Infinity", b"-Infinity"])
def test_a_payload_with_nan_or_infinity_anywhere_is_refused(bad: bytes) -> None:
    from tableside.wire.payloads import DeviceEventPayload, StatusPayload, parse_payload

    event = (b'{"table":"t","ts":"x","seq":1,"device":"s","device_class":"s","event":"e",'
             b'"data":{"deep":[1,' + bad + b"]}}")  # fmt: skip
    with pytest.raises(ValueError, match="not JSON"):
        parse_payload(DeviceEventPayload, event)
    quoted = b'{"table":"t","ts":"x","seq":1,"status":"online","version":"' + bad + b'"}'
    assert parse_payload(StatusPayload, quoted).version == bad.decode()  # in a string: text
    number = b'{"table":"t","ts":5,"seq":1,"status":"online","version":"0"}'
    with pytest.raises(ValueError, match=r"not a StatusPayload: ts: Input should be a valid st"):
        parse_payload(StatusPayload, number)
