"""Changes on the record (issue 31): each start journals the configuration it runs, its hash
and what changed since the last start's, secrets as digests; a config edit between two starts
is one record naming the changed keys, old and new."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from tableside.daemon.app import TableDaemon
from tableside.daemon.changes import config_message, flat
from tableside.daemon.config import Config

from .hil import make_config, stop, until


async def _one_start(config: Config) -> dict[str, object]:
    """Run the daemon until its config record is durable; that record's payload."""
    daemon = TableDaemon(config)
    first = daemon.journal.next_seq  # this start's config record is its first
    task = asyncio.create_task(daemon.run())
    try:
        await until(lambda: daemon.journal.durable_seq >= first)
        records = await daemon.journal.read_from(0, daemon.journal.next_seq)
    finally:
        await stop(task)
    (record,) = [r for r in records if r.topic.endswith("/config")][-1:]
    found = json.loads(record.payload)
    assert isinstance(found, dict)
    return found


async def test_a_config_edit_between_two_starts_is_one_record_with_the_changed_keys(
    tmp_path: Path,
) -> None:
    config = make_config("mqtt://127.0.0.1:1", "socket://127.0.0.1:1", tmp_path)
    first = await _one_start(config)
    assert (first["changed"] and first["started_by"] is None) or isinstance(
        first["started_by"], str
    )
    again = await _one_start(config)
    assert again["changed"] == [] and again["hash"] == first["hash"]
    journal = config.journal.model_copy(update={"retain_days": 120})
    broker = config.broker.model_copy(update={"password": "s3cret"})
    edited = config.model_copy(update={"journal": journal, "broker": broker})
    third = await _one_start(edited)
    assert isinstance(third["changed"], list)
    changed = {c["key"]: (c["old"], c["new"]) for c in third["changed"]}
    assert set(changed) == {"journal.retain_days", "broker.password"}
    assert changed["journal.retain_days"] == (90, 120)
    old, new = changed["broker.password"]
    assert old is None and isinstance(new, str) and new.startswith("sha256:")
    assert "s3cret" not in json.dumps(third) and third["hash"] != first["hash"]


def test_secrets_are_digests_that_still_show_a_change(tmp_path: Path) -> None:
    config = make_config("mqtt://127.0.0.1:1", "socket://127.0.0.1:1", tmp_path)
    one = config.model_copy(update={"broker": config.broker.model_copy(update={"password": "a"})})
    two = config.model_copy(update={"broker": config.broker.model_copy(update={"password": "b"})})
    a = flat(one.model_dump(mode="json"))["broker.password"]
    b = flat(two.model_dump(mode="json"))["broker.password"]
    assert a != b and a != "a"
    fields = config_message(two, None, environ={"SUDO_USER": "ann"})
    assert fields.started_by == "ann"
