"""Trusted time on the floor (issue 31): a table whose clock goes unsynchronised shows it on its
tile within a minute, and the tile clears once the clock is synchronised again. The real daemon
(its clock's discipline read through the lab's file, daemon/discipline.py), a real Mosquitto,
the real floor storing and verifying what the table sends, and real headless Chromium."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from playwright.async_api import expect

from tableside.daemon.discipline import DISCIPLINE_FILE_ENV

from .conftest import SYNCHRONISED, Mosquitto
from .floorweb import log_in, pit

UNSYNCHRONISED = {"synchronised": False, "esterror_us": 16_000_000, "maxerror_us": 16_000_000}


async def test_an_unsynchronised_clock_shows_on_the_tables_tile_within_a_minute(
    mosquitto: Mosquitto, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lab = tmp_path / "discipline.json"
    lab.write_text(SYNCHRONISED, encoding="utf-8")
    monkeypatch.setenv(DISCIPLINE_FILE_ENV, str(lab))
    async with pit(mosquitto.url, tmp_path) as (floor, table, page):
        await log_in(page, floor.url)
        tile = page.locator("article[data-table='hil-1']")
        await expect(tile).to_contain_text("online")
        clock = tile.locator("p.clock")
        await expect(clock).to_have_count(0)

        lab.write_text(json.dumps(UNSYNCHRONISED), encoding="utf-8")
        went_bad = time.monotonic()
        await expect(clock).to_contain_text("clock not synchronised", timeout=60_000)
        assert time.monotonic() - went_bad < 60
        (said,) = await table.subscriber.wait_for(
            lambda m: m.kind == "clock" and not m.payload["trusted"]
        )
        await expect(clock).to_have_attribute("data-seq", str(said.payload["seq"]))
        await expect(tile).to_contain_text("1 open ruling")  # the alert, in the queue
        page_text = page.locator("main")
        await page.goto(floor.url + "/table/hil-1")
        await expect(page_text.locator("p.clock")).to_contain_text("untrusted")

        lab.write_text(SYNCHRONISED, encoding="utf-8")
        await page.goto(floor.url + "/")
        await expect(tile).to_contain_text("online")
        await expect(clock).to_have_count(0, timeout=60_000)
        await expect(tile).to_contain_text("1 open ruling")  # for a floorperson to resolve
