"""A real headless Chromium (Debian's ``chromium``, which ./dev.sh installs) driven by
Playwright; Playwright's own browser download is never used."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from playwright.async_api import Browser, async_playwright

__all__ = ["CHROMIUM", "chromium"]

CHROMIUM = os.environ.get("TABLESIDE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"


def _installed() -> bool:
    return os.path.exists(CHROMIUM)


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    if not _installed():
        raise RuntimeError(f"no Chromium at {CHROMIUM}: apt-get install chromium (./dev.sh does)")
    async with async_playwright() as playwright:
        # --no-sandbox: the tests may run as root (CI does), where Chromium's sandbox refuses
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
        )
        try:
            yield browser
        finally:
            await browser.close()
