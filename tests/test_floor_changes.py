"""A table's changes on the record (floor/changes.py): which records are changes, and each row."""

from __future__ import annotations

import json

from tableside.floor.changes import changes
from tableside.floor.store import Enrolment, Message
from tableside.wire.topics import split_topic

TS = "2026-11-29T14:43:13.123Z"


def record(seq: int, topic: str, body: object, *, raw: bytes | None = None) -> Message:
    """A stored record of table ``t``, its envelope in front of ``body`` (a dict)."""
    fields = {"table": "t", "ts": TS, "seq": seq, **body} if isinstance(body, dict) else body
    payload = raw if raw is not None else json.dumps(fields).encode()
    where = split_topic("t", topic)
    return Message(table="t", topic=topic, kind="record", seq=seq, payload=payload, retain=False,
                   arrival=1_800_000_000.0 + seq, verdict="ok", chain_ts=1_800_000_000.0 + seq,
                   what=where[1].kind if where is not None else None)  # fmt: skip


CONFIG = {"hash": "a" * 64, "config": {"table.id": "t", "journal.retain_days": 30},
          "changed": [{"key": "journal.retain_days", "old": 7, "new": 30},
                      {"key": "table.id", "old": None, "new": "t"}],
          "started_by": "ops"}  # fmt: skip
SOFTWARE = {"result": "ok", "version": "1.0", "manifest": "/etc/m.json",
            "manifest_sha256": "b" * 64, "files": 3, "differ": 0, "changed": [], "missing": [],
            "added": [], "problem": None, "checked_by": "start", "seconds": 0.25}  # fmt: skip
IDENTIFIED = {"vendor": "V", "model": "M", "serial": "S1", "firmware_version": "2.0",
              "firmware_sha256": "c" * 64}  # fmt: skip
IDENTITY = {"device": "shoe", "device_class": "shoe", "event": "identity", "data": IDENTIFIED}
FLASHED = {"part": "seat3", "previous": "1.0", "current": "1.1"}
FIRMWARE = {"device": "acceptors", "device_class": "acceptors", "event": "firmware_changed",
            "data": FLASHED}  # fmt: skip
OTHER_EVENT = {"device": "shoe", "device_class": "shoe", "event": "card_dealt", "data": {}}


def test_each_change_is_one_row_its_fields_as_recorded() -> None:
    """A config record's summary is its changed keys; a software record's, its plain fields
    (its ``changed`` is a list of files, not of keys). A record that is not its topic's model is
    no row: the view shows none of it either."""
    records = [
        record(1, "tableside/t/config", CONFIG),
        record(2, "tableside/t/software", SOFTWARE),
        record(3, "tableside/t/device/shoe/event", IDENTITY),
        record(4, "tableside/t/device/acceptors/event", FIRMWARE),
        record(5, "tableside/t/device/shoe/event", OTHER_EVENT),  # no change
        record(6, "tableside/t/config", {}, raw=b"\xff not json"),
        record(7, "tableside/t/config", [1, 2]),
        record(8, "tableside/t/status", {"status": "online", "version": "1"}),
        record(9, "tableside/t/config", {"hash": "a" * 64, "started_by": "ops"}),
    ]
    enrolled = Enrolment("t", "d" * 64, "enrolled", "sam", "web", 1_800_000_009.5, "first")
    rows = [c.as_dict() for c in changes(records, [enrolled])]
    assert rows == [
        {"time": "2027-01-15T08:00:01.000Z", "seq": 1, "kind": "config", "subject": "config",
         "by": "ops", "summary": "2 key(s) changed: journal.retain_days, table.id",
         "detail": CONFIG},
        {"time": "2027-01-15T08:00:02.000Z", "seq": 2, "kind": "software", "subject": "software",
         "by": "", "summary": "result=ok, version=1.0, manifest=/etc/m.json, manifest_sha256="
         + "b" * 64 + ", files=3, differ=0, checked_by=start, seconds=0.25",
         "detail": SOFTWARE},
        {"time": "2027-01-15T08:00:03.000Z", "seq": 3, "kind": "device identity", "subject": "shoe",
         "by": "", "summary": "vendor=V, model=M, serial=S1, firmware_version=2.0, "
         "firmware_sha256=" + "c" * 64, "detail": {"device": "shoe", **IDENTIFIED}},
        {"time": "2027-01-15T08:00:04.000Z", "seq": 4, "kind": "firmware",
         "subject": "acceptors", "by": "", "summary": "part=seat3, previous=1.0, current=1.1",
         "detail": {"device": "acceptors", **FLASHED}},
        {"time": "2027-01-15T08:00:09.500Z", "seq": None, "kind": "enrolment", "subject": "key",
         "by": "sam", "summary": f"key {'d' * 64} enrolled (web): first",
         "detail": {"key": "d" * 64, "action": "enrolled", "via": "web", "reason": "first"}},
    ]  # fmt: skip


def test_a_config_record_with_no_key_changed_says_so() -> None:
    rows = changes([record(1, "tableside/t/config", {**CONFIG, "changed": []})], [])
    assert [(c.kind, c.summary, c.by) for c in rows] == [("config", "no key changed", "ops")]
