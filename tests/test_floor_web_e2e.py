"""The floor in a browser, end to end: a real daemon with a simulated shuffler and shoe, a real
Mosquitto, the real floor (storing and verifying what the table sends, its web view fed what
the store vouches for), and a floorperson in real headless Chromium. The table's tile appears;
a shuffler miscount's ruling joins the queue; the floorperson acknowledges and resolves it with
clicks; the table's stream carries both, and the deal the ruling halted goes through only after.

Screenshots of the floor map and the table page are written to $TABLESIDE_SCREENSHOTS when it is
set (``TABLESIDE_SCREENSHOTS=docs/screenshots ./dev.sh test tests/test_floor_web_e2e.py``
refreshes the ones in docs/)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from playwright.async_api import Page, expect

from .browser import chromium
from .conftest import Mosquitto
from .floorweb import log_in, pit
from .hil import ask


async def _shoot(page: Page, name: str) -> None:
    where = os.environ.get("TABLESIDE_SCREENSHOTS")
    if where:
        await asyncio.to_thread(Path(where).mkdir, parents=True, exist_ok=True)
        await page.screenshot(path=str(Path(where) / name))


async def test_a_floorperson_acknowledges_and_resolves_a_ruling_in_the_browser(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    async with pit(mosquitto.url, tmp_path) as (floor, table, page):
        url = floor.url
        port = mosquitto.port
        await log_in(page, url)
        tile = page.locator("article[data-table='hil-1']")
        await expect(tile).to_contain_text("online")
        assert (await ask(table, port, "floorperson", "open_table", "o"))["ok"]
        await expect(tile).to_contain_text("open")

        # the miscount: its ruling joins the queue, halting dealing
        await page.click("a[href='/rulings']")
        assert (await ask(table, port, "dealer", "start_shuffle", "s", device="shuffler"))["ok"]
        (ruling,) = await table.subscriber.wait_for(lambda m: m.kind == "ruling")
        seq = ruling.payload["seq"]
        row = page.locator(f"tr.ruling[data-ruling='hil-1-{seq}']")
        await expect(row).to_contain_text(ruling.payload["clause"], timeout=1000)
        await expect(page.locator("#ruling-count")).to_have_text("1")
        await page.goto(url + "/")
        await expect(tile).to_contain_text("dealing halted")
        await _shoot(page, "floor-map.png")

        # acknowledged, with a click
        await page.goto(url + "/rulings")
        await row.locator("button.ack").click()
        await expect(row.locator("td.state")).to_contain_text("acknowledged by bob")
        (ack,) = await table.subscriber.wait_for(
            lambda m: m.kind == "ruling_state" and m.payload["state"] == "acknowledged"
        )
        assert (ack.payload["ruling"], ack.payload["by"]) == (seq, "bob")
        refused = await ask(table, port, "dealer", "deal_round", "d1", device="shoe",
                             positions=[1, 2])  # fmt: skip
        assert not refused["ok"] and "halted" in refused["error"]

        # resolved: what was done chosen from the ruling's own actions, and a note
        await row.locator("button.resolve").click()
        await page.select_option("#resolve-action", "remove_deck")
        await page.fill("#resolve-note", "deck counted and destroyed")
        await page.click("#resolve-confirm")
        (done,) = await table.subscriber.wait_for(
            lambda m: m.kind == "ruling_state" and m.payload["state"] == "resolved"
        )
        assert done.payload["action"] == "remove_deck"
        assert done.payload["note"] == "deck counted and destroyed"
        await expect(page.locator("#ruling-count")).to_have_text("0")
        await page.goto(url + "/table/hil-1")
        await expect(page.locator("main")).to_contain_text("resolved")
        await expect(page.locator("main")).to_contain_text("deck counted and destroyed")
        await _shoot(page, "table-page.png")
        results = table.subscriber.matching(
            lambda m: m.kind == "command_result" and m.payload["role"] == "floorperson"
            and str(m.payload["request_id"]).startswith("floor-")
        )  # fmt: skip
        assert [r.payload["command"] for r in results] == [
            "acknowledge_ruling", "resolve_ruling"
        ]  # fmt: skip


async def test_the_demo_shows_its_table_stored_and_verified_in_a_browser(tmp_path: Path) -> None:
    """``tableside demo`` starts the floor beside its table and prints where to log in: the
    table's tile appears, live, with its chain verified and signed (the demo enrols its key)."""
    import re
    import signal
    import sys

    from tests.ports import free_port

    demo = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tableside", "demo", "--rounds", "0", "--interval", "0.3",
        "--broker", f"mqtt://127.0.0.1:{free_port()}", "--floor-http", "127.0.0.1:0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    assert demo.stdout is not None
    try:
        found = None
        async with asyncio.timeout(60):
            while found is None:
                line = (await demo.stdout.readline()).decode()
                assert line, "the demo ended before it started the floor"
                found = re.search(r"live at (\S+)/ \(log in as demo, password (\S+)\)", line)
        url, password = found.group(1), found.group(2)
        # the demo goes on printing what it sees: read it, so a full pipe never stops it
        drain = asyncio.create_task(demo.stdout.read(), name="drain")
        async with chromium() as browser:
            page = await browser.new_page(viewport={"width": 1366, "height": 768})
            await page.goto(url + "/login")
            await page.fill("#username", "demo")
            await page.fill("#password", password)
            await page.click("button[type=submit]")
            tile = page.locator("article[data-table='demo-caribbean-stud']")
            await expect(tile).to_contain_text("online", timeout=30_000)
            await expect(tile).to_contain_text("verified to", timeout=30_000)
            # a checkpoint comes at the interval or on stop; the chain is verified live
            assert "CHAIN BROKEN" not in await tile.inner_text()
    finally:
        if demo.returncode is None:
            demo.send_signal(signal.SIGINT)
            async with asyncio.timeout(30):
                await demo.wait()
    await drain
