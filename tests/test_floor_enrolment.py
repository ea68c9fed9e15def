"""Issue 31: a table's key enrolled and revoked on the record (who, when, which key, why), in
both stores, from ``tableside floor enroll|revoke`` and from the web view's supervisor; what a
revocation means for verification (docs/floor.md, "Enrolment and revocation")."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from tableside.cli import main
from tableside.daemon import proof
from tableside.floor.store import Store, open_store
from tests.floorpeer import PeerTable


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
