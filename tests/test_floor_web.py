"""The floor in a browser (floor/web/): real headless Chromium against the real web server.

These tests feed the floor's web view the messages a table sends; tests/test_floor_web_e2e.py
runs a real daemon, simulator and broker behind it."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from playwright.async_api import Page, expect

from tableside.floor.judge import judge
from tableside.floor.store import Message
from tableside.floor.web.app import WebApp, serving
from tableside.floor.web.commander import Commander, Request
from tableside.floor.web.users import Users
from tableside.floor.web.view import FloorView
from tableside.rules.rows import RULES
from tests.browser import chromium

pytestmark = pytest.mark.slow

PASSWORD = "correct horse battery"


def _msg(table: str, seq: int, **body: Any) -> bytes:
    base = {"table": table, "ts": "2026-12-01T08:00:00.000Z", "seq": seq,
            "republished": False, "redelivered": False}  # fmt: skip
    return json.dumps(base | body).encode()


def _judged(topic: str, payload: bytes) -> Message:
    """A message as the floor judges it (the view is fed what the store vouches for: these
    tests stand in for the floor service, tests/test_floor_trust.py runs the real one)."""
    return judge("tableside", topic, payload, False, None, 0.0, {})


async def _feed(app: WebApp, topic: str, payload: bytes) -> None:
    await app.live.stored([_judged(topic, payload)])


#: a real row of the rules (any row will do: these tests are about the page, not the rules)
ROW = next(r for r in RULES if r.actions and r.affects == "all")
RULING = {
    "rule_id": ROW.id, "game": "caribbean_stud", "clause": ROW.citation, "words": ROW.words,
    "summary": ROW.summary, "actions": [str(a) for a in ROW.actions], "affected": ["all"],
    "event": {"device": "shuffler", "event": "shuffle_complete", "seq": 4, "data": {}},
    "round": 1,
}  # fmt: skip
ACTION = str(ROW.actions[0])


@dataclass
class Floor:
    app: WebApp
    url: str
    sent: list[tuple[str, str, str, dict[str, Any]]]


@pytest.fixture
async def floor(tmp_path: Path) -> AsyncIterator[Floor]:
    users = Users(tmp_path / "users.json")
    users.set("bob", "floorperson", PASSWORD)
    users.set("ann", "dealer", PASSWORD)
    sent: list[tuple[str, str, str, dict[str, Any]]] = []

    async def send(request: Request) -> None:
        sent.append((request.table, request.role, request.command, request.args))

    app = WebApp(FloorView(), users, Commander(send))
    app.commander.answer_within_s = 0.5
    async with serving(app, "127.0.0.1", 0) as url:
        yield Floor(app, url, sent)


async def _login(page: Page, url: str, user: str) -> None:
    await page.goto(url + "/login")
    await page.fill("#username", user)
    await page.fill("#password", PASSWORD)
    await page.click("button[type=submit]")
    await expect(page.locator("#live")).to_have_text("live")


async def _table_comes_up(app: WebApp, table: str) -> None:
    await _feed(app, f"tableside/{table}/status",
                _msg(table, 1, status="online", version="0.1.0"))  # fmt: skip
    await _feed(app, f"tableside/{table}/table", _msg(
        table, 2, game="caribbean_stud", phase="betting", round=1, rounds_since_stub_count=1,
        deck_age_h=0.1, meter_cents=123456, state={}, cause="start_round"))  # fmt: skip
    await _feed(app, f"tableside/{table}/device/shuffler/state", _msg(
        table, 3, device="shuffler", device_class="shuffler", driver="tableside.shuffler",
        connection="connected", since="2026-12-01T08:00:00.000Z", connects=1))  # fmt: skip


async def test_a_wrong_password_is_refused_and_no_page_without_a_login(floor: Floor) -> None:
    async with chromium() as browser:
        page = await browser.new_page()
        await page.goto(floor.url + "/")
        assert page.url.endswith("/login")
        await page.fill("#username", "bob")
        await page.fill("#password", "wrong password!")
        await page.click("button[type=submit]")
        await expect(page.locator(".error")).to_have_text("Wrong user name or password.")
    async with aiohttp.ClientSession() as http, http.get(floor.url + "/api/floor") as response:
        assert response.status == 401


async def test_a_table_appears_live_and_a_ruling_joins_the_queue(floor: Floor) -> None:
    async with chromium() as browser:
        page = await browser.new_page(viewport={"width": 1366, "height": 768})
        await _login(page, floor.url, "bob")
        await _table_comes_up(floor.app, "cs-01")
        tile = page.locator("article[data-table='cs-01']")
        await expect(tile).to_contain_text("caribbean_stud")
        await expect(tile).to_contain_text("$1234.56")
        await expect(tile).to_contain_text("connected")
        await expect(tile).to_contain_text("no open rulings")
        await page.click("a[href='/rulings']")
        given = time.monotonic()
        await _feed(floor.app, "tableside/cs-01/ruling", _msg("cs-01", 5, **RULING))
        row = page.locator("tr.ruling[data-ruling='cs-01-5']")
        await expect(row).to_contain_text(ROW.citation, timeout=1000)
        shown = time.monotonic() - given
        assert shown < 1.0, f"the ruling took {shown:.2f} s to show"
        await expect(row).to_contain_text(ACTION.replace("_", " "))
        await expect(page.locator("#ruling-count")).to_have_text("1")


async def test_a_dealer_is_not_offered_a_floorpersons_action_and_the_server_refuses_it(
    floor: Floor,
) -> None:
    await _table_comes_up(floor.app, "cs-01")
    await _feed(floor.app, "tableside/cs-01/ruling", _msg("cs-01", 5, **RULING))
    async with chromium() as browser:
        page = await browser.new_page()
        await _login(page, floor.url, "ann")
        await page.goto(floor.url + "/rulings")
        row = page.locator("tr.ruling[data-ruling='cs-01-5']")
        await expect(row).to_contain_text(ROW.citation)
        await expect(row.locator("button")).to_have_count(0)
        csrf = await page.locator("meta[name=csrf]").get_attribute("content")
        forced = await page.evaluate(
            """async (csrf) => {
                const r = await fetch('/api/table/cs-01/rulings/cs-01-5/resolve', {method: 'POST',
                  headers: {'Content-Type': 'application/json', 'X-CSRF-Token': csrf},
                  body: JSON.stringify({action: 'void_all_hands', note: 'x'})});
                return r.status;
            }""",
            csrf,
        )
        assert forced == 403
        no_token = await page.evaluate(
            """async () => (await fetch('/api/table/cs-01/rulings/cs-01-5/acknowledge',
                {method: 'POST', body: '{}'})).status"""
        )
        assert no_token == 403
    assert floor.sent == []


def test_passwords_are_stored_hashed(tmp_path: Path) -> None:
    users = Users(tmp_path / "users.json")
    users.set("bob", "floorperson", PASSWORD)
    text = (tmp_path / "users.json").read_text()
    assert PASSWORD not in text and "scrypt$" in text
    assert (tmp_path / "users.json").stat().st_mode & 0o777 == 0o600
    again = Users(tmp_path / "users.json")
    assert again.check("bob", PASSWORD) is not None
    assert again.check("bob", PASSWORD + "x") is None
    assert again.check("nobody", PASSWORD) is None
    with pytest.raises(ValueError, match="role"):
        users.set("cy", "croupier", PASSWORD)
    with pytest.raises(ValueError, match="shorter"):
        users.set("cy", "dealer", "short")


def test_the_view_keeps_a_rulings_lifecycle_from_the_table() -> None:
    view = FloorView()

    def take(topic: str, payload: bytes, now: float) -> str | None:
        return view.take(_judged(topic, payload), now=now)

    take("tableside/t1/ruling", _msg("t1", 9, **RULING, halts=True), now=0.0)
    assert [r.id for r in view.open_rulings()] == ["t1-9"]
    assert view.tile("t1", now=0.0)["halted"]
    state = {"ruling": 9, "rule_id": ROW.id, "clause": ROW.citation, "actions": RULING["actions"],
             "open_s": 1.0}  # fmt: skip
    escalated = _msg("t1", 10, **state, state="escalated", halts=True)
    take("tableside/t1/ruling_state", escalated, now=1.0)
    assert view.tile("t1", now=1.0)["escalated"] == 1
    ack = _msg("t1", 11, **state, state="acknowledged", halts=True, by="bob")
    take("tableside/t1/ruling_state", ack, now=2.0)
    assert (view.rulings["t1-9"].state, view.rulings["t1-9"].acknowledged_by) == (
        "acknowledged",
        "bob",
    )
    done = _msg(
        "t1", 12, **state, state="resolved", halts=False, by="bob", action=ACTION, note="ok"
    )
    take("tableside/t1/ruling_state", done, now=3.0)
    assert view.open_rulings() == []
    assert not view.tile("t1", now=3.0)["halted"]
    assert view.public(view.rulings["t1-9"], 3.0)["resolution"] == ACTION
    assert take("other/t1/ruling", b"{}", now=3.0) is None
    assert take("tableside/t1/ruling", b"not json", now=3.0) is None


async def _logged_in(http: aiohttp.ClientSession, url: str, user: str) -> str:
    """Log ``user`` in over plain HTTP; the session's CSRF token."""
    async with http.post(url + "/login", data={"username": user, "password": PASSWORD}):
        pass
    async with http.get(url + "/") as page:
        text = await page.text()
    return text.split('name="csrf" content="', 1)[1].split('"', 1)[0]


async def test_a_body_that_is_not_an_object_is_refused_with_400_never_500(floor: Floor) -> None:
    await _table_comes_up(floor.app, "cs-01")
    await _feed(floor.app, "tableside/cs-01/ruling", _msg("cs-01", 5, **RULING))
    deep = "[" * 30_000 + "]" * 30_000
    bodies = ["null", "[]", "5", '"resolve"', deep, "{not json", '{"action": %s, "note": 5}']
    jar = aiohttp.CookieJar(unsafe=True)  # the floor listens on an address, not a name
    async with aiohttp.ClientSession(headers={"Origin": floor.url}, cookie_jar=jar) as http:
        csrf = await _logged_in(http, floor.url, "bob")
        for body in bodies:
            body = body.replace("%s", json.dumps(ACTION))
            for verb in ("acknowledge", "resolve"):
                if verb == "acknowledge" and body.startswith('{"action'):
                    continue  # an object: acknowledging takes it, whatever it holds
                async with http.post(
                    f"{floor.url}/api/table/cs-01/rulings/cs-01-5/{verb}",
                    data=body, headers={"X-CSRF-Token": csrf},
                ) as answer:  # fmt: skip
                    assert answer.status == 400, (verb, body[:20], await answer.text())
    assert floor.sent == []


async def test_a_static_name_that_is_no_file_of_ours_is_not_found_never_500(
    floor: Floor,
) -> None:
    async with aiohttp.ClientSession() as http:
        for name in ("%00.js", "a%00b.css", "..%2Ffloor.js", "nothing.js", "x.js%0d%0a"):
            async with http.get(f"{floor.url}/static/{name}") as answer:
                assert answer.status == 404, (name, answer.status)
                assert "Traceback" not in await answer.text()


def test_a_downloads_name_can_neither_inject_nor_break_its_header() -> None:
    from tableside.floor.web.app import attachment

    assert attachment("cs-01.jsonl") == (
        "attachment; filename=\"cs-01.jsonl\"; filename*=UTF-8''cs-01.jsonl"
    )
    for hostile in ('cs"; filename="evil.exe', "cs\r\nSet-Cookie: a=b", "cs;x=y", "tisch-ü"):
        header = attachment(hostile + ".jsonl")
        assert "\r" not in header and "\n" not in header
        fallback = header.split('filename="', 1)[1].split('"', 1)[0]
        assert set(fallback) <= set(
            "abcdefghijklmnopqrstuvwxyz0123456789._-ABCDEFGHIJKLMNOPQRSTUVWXYZ"
        )
        assert header.count('"') == 2 and header.count(";") == 2


async def test_the_pages_requests_go_over_one_kept_connection_a_role(tmp_path: Path) -> None:
    """``MqttSender``: every click a PUBLISH on the role's one connection (the broker logs one
    connect for five requests), opened again after the broker went away, and a role the floor
    has no login for refused in words."""
    import asyncio

    import aiomqtt

    from tableside.floor.web.commander import MqttSender, RoleLogin
    from tests.conftest import Mosquitto

    def ask(table: str, role: str, args: dict[str, object], rid: str) -> Request:
        return Request(table, role, "acknowledge_ruling", args, rid, b"c")

    log = tmp_path / "broker.log"
    broker = Mosquitto(tmp_path, f"log_dest file {log}\nlog_type notice\n")
    broker.start()
    sender = MqttSender(broker.url, "tableside", {"floorperson": RoleLogin("fp")})
    try:
        async with aiomqtt.Client("127.0.0.1", broker.port) as watcher:
            await watcher.subscribe("tableside/+/command/#", qos=1)

            async def heard(n: int) -> list[dict[str, Any]]:
                got = []
                async with asyncio.timeout(10):
                    async for m in watcher.messages:
                        got.append(json.loads(bytes(m.payload)))
                        if len(got) == n:
                            return got
                raise AssertionError("unreachable")

            for i in range(5):
                await sender(ask("cs-01", "floorperson", {"ruling": i}, f"r{i}"))
            bodies = await heard(5)
            assert [b["request_id"] for b in bodies] == [f"r{i}" for i in range(5)]
            assert bodies[0] == {"command": "acknowledge_ruling", "device": "table",
                                 "args": {"ruling": 0}, "request_id": "r0"}  # fmt: skip
        connects = [line for line in log.read_text().splitlines() if " as fp-" in line]
        assert len(connects) == 1, connects
        broker.stop()
        broker.start()
        async with aiomqtt.Client("127.0.0.1", broker.port) as watcher:
            await watcher.subscribe("tableside/+/command/#", qos=1)
            await sender(ask("cs-01", "floorperson", {"ruling": 9}, "again"))
            assert [b["request_id"] for b in await heard(1)] == ["again"]
        with pytest.raises(PermissionError, match="no broker login for the role technician"):
            await sender(ask("cs-01", "technician", {"ruling": 1}, "t"))
    finally:
        await sender.aclose()
        broker.stop()
