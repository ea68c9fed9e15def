"""The floor in a browser: a live pit view, and rulings people acknowledge and resolve.

An aiohttp application. Pages are plain HTML shells (floor/web/static/) that the page's own
script fills from JSON and keeps live over server-sent events (``/events``): one stream per
browser, a snapshot first, then each table's tile as it changes, within the loop turn the table's
message arrives in. No polling loop, no external resources, no build step.

Who may do what: every page needs a login (floor/web/users.py). A session (floor/web/sessions.py)
is a random token in an HttpOnly, SameSite=Strict cookie (Secure under TLS); each
state-changing request carries the session's CSRF token in ``X-CSRF-Token`` and is refused
without it. The page offers only the
actions the user's role may take (``COMMANDS[...].roles``, the tables' own registry), and the
server checks again. An action is a table command, sent to the broker with that role's broker
login (``role_logins``), so the broker's ACL and the table still decide; the table journals it,
and its result comes back on the stream like any other message once the store vouches for it.
The click itself is answered by the table's own answer to the request (``Commander``): its MQTT
v5 response, on the response topic the request named, as soon as it comes, or its
``command_result`` as the store vouches for it, whichever comes first.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import html
import json
import math
import re
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from importlib import resources
from urllib.parse import quote

import structlog
from aiohttp import web

from tableside.floor.metrics import FloorMetrics
from tableside.floor.store import Message, Store, TableState
from tableside.floor.verify import export_line
from tableside.floor.web.commander import Commander
from tableside.floor.web.sessions import COOKIE, Session, Sessions
from tableside.floor.web.throttle import LoginThrottle, address_of
from tableside.floor.web.users import SURVEILLANCE, User, Users
from tableside.floor.web.view import FloorView
from tableside.rules.commands import COMMANDS
from tableside.rules.rulings import MAX_NOTE_CHARS
from tableside.wire.payloads import CommandResult, parse_payload
from tableside.wire.proof import unmarked
from tableside.wire.topics import TopicKind

__all__ = [
    "ACKNOWLEDGE",
    "RESOLVE",
    "WebApp",
    "json_object",
    "make_app",
    "page",
]

log = structlog.get_logger("tableside.floor.web")

#: the table commands behind the page's two buttons (rules/commands.py)
ACKNOWLEDGE = "acknowledge_ruling"
RESOLVE = "resolve_ruling"
#: a browser that falls this many updates behind is cut off (it reconnects to a snapshot)
SSE_QUEUE = 256
#: how often the users file is looked at while no request comes (each request looks too)
USERS_POLL_S = 0.5

#: one browser's server-sent-event stream: its updates, then None to end it
Stream = asyncio.Queue[tuple[str, dict[str, object]] | None]


@dataclass
class WebApp:
    view: FloorView
    users: Users
    commander: Commander
    #: the floor's store: completeness and verification on the tiles, and the export
    store: Store | None = None
    secure_cookies: bool = False
    clock: Callable[[], float] = time.time
    sessions: Sessions = field(default_factory=Sessions)
    metrics: FloorMetrics = field(default_factory=FloorMetrics)
    throttle: LoginThrottle = field(default_factory=LoginThrottle)
    #: the clock the login throttle counts by
    monotonic: Callable[[], float] = time.monotonic
    #: told when a supervisor enrolled or revoked a key (the floor reloads the keys it trusts)
    keys_changed: Callable[[], Awaitable[None]] | None = None
    _listeners: set[Stream] = field(default_factory=set)
    #: the ``/events`` streams each session opened (by its token), ended with it
    _streams: dict[str, set[Stream]] = field(default_factory=dict)

    # -- feeding the view -----------------------------------------------------------------

    async def stored(self, shown: list[Message]) -> None:
        """What the floor's store vouches for after a batch (``Floor.on_stored``: records the
        chain walk linked, in seq order per table; last wills; retained states that came again
        as stored): into the view, each table's completeness from the store, then one update
        per table it changed. The view hears nothing else: not a message the store rejected,
        held apart or could not link, however it came. One message the view cannot take is
        logged and skipped; the rest of the batch goes on."""
        if self.store is not None:
            self.view.enrolled = set(await self.store.keys())
            self.view.approved_software = set(await self.store.approved_software())
        now = self.clock()
        changed: set[str] = set()
        for m in shown:
            try:
                table = self.view.take(m, now=now)
            except Exception:  # a defect in the view must not cost the other messages
                log.exception("floor_view_take_failed", table=m.table, seq=m.seq)
                continue
            if table is None:
                continue
            changed.add(table)
            self._answer(m)
        for table in sorted(changed):
            if self.store is not None:
                state = await self.store.state(table)
                if state is not None:
                    self.view.set_completeness(table, completeness(state))
            self.publish_table(table)
        self._publish_gone()

    def _publish_gone(self) -> None:
        """Tell every browser which tables left the view (capped or expired)."""
        gone, self.view.dropped = self.view.dropped, []
        for table in dict.fromkeys(gone):
            if table not in self.view.tables:
                self._send("gone", {"table": table})

    def _answer(self, m: Message) -> None:
        """A table's answer to a waiting request (the commander's)."""
        if m.what is not TopicKind.COMMAND_RESULT:
            return
        with contextlib.suppress(ValueError):
            self.commander.result(m.table, parse_payload(CommandResult, unmarked(m.payload)))

    def publish_table(self, table: str) -> None:
        if table not in self.view.tables:
            return
        now = self.clock()
        # this table's open rulings only: the page keeps the others' (at 1,000 tables the whole
        # queue in every update would be most of the snapshot, once a message)
        rulings = [self.view.public(r, now) for r in self.view.open_rulings(table)]
        self._send("table", {"tile": self.view.tile(table, now), "rulings": rulings})

    def _send(self, event: str, data: dict[str, object]) -> None:
        for queue in list(self._listeners):
            try:
                queue.put_nowait((event, data))
            except asyncio.QueueFull:
                self._listeners.discard(queue)
                with contextlib.suppress(asyncio.QueueFull):
                    queue.get_nowait()
                    queue.put_nowait(None)

    # -- sessions -------------------------------------------------------------------------

    def _session(self, request: web.Request) -> Session | None:
        self._check_users()
        session = self.sessions.get(request.cookies.get(COOKIE), self.clock())
        self._hang_up_ended()
        return session

    def _need_session(self, request: web.Request) -> Session:
        session = self._session(request)
        if session is None:
            if request.path.startswith("/api/") or request.path == "/events":
                raise web.HTTPUnauthorized(text="log in first")
            raise web.HTTPSeeOther("/login")
        return session

    def _need_csrf(self, request: web.Request, session: Session) -> None:
        if not session.csrf_matches(request.headers.get("X-CSRF-Token", "")):
            raise web.HTTPForbidden(text="missing or wrong CSRF token")

    def _check_users(self) -> None:
        """The users file as it is now (floor/web/users.py: one ``stat`` when it did not
        change); a session whose user it no longer names as they were (removed, another role,
        a new password) ends, with its streams."""
        if self.users.refresh() and self.users.problem:
            log.error("floor_web_users_unreadable", problem=self.users.problem)
        self.sessions.check_users(self.users)
        self._hang_up_ended()

    def _hang_up_ended(self) -> None:
        """Each session that ended is over, and so is every stream it opened."""
        for session, why in self.sessions.take_ended():
            streams = self._streams.pop(session.token, set())
            for stream in streams:
                _hang_up(stream)
            self.metrics.sessions_ended.labels(why).inc()
            log.info("floor_web_session_ended", user=session.user.name, why=why,
                     streams=len(streams))  # fmt: skip

    async def hang_up_all(self, _: web.Application) -> None:
        """The server is stopping: every ``/events`` stream ends now (a stream's handler waits
        on its queue, and the server waits for its handlers)."""
        for stream in list(self._listeners):
            _hang_up(stream)

    def _follows(self, session: Session, stream: Stream) -> None:
        """``stream`` ends with ``session`` (at once, if it already ended)."""
        if not session.live:
            _hang_up(stream)
        else:
            self._streams.setdefault(session.token, set()).add(stream)

    async def watch_users(self, app: web.Application) -> AsyncIterator[None]:
        """While the app serves (``cleanup_ctx``): the users file looked at every
        ``USERS_POLL_S``, so a removed user's open stream ends with no request of theirs."""

        async def poll() -> None:
            while True:
                self._check_users()
                await asyncio.sleep(USERS_POLL_S)

        task = asyncio.create_task(poll(), name="floor-web-users")
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    # -- pages ----------------------------------------------------------------------------

    async def login_page(self, request: web.Request) -> web.Response:
        return page("login.html", error="")

    async def login(self, request: web.Request) -> web.Response:
        _same_origin(request)
        if request.content_type != "application/x-www-form-urlencoded":
            raise web.HTTPBadRequest(
                text="a login is the login page's form (application/x-www-form-urlencoded)"
            )
        form = await request.post()
        name, password = str(form.get("username", "")), str(form.get("password", ""))
        self._check_users()
        address = address_of(request.remote)
        wait = self.throttle.wait(name, address, self.monotonic())
        if wait:
            self.metrics.logins.labels("locked").inc()
            log.warning("floor_web_login_refused", user=name[:64], address=address,
                        retry_s=math.ceil(wait))  # fmt: skip
            minutes = math.ceil(wait / 60)
            refused = page("login.html", status=429, error="Too many wrong passwords: try "
                            f"again in {minutes} minute{'s' if minutes > 1 else ''}.")  # fmt: skip
            refused.headers["Retry-After"] = str(math.ceil(wait))
            return refused
        user = await self._check_password(name, password, address)
        if user is None:
            await asyncio.sleep(self.throttle.policy.delay_s)
            return page("login.html", error="Wrong user name or password.", status=401)
        session = self.sessions.open(user, self.clock())
        response = web.HTTPSeeOther("/")
        response.set_cookie(
            COOKIE,
            session.token,
            httponly=True,
            samesite="Strict",
            secure=self.secure_cookies,
            path="/",
        )
        raise response

    async def _check_password(self, name: str, password: str, address: str) -> User | None:
        """The user, when the password is theirs and they are still that user once it is
        checked; every answer told to the throttle, counted and logged."""
        user: User | None = None
        try:
            user = await asyncio.to_thread(self.users.check, name, password)
            if user is not None and self.users.get(name) != user:
                user = None  # removed or changed while the password was checked
        finally:
            locked = self.throttle.answer(name, address, self.monotonic(), right=user is not None)
        self.metrics.logins.labels("wrong" if user is None else "ok").inc()
        if user is None:
            log.warning("floor_web_login_wrong", user=name[:64], address=address)
        for scope in locked:
            self.metrics.login_locks.labels(scope).inc()
            log.warning("floor_web_login_locked", scope=scope, user=name[:64], address=address,
                        lock_s=self.throttle.policy.lock_s)  # fmt: skip
        return user

    async def logout(self, request: web.Request) -> web.Response:
        session = self._need_session(request)
        self._need_csrf(request, session)
        self.sessions.end(session.token, "logout")
        self._hang_up_ended()
        response = web.HTTPSeeOther("/login")
        response.del_cookie(COOKIE, path="/")
        raise response

    async def shell(self, request: web.Request) -> web.Response:
        session = self._need_session(request)
        return page(
            "floor.html",
            user=session.user.name,
            role=session.user.role,
            csrf=session.csrf,
            may=json.dumps(sorted(_may(session.user.role))),
        )

    async def me(self, request: web.Request) -> web.Response:
        session = self._need_session(request)
        user = session.user
        return web.json_response(
            {"user": user.name, "role": user.role, "may": sorted(_may(user.role))}
        )

    async def floor(self, request: web.Request) -> web.Response:
        self._need_session(request)
        snapshot = self.view.floor(self.clock())
        self._publish_gone()
        return _json(snapshot)

    async def table(self, request: web.Request) -> web.Response:
        self._need_session(request)
        page = self.view.table_page(request.match_info["table"], self.clock())
        if page is None:
            raise web.HTTPNotFound(text=f"no table {request.match_info['table']!r} heard from")
        return _json(page)

    async def events(self, request: web.Request) -> web.StreamResponse:
        session = self._need_session(request)
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
        )
        await response.prepare(request)
        queue: Stream = asyncio.Queue(SSE_QUEUE)
        self._listeners.add(queue)
        self._follows(session, queue)
        try:
            await _sse(response, "snapshot", self.view.floor(self.clock()))
            while True:
                try:
                    async with asyncio.timeout(15):
                        item = await queue.get()
                except TimeoutError:
                    await response.write(b": keep-alive\n\n")
                    continue
                if item is None:
                    break
                await _sse(response, *item)
        except ConnectionResetError:
            pass  # the browser went away
        finally:
            self._listeners.discard(queue)
            self._streams.get(session.token, set()).discard(queue)
        return response

    async def export(self, request: web.Request) -> web.StreamResponse:
        """The table's stored records, as ``tableside floor export`` writes them."""
        self._need_session(request)
        table = request.match_info["table"]
        if self.store is None:
            raise web.HTTPNotFound(text="this view has no store to export from")
        response = web.StreamResponse(
            headers={
                "Content-Type": "application/x-ndjson",
                "Content-Disposition": attachment(f"{table}.jsonl"),
            }
        )
        await response.prepare(request)
        first = 0
        while True:
            page = await self.store.records(table, first, limit=5_000)
            lines = "".join(json.dumps(export_line(r)) + "\n" for r in page)
            await response.write(lines.encode())
            if len(page) < 5_000:
                break
            first = (page[-1].seq or 0) + 1
        await response.write_eof()
        return response

    # -- acting on a ruling ---------------------------------------------------------------

    async def act(self, request: web.Request) -> web.Response:
        session = self._need_session(request)
        self._need_csrf(request, session)
        table, ruling_id = request.match_info["table"], request.match_info["ruling"]
        verb = request.match_info["verb"]
        command = {"acknowledge": ACKNOWLEDGE, "resolve": RESOLVE}.get(verb)
        if command is None:
            raise web.HTTPNotFound(text=f"no action {verb!r}")
        role = session.user.role
        if command not in _may(role):
            raise web.HTTPForbidden(text=f"a {role} may not {verb} a ruling")
        ruling = self.view.rulings.get(ruling_id)
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
        result = await self.commander.ask(table, role, command, args)
        return web.json_response(result, status=200 if result.get("ok") else 409)


def completeness(state: TableState) -> dict[str, object]:
    """What a table's page shows of the store's view of a table's stream (its tile, the
    first gaps)."""
    progress = state.progress
    return {
        "gaps": [list(gap) for gap in state.gaps],
        "missing": state.missing,
        "duplicates": state.duplicates,
        "verified": not progress.broken,
        "verified_upto": progress.verified_upto,
        "signed_upto": progress.signed_upto,
        "key_enrolled": state.key is not None,
        "flagged": state.flagged,
        # the seqs whose record the store holds only as a withheld stand-in (too large for the
        # broker: linked by the chain, its content in the table's journal)
        "withheld": state.withheld,
        "withheld_count": len(state.withheld),
    }


async def json_object(request: web.Request) -> dict[str, object]:
    """The request's body as a JSON object, or 400 saying what it is instead (``null``, a list,
    nesting too deep to parse, not JSON at all: never a 500)."""
    try:
        body = await request.json()
    except (ValueError, RecursionError) as exc:
        raise web.HTTPBadRequest(text="the request is not JSON") from exc
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(
            text=f"the request must be a JSON object, not {type(body).__name__}"
        )
    return body


#: what a download's file name keeps as it is; anything else is percent-encoded (RFC 6266)
_PLAIN_NAME = re.compile(r"[A-Za-z0-9._-]+")


def attachment(name: str) -> str:
    """A ``Content-Disposition`` for a download called ``name``, whatever a table id holds: an
    ASCII fallback with every other character as ``_``, and the exact name as RFC 5987
    ``filename*`` (so a ``"``, ``;`` or CR LF in a table id can neither inject nor break it)."""
    fallback = "".join(c if _PLAIN_NAME.fullmatch(c) else "_" for c in name)
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(name, safe='')}"


def _may(role: str) -> set[str]:
    """The ruling commands this role may send (none for surveillance)."""
    if role == SURVEILLANCE:
        return set()
    return {
        name
        for name in (ACKNOWLEDGE, RESOLVE)
        if name in COMMANDS and role in {str(r) for r in COMMANDS[name].roles}
    }


def _same_origin(request: web.Request) -> None:
    """A form post from another site is refused (the login form has no session yet)."""
    origin = request.headers.get("Origin")
    if origin is not None and origin.split("://", 1)[-1] != request.host:
        raise web.HTTPForbidden(text="cross-site request refused")


def _dumps(data: object) -> str:
    """JSON a browser's ``JSON.parse`` takes: no NaN or Infinity (ValueError if any got in)."""
    return json.dumps(data, allow_nan=False)


def _json(data: dict[str, object]) -> web.Response:
    return web.json_response(data, dumps=_dumps)


def _hang_up(stream: Stream) -> None:
    """End a stream: whatever it still holds is dropped for the None that ends it."""
    while not stream.empty():
        stream.get_nowait()
    stream.put_nowait(None)


async def _sse(response: web.StreamResponse, event: str, data: dict[str, object]) -> None:
    await response.write(f"event: {event}\ndata: {_dumps(data)}\n\n".encode())


@functools.cache
def _static(name: str) -> str:
    return (resources.files("tableside.floor.web") / "static" / name).read_text(encoding="utf-8")


def page(name: str, status: int = 200, **values: str) -> web.Response:
    text = _static(name)
    for key, value in values.items():
        text = text.replace("{{" + key + "}}", html.escape(value))
    return web.Response(
        text=text,
        status=status,
        content_type="text/html",
        headers={
            "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'",
            "X-Content-Type-Options": "nosniff",
            "Cache-Control": "no-store",
        },
    )


async def _asset(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    kinds = {".js": "text/javascript", ".css": "text/css"}
    kind = next((k for s, k in kinds.items() if name.endswith(s)), None)
    if kind is None or not _PLAIN_NAME.fullmatch(name):  # no "/" nor NUL: a file of ours
        raise web.HTTPNotFound()
    try:
        return web.Response(text=_static(name), content_type=kind)
    except FileNotFoundError as exc:
        raise web.HTTPNotFound() from exc


def make_app(web_app: WebApp) -> web.Application:
    from tableside.floor.web.records import Records, routes

    app = web.Application(client_max_size=64 * 1024)
    app.add_routes(routes(Records(web_app, web_app.keys_changed)))
    app.cleanup_ctx.append(web_app.watch_users)
    app.on_shutdown.append(web_app.hang_up_all)
    app.add_routes(
        [
            web.get("/login", web_app.login_page),
            web.post("/login", web_app.login),
            web.post("/logout", web_app.logout),
            web.get("/", web_app.shell),
            web.get("/rulings", web_app.shell),
            web.get("/table/{table}", web_app.shell),
            web.get("/api/me", web_app.me),
            web.get("/api/floor", web_app.floor),
            web.get("/api/table/{table}", web_app.table),
            web.get("/api/table/{table}/export", web_app.export),
            web.post("/api/table/{table}/rulings/{ruling}/{verb}", web_app.act),
            web.get("/events", web_app.events),
            web.get("/static/{name}", _asset),
        ]
    )
    return app


@contextlib.asynccontextmanager
async def serving(
    web_app: WebApp, host: str, port: int, tls: ssl.SSLContext | None = None
) -> AsyncIterator[str]:
    """Serve until the block ends; yields the base URL."""
    runner = web.AppRunner(make_app(web_app), access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, ssl_context=tls)
        await site.start()  # a port taken: the runner is cleaned up all the same
        bound = runner.addresses[0]
        yield f"{'https' if tls else 'http'}://{bound[0]}:{bound[1]}"
    finally:
        await runner.cleanup()
