"""What the pit sees, built from what the floor's store vouches for: a pure model, no I/O.

``FloorView.take(message, now=…)`` takes one message the store vouches for (floor/service.py
``Floor._vouched``: a record the chain walk linked, a last will, a retained state that came
again as stored) and returns the table it changed, or None. Its payload is validated against
its topic's model (wire/payloads.py), as the judge did: a payload that is not is shown to
nobody.
The web server (floor/web/app.py) turns each change into a server-sent event; the tests feed it
messages directly. The view keeps, per table, the tile the floor map shows (status, game, phase,
round, devices, meter, open rulings) and its last events, and across tables the queue of rulings
not yet resolved, oldest first.

A ruling's lifecycle (open → acknowledged → resolved, and escalated when nobody acknowledged it
in time) comes from the table: its ``ruling`` message opens it (its id on the floor is
``<table>-<seq>``; the table's own id is the seq) and its ``ruling_state`` messages move it. The
view never decides a ruling's state itself, and hears nothing the store has not vouched for.

What the table says of its broker is shown as the table's word, like the rest of its status: a
record the broker refuses (its status's ``undelivered``, on the tile and the page until a later
status says null), and each record it sent as a withheld stand-in, too large for the broker
(the page says which, how large, and the limit; the record is in the table's journal; a
retained state whose newest record was withheld is said to be older than that).

A table with no key enrolled, or flagged (a checkpoint not signed by its enrolled key), is shown
as unverified on its tile, its page and each of its rulings. Tables with no key enrolled are
capped (``MAX_UNENROLLED``, the least recently heard one leaves) and leave the live view after
``UNENROLLED_IDLE_S`` without a message; they stay in the store.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from datetime import UTC, datetime

from tableside.drivers.shuffler.events import ShuffleCompleted
from tableside.floor.judge import withheld_words
from tableside.floor.store import Message
from tableside.floor.web.panel import ShufflerPanel, typed
from tableside.rules.rulings import RulingState
from tableside.wire.payloads import (
    ClockPayload,
    CommandResult,
    DeviceEventPayload,
    DeviceStatePayload,
    Envelope,
    RulingPayload,
    RulingStatePayload,
    SoftwarePayload,
    StatusPayload,
    TablePayload,
    Undelivered,
    WithheldPayload,
    model_of,
    parse_payload,
)
from tableside.wire.topics import TopicKind, parse_topic

__all__ = ["MAX_UNENROLLED", "UNENROLLED_IDLE_S", "FloorRuling", "FloorView", "TableTile"]

#: how many of a table's last events its page shows
LAST_EVENTS = 50
#: the most tables with no key enrolled the live view holds (the least recently heard leaves)
MAX_UNENROLLED = 64
#: a table with no key enrolled leaves the live view after this long without a message
UNENROLLED_IDLE_S = 600.0
#: the resolved (or lapsed) rulings a table keeps for its page, newest
KEPT_CLOSED = 100
#: the gaps (and seqs withheld) a tile names (the rest are counted)
TILE_GAPS = 5
#: the withheld stand-ins a table's page lists, newest first
KEPT_WITHHELD = 20


def _seconds(ts: str) -> float | None:
    """A payload's UTC timestamp as POSIX seconds (None when unreadable)."""
    try:
        return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


@dataclass(slots=True)
class FloorRuling:
    """One ruling as the queue and the table page show it: the table's ``ruling`` message and
    the newest ``ruling_state`` that moved it."""

    given: RulingPayload
    moved: RulingStatePayload | None = None
    acknowledged_by: str | None = None

    @property
    def id(self) -> str:
        return f"{self.given.table}-{self.given.seq}"

    @property
    def table(self) -> str:
        return self.given.table

    @property
    def seq(self) -> int:
        return self.given.seq

    @property
    def actions(self) -> list[str]:
        return [str(a) for a in self.given.actions]

    @property
    def state(self) -> RulingState:
        return self.moved.state if self.moved is not None else RulingState.OPEN

    @property
    def halts(self) -> bool:
        return self.moved.halts if self.moved is not None else self.given.halts

    def public(self, now: float, *, unverified: bool) -> dict[str, object]:
        g, moved = self.given, self.moved
        opened = _seconds(g.ts)
        resolved = moved is not None and moved.state is RulingState.RESOLVED
        return {
            "id": self.id, "table": g.table, "seq": g.seq, "ts": g.ts,
            "age_s": None if opened is None else max(0.0, round(now - opened, 1)),
            "clause": g.clause, "words": g.words, "summary": g.summary,
            "actions": self.actions, "affected": g.affected, "round": g.round,
            "state": self.state.value, "acknowledged_by": self.acknowledged_by,
            "resolved_by": moved.by if resolved and moved else None,
            "resolution": str(moved.action) if resolved and moved and moved.action else None,
            "note": moved.note if resolved and moved else None,
            "halts": self.halts, "unverified": unverified,
        }  # fmt: skip


@dataclass(slots=True)
class TableTile:
    table: str
    status: StatusPayload | None = None
    state: TablePayload | None = None
    devices: dict[str, DeviceStatePayload] = field(default_factory=dict)
    highest_seq: int = -1
    last_heard: float | None = None
    #: from the floor's store when it has one: gaps, duplicates, verification
    completeness: dict[str, object] = field(default_factory=dict)
    events: collections.deque[dict[str, object]] = field(
        default_factory=lambda: collections.deque(maxlen=LAST_EVENTS)
    )
    #: each shuffler's panel (floor/web/panel.py)
    shufflers: dict[str, ShufflerPanel] = field(default_factory=dict)
    #: the game's pace: the first and the newest (table clock, round) heard
    rounds: tuple[tuple[float, int], tuple[float, int]] | None = None
    #: the table's newest check of its software against its manifest (docs/software.md)
    software: SoftwarePayload | None = None
    #: the table's newest word on its wall clock (daemon/discipline.py)
    clock: ClockPayload | None = None
    #: the records the table sent as withheld stand-ins (too large for the broker), newest first
    withheld: collections.deque[WithheldPayload] = field(
        default_factory=lambda: collections.deque(maxlen=KEPT_WITHHELD)
    )


class FloorView:
    def __init__(self, prefix: str = "tableside") -> None:
        self.prefix = prefix
        self.tables: dict[str, TableTile] = {}
        self.rulings: dict[str, FloorRuling] = {}
        #: the tables with a key enrolled (the web app keeps it from the store)
        self.enrolled: set[str] = set()
        #: the approved release manifests' SHA-256s (the web app keeps it from the store)
        self.approved_software: set[str] = set()
        #: tables that left the view (capped or expired) since the web app last told browsers
        self.dropped: list[str] = []

    # -- in -------------------------------------------------------------------------------

    def take(self, m: Message, *, now: float) -> str | None:
        """Take one message the store vouches for; the table it changed, or None (not a
        table's, a kind the view does not show, or a payload that is not its model)."""
        where = parse_topic(self.prefix, m.topic)
        if where is None or where.kind in (TopicKind.COMMAND, TopicKind.REPLAY):
            return None
        model = model_of(where.kind)  # validated again: the judge keeps no model, to hold
        if not issubclass(model, Envelope):  # less while a batch waits for the store
            return None
        try:
            body = parse_payload(model, m.payload)
        except ValueError:
            return None
        if body.table != where.table:
            return None
        tile = self._tile(where.table, now)
        if tile is None:
            return None
        tile.last_heard = now
        if not (isinstance(body, StatusPayload) and body.will):
            tile.highest_seq = max(tile.highest_seq, body.seq)
        self._apply(tile, body, where.name or "")
        return where.table

    def _apply(self, tile: TableTile, body: Envelope, device: str) -> None:
        match body:
            case StatusPayload():
                tile.status = body
            case TablePayload():
                tile.state = body
                self._note_round(tile, body)
            case DeviceStatePayload():
                tile.devices[device] = body
            case DeviceEventPayload():
                self._event(tile, body, f"{device} {body.event}", body.data)
                if body.device_class == "shuffler" and (event := typed(body)) is not None:
                    tile.shufflers.setdefault(device, ShufflerPanel()).take(event, body.ts)
            case RulingStatePayload():
                self._ruling_state(body)
                self._event(tile, body, f"ruling #{body.ruling} {body.state.value}", body.by)
            case RulingPayload():
                if body.event.event == ShuffleCompleted.kind:  # the counting shuffler's count
                    panel = tile.shufflers.setdefault(body.event.device, ShufflerPanel())
                    panel.count_errors += 1
                self.rulings[f"{body.table}-{body.seq}"] = FloorRuling(body)
                self._forget_closed(body.table)
                self._event(tile, body, f"RULING {body.clause}", body.summary)
            case CommandResult():
                what = f"{body.role} {body.command}"
                self._event(tile, body, what, "ok" if body.ok else body.error)
            case SoftwarePayload():
                tile.software = body
                self._event(tile, body, f"software {body.result}", body.manifest_sha256)
            case ClockPayload():
                if tile.clock is None or body.seq >= tile.clock.seq:  # a retained one comes late
                    tile.clock = body
            case WithheldPayload():
                tile.withheld.appendleft(body)
                self._event(tile, body, "WITHHELD", withheld_words(body))

    @staticmethod
    def _note_round(tile: TableTile, body: TablePayload) -> None:
        at = _seconds(body.ts)
        if at is None or not body.round:
            return
        first = tile.rounds[0] if tile.rounds else (at, body.round)
        tile.rounds = (first, (at, body.round))

    def _tile(self, table: str, now: float) -> TableTile | None:
        tile = self.tables.get(table)
        if tile is not None:
            return tile
        if table not in self.enrolled:
            self.expire(now)
            unenrolled = [t for t in self.tables.values() if t.table not in self.enrolled]
            if len(unenrolled) >= MAX_UNENROLLED:
                oldest = min(unenrolled, key=lambda t: t.last_heard or 0.0)
                self._drop(oldest.table)
        tile = self.tables[table] = TableTile(table)
        return tile

    def expire(self, now: float) -> None:
        """Tables with no key enrolled, not heard for ``UNENROLLED_IDLE_S``, leave the view."""
        for t in [t for t in self.tables.values() if t.table not in self.enrolled]:
            if t.last_heard is not None and now - t.last_heard > UNENROLLED_IDLE_S:
                self._drop(t.table)

    def _drop(self, table: str) -> None:
        self.tables.pop(table, None)
        self.dropped.append(table)
        for key in [k for k, r in self.rulings.items() if r.table == table]:
            del self.rulings[key]

    def _forget_closed(self, table: str) -> None:
        closed = [r for r in self.rulings.values()
                  if r.table == table and not r.state.unresolved]  # fmt: skip
        for r in sorted(closed, key=lambda r: r.seq)[:-KEPT_CLOSED]:
            del self.rulings[r.id]

    def _event(self, tile: TableTile, body: Envelope, what: str, detail: object) -> None:
        tile.events.appendleft({"seq": body.seq, "ts": body.ts, "what": what, "detail": detail})

    def _ruling_state(self, body: RulingStatePayload) -> None:
        entry = self.rulings.get(f"{body.table}-{body.ruling}")
        if entry is None:
            return  # opened before the floor first heard this table; its page shows the state
        entry.moved = body
        if body.state is RulingState.ACKNOWLEDGED:
            entry.acknowledged_by = body.by

    def set_completeness(self, table: str, state: dict[str, object]) -> None:
        """What the floor's store knows of a table's stream (gaps, verification)."""
        tile = self.tables.get(table)
        if tile is not None:
            tile.completeness = state

    # -- out ------------------------------------------------------------------------------

    def unverified(self, table: str) -> bool:
        """No key enrolled for the table, or its checkpoints flagged (not signed by it)."""
        tile = self.tables.get(table)
        flagged = tile is not None and bool(tile.completeness.get("flagged"))
        return table not in self.enrolled or flagged

    def open_rulings(self, table: str | None = None) -> list[FloorRuling]:
        found = [
            r
            for r in self.rulings.values()
            if r.state.unresolved and (table is None or r.table == table)
        ]
        return sorted(found, key=lambda r: (r.given.ts, r.seq))

    def public(self, r: FloorRuling, now: float) -> dict[str, object]:
        return r.public(now, unverified=self.unverified(r.table))

    def tile(self, table: str, now: float) -> dict[str, object]:
        tile = self.tables[table]
        open_ = self.open_rulings(table)
        oldest = self.public(open_[0], now)["age_s"] if open_ else None
        status, state = tile.status, tile.state
        return {
            "table": tile.table,
            "status": status.status if status is not None else "unknown",
            "status_since": status.ts if status is not None else None,
            "game": state.game if state else None,
            "phase": state.phase if state else None,
            "round": state.round if state else None,
            "meter_cents": state.meter_cents if state else None,
            "devices": {
                name: {"connection": str(d.connection), "fault": d.fault}
                for name, d in tile.devices.items()
            },
            "open_rulings": len(open_),
            "oldest_ruling_age_s": oldest,
            "escalated": sum(1 for r in open_ if r.state is RulingState.ESCALATED),
            "halted": any(r.halts for r in open_),
            "highest_seq": tile.highest_seq,
            "last_heard_age_s": (
                None if tile.last_heard is None else round(now - tile.last_heard, 1)
            ),
            "completeness": _brief(tile.completeness),
            "unverified": self.unverified(table),
            "undelivered": _undelivered(status.undelivered if status is not None else None),
            "clock": _clock(tile.clock),
            "withheld_state": self._stale(tile),
            "software": _software(tile.software, self.approved_software),
        }

    def _stale(self, tile: TableTile) -> list[dict[str, object]]:
        """The table's retained states whose newest record is a withheld stand-in (too large
        for the broker): the one shown for each is older, and says so."""
        found: list[dict[str, object]] = []
        seen: set[str] = set()
        for w in tile.withheld:  # newest first
            where = parse_topic(self.prefix, w.topic)
            if not w.retain or where is None or w.topic in seen:
                continue
            seen.add(w.topic)
            shown: Envelope | None
            match where.kind:
                case TopicKind.STATUS:
                    shown, what = tile.status, "status"
                case TopicKind.TABLE:
                    shown, what = tile.state, "table state"
                case TopicKind.DEVICE_STATE:
                    shown, what = tile.devices.get(where.name or ""), f"{where.name} state"
                case _:
                    continue
            if shown is None or shown.seq < w.seq:
                text = f"{what} withheld at seq {w.seq} (larger than the broker's limit): " + (
                    "the one shown is older" if shown is not None else "none shown"
                )
                found.append({"topic": w.topic, "seq": w.seq, "text": text})
        return found

    def floor(self, now: float) -> dict[str, object]:
        """Everything the floor map and the rulings queue show."""
        self.expire(now)
        return {
            "tables": [self.tile(t, now) for t in sorted(self.tables)],
            "rulings": [self.public(r, now) for r in self.open_rulings()],
        }

    def table_page(self, table: str, now: float) -> dict[str, object] | None:
        tile = self.tables.get(table)
        if tile is None:
            return None
        rulings = sorted((r for r in self.rulings.values() if r.table == table),
                         key=lambda r: r.seq)  # fmt: skip
        shown = {"connection", "since", "fault", "device_class", "device_state", "identity"}
        devices = {n: d.model_dump(mode="json", include=shown) for n, d in tile.devices.items()}
        return {
            "tile": self.tile(table, now) | {"completeness": tile.completeness},
            "devices": devices,
            "events": list(tile.events),
            "rulings": [self.public(r, now) for r in reversed(rulings)],
            "shufflers": {n: p.public() for n, p in sorted(tile.shufflers.items())},
            "pace": _pace(tile),
            "withheld": [_withheld(w) for w in tile.withheld],
        }


def _software(record: SoftwarePayload | None, approved: set[str]) -> dict[str, object] | None:
    """The table's software as a tile shows it: its version, its manifest (short), and a flag
    when its own check failed or found no manifest, or its manifest is not approved."""
    if record is None:
        return None
    digest = record.manifest_sha256
    if record.result == "mismatch":
        flag = (f"check failed: {record.differ} files differ" if record.differ
                else f"check failed: {record.problem}")  # fmt: skip
    elif record.result == "unverified" or digest is None:
        flag = "unverified: no manifest"
    elif digest not in approved:
        flag = "manifest not approved"
    else:
        flag = None
    return {
        "version": record.version,
        "manifest_sha256": digest,
        "manifest_short": digest[:12] if digest else None,
        "result": record.result,
        "approved": digest is not None and digest in approved,
        "flag": flag,
        "checked_at": record.ts,
    }


def _pace(tile: TableTile) -> dict[str, object]:
    """Rounds an hour over what this floor heard (the table's clock), once an hour's share of
    at least one round has passed."""
    if tile.rounds is None:
        return {"rounds_per_hour": None, "rounds": 0, "over_s": 0.0}
    (t0, r0), (t1, r1) = tile.rounds
    span, rounds = t1 - t0, r1 - r0
    rate = round(rounds * 3600 / span, 1) if span > 0 and rounds > 0 else None
    return {"rounds_per_hour": rate, "rounds": rounds, "over_s": round(span, 1)}


def _withheld(w: WithheldPayload) -> dict[str, object]:
    """A withheld stand-in as the table's page lists it, with its words."""
    return w.model_dump(mode="json", include={"seq", "ts", "topic", "retain", "size", "limit"}) | {
        "text": withheld_words(w)
    }


def _clock(clock: ClockPayload | None) -> dict[str, object] | None:
    """The table's wall clock while the table does not trust it, with the words the tile
    shows; None while it does (or has not said)."""
    if clock is None or clock.trusted:
        return None
    if not clock.synchronised:
        text = "clock not synchronised"
    else:
        text = f"clock error {clock.esterror_us / 1e6:g} s, past {clock.bound_s:g} s"
    text += f": times since {clock.ts[11:19]} untrusted (seq {clock.seq}, {clock.source})"
    return clock.model_dump(mode="json", include={"seq", "ts", "synchronised", "esterror_us",
                                                  "maxerror_us", "bound_s", "source"}) | {
        "text": text
    }  # fmt: skip


def _undelivered(refused: Undelivered | None) -> dict[str, object] | None:
    """The record the table says its broker refuses, with the words the page shows."""
    if refused is None:
        return None
    text = f"broker refuses seq {refused.seq} on {refused.topic}: {refused.reason}"
    return refused.model_dump(mode="json") | {"text": text}


def _brief(completeness: dict[str, object]) -> dict[str, object]:
    """A tile's completeness: the first gaps and seqs withheld, not all (the table's page has
    them all)."""
    brief = completeness
    for name in ("gaps", "withheld"):
        found = completeness.get(name)
        if isinstance(found, list) and len(found) > TILE_GAPS:
            brief = brief | {name: found[:TILE_GAPS]}
    return brief
