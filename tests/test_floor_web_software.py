"""The table's software on the floor (docs/software.md), in real headless Chromium: a real
daemon held to a release manifest, a real Mosquitto, the real floor and its store. The tile
shows the version and the manifest (short) and flags a manifest the floor has not approved;
approved (``tableside floor approve-software``, as keys are enrolled) the flag goes; a check
that fails on the table (``verify_software`` finding a file that differs) is flagged again."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

from playwright.async_api import expect

from tableside.cli import main

from .browser import chromium
from .conftest import Mosquitto
from .floorweb import floor_with_web, log_in
from .hil import ask, simulated_table, simulator
from .test_software import _held_to, _manifests, software


async def test_the_tile_shows_the_software_and_flags_an_unapproved_or_failed_one(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    good, bad = _manifests(tmp_path)
    held = tmp_path / "manifest.json"
    held.write_bytes(good.read_bytes())
    digest = hashlib.sha256(held.read_bytes()).hexdigest()
    async with (
        floor_with_web(mosquitto.url, tmp_path) as floor,
        simulated_table(mosquitto.url, tmp_path, simulator(interval=None),
                        adjust=_held_to(held)) as table,
        chromium() as browser,
    ):  # fmt: skip
        page = await browser.new_page(viewport={"width": 1366, "height": 768})
        await log_in(page, floor.url)
        line = page.locator("article[data-table='hil-1'] p.software")
        await expect(line).to_contain_text(f"tableside 0.1.0 · manifest {digest[:12]}")
        await expect(line).to_contain_text("MANIFEST NOT APPROVED")
        await expect(line).to_have_class("software bad")

        store = f"sqlite:///{tmp_path}/floor.db"
        approve = ["floor", "approve-software", "--store", store, "--manifest", digest,
                   "--note", "0.1.0 as released"]  # fmt: skip
        assert await asyncio.to_thread(main, approve) == 0
        # the tile is drawn again with the floor's next stored batch: the table's next check
        port = mosquitto.port
        assert (await ask(table, port, "technician", "verify_software", "v1"))["ok"]
        await expect(line).to_contain_text("· approved")
        await expect(line).to_have_class("software")

        # a file on the table differs from the manifest: the table's own check fails
        held.write_bytes(bad.read_bytes())
        assert (await ask(table, port, "technician", "verify_software", "v2"))["ok"]
        await table.subscriber.wait_for(software("mismatch"))
        await expect(line).to_contain_text("CHECK FAILED: 1 FILES DIFFER")
        tile = page.locator("article[data-table='hil-1']")
        await expect(tile).to_contain_text("dealing halted")
        await page.goto(floor.url + "/table/hil-1")
        await expect(page.locator("main p.software")).to_contain_text("CHECK FAILED")

        revoke = ["floor", "revoke-software", "--store", store, "--manifest", digest]
        assert await asyncio.to_thread(main, revoke) == 0
        assert await asyncio.to_thread(main, revoke) == 1
