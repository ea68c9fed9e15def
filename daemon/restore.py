"""A restarted table as the journal last saw it (docs/journal.md): the retained state to send
again, what each device last reported, the table's phase and rulings, and a lock-out in force.
"""

from __future__ import annotations

from collections.abc import Mapping

import structlog
from pydantic import ValidationError

from tableside.daemon.journal import Journal
from tableside.daemon.publisher import Publisher
from tableside.daemon.runtime import TableRuntime
from tableside.drivers.base import Driver
from tableside.rules.table import TableState
from tableside.wire.payloads import DeviceEventPayload, DeviceStatePayload, TablePayload

__all__ = ["restore"]

log = structlog.get_logger("tableside.daemon")


def restore(
    table: TableRuntime, drivers: Mapping[str, Driver], journal: Journal, publisher: Publisher
) -> dict[str, int]:
    """Put back into ``table`` and ``publisher`` what ``journal`` kept; returns what was
    restored, for the log. What another version wrote and this one cannot read is said and
    skipped."""
    latest = journal.latest()
    topics = publisher.topics
    counts = {"retained": 0, "devices": 0, "locked_out": 0, "table_state": 0}
    raw_table = latest.get(topics.table_state)
    if raw_table is not None:
        try:
            saved = TablePayload.model_validate_json(raw_table)
            table.state = TableState.from_dict(saved.state)
            counts["table_state"] = 1
        except (ValidationError, ValueError, TypeError) as exc:
            log.warning("restore_skipped", what="table", error=str(exc)[:300])
    for key, payload in latest.items():
        if "#" not in key:
            publisher.restore_retained(key, payload)
            counts["retained"] += 1
    last_button: str | None = None
    for name, rt in table.devices.items():
        raw = latest.get(topics.device_state(name))
        try:
            if raw is not None:
                state = DeviceStatePayload.model_validate_json(raw)
                rt.identity, rt.device_state = state.identity, state.device_state
                rt.fault, rt.parts = state.fault, dict(state.parts)
                counts["devices"] += 1
            prefix = topics.device_event(name) + "#"
            for key, payload in latest.items():
                if key.startswith(prefix):
                    event = DeviceEventPayload.model_validate_json(payload)
                    drivers[name].restore(event.event, event.data)
                    if event.event == "button":
                        last_button = str(event.data.get("button"))
        except ValidationError as exc:  # written by another version: said, and skipped
            log.warning("restore_skipped", device=name, error=str(exc)[:300])
    # "No more bets" pressed before a crash holds after it: the acceptors stay locked out
    # (a lock-out errs on the safe side: a restored table never reopens betting by itself).
    # So after `journal recover`, whose table may be older than the table was: betting
    # opens again only when the dealer opens it.
    if journal.fresh_from_recovery:
        log.warning("table_held_after_recovery", table=publisher.table,
                    after_seq=journal.next_seq - 1)  # fmt: skip
    if last_button == "no_more_bets" or journal.fresh_from_recovery:
        for driver in drivers.values():
            driver.hold_lock_out()  # (a driver with no lock-out has none to hold)
    counts["locked_out"] = sum(driver.holds_lock_out for driver in drivers.values())
    if latest:
        log.info("table_restored", table=publisher.table, next_seq=journal.next_seq,
                 unsent=publisher.pending, **counts)  # fmt: skip
    return counts
