"""``tableside floor gaps | enroll | verify | export`` on a store holding a real journal's
records: the export is the journal export's format line for line, and verify finds where the
store and the table's journal disagree."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tableside.cli import main
from tableside.daemon.journal import Journal, Record, export_records
from tableside.floor.judge import judge
from tableside.floor.store import Message, open_store
from tableside.wire import proof
from tableside.wire.payloads import DeviceEventPayload
from tests.floorpeer import PeerTable


async def _journal(path: Path, count: int) -> list[Record]:
    journal = Journal(path, "cs-01")
    journal.open()
    journal.start()

    def payload(seq: int) -> bytes:
        return DeviceEventPayload(
            table="cs-01", ts="2026-12-01T08:00:00.000Z", seq=seq, device="shoe",
            device_class="shoe", event="card_dealt", data={"n": seq},
        ).model_dump_json().encode()  # fmt: skip

    for _ in range(count):
        journal.append("tableside/cs-01/device/shoe/event", payload, retain=False, key=None)
    await journal.wait_durable(count - 1)
    records = await journal.read_from(0, count)
    journal.close()
    return records


def _live(record: Record, **flags: bool) -> Message:
    chain = proof.Chain(record.prev_hash, record.hash, record.ts)
    return judge("tableside", record.topic, proof.marked(record.payload, **flags), record.retain,
                 chain.properties(), 1.0, {})  # fmt: skip


@pytest.fixture
def journaled(tmp_path: Path) -> tuple[str, Path, list[Record]]:
    """A store holding records 0..19 of a real journal, except 7 (and 3 came redelivered)."""
    path = tmp_path / "journal.sqlite"
    url = f"sqlite:///{tmp_path}/floor.db"

    async def fill() -> list[Record]:
        records = await _journal(path, 20)
        async with open_store(url) as store:
            await store.write([_live(r, redelivered=r.seq == 3) for r in records if r.seq != 7])
        return records

    return url, path, asyncio.run(fill())


def test_export_is_the_journal_exports_format(
    journaled: tuple[str, Path, list[Record]], tmp_path: Path
) -> None:
    url, path, _ = journaled
    out = tmp_path / "floor.jsonl"
    assert main(["floor", "export", "--store", url, "--table", "cs-01", "--from", "2",
                 "--to", "9", "-o", str(out)]) == 0  # fmt: skip
    ours = [json.loads(line) for line in out.read_text().splitlines()]
    theirs = [r for r in export_records(path, 2, 9) if r["seq"] != 7]
    assert ours == json.loads(json.dumps(theirs))  # line for line, the redelivered 3 included
    assert [r["seq"] for r in ours] == [2, 3, 4, 5, 6, 8, 9]


def test_verify_against_the_journal_export(
    journaled: tuple[str, Path, list[Record]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, path, records = journaled
    export = tmp_path / "cs-01.jsonl"
    export.write_text("".join(json.dumps(r) + "\n" for r in export_records(path)))
    assert main(["floor", "verify", "--store", url, "--table", "cs-01",
                 "--journal-export", str(export)]) == 1  # fmt: skip
    out = capsys.readouterr().out
    assert "seq 7: in the table's journal, not in the store" in out
    assert "seq 7..7 missing" in out
    # the missing record stored (a replay): store and journal agree
    replay = PeerTable()
    replay.records = {r.seq: r for r in records}

    async def fill() -> None:
        async with open_store(url) as store:
            await store.write([replay.replayed(records[7])])

    asyncio.run(fill())
    assert main(["floor", "verify", "--store", url, "--table", "cs-01",
                 "--journal-export", str(export)]) == 0  # fmt: skip
    assert "cs-01: 20 records, chain verified up to 19" in capsys.readouterr().out
    # a journal whose record 11 says something else than what the floor received
    lines = export.read_text().splitlines()
    edited = json.loads(lines[11])
    edited["payload"]["data"]["n"] = 99
    lines[11] = json.dumps(edited)
    export.write_text("\n".join(lines) + "\n")
    assert main(["floor", "verify", "--store", url, "--table", "cs-01",
                 "--journal-export", str(export)]) == 1  # fmt: skip
    assert "seq 11: payload differs from the table's journal" in capsys.readouterr().out


def test_gaps_and_enroll(
    journaled: tuple[str, Path, list[Record]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, _, _ = journaled
    assert main(["floor", "gaps", "--store", url]) == 0
    out = capsys.readouterr().out
    assert "cs-01: highest seq 19, 19 records" in out
    assert "gaps: 7 (1 missing)" in out and "duplicates 0" in out and "no key enrolled" in out
    assert main(["floor", "gaps", "--store", url, "--table", "cs-99"]) == 1
    assert "no table 'cs-99'" in capsys.readouterr().err
    peer = PeerTable()
    pem = tmp_path / "cs-01.pub"
    pem.write_bytes(peer.public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ))  # fmt: skip
    assert main(["floor", "enroll", "--store", url, "--table", "cs-01", "--key", str(pem)]) == 0
    assert main(["floor", "gaps", "--store", url, "--table", "cs-01", "--json"]) == 0
    state = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert state["key"] == proof.public_key_hex(peer.key) and state["gaps"] == [[7, 7]]
    assert main(["floor", "enroll", "--store", url, "--table", "cs-01", "--key", "nope"]) == 2
    assert "64 hex digits or a PEM" in capsys.readouterr().err


def test_records_of_a_flagged_table_say_so_in_export_and_verify(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path}/floor.db"
    peer = PeerTable()
    keys = {"cs-01": peer.public}

    async def fill() -> None:
        async with open_store(url) as store:
            await store.enrol("cs-01", proof.public_key_hex(peer.key))
            await store.write([peer.judged(peer.event(), keys)])
            await store.write([
                peer.judged(peer.checkpoint(key=Ed25519PrivateKey.generate()), keys),
                peer.judged(peer.event(), keys), peer.judged(peer.event(), keys),
            ])  # fmt: skip

    asyncio.run(fill())
    out = tmp_path / "floor.jsonl"
    assert main(["floor", "export", "--store", url, "--table", "cs-01", "-o", str(out)]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert "flagged" not in lines[0]
    assert all("not the enrolled one" in line["flagged"] for line in lines[1:])
    assert main(["floor", "verify", "--store", url, "--table", "cs-01"]) == 1
    said = capsys.readouterr().out
    assert "3 record(s) stored while the table was flagged, seq 1..3: seq 1: checkpoint" in said
