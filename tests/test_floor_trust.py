"""Issue 21: the floor believes only the tables. Each attack of the issue, reproduced against a
real Mosquitto, the real floor (floor/service.py storing into SQLite, its web view fed what the
store vouches for) and, where a person would see it, a floorperson in real headless Chromium:

1. a forged ``ruling_state`` does not hide a ruling that halts dealing;
2. one forged seq far ahead does not freeze the table (nor its acknowledge's answer);
3. no message blanks the page: NaN, a ``ts`` that is a number, ``actions`` that is 5 (and the
   rest of the batch is shown), across a restart of the floor too;
4. a forged ``command_result`` (another table's, chained; or on the asked table's topic, not
   chained) does not answer a floorperson's request: only the table asked does;
6. tables the floor never enrolled are capped and expire from the live view.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, NamedTuple

import aiomqtt
import pytest
from playwright.async_api import Browser, Page, expect

from tableside.floor.judge import judge
from tableside.floor.store import Store, open_store
from tableside.floor.web.app import WebApp
from tableside.rules.rows import RULES
from tableside.wire import proof
from tests.browser import chromium
from tests.conftest import Mosquitto
from tests.floorpeer import PeerTable
from tests.floorweb import FloorWeb, floor_with_web, log_in, pit
from tests.hil import SimulatedTable, ask

pytestmark = pytest.mark.slow

TS = "2026-12-01T08:00:00.000Z"
#: issue 21, attack 6: 3,000 forged tables
N_FORGED = 3000
ROW = next(r for r in RULES if r.actions and r.affects == "all")


def _ruling(**fields: Any) -> dict[str, Any]:
    return {
        "rule_id": ROW.id, "game": "caribbean_stud", "clause": ROW.citation, "words": ROW.words,
        "summary": ROW.summary, "actions": [str(a) for a in ROW.actions], "affected": ["all"],
        "event": {"device": "shuffler", "event": "shuffle_complete", "seq": 0, "data": {}},
        "round": 1, "halts": True,
    } | fields  # fmt: skip


async def until(condition: Callable[[], bool], within: float = 20) -> None:
    async with asyncio.timeout(within):
        while not condition():
            await asyncio.sleep(0.05)


def _refuse(name: str) -> object:
    raise AssertionError(f"{name} in the JSON the page received")


async def _page_json(page: Page, path: str) -> Any:
    """What the page's own fetch receives, parsed as strictly as a browser's JSON.parse."""
    text = await page.evaluate(f"fetch({path!r}).then((r) => r.text())")
    return json.loads(text, parse_constant=_refuse)


async def _forge(port: int, topic: str, body: dict[str, Any], retain: bool = False) -> None:
    """What anyone who may publish on the broker can send (no chain entry, nothing signed)."""
    async with aiomqtt.Client("127.0.0.1", port) as client:
        await client.publish(topic, json.dumps(body), qos=1, retain=retain)


async def _miscount(floor: FloorWeb, table: SimulatedTable, port: int, page: Page) -> int:
    """The table opened and its shuffler's miscount ruled on (remove the deck: dealing halted);
    the ruling's seq, once the page shows it in the queue."""
    await log_in(page, floor.url)
    assert (await ask(table, port, "floorperson", "open_table", "o"))["ok"]
    assert (await ask(table, port, "dealer", "start_shuffle", "s", device="shuffler"))["ok"]
    (ruling,) = await table.subscriber.wait_for(lambda m: m.kind == "ruling")
    await page.goto(floor.url + "/rulings")
    row = page.locator(f"tr.ruling[data-ruling='hil-1-{ruling.payload['seq']}']")
    await expect(row).to_contain_text(ruling.payload["clause"])
    return int(ruling.payload["seq"])


class Halted(NamedTuple):
    floor: FloorWeb
    table: SimulatedTable
    page: Page
    port: int
    seq: int


@pytest.fixture
async def halted(mosquitto: Mosquitto, tmp_path: Path) -> AsyncIterator[Halted]:
    """The pit, its table's remove-deck ruling in the queue (dealing halted)."""
    async with pit(mosquitto.url, tmp_path) as (floor, table, page):
        seq = await _miscount(floor, table, mosquitto.port, page)
        yield Halted(floor, table, page, mosquitto.port, seq)


async def test_a_forged_ruling_state_does_not_hide_a_ruling_that_halts_dealing(
    halted: Halted,
) -> None:
    floor, table, page, port, seq = halted
    resolved = {"ruling": seq, "state": "resolved", "by": "nobody", "action": "remove_deck",
                "halts": False}  # fmt: skip
    await _forge(port, "tableside/hil-1/ruling_state", resolved)  # issue 21's, as it was
    whole = {
        "table": "hil-1",
        "ts": TS,
        "seq": seq + 50,
        "republished": False,
        "redelivered": False,
        "rule_id": ROW.id,
        "clause": ROW.citation,
        "actions": ["remove_deck"],
        "open_s": 1.0,
    } | resolved  # a valid payload
    await _forge(port, "tableside/hil-1/ruling_state", whole)
    # the table goes on: a deal it refuses, dealing being halted, stored after the forgeries
    refused = await ask(table, port, "dealer", "deal_round", "d", device="shoe",
                        positions=[1, 2])  # fmt: skip
    assert not refused["ok"] and "halted" in refused["error"]
    tiles = floor.web.view.tables
    await until(lambda: "hil-1" in tiles and tiles["hil-1"].highest_seq >= refused["seq"])
    forged = [m for m in await floor.store.messages("hil-1", "tableside/hil-1/ruling_state")
              if b"nobody" in m.payload]  # fmt: skip
    assert len(forged) == 2  # both kept, as evidence
    await page.reload()
    row = page.locator(f"tr.ruling[data-ruling='hil-1-{seq}']")
    await expect(row.locator("td.state")).to_have_text("open")
    await page.goto(floor.url + "/")
    await expect(page.locator("article[data-table='hil-1']")).to_contain_text("dealing halted")
    await page.goto(floor.url + "/table/hil-1")
    await expect(page.locator("main")).to_contain_text("Last events")
    assert "nobody" not in await page.locator("main").inner_text()


async def test_one_forged_seq_far_ahead_does_not_freeze_the_table(halted: Halted) -> None:
    floor, _, page, port, seq = halted
    await _forge(port, "tableside/hil-1/status", {
        "table": "hil-1", "ts": TS, "seq": 999_999_999, "republished": False,
        "redelivered": False, "status": "online", "version": "0",
    })  # fmt: skip
    # a floorperson acknowledges: the table does it, and the page hears its answer
    row = page.locator(f"tr.ruling[data-ruling='hil-1-{seq}']")
    await row.locator("button.ack").click()
    await expect(row.locator("td.state")).to_contain_text("acknowledged by bob")
    status = page.locator(f"#ruling-{row_id(seq)}-status")
    await expect(status).to_have_text("acknowledged")
    await page.goto(floor.url + "/")
    tile = page.locator("article[data-table='hil-1']")
    await expect(tile).to_contain_text("complete")
    state = await floor.store.state("hil-1")
    assert state is not None and state.highest_seq is not None
    assert state.highest_seq < 999_999_999 and state.missing == 0
    (held,) = await floor.store.messages("hil-1", kind="rejected")
    assert held.seq == 999_999_999 and "links to nothing verified" in held.reason
    assert not [m for m in await floor.store.messages("hil-1", limit=1000)
                if m.kind == "rejected" and m.seq != 999_999_999]  # fmt: skip


async def test_only_the_table_asked_answers_a_floorpersons_request(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    asked, other = PeerTable(table="cs-02"), PeerTable(table="cs-03")
    answers_from: list[str] = []  # who answers the next request: "forgers" or "cs-02"

    async def answer(client: aiomqtt.Client, request: aiomqtt.Message) -> None:
        body = json.loads(bytes(request.payload))
        reply = {"role": "floorperson", "device": "table", "command": body["command"],
                 "request_id": body["request_id"], "ok": True}  # fmt: skip
        if answers_from.pop(0) == "cs-02":
            await asked.publish(client, asked.message("command_result", **reply))
            return
        # everyone who may publish can read the request id off the broker: the other table
        # (enrolled, its own chain), and a raw copy on the asked table's topic (no chain)
        await other.publish(client, other.message("command_result", **reply))
        await _forge(mosquitto.port, "tableside/cs-02/command_result", {
            "table": "cs-02", "ts": TS, "seq": asked.next_seq(), "republished": False,
            "redelivered": False} | reply)  # fmt: skip

    async def tables(client: aiomqtt.Client) -> None:
        await client.subscribe("tableside/cs-02/command/#")
        async for request in client.messages:
            await answer(client, request)

    async with _beside(mosquitto, tmp_path) as (store, browser, client):
        for peer in (asked, other):
            await store.enrol(peer.table, proof.public_key_hex(peer.key))
        async with floor_with_web(mosquitto.url, tmp_path, store=store) as floor:
            floor.web.commander.answer_within_s = 4.0  # (a loaded machine's floor stores slower)
            for peer in (asked, other):
                await peer.publish(client, peer.message("status", status="online", version="0"))
            ruling = asked.message("ruling", **_ruling())
            await asked.publish(client, ruling)
            responder = asyncio.create_task(tables(client))
            try:
                page = await browser.new_page()
                await log_in(page, floor.url)
                await page.goto(floor.url + "/rulings")
                row = page.locator(f"tr.ruling[data-ruling='cs-02-{ruling.seq}']")
                status = page.locator(f"#ruling-cs-02-{ruling.seq}-status")
                answers_from.append("forgers")
                await row.locator("button.ack").click()
                await expect(status).to_have_text(
                    "refused: no answer from table cs-02 in 4 s", timeout=15_000
                )
                forged = await store.messages("cs-03", "tableside/cs-03/command_result")
                assert len(forged) == 1 and forged[0].verdict == "ok"  # stored, and the other's
                answers_from.append("cs-02")  # the control: the table asked answers at last
                await row.locator("button.ack").click()
                await expect(status).to_have_text("acknowledged", timeout=15_000)
                await page.close()
            finally:
                responder.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await responder


def row_id(seq: int) -> str:
    return f"hil-1-{seq}"


@contextlib.asynccontextmanager
async def _beside(
    mosquitto: Mosquitto, tmp_path: Path
) -> AsyncIterator[tuple[Store, Browser, aiomqtt.Client]]:
    """A store that outlives a floor, a browser, and a client for the tables to publish with."""
    async with (
        open_store(f"sqlite:///{tmp_path}/floor.db") as store,
        chromium() as browser,
        aiomqtt.Client("127.0.0.1", mosquitto.port, protocol=aiomqtt.ProtocolVersion.V5)
        as client,
    ):  # fmt: skip
        yield store, browser, client


async def test_no_message_blanks_the_page_or_drops_another_across_a_restart(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    peers = [PeerTable(table=f"cs-{i:02}") for i in range(11)]
    nan = json.dumps({"table": "cs-00", "ts": TS, "seq": 1, "republished": False,
                      "redelivered": False} | _ruling(round=float("nan"))).encode()  # fmt: skip
    async with _beside(mosquitto, tmp_path) as (store, browser, client):
        async with floor_with_web(mosquitto.url, tmp_path, store=store) as floor:
            page = await browser.new_page(viewport={"width": 1366, "height": 768})
            await log_in(page, floor.url)
            for p in peers:
                await p.publish(client, p.message("status", retain=True, status="online",
                                                  version="0"))  # fmt: skip
            bad, ts_number, actions_five = peers[0], peers[1], peers[2]
            # each chained, as an impostor that computes hashes (or a table with a defect) sends
            await bad.publish(client, bad.message("ruling", retain=True, raw=nan))
            await ts_number.publish(client, ts_number.message(
                "status", retain=True, ts=1764590000, status="online", version="0"))  # fmt: skip
            await actions_five.publish(client, actions_five.message("ruling", **_ruling(actions=5)))
            for p in peers[3:]:
                await p.publish(client, p.message("ruling", **_ruling()))
            await _the_page_holds(page, floor.web, 8, [p.table for p in peers])
            malformed = [m for p in peers[:3] for m in await store.records(p.table, 1, 1)]
            assert [m.verdict for m in malformed] == ["malformed"] * 3
            assert "round" in malformed[0].reason and "ts" in malformed[1].reason
            await page.close()  # (its event stream open, the server would wait for it)
        # `floor run` again: the broker sends the retained states again, the NaN ruling among
        # them; cs-01's retained status is the one whose ts is a number: shown to nobody
        async with floor_with_web(mosquitto.url, tmp_path, store=store, client_id="again") as floor:
            page = await browser.new_page(viewport={"width": 1366, "height": 768})
            await log_in(page, floor.url)
            await _the_page_holds(
                page, floor.web, 0, [p.table for p in peers if p.table != "cs-01"]
            )
            await page.close()


async def _the_page_holds(page: Page, web: WebApp, rulings: int, tables: list[str]) -> None:
    """These tables' tiles on the map, the queue as it should be, valid JSON throughout."""
    await until(lambda: len(web.view.open_rulings()) == rulings and sorted(web.view.tables)
                == tables)  # fmt: skip
    await page.goto(page.url.split("/", 3)[0] + "//" + page.url.split("/", 3)[2] + "/")
    await expect(page.locator("article.tile")).to_have_count(len(tables))
    await expect(page.locator("#ruling-count")).to_have_text(str(rulings))
    floor = await _page_json(page, "/api/floor")
    assert [t["table"] for t in floor["tables"]] == tables and len(floor["rulings"]) == rulings
    for table in ("cs-00", "cs-02"):
        assert (await _page_json(page, f"/api/table/{table}"))["tile"]["table"] == table


async def test_tables_never_enrolled_are_capped_and_expire_from_the_live_view(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    real = PeerTable(table="cs-01")
    async with _beside(mosquitto, tmp_path) as (store, browser, client):
        await store.enrol("cs-01", proof.public_key_hex(real.key))
        async with floor_with_web(mosquitto.url, tmp_path, store=store) as floor:
            forged = [PeerTable(table=f"forged-{i:04}") for i in range(N_FORGED)]
            await real.publish(client, real.message("status", status="online", version="0"))
            for p in forged:  # each a valid, chained first record: the worst case
                await p.publish(client, p.message("status", status="online", version="0"))
            async with asyncio.timeout(120):
                while len(await store.tables()) < N_FORGED + 1:
                    await asyncio.sleep(0.2)
            await until(lambda: floor.web.view.tables.get(f"forged-{N_FORGED - 1:04}") is not None)
            page = await browser.new_page()
            await log_in(page, floor.url)
            snapshot = await page.evaluate("fetch('/api/floor').then((r) => r.text())")
            shown = [t["table"] for t in json.loads(snapshot)["tables"]]
            assert "cs-01" in shown and len(shown) == 65  # view.py's MAX_UNENROLLED, and cs-01
            assert len(snapshot.encode()) < 64 * 1024, len(snapshot)
            assert all(t["unverified"] for t in json.loads(snapshot)["tables"]
                       if t["table"] != "cs-01")  # fmt: skip
            later = time.time() + 3600  # an hour on: past view.py's UNENROLLED_IDLE_S
            floor.web.clock = lambda: later
            after = await _page_json(page, "/api/floor")
            assert [t["table"] for t in after["tables"]] == ["cs-01"]
            assert len(await store.tables()) == N_FORGED + 1  # they stay in the store
            await page.close()


async def test_one_bad_message_never_costs_another_of_its_batch(tmp_path: Path) -> None:
    """``Live.stored`` takes each message on its own: one the view cannot take (whatever
    got past the judge) is logged and skipped, and the rest of the batch is shown."""
    from tableside.floor.web.commander import Commander
    from tableside.floor.web.users import Users
    from tableside.floor.web.view import FloorView

    async def send(*_: object) -> None:
        return None

    web = WebApp(FloorView(), Users(tmp_path / "users.json"), Commander(send))
    messages = []
    for i in range(11):
        actions = 5 if i == 0 else [str(ROW.actions[0])]
        body = {"table": f"t{i}", "ts": TS, "seq": 0, "republished": False,
                "redelivered": False} | _ruling(actions=actions)  # fmt: skip
        payload = json.dumps(body).encode()
        messages.append(judge("tableside", f"tableside/t{i}/ruling", payload, False, None, 0.0, {}))
    await web.live.stored(messages)
    assert sorted(r.table for r in web.view.open_rulings()) == sorted(f"t{i}" for i in range(1, 11))
