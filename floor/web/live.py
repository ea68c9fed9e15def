"""The floor's live view in the web view: what the store vouches for fed into the view, the
view's JSON (``/api/floor``, ``/api/table/<table>``), and each browser's server-sent-event
stream (``/events``): a snapshot first, then each table's tile as it changes. Beside
floor/web/app.py's WebApp, whose sessions, view and store it uses; a session's streams end
with it (``hang_up``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog
from aiohttp import web

from tableside.floor.store import Message
from tableside.floor.web.app import completeness
from tableside.floor.web.sessions import Session
from tableside.wire.payloads import CommandResult, parse_payload
from tableside.wire.proof import unmarked
from tableside.wire.topics import TopicKind

if TYPE_CHECKING:
    from tableside.floor.web.app import WebApp

__all__ = ["SSE_QUEUE", "Live", "Stream", "routes"]

log = structlog.get_logger("tableside.floor.web")

#: a browser that falls this many updates behind is cut off (it reconnects to a snapshot)
SSE_QUEUE = 256

#: one browser's server-sent-event stream: its updates, then None to end it
Stream = asyncio.Queue[tuple[str, dict[str, object]] | None]


@dataclass
class Live:
    app: WebApp
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
        view, store = self.app.view, self.app.store
        if store is not None:
            view.enrolled = set(await store.keys())
            view.approved_software = set(await store.approved_software())
        now = self.app.clock()
        changed: set[str] = set()
        for m in shown:
            try:
                table = view.take(m, now=now)
            except Exception:  # a defect in the view must not cost the other messages
                log.exception("floor_view_take_failed", table=m.table, seq=m.seq)
                continue
            if table is None:
                continue
            changed.add(table)
            self._answer(m)
        for table in sorted(changed):
            if store is not None:
                state = await store.state(table)
                if state is not None:
                    view.set_completeness(table, completeness(state))
            self.publish_table(table)
        self._publish_gone()

    def _publish_gone(self) -> None:
        """Tell every browser which tables left the view (capped or expired)."""
        view = self.app.view
        gone, view.dropped = view.dropped, []
        for table in dict.fromkeys(gone):
            if table not in view.tables:
                self._send("gone", {"table": table})

    def _answer(self, m: Message) -> None:
        """A table's answer to a waiting request (the commander's)."""
        if m.what is not TopicKind.COMMAND_RESULT:
            return
        with contextlib.suppress(ValueError):
            self.app.commander.result(m.table, parse_payload(CommandResult, unmarked(m.payload)))

    def publish_table(self, table: str) -> None:
        view = self.app.view
        if table not in view.tables:
            return
        now = self.app.clock()
        # this table's open rulings only: the page keeps the others' (at 1,000 tables the whole
        # queue in every update would be most of the snapshot, once a message)
        rulings = [view.public(r, now) for r in view.open_rulings(table)]
        self._send("table", {"tile": view.tile(table, now), "rulings": rulings})

    def _send(self, event: str, data: dict[str, object]) -> None:
        for queue in list(self._listeners):
            try:
                queue.put_nowait((event, data))
            except asyncio.QueueFull:
                self._listeners.discard(queue)
                with contextlib.suppress(asyncio.QueueFull):
                    queue.get_nowait()
                    queue.put_nowait(None)

    # -- the streams ----------------------------------------------------------------------

    def hang_up(self, token: str) -> int:
        """The session ``token`` ended: every stream it opened ends; how many there were."""
        streams = self._streams.pop(token, set())
        for stream in streams:
            _hang_up(stream)
        return len(streams)

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

    # -- pages ----------------------------------------------------------------------------

    async def floor(self, request: web.Request) -> web.Response:
        self.app._need_session(request)
        snapshot = self.app.view.floor(self.app.clock())
        self._publish_gone()
        return _json(snapshot)

    async def table(self, request: web.Request) -> web.Response:
        self.app._need_session(request)
        page = self.app.view.table_page(request.match_info["table"], self.app.clock())
        if page is None:
            raise web.HTTPNotFound(text=f"no table {request.match_info['table']!r} heard from")
        return _json(page)

    async def events(self, request: web.Request) -> web.StreamResponse:
        session = self.app._need_session(request)
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
        )
        await response.prepare(request)
        queue: Stream = asyncio.Queue(SSE_QUEUE)
        self._listeners.add(queue)
        self._follows(session, queue)
        try:
            await _sse(response, "snapshot", self.app.view.floor(self.app.clock()))
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


def routes(live: Live) -> list[web.RouteDef]:
    return [
        web.get("/api/floor", live.floor),
        web.get("/api/table/{table}", live.table),
        web.get("/events", live.events),
    ]
