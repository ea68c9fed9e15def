"""The publisher's fast path: a message of a PLAIN model (daemon/payloads.py) is serialised from
a dict, not built as the model; its bytes must be the model's, byte for byte, for every event
any driver can make (the chain's hash covers them, and ``marked`` relies on their layout)."""

from __future__ import annotations

import dataclasses
import json
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
from tableside.daemon.payloads import PLAIN, DeviceEventPayload, utc_ms
from tableside.daemon.publisher import Publisher
from tableside.drivers.cards import Card
from tableside.drivers.events import DeviceEvent
from tableside.drivers.registry import available_drivers, get_driver
from tableside.shuffle.deck import new_deck


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


def test_the_plain_models_are_the_device_event() -> None:
    assert frozenset({DeviceEventPayload}) == PLAIN
    assert len(EVENTS) > 10  # every driver's events were found


@pytest.mark.parametrize("cls", EVENTS, ids=lambda c: c.__qualname__)
@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(data=st.data())
async def test_a_device_event_is_serialised_as_its_model_would(
    publisher: Publisher, cls: type[DeviceEvent], data: st.DataObject
) -> None:
    event = data.draw(_events(cls))
    fields: dict[str, Any] = {"device": event.device, "device_class": "shoe",
                              "event": event.kind,
                              "data": event.data(include_cards=True)}  # fmt: skip
    ts = utc_ms()
    record = publisher.enqueue("tableside/cs-01/device/x/event", DeviceEventPayload, ts, fields)
    model = DeviceEventPayload(**{**publisher._head, "ts": ts, "seq": record.seq, **fields})
    assert record.payload == model.model_dump_json().encode()
    again = DeviceEventPayload.model_validate_json(record.payload)
    assert again.seq == record.seq and again.event == event.kind
    assert again.test_clock == publisher._head["test_clock"]


async def test_other_models_are_built_and_checked(publisher: Publisher) -> None:
    """A model not PLAIN is built: a field it does not know is refused, not sent, and takes
    no seq."""
    from pydantic import ValidationError

    from tableside.daemon.payloads import CommandResult

    fields = {"role": "dealer", "device": None, "command": None, "request_id": None, "ok": True}
    record = publisher.enqueue("tableside/cs-01/command_result", CommandResult, utc_ms(), fields)
    assert json.loads(record.payload)["seq"] == record.seq
    with pytest.raises(ValidationError):
        publisher.enqueue("tableside/cs-01/command_result", CommandResult, utc_ms(),
                          {**fields, "unknown": 1})  # fmt: skip
    assert publisher.journal.next_seq == record.seq + 1


def test_one_topic_parser_names_every_topic_the_table_uses() -> None:
    """daemon/payloads.py ``parse_topic``, against the daemon's own topics (publisher.Topics)."""
    from tableside.daemon.payloads import Topic, TopicKind, parse_topic
    from tableside.daemon.publisher import Topics

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
    from tableside.daemon.payloads import TopicKind, parse_topic, split_topic
    from tableside.daemon.publisher import Topics

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
    from tableside.daemon.payloads import DeviceEventPayload, StatusPayload, parse_payload

    event = (b'{"table":"t","ts":"x","seq":1,"device":"s","device_class":"s","event":"e",'
             b'"data":{"deep":[1,' + bad + b"]}}")  # fmt: skip
    with pytest.raises(ValueError, match="not JSON"):
        parse_payload(DeviceEventPayload, event)
    quoted = b'{"table":"t","ts":"x","seq":1,"status":"online","version":"' + bad + b'"}'
    assert parse_payload(StatusPayload, quoted).version == bad.decode()  # in a string: text
    number = b'{"table":"t","ts":5,"seq":1,"status":"online","version":"0"}'
    with pytest.raises(ValueError, match=r"not a StatusPayload: ts: Input should be a valid st"):
        parse_payload(StatusPayload, number)
