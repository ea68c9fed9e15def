"""The floor's records in the web view: a table's key, enrolled and revoked by a supervisor
(``/keys/<table>``), and a table's changes for a date range with their export
(``/changes/<table>``), which is what an auditor asks for. Beside floor/web/app.py's WebApp,
whose sessions, CSRF token and store it uses.

Enrolling: the page shows the key the table's newest checkpoint names, as its fingerprint in 16
groups of four hex digits (as ``tableside key`` prints it), and asks the supervisor to type
one group from what the table prints: a group the server picks from the session and the key,
not always the last (a key whose last group matches the real one costs 65,536 tries to make;
one that matches a group nobody can predict, all 16 of them). Only a ``supervisor`` may enrol
or revoke; every logged-in role may read the key's state and its record, and the changes.
"""

from __future__ import annotations

import csv
import hashlib
import hmac
import io
import json
import re
import unicodedata
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from aiohttp import web

from tableside.floor.changes import COLUMNS, changes, topics
from tableside.floor.store import Enrolment, Store
from tableside.floor.web.app import WebApp, attachment, completeness, json_object, page
from tableside.floor.web.sessions import Session
from tableside.floor.web.users import SUPERVISOR
from tableside.rules.rulings import MAX_NOTE_CHARS
from tableside.wire import proof
from tableside.wire.payloads import CheckpointPayload, parse_payload
from tableside.wire.topics import Topics

__all__ = ["Records", "routes"]

#: the longest date range one request may ask for (retain_days is 90; a year is plenty)
MAX_DAYS = 400
#: the most records one changes page or export reads: a range holding more is refused, with
#: the way out (a shorter range), never cut short (an audit must not miss a change silently)
MAX_CHANGE_RECORDS = 100_000


@dataclass(slots=True)
class Records:
    app: WebApp
    #: told when a key was enrolled or revoked (the floor service reloads the keys it trusts)
    keys_changed: Callable[[], Awaitable[None]] | None = None

    def _store(self) -> Store:
        if self.app.store is None:
            raise web.HTTPNotFound(text="this view has no store")
        return self.app.store

    # -- a table's key ----------------------------------------------------------------------

    async def keys_page(self, request: web.Request) -> web.Response:
        return self._shell(request, "keys.html")

    async def changes_page(self, request: web.Request) -> web.Response:
        return self._shell(request, "changes.html")

    def _shell(self, request: web.Request, name: str) -> web.Response:
        session = self.app._need_session(request)
        return page(name, user=session.user.name, role=session.user.role, csrf=session.csrf,
                     table=request.match_info["table"])  # fmt: skip

    async def key_state(self, request: web.Request) -> web.Response:
        """The table's key: enrolled or not, the key its newest checkpoint names, the group to
        type, and every enrolment and revocation on the record."""
        session = self.app._need_session(request)
        table = request.match_info["table"]
        store = self._store()
        state = await store.state(table, with_gaps=False)
        seen = await self._seen(table)
        return web.json_response({
            "table": table,
            "known": state is not None,
            "enrolled": state.key if state else None,
            "enrolled_fingerprint": proof.fingerprint(state.key) if state and state.key else None,
            "flagged": state.flagged if state else None,
            "seen": seen,
            "seen_fingerprint": proof.fingerprint(seen) if seen else None,
            "confirm_group": _group(session.csrf, table, seen) + 1 if seen else None,
            "may_act": session.user.role == SUPERVISOR,
            "record": [_enrolment(e) for e in await store.enrolments(table)],
        })  # fmt: skip

    async def _seen(self, table: str) -> str | None:
        """The key the table's newest stored checkpoint names (its word, to be compared with
        what the table itself prints)."""
        topic = Topics(self.app.view.prefix, table).checkpoint
        for m in await self._store().messages(table, topic=topic, limit=1):
            try:
                return parse_payload(CheckpointPayload, proof.unmarked(m.payload)).key
            except ValueError:
                return None
        return None

    async def enrol(self, request: web.Request) -> web.Response:
        session, table, body = await self._supervisor(request, "enrol")
        key, typed = body.get("key"), body.get("group")
        if not isinstance(key, str) or not isinstance(typed, str):
            raise web.HTTPBadRequest(text="give the key and the group you typed")
        try:
            key = proof.public_key_hex(proof.trusted_key(key))
        except ValueError as exc:
            raise web.HTTPBadRequest(text=f"not a key: {exc}") from exc
        at = _group(session.csrf, table, key)
        if typed.strip().lower().replace(" ", "") != proof.fingerprint(key)[at]:
            raise web.HTTPBadRequest(
                text=f"group {at + 1} is not what you typed: compare the whole fingerprint "
                "with what `tableside key` prints on the table; nothing was enrolled"
            )
        done = await self._store().enrol(table, key, by=session.user.name, via="web",
                                         reason=_reason(body, required=False))  # fmt: skip
        await self._changed(table)
        return web.json_response(_enrolment(done))

    async def revoke(self, request: web.Request) -> web.Response:
        session, table, body = await self._supervisor(request, "revoke")
        key = body.get("key")
        if not isinstance(key, str):
            raise web.HTTPBadRequest(text="give the key to revoke")
        try:
            reason = _reason(body, required=True)
            done = await self._store().revoke(table, key.lower(), by=session.user.name,
                                              via="web", reason=reason)  # fmt: skip
        except ValueError as exc:
            raise web.HTTPConflict(text=str(exc)) from exc
        await self._changed(table)
        return web.json_response(_enrolment(done))

    async def _supervisor(
        self, request: web.Request, verb: str
    ) -> tuple[Session, str, dict[str, object]]:
        session = self.app._need_session(request)
        self.app._need_csrf(request, session)
        if session.user.role != SUPERVISOR:
            raise web.HTTPForbidden(text=f"a {session.user.role} may not {verb} a table's key")
        return session, request.match_info["table"], await json_object(request)

    async def _changed(self, table: str) -> None:
        """The floor trusts the key as enrolled now; the tile says so at once."""
        if self.keys_changed is not None:
            await self.keys_changed()
        store = self._store()
        self.app.view.enrolled = set(await store.keys())
        state = await store.state(table)
        if state is not None and table in self.app.view.tables:
            self.app.view.set_completeness(table, completeness(state))
            self.app.live.publish_table(table)

    # -- a table's changes ------------------------------------------------------------------

    async def changes(self, request: web.Request) -> web.Response:
        self.app._need_session(request)
        table, first, last = _range(request)
        rows = await self._changes(table, first, last)
        return web.json_response({"table": table, "from": first.isoformat(),
                                  "to": last.isoformat(), "columns": list(COLUMNS),
                                  "changes": rows})  # fmt: skip

    async def export(self, request: web.Request) -> web.Response:
        """The same rows as a file: CSV (``detail`` as JSON in its column) or JSON."""
        self.app._need_session(request)
        table, first, last = _range(request)
        kind = request.query.get("format", "csv")
        if kind not in ("csv", "json"):
            raise web.HTTPBadRequest(text=f"format {kind!r}: csv or json")
        rows = await self._changes(table, first, last)
        name = f"{table}-changes-{first.isoformat()}-{last.isoformat()}.{kind}"
        if kind == "json":
            text = json.dumps({"table": table, "from": first.isoformat(), "to": last.isoformat(),
                               "changes": rows}, indent=1)  # fmt: skip
            content_type = "application/json"
        else:
            out = io.StringIO()
            writer = csv.writer(out)
            writer.writerow(COLUMNS)
            for row in rows:
                writer.writerow([json.dumps(row[c]) if c == "detail" else
                                 ("" if row[c] is None else row[c]) for c in COLUMNS])  # fmt: skip
            text, content_type = out.getvalue(), "text/csv"
        return web.Response(text=text, content_type=content_type,
                            headers={"Content-Disposition": attachment(name)})  # fmt: skip

    async def _changes(self, table: str, first: date, last: date) -> list[dict[str, object]]:
        store, prefix = self._store(), self.app.view.prefix
        since = datetime(first.year, first.month, first.day, tzinfo=UTC).timestamp()
        until = since + ((last - first).days + 1) * 86400
        exact, like = topics(prefix, table)
        records = await store.records_between(
            table, since, until, topics=exact, like=like, limit=MAX_CHANGE_RECORDS + 1
        )
        if len(records) > MAX_CHANGE_RECORDS:
            raise web.HTTPBadRequest(
                text=f"{table} holds more than {MAX_CHANGE_RECORDS:,} records that may be "
                f"changes from {first} to {last}: ask for a shorter range"
            )
        enrolments = await store.enrolments(table, since, until)
        return [c.as_dict() for c in changes(records, enrolments)]


def _group(secret: str, table: str, key: str) -> int:
    """Which group of the key's fingerprint this session is asked to type (0-based)."""
    mac = hmac.new(secret.encode(), f"{table}\0{key}".encode(), hashlib.sha256).digest()
    return mac[0] % proof.FINGERPRINT_GROUPS


def _reason(body: dict[str, object], *, required: bool) -> str:
    reason = body.get("reason", "")
    if not isinstance(reason, str):
        raise web.HTTPBadRequest(text="the reason must be text")
    reason = reason.strip()
    if required and not reason:
        raise web.HTTPBadRequest(text="say why the key is revoked")
    if len(reason) > MAX_NOTE_CHARS:
        raise web.HTTPBadRequest(text=f"the reason is longer than {MAX_NOTE_CHARS} characters")
    for at, char in enumerate(reason):  # as a ruling's note (rules/commands.py): read as typed
        if unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp"):
            raise web.HTTPBadRequest(text=f"U+{ord(char):04X} at character {at + 1}: it would "
                                     "hide or reorder what was typed")  # fmt: skip
    return reason


def _enrolment(e: Enrolment) -> dict[str, object]:
    at = datetime.fromtimestamp(e.at, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    return {"key": e.key_hex, "action": e.action, "by": e.by, "via": e.via, "at": at,
            "reason": e.reason}  # fmt: skip


_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")


def _range(request: web.Request) -> tuple[str, date, date]:
    """The table and the date range asked for (UTC days, both included; the last 90 days by
    default), or 400 saying what is wrong."""
    today = datetime.now(UTC).date()
    try:
        last = _day(request.query.get("to"), today)
        first = _day(request.query.get("from"), last - timedelta(days=89))
    except ValueError as exc:
        raise web.HTTPBadRequest(text=str(exc)) from exc
    if first > last:
        raise web.HTTPBadRequest(text=f"from {first} is after to {last}")
    if (last - first).days >= MAX_DAYS:
        raise web.HTTPBadRequest(text=f"at most {MAX_DAYS} days at a time")
    return request.match_info["table"], first, last


def _day(text: str | None, default: date) -> date:
    if not text:
        return default
    if not _DAY.fullmatch(text):
        raise ValueError(f"{text!r}: a date is YYYY-MM-DD")
    return date.fromisoformat(text)


def routes(records: Records) -> list[web.RouteDef]:
    return [
        web.get("/keys/{table}", records.keys_page),
        web.get("/changes/{table}", records.changes_page),
        web.get("/api/table/{table}/key", records.key_state),
        web.post("/api/table/{table}/key/enrol", records.enrol),
        web.post("/api/table/{table}/key/revoke", records.revoke),
        web.get("/api/table/{table}/changes", records.changes),
        web.get("/api/table/{table}/changes/export", records.export),
    ]
