"""The real floor with its web view, as ``tableside floor run --http`` wires them: the floor
service (floor/service.py) on a broker, storing into SQLite, feeding the view what its store
vouches for; the web server on a free port; a floorperson to log in as."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from playwright.async_api import Page, expect

from tableside.floor.service import Floor, RepairPolicy
from tableside.floor.store import Store, open_store
from tableside.floor.web.app import WebApp, serving
from tableside.floor.web.commander import Commander, MqttSender, RoleLogin
from tableside.floor.web.users import Users
from tableside.floor.web.view import FloorView
from tests.browser import chromium
from tests.hil import SimulatedTable, simulated_table, simulator
from tests.test_floor import running
from tests.test_shoe import shoe

__all__ = ["PASSWORD", "FloorWeb", "floor_with_web", "log_in", "pit"]

PASSWORD = "correct horse battery"
FAST = RepairPolicy(interval_s=0.2, retry_s=0.5, max_retry_s=2.0, rate_per_s=100)


@dataclass
class FloorWeb:
    floor: Floor
    store: Store
    web: WebApp
    url: str


@contextlib.asynccontextmanager
async def floor_with_web(
    broker: str, tmp_path: Path, *, store: Store | None = None, client_id: str = "floor-web"
) -> AsyncIterator[FloorWeb]:
    """The floor subscribed (a table started after this is heard from its first record) and
    its web view serving; ``bob`` is a floorperson."""
    users = Users(tmp_path / "users.json")
    users.set("bob", "floorperson", PASSWORD)
    logins = {"floorperson": RoleLogin("floor-web-floorperson")}
    send = MqttSender(broker, "tableside", logins)
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(send.aclose)
        if store is None:
            store = await stack.enter_async_context(open_store(f"sqlite:///{tmp_path}/floor.db"))
        web = WebApp(FloorView(), users, Commander(send), store=store)
        url = await stack.enter_async_context(serving(web, "127.0.0.1", 0))
        floor = await stack.enter_async_context(running(Floor(
            store, broker, client_id=client_id, repair=FAST,
            on_stored=web.live.stored)))  # fmt: skip
        yield FloorWeb(floor, store, web, url)


async def log_in(page: Page, url: str, user: str = "bob") -> None:
    await page.goto(url + "/login")
    await page.fill("#username", user)
    await page.fill("#password", PASSWORD)
    await page.click("button[type=submit]")
    # (a burst of updates past SSE_QUEUE cuts a stream and the page reconnects to a snapshot,
    # a few seconds later: a loaded floor still storing a flood is live again within this)
    await expect(page.locator("#live")).to_have_text("live", timeout=20_000)


@contextlib.asynccontextmanager
async def pit(broker: str, tmp_path: Path) -> AsyncIterator[tuple[FloorWeb, SimulatedTable, Page]]:
    """The floor with its web view, then a real daemon (table ``hil-1``: a shuffler whose first
    shuffle miscounts, a shoe) on the same broker, and a browser page at a pit terminal's size."""
    sims = {"shuffler": simulator("count=51@1", interval=None), "shoe": shoe(interval=None)}
    async with (
        floor_with_web(broker, tmp_path) as floor,
        simulated_table(broker, tmp_path, sims["shuffler"], others={"shoe": sims["shoe"]})
        as table,
        chromium() as browser,
    ):  # fmt: skip
        await table.daemon.publisher.connected.wait()
        yield floor, table, await browser.new_page(viewport={"width": 1366, "height": 768})
