"""What a user may do in the web view, and doing it: the floor page (``/``, ``/rulings``,
``/table/<table>``) offering the actions the user's role may take, ``/api/me``, and the
ruling actions (``/api/table/<table>/rulings/<ruling>/acknowledge`` and ``.../resolve``), each
a table command sent with the role's broker login (floor/web/commander.py) and answered with
the table's own answer. Beside floor/web/app.py's WebApp, whose sessions, CSRF token, view and
commander it uses.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp import web

from tableside.floor.web.app import json_object, page
from tableside.floor.web.users import SURVEILLANCE
from tableside.rules.commands import COMMANDS
from tableside.rules.rulings import MAX_NOTE_CHARS

if TYPE_CHECKING:
    from tableside.floor.web.app import WebApp

__all__ = ["ACKNOWLEDGE", "RESOLVE", "Actions", "routes"]

#: the table commands behind the page's two buttons (rules/commands.py)
ACKNOWLEDGE = "acknowledge_ruling"
RESOLVE = "resolve_ruling"


@dataclass(slots=True)
class Actions:
    app: WebApp

    async def shell(self, request: web.Request) -> web.Response:
        session = self.app._need_session(request)
        return page(
            "floor.html",
            user=session.user.name,
            role=session.user.role,
            csrf=session.csrf,
            may=json.dumps(sorted(_may(session.user.role))),
        )

    async def me(self, request: web.Request) -> web.Response:
        session = self.app._need_session(request)
        user = session.user
        return web.json_response(
            {"user": user.name, "role": user.role, "may": sorted(_may(user.role))}
        )

    # -- acting on a ruling ---------------------------------------------------------------

    async def act(self, request: web.Request) -> web.Response:
        session = self.app._need_session(request)
        self.app._need_csrf(request, session)
        table, ruling_id = request.match_info["table"], request.match_info["ruling"]
        verb = request.match_info["verb"]
        command = {"acknowledge": ACKNOWLEDGE, "resolve": RESOLVE}.get(verb)
        if command is None:
            raise web.HTTPNotFound(text=f"no action {verb!r}")
        role = session.user.role
        if command not in _may(role):
            raise web.HTTPForbidden(text=f"a {role} may not {verb} a ruling")
        ruling = self.app.view.rulings.get(ruling_id)
        if ruling is None or ruling.table != table:
            raise web.HTTPNotFound(text=f"no ruling {ruling_id!r} at table {table!r}")
        body = await json_object(request)
        args: dict[str, object] = {"ruling": ruling.seq, "by": session.user.name}
        if command == RESOLVE:
            action, note = body.get("action"), body.get("note", "")
            if not isinstance(note, str):
                raise web.HTTPBadRequest(text="the note must be text")
            if action not in ruling.actions:
                raise web.HTTPBadRequest(text=f"{action!r} is not one of {ruling.actions}")
            if len(note) > MAX_NOTE_CHARS:
                raise web.HTTPBadRequest(
                    text=f"the note is longer than {MAX_NOTE_CHARS} characters"
                )
            args |= {"action": action, "note": note}
        result = await self.app.commander.ask(table, role, command, args)
        return web.json_response(result, status=200 if result.get("ok") else 409)


def _may(role: str) -> set[str]:
    """The ruling commands this role may send (none for surveillance)."""
    if role == SURVEILLANCE:
        return set()
    return {
        name
        for name in (ACKNOWLEDGE, RESOLVE)
        if name in COMMANDS and role in {str(r) for r in COMMANDS[name].roles}
    }


def routes(actions: Actions) -> list[web.RouteDef]:
    return [
        web.get("/", actions.shell),
        web.get("/rulings", actions.shell),
        web.get("/table/{table}", actions.shell),
        web.get("/api/me", actions.me),
        web.post("/api/table/{table}/rulings/{ruling}/{verb}", actions.act),
    ]
