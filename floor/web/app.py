"""The floor in a browser: a live pit view, and rulings people acknowledge and resolve.

An aiohttp application. Pages are plain HTML shells (floor/web/static/) that the page's own
script fills from JSON and keeps live over server-sent events (``/events``, floor/web/live.py):
one stream per browser, a snapshot first, then each table's tile as it changes, within the loop
turn the table's message arrives in. No polling loop, no external resources, no build step.
``WebApp`` is the wiring: the sessions, the login and logout, the users file looked at; each
page module beside it registers its own routes (``make_app``): floor/web/live.py (the view and
its stream), floor/web/actions.py (the floor page and the ruling actions), floor/web/export.py
(a table's records as a download), floor/web/records.py (a table's key and changes).

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
import math
import re
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING
from urllib.parse import quote

import structlog
from aiohttp import web

from tableside.floor.metrics import FloorMetrics
from tableside.floor.store import Store, TableState
from tableside.floor.web.commander import Commander
from tableside.floor.web.sessions import COOKIE, Session, Sessions
from tableside.floor.web.throttle import LoginThrottle, address_of
from tableside.floor.web.users import User, Users
from tableside.floor.web.view import FloorView

if TYPE_CHECKING:
    from tableside.floor.web.live import Live

__all__ = [
    "WebApp",
    "json_object",
    "make_app",
    "page",
]

log = structlog.get_logger("tableside.floor.web")

#: how often the users file is looked at while no request comes (each request looks too)
USERS_POLL_S = 0.5


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
    #: the live view and its ``/events`` streams (floor/web/live.py); ``live.stored`` is fed
    #: what the floor's store vouches for
    live: Live = field(init=False)

    def __post_init__(self) -> None:
        from tableside.floor.web.live import Live

        self.live = Live(self)

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
            streams = self.live.hang_up(session.token)
            self.metrics.sessions_ended.labels(why).inc()
            log.info("floor_web_session_ended", user=session.user.name, why=why,
                     streams=streams)  # fmt: skip

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


def _same_origin(request: web.Request) -> None:
    """A form post from another site is refused (the login form has no session yet)."""
    origin = request.headers.get("Origin")
    if origin is not None and origin.split("://", 1)[-1] != request.host:
        raise web.HTTPForbidden(text="cross-site request refused")


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
    from tableside.floor.web import actions, export, live, records

    app = web.Application(client_max_size=64 * 1024)
    app.add_routes(records.routes(records.Records(web_app, web_app.keys_changed)))
    app.cleanup_ctx.append(web_app.watch_users)
    app.on_shutdown.append(web_app.live.hang_up_all)
    app.add_routes(
        [
            web.get("/login", web_app.login_page),
            web.post("/login", web_app.login),
            web.post("/logout", web_app.logout),
        ]
    )
    app.add_routes(actions.routes(actions.Actions(web_app)))
    app.add_routes(live.routes(web_app.live))
    app.add_routes(export.routes(export.Export(web_app)))
    app.add_routes([web.get("/static/{name}", _asset)])
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
