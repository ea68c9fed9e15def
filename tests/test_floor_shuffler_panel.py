"""Issue 19 on the floor: each shuffler's panel on its table's page, in real headless Chromium,
fed by the real floor from a real daemon and a card-recognising simulated shuffler on a real
Mosquitto: its health (shuffles, unsuccessful, count errors, cards per shuffle), its integrity
statistics as a plot and a table, and its alerts; the table's pace. A rigged shuffler's panel
shows its alert, a fair one's none. ``TABLESIDE_SCREENSHOTS=docs/images`` keeps the pages as
docs/floor.md shows them."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from playwright.async_api import expect

from tests.browser import chromium
from tests.conftest import Mosquitto
from tests.floorweb import floor_with_web, log_in
from tests.hil import simulated_table, simulator, stop
from tests.test_shuffle_integrity import ALERT, _event, _recognising

pytestmark = pytest.mark.slow


async def _show(mosquitto: Mosquitto, tmp_path: Path, spec: str, wait_for: str, count: int,
                screenshot: str) -> tuple[str, list[str], int]:  # fmt: skip
    """A table whose shuffler shuffles as ``spec``, until ``count`` events ``wait_for``; the
    shuffler panel's text, each plotted test's name, and the SVG's polyline count."""
    sim = simulator(interval=0.03, shuffle=spec)
    async with (
        floor_with_web(mosquitto.url, tmp_path) as floor,
        simulated_table(mosquitto.url, tmp_path, sim, adjust=_recognising) as table,
        chromium() as browser,
    ):  # fmt: skip
        if wait_for == ALERT:
            await table.subscriber.wait_for(
                lambda m: m.kind == "ruling" and m.payload["rule_id"] == ALERT, within=60
            )
        await table.subscriber.wait_for(_event("shuffle_statistics"), count=count, within=90)
        await stop(table.tasks.pop("sim"))  # the shuffler stops: the page stays still to read
        await table.subscriber.wait_for(lambda m: m.kind == "state" and m.payload["connection"]
                                        != "connected")  # fmt: skip
        tiles = floor.web.view.tables
        await _until(
            lambda: (
                "hil-1" in tiles
                and "shuffler" in tiles["hil-1"].shufflers
                and len(tiles["hil-1"].shufflers["shuffler"].history) >= count
            )
        )
        page = await browser.new_page(viewport={"width": 1366, "height": 900})
        await log_in(page, floor.url)
        await page.goto(floor.url + "/table/hil-1")
        panel = page.locator("section.shuffler[data-shuffler='shuffler']")
        await expect(panel).to_contain_text("Integrity:")
        await expect(panel.locator("svg.plot polyline").first).to_be_attached()
        where = os.environ.get("TABLESIDE_SCREENSHOTS")
        if where:
            await panel.screenshot(path=str(Path(where) / screenshot))
        text = await panel.inner_text()
        tests = await panel.locator("svg.plot polyline").evaluate_all(
            "(lines) => lines.map((l) => l.dataset.test)"
        )
        points = await panel.locator("svg.plot polyline").first.get_attribute("points") or ""
        await page.close()
        return text, tests, len(points.split())


async def _until(condition: Callable[[], bool], within: float = 20) -> None:
    async with asyncio.timeout(within):
        while not condition():
            await asyncio.sleep(0.05)


async def test_a_rigged_shufflers_panel_shows_its_alert(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    text, tests, points = await _show(mosquitto, tmp_path, "shelf:10", ALERT, 3,
                                      "shuffler-panel-rigged.png")  # fmt: skip
    assert "No integrity alert" not in text
    assert "p = " in text and "shuffles tested" in text
    assert "valleys" in tests and "rising sequences" in tests
    assert points >= 3
    assert "Count errors\t0" in text or "Count errors 0" in text.replace("\t", " ")


async def test_a_fair_shufflers_panel_shows_statistics_and_no_alert(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    text, tests, points = await _show(mosquitto, tmp_path, "fair", "shuffle_statistics", 30,
                                      "shuffler-panel-fair.png")  # fmt: skip
    assert "No integrity alert." in text
    assert "guessing score" in tests and points >= 25
    assert "Cards per shuffle\t52" in text or "Cards per shuffle 52" in text.replace("\t", " ")
