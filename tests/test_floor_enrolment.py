"""Issue 31: a table's key enrolled and revoked on the record (who, when, which key, why), in
both stores, from ``tableside floor enroll|revoke`` and from the web view's supervisor; what a
revocation means for verification (docs/floor.md, "Enrolment and revocation")."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import time
from pathlib import Path

import pytest
from playwright.async_api import expect

from tableside.cli import main
from tableside.daemon.config import Config
from tableside.floor.store import Store, open_store
from tableside.floor.web import records as records_page
from tableside.wire import proof
from tests.browser import chromium
from tests.conftest import Mosquitto
from tests.floorpeer import PeerTable
from tests.floorweb import PASSWORD, floor_with_web, log_in
from tests.hil import simulated_table, simulator


async def test_enrolment_and_revocation_are_on_the_record(store: Store) -> None:
    peer = PeerTable()
    key = proof.public_key_hex(peer.key)
    before = time.time()
    done = await store.enrol("cs-01", key, by="sam", via="web", reason="new controller")
    assert await store.keys() == {"cs-01": key}
    with pytest.raises(ValueError, match="needs a reason"):
        await store.revoke("cs-01", key, by="sam", via="web", reason="  ")
    with pytest.raises(ValueError, match="not the one enrolled"):
        await store.revoke("cs-01", "ab" * 32, by="sam", via="web", reason="stolen")
    await store.revoke("cs-01", key, by="sam", via="web", reason="controller stolen")
    assert await store.keys() == {}
    with pytest.raises(ValueError, match="none is"):
        await store.revoke("cs-01", key, by="sam", via="web", reason="again")
    on_record = await store.enrolments("cs-01")
    assert [(e.action, e.key_hex, e.by, e.via, e.reason) for e in on_record] == [
        ("enrolled", key, "sam", "web", "new controller"),
        ("revoked", key, "sam", "web", "controller stolen"),
    ]
    assert before <= on_record[0].at == done.at <= on_record[1].at <= time.time()
    assert await store.enrolments("cs-02") == []
    assert await store.enrolments("cs-01", since=on_record[1].at) == on_record[1:]


def test_the_cli_records_its_login_and_a_revoked_key_vouches_only_for_what_came_before(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint the floor stored before the key was revoked stays verified; one stored
    after it is not vouched for (``floor verify``), though the same key signed both."""
    monkeypatch.delenv("SUDO_USER", raising=False)
    monkeypatch.setenv("LOGNAME", "olga")
    url = f"sqlite:///{tmp_path}/floor.db"
    peer = PeerTable()
    key = proof.public_key_hex(peer.key)
    assert main(["floor", "enroll", "--store", url, "--table", "cs-01", "--key", key,
                 "--reason", "installed"]) == 0  # fmt: skip
    assert "enrolled (by olga)" in capsys.readouterr().out
    trusted = {"cs-01": peer.public}

    async def before() -> None:
        async with open_store(url) as store:
            await store.write([peer.judged(peer.event(), trusted)])
            await store.write([peer.judged(peer.checkpoint(), trusted)])  # seq 1: ok

    asyncio.run(before())
    assert main(["floor", "verify", "--store", url, "--table", "cs-01"]) == 0
    with pytest.raises(SystemExit):  # a revocation says why
        main(["floor", "revoke", "--store", url, "--table", "cs-01", "--key", key])
    capsys.readouterr()
    assert main(["floor", "revoke", "--store", url, "--table", "cs-01", "--key", key,
                 "--reason", "key copied off the controller"]) == 0  # fmt: skip
    assert "revoked (by olga)" in capsys.readouterr().out

    async def after() -> list[tuple[str, str, str, str]]:
        async with open_store(url) as store:
            await store.write([peer.judged(peer.event(), {})])
            # the same key signs on; live, the floor trusts no key for the table now
            await store.write([peer.judged(peer.checkpoint(), {})])  # seq 3
            return [(e.action, e.by, e.via, e.reason) for e in await store.enrolments()]

    assert asyncio.run(after()) == [
        ("enrolled", "olga", "cli", "installed"),
        ("revoked", "olga", "cli", "key copied off the controller"),
    ]
    assert main(["floor", "verify", "--store", url, "--table", "cs-01"]) == 1
    said = capsys.readouterr().out
    assert "seq 3: checkpoint signed by key" in said and "no key is enrolled" in said
    assert "seq 1:" not in said, "stored before the revocation: still verified"
    assert "signed up to 0" in said
    assert main(["floor", "gaps", "--store", url, "--table", "cs-01", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["key"] is None


# -- in the browser: a supervisor enrols and revokes; the table's changes and their export -----


def _checkpointing(config: Config) -> Config:
    """The table signs a checkpoint every half second (the floor sees its key soon)."""
    proofs = config.proof.model_copy(update={"checkpoint_interval_s": 0.5})
    return config.model_copy(update={"proof": proofs})


async def test_a_supervisor_enrols_and_revokes_a_table_from_the_browser_and_its_changes_show(
    mosquitto: Mosquitto, tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real daemon's new table, not enrolled: the supervisor compares the fingerprint with
    what the table prints (``tableside key``: ``daemon.public_key``), types the group asked
    for, enrols it, then revokes it with a reason; both are on the record with who and why, on
    the key page and the table's changes page (with its config record and its devices'
    identities) and in both exports. A floorperson is offered neither and refused both;
    surveillance reads the changes."""
    async with (
        floor_with_web(mosquitto.url, tmp_path, store=store) as floor,
        simulated_table(mosquitto.url, tmp_path, simulator(interval=None),
                        adjust=_checkpointing) as table,
        chromium() as browser,
    ):  # fmt: skip
        for name, role in (("sam", "supervisor"), ("sue", "surveillance")):
            floor.web.users.set(name, role, PASSWORD)
        printed = table.daemon.public_key  # what `tableside key` prints on the table
        page = await browser.new_page(viewport={"width": 1366, "height": 768})
        await log_in(page, floor.url, "sam")
        await page.goto(f"{floor.url}/keys/hil-1")
        await expect(page.locator("#key-status")).to_have_text("not enrolled", timeout=20_000)
        groups = page.locator("#seen-fingerprint li")
        await expect(groups).to_have_count(16)
        assert "".join(await groups.all_text_contents()) == printed
        asked = int(await page.locator("#confirm-group").text_content() or "0")
        group = printed[(asked - 1) * 4 : asked * 4]
        wrong = "0000" if group != "0000" else "ffff"
        await page.fill("#enrol-group", wrong)
        await page.click("#enrol-button")
        await expect(page.locator("#answer")).to_contain_text(f"group {asked} is not what")
        assert await store.keys() == {}
        await page.fill("#enrol-group", group.upper())
        await page.fill("#enrol-reason", "compared with the controller's console")
        await page.click("#enrol-button")
        await expect(page.locator("#key-status")).to_have_text(
            "enrolled: " + " ".join(printed[i : i + 4] for i in range(0, 64, 4))
        )
        assert await store.keys() == {"hil-1": printed}
        await expect(page.locator("#enrol")).to_be_hidden()
        await page.fill("#revoke-reason", "controller sent for repair")
        await page.click("#revoke-button")
        await expect(page.locator("#key-status")).to_have_text("not enrolled")
        assert await store.keys() == {}
        record = page.locator("#record tr")
        await expect(record).to_have_count(2)
        newest, first = [await record.nth(i).text_content() or "" for i in (0, 1)]
        assert "revoked" in newest and "sam" in newest and "controller sent for repair" in newest
        assert "compared with the controller's console" in first

        # the table's changes: its config record, its devices' identities, the key's record
        await page.goto(f"{floor.url}/changes/hil-1")
        rows = page.locator("#rows tr")
        await expect(page.locator("#rows tr[data-kind=enrolment]")).to_have_count(2)
        await expect(page.locator("#rows tr[data-kind=config]")).to_have_count(1)
        await expect(page.locator("#rows tr[data-kind='device identity']")).not_to_have_count(0)
        assert await rows.count() >= 4
        today = time.strftime("%Y-%m-%d", time.gmtime())
        csv_answer = await page.request.get(
            f"{floor.url}/api/table/hil-1/changes/export?from={today}&to={today}&format=csv"
        )
        assert csv_answer.ok and "attachment" in csv_answer.headers["content-disposition"]
        lines = list(csv.DictReader(io.StringIO(await csv_answer.text())))
        kinds = [line["kind"] for line in lines]
        assert kinds.count("enrolment") == 2 and "config" in kinds and "device identity" in kinds
        revoked = next(line for line in lines if "revoked" in line["summary"])
        assert revoked["by"] == "sam" and json.loads(revoked["detail"])["reason"] == (
            "controller sent for repair"
        )
        config = next(line for line in lines if line["kind"] == "config")
        assert config["seq"] == "0" and "key(s) changed" in config["summary"]
        json_answer = await page.request.get(
            f"{floor.url}/api/table/hil-1/changes/export?from={today}&to={today}&format=json"
        )
        exported = json.loads(await json_answer.text())
        assert [c["kind"] for c in exported["changes"]] == kinds
        yesterday = time.strftime("%Y-%m-%d", time.gmtime(time.time() - 86400))
        none = await page.request.get(
            f"{floor.url}/api/table/hil-1/changes?from={yesterday}&to={yesterday}"
        )
        assert (await none.json())["changes"] == []
        bad = await page.request.get(f"{floor.url}/api/table/hil-1/changes?from=2026-13-01")
        assert bad.status == 400
        # a range holding more records than a page reads: refused, saying so, never cut short
        with monkeypatch.context() as patched:
            patched.setattr(records_page, "MAX_CHANGE_RECORDS", 2)
            for path in ("changes", "changes/export"):
                many = await page.request.get(
                    f"{floor.url}/api/table/hil-1/{path}?from={today}&to={today}&format=csv"
                )
                assert many.status == 400
                assert "more than 2 records that may be changes" in await many.text()

        # other roles: a floorperson is offered neither action and refused both; surveillance
        # reads the changes
        for name in ("bob", "sue"):
            other = await browser.new_page()
            await log_in(other, floor.url, name)
            await other.goto(f"{floor.url}/keys/hil-1")
            await expect(other.locator("#key-status")).to_have_text("not enrolled")
            await expect(other.locator("#enrol")).to_be_hidden()
            csrf = await other.locator("meta[name=csrf]").get_attribute("content") or ""
            forced = await other.request.post(
                f"{floor.url}/api/table/hil-1/key/enrol",
                data=json.dumps({"key": printed, "group": group}),
                headers={"Content-Type": "application/json", "X-CSRF-Token": csrf},
            )
            assert forced.status == 403, await forced.text()
            await other.goto(f"{floor.url}/changes/hil-1")
            await expect(other.locator("#rows tr[data-kind=enrolment]")).to_have_count(2)
        assert await store.keys() == {}
        no_token = await page.request.post(
            f"{floor.url}/api/table/hil-1/key/enrol",
            data=json.dumps({"key": printed, "group": group}),
            headers={"Content-Type": "application/json"},
        )
        assert no_token.status == 403, "the supervisor's request without its CSRF token"
