"""Software identity (issue 31, docs/software.md): before any device opens, and at a
technician's ``verify_software``, the daemon holds the installed software to its release
manifest and journals the outcome (the retained ``software`` record); a mismatch is a ruling
that halts dealing until a check passes again. The real daemon, a simulated shuffler and a
real Mosquitto; the installed files are the checkout's own, held to a manifest written for
them with one file's hash changed, as a tampered file would show."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

from tableside.daemon.config import Config
from tableside.daemon.integrity import Manifest, manifest_from_install, write_manifest

from .conftest import Mosquitto
from .hil import Predicate, ask, live, ruling, simulated_table, simulator, until

CLAUSE = "AGCO Registrar's Standards 12.2.1"
TAMPERED = "tableside/rules/rows.py"


def _manifests(directory: Path) -> tuple[Path, Path]:
    """The manifest of the files as they are, and one that a changed rows.py differs from."""
    true = manifest_from_install()
    files = {**true.files, TAMPERED: "0" * 64}
    good, bad = directory / "good.json", directory / "bad.json"
    write_manifest(true, good)
    write_manifest(Manifest(version=true.version, distributions=true.distributions,
                            files=files), bad)  # fmt: skip
    return good, bad


def _held_to(manifest: Path) -> Callable[[Config], Config]:
    def adjust(config: Config) -> Config:
        table = config.table.model_copy(update={"software_manifest": manifest})
        return config.model_copy(update={"table": table})

    return adjust


def software(result: str) -> Predicate:
    """This start's software record (not the last start's, retained by the broker)."""
    return lambda m: m.kind == "software" and live(m) and m.payload["result"] == result


async def test_a_tampered_file_halts_dealing_until_verify_software_passes(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    port = mosquitto.port
    good, bad = _manifests(tmp_path)
    state = tmp_path / "state"
    async with simulated_table(mosquitto.url, state, simulator(interval=None),
                               adjust=_held_to(bad)) as table:  # fmt: skip
        sub, runtime = table.subscriber, table.daemon.runtime
        (record,) = await sub.wait_for(software("mismatch"))
        found = record.payload
        assert found["changed"] == [TAMPERED] and found["differ"] == 1
        assert found["manifest"] == str(bad) and found["checked_by"] == "start"
        assert found["version"] == "0.1.0"
        assert found["manifest_sha256"] == hashlib.sha256(bad.read_bytes()).hexdigest()
        (halt,) = await sub.wait_for(ruling(CLAUSE))
        assert halt.payload["actions"] == ["halt_dealing", "alert"] and halt.payload["halts"]
        assert halt.payload["event"]["event"] == "software"
        # journaled before any device opened: the shuffler's first event comes after
        (opened, *_) = await sub.wait_for(lambda m: m.kind == "event" and m.payload["device"]
                                          == "shuffler")  # fmt: skip
        assert found["seq"] < halt.payload["seq"] < opened.payload["seq"]
        assert (await ask(table, port, "floorperson", "open_table", "open"))["ok"]
        refused = await ask(table, port, "dealer", "start_round", "r1")
        assert not refused["ok"]
        assert (
            f"dealing is halted — ruling {halt.payload['seq']} is open ({CLAUSE}"
            in (refused["error"])
        ), refused["error"]

        # a technician's check: still tampered, on the record again; no second ruling
        by_dealer = await ask(table, port, "dealer", "verify_software", "v0")
        assert "may not give 'verify_software'" in by_dealer["error"]
        assert (await ask(table, port, "technician", "verify_software", "v1"))["ok"]
        again = await sub.wait_for(software("mismatch"), count=2)
        assert again[-1].payload["checked_by"] == "technician"
        assert len(sub.matching(ruling(CLAUSE))) == 1
        assert not (await ask(table, port, "dealer", "start_round", "r2"))["ok"]

        # the approved software back (here: the manifest it matches), verified: dealing goes on
        bad.write_bytes(good.read_bytes())
        assert (await ask(table, port, "technician", "verify_software", "v2"))["ok"]
        (passed,) = await sub.wait_for(software("ok"))
        assert passed.payload["differ"] == 0 and passed.payload["files"] > 80
        await until(lambda: not [r for r in runtime.state.rulings if r.halts])
        assert (await ask(table, port, "dealer", "start_round", "r3"))["ok"]
        # the ruling stays for a floorperson
        (held,) = [r for r in runtime.state.rulings if r.rule_id == "software.mismatch"]
        assert held.unresolved and held.halt_ended_at is not None


async def test_the_next_start_finds_the_tampered_file_and_without_a_manifest_it_is_unverified(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    good, bad = _manifests(tmp_path)
    state = tmp_path / "state"
    async with simulated_table(mosquitto.url, state, simulator(interval=None),
                               adjust=_held_to(good)) as table:  # fmt: skip
        (ok,) = await table.subscriber.wait_for(software("ok"))
        assert ok.payload["changed"] == [] and ok.payload["problem"] is None
    # between two starts a file changes (here: its approved hash differs)
    async with simulated_table(mosquitto.url, state, simulator(interval=None),
                               adjust=_held_to(bad)) as table:  # fmt: skip
        await table.subscriber.wait_for(software("mismatch"))
        await table.subscriber.wait_for(ruling(CLAUSE))
        await until(lambda: bool([r for r in table.daemon.runtime.state.rulings if r.halts]))
    # a configured manifest that is not there is a mismatch too
    async with simulated_table(mosquitto.url, state, simulator(interval=None),
                               adjust=_held_to(tmp_path / "gone.json")) as table:  # fmt: skip
        (gone,) = await table.subscriber.wait_for(software("mismatch"))
        assert "cannot read" in gone.payload["problem"] and gone.payload["manifest_sha256"] is None
        # the ruling of the last start still halts: no second one
        await until(lambda: bool([r for r in table.daemon.runtime.state.rulings if r.halts]))
        assert not table.subscriber.matching(ruling(CLAUSE))
    # no manifest configured, none installed (the venv the tests run in): unverified, no halt
    async with simulated_table(mosquitto.url, tmp_path / "other", simulator(interval=None)) as t:
        (unverified,) = await t.subscriber.wait_for(software("unverified"))
        assert unverified.payload["manifest"] is None
        assert "no manifest" in unverified.payload["problem"]
        assert not t.subscriber.matching(ruling(CLAUSE))
