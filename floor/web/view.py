"""What the pit sees, built from the tables' messages: a pure model, no I/O.

``FloorView.apply(topic, payload)`` takes one MQTT message (any table under the prefix) and
returns the table it changed, or None. The web server (floor/web/app.py) turns each change into
a server-sent event; the tests feed it messages directly. The view keeps, per table, the tile
the floor map shows (status, game, phase, round, devices, meter, open rulings) and its last
events, and across tables the queue of rulings not yet resolved, oldest first.

A ruling's lifecycle (open → acknowledged → resolved, and escalated when nobody acknowledged it
in time) comes from the table: its ``ruling`` message opens it (its id on the floor is
``<table>-<seq>``; the table's own id is the seq) and its ``ruling_state`` messages move it. The
view never decides a ruling's state itself.
"""

from __future__ import annotations

import collections
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

__all__ = ["FloorView", "RulingEntry", "TableTile"]

#: how many of a table's last events its page shows
LAST_EVENTS = 50

_OPEN_STATES = ("open", "acknowledged", "escalated")


def _seconds(ts: str | None) -> float | None:
    """A payload's UTC timestamp as POSIX seconds (None when absent or unreadable)."""
    if not ts:
        return None
    try:
        return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


@dataclass(slots=True)
class RulingEntry:
    """One ruling, as the queue and the table page show it."""

    id: str
    table: str
    seq: int
    ts: str
    clause: str
    words: str
    summary: str
    actions: list[str]
    affected: list[str]
    round: int | None
    state: str = "open"
    acknowledged_by: str | None = None
    resolved_by: str | None = None
    resolution: str | None = None
    note: str | None = None
    halts: bool = False

    def public(self, now: float) -> dict[str, Any]:
        opened = _seconds(self.ts)
        return {
            "id": self.id,
            "table": self.table,
            "seq": self.seq,
            "ts": self.ts,
            "age_s": None if opened is None else max(0.0, round(now - opened, 1)),
            "clause": self.clause,
            "words": self.words,
            "summary": self.summary,
            "actions": self.actions,
            "affected": self.affected,
            "round": self.round,
            "state": self.state,
            "acknowledged_by": self.acknowledged_by,
            "resolved_by": self.resolved_by,
            "resolution": self.resolution,
            "note": self.note,
            "halts": self.halts,
        }


@dataclass(slots=True)
class TableTile:
    table: str
    status: str = "unknown"
    status_since: str | None = None
    game: str | None = None
    phase: str | None = None
    round: int | None = None
    meter_cents: int | None = None
    devices: dict[str, dict[str, Any]] = field(default_factory=dict)
    highest_seq: int = -1
    last_heard: float | None = None
    #: from the floor's store when it has one: gaps, duplicates, verification
    completeness: dict[str, Any] = field(default_factory=dict)
    events: collections.deque[dict[str, Any]] = field(
        default_factory=lambda: collections.deque(maxlen=LAST_EVENTS)
    )


class FloorView:
    def __init__(self, prefix: str = "tableside") -> None:
        self.prefix = prefix
        self.tables: dict[str, TableTile] = {}
        self.rulings: dict[str, RulingEntry] = {}

    # -- in -------------------------------------------------------------------------------

    def apply(self, topic: str, payload: bytes, *, now: float) -> str | None:
        """Take one message; the table it changed, or None (not ours, or not a table's)."""
        parts = topic.split("/")
        if len(parts) < 3 or parts[0] != self.prefix:
            return None
        table, kind = parts[1], parts[2]
        if kind in ("command", "response", "replay"):
            return None
        try:
            body = json.loads(payload)
        except ValueError:
            return None
        if not isinstance(body, dict):
            return None
        tile = self.tables.get(table)
        if tile is None:
            tile = self.tables[table] = TableTile(table)
        tile.last_heard = now
        seq = body.get("seq")
        if isinstance(seq, int) and not body.get("will"):
            tile.highest_seq = max(tile.highest_seq, seq)
        if kind == "status":
            tile.status = str(body.get("status", "unknown"))
            tile.status_since = body.get("ts")
        elif kind == "table":
            tile.game, tile.phase = body.get("game"), body.get("phase")
            tile.round, tile.meter_cents = body.get("round"), body.get("meter_cents")
        elif kind == "device" and len(parts) == 5 and parts[4] == "state":
            tile.devices[parts[3]] = {
                "connection": body.get("connection"),
                "since": body.get("since"),
                "fault": body.get("fault"),
                "device_class": body.get("device_class"),
                "device_state": body.get("device_state"),
                "identity": body.get("identity"),
            }
        elif kind == "device" and len(parts) == 5 and parts[4] == "event":
            self._event(tile, body, f"{parts[3]} {body.get('event')}", body.get("data"))
        elif kind == "ruling_state":
            self._ruling_state(table, body)
            what = f"ruling #{body.get('ruling')} {body.get('state')}"
            self._event(tile, body, what, body.get("by"))
        elif kind == "ruling":
            self._ruling(table, body)
            self._event(tile, body, f"RULING {body.get('clause')}", body.get("summary"))
        elif kind == "command_result":
            what = f"{body.get('role')} {body.get('command')}"
            self._event(tile, body, what, "ok" if body.get("ok") else body.get("error"))
        return table

    def _event(self, tile: TableTile, body: dict[str, Any], what: str, detail: Any) -> None:
        tile.events.appendleft(
            {"seq": body.get("seq"), "ts": body.get("ts"), "what": what, "detail": detail}
        )

    def _ruling(self, table: str, body: dict[str, Any]) -> None:
        seq = int(body.get("seq", -1))
        actions = [str(a) for a in body.get("actions", [])]
        self.rulings[f"{table}-{seq}"] = RulingEntry(
            id=f"{table}-{seq}",
            table=table,
            seq=seq,
            ts=str(body.get("ts", "")),
            clause=str(body.get("clause", "")),
            words=str(body.get("words", "")),
            summary=str(body.get("summary", "")),
            actions=actions,
            affected=[str(a) for a in body.get("affected", [])],
            round=body.get("round"),
            halts=bool(body.get("halts", False)),
        )

    def _ruling_state(self, table: str, body: dict[str, Any]) -> None:
        entry = self.rulings.get(f"{table}-{body.get('ruling')}")
        if entry is None:
            return  # opened before the floor first heard this table; its page shows the state
        entry.state = str(body.get("state", entry.state))
        entry.halts = bool(body.get("halts", entry.halts))
        if entry.state == "acknowledged":
            entry.acknowledged_by = body.get("by")
        elif entry.state == "resolved":
            entry.resolved_by, entry.resolution = body.get("by"), body.get("action")
            entry.note = body.get("note")

    def set_completeness(self, table: str, state: dict[str, Any]) -> None:
        """What the floor's store knows of a table's stream (gaps, verification)."""
        tile = self.tables.get(table)
        if tile is None:
            tile = self.tables[table] = TableTile(table)
        tile.completeness = state

    # -- out ------------------------------------------------------------------------------

    def open_rulings(self, table: str | None = None) -> list[RulingEntry]:
        found = [
            r
            for r in self.rulings.values()
            if r.state in _OPEN_STATES and (table is None or r.table == table)
        ]
        return sorted(found, key=lambda r: (r.ts, r.seq))

    def tile(self, table: str, now: float) -> dict[str, Any]:
        tile = self.tables[table]
        open_ = self.open_rulings(table)
        oldest = open_[0].public(now)["age_s"] if open_ else None
        return {
            "table": tile.table,
            "status": tile.status,
            "status_since": tile.status_since,
            "game": tile.game,
            "phase": tile.phase,
            "round": tile.round,
            "meter_cents": tile.meter_cents,
            "devices": tile.devices,
            "open_rulings": len(open_),
            "oldest_ruling_age_s": oldest,
            "escalated": sum(1 for r in open_ if r.state == "escalated"),
            "halted": any(r.halts for r in open_),
            "highest_seq": tile.highest_seq,
            "last_heard_age_s": (
                None if tile.last_heard is None else round(now - tile.last_heard, 1)
            ),
            "completeness": tile.completeness,
        }

    def floor(self, now: float) -> dict[str, Any]:
        """Everything the floor map and the rulings queue show."""
        return {
            "tables": [self.tile(t, now) for t in sorted(self.tables)],
            "rulings": [r.public(now) for r in self.open_rulings()],
        }

    def table_page(self, table: str, now: float) -> dict[str, Any] | None:
        if table not in self.tables:
            return None
        rulings = sorted(
            (r for r in self.rulings.values() if r.table == table), key=lambda r: r.seq
        )
        return {
            "tile": self.tile(table, now),
            "events": list(self.tables[table].events),
            "rulings": [r.public(now) for r in reversed(rulings)],
        }
