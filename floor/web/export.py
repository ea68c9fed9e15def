"""A table's stored records as a download (``/api/table/<table>/export``), as ``tableside
floor export`` writes them. Beside floor/web/app.py's WebApp, whose sessions and store it uses.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp import web

from tableside.floor.verify import export_line
from tableside.floor.web.app import attachment

if TYPE_CHECKING:
    from tableside.floor.web.app import WebApp

__all__ = ["Export", "routes"]

#: records read from the store at a time
PAGE = 5_000


@dataclass(slots=True)
class Export:
    app: WebApp

    async def export(self, request: web.Request) -> web.StreamResponse:
        """The table's stored records, as ``tableside floor export`` writes them."""
        self.app._need_session(request)
        table = request.match_info["table"]
        store = self.app.store
        if store is None:
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
            page = await store.records(table, first, limit=PAGE)
            lines = "".join(json.dumps(export_line(r)) + "\n" for r in page)
            await response.write(lines.encode())
            if len(page) < PAGE:
                break
            first = (page[-1].seq or 0) + 1
        await response.write_eof()
        return response


def routes(export: Export) -> list[web.RouteDef]:
    return [web.get("/api/table/{table}/export", export.export)]
