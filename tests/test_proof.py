"""wire/proof.py: the chain entry and the flags a resend sets survive the wire exactly."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import pytest

from tableside.wire import proof
from tableside.wire.payloads import StatusPayload


def _payload() -> bytes:
    status = StatusPayload(
        table="t1", ts="2026-12-01T08:00:00.000Z", seq=7, status="online", version="0"
    )
    return status.model_dump_json().encode()


def test_marked_then_unmarked_is_the_journaled_payload() -> None:
    journaled = _payload()
    for flags in (
        {"redelivered": True},
        {"republished": True},
        {"redelivered": True, "republished": True},
    ):
        sent = proof.marked(journaled, **flags)
        assert sent != journaled
        assert proof.unmarked(sent) == journaled


def test_a_chain_entry_holds_only_for_its_own_message() -> None:
    journaled = _payload()
    digest = proof.record_hash(proof.GENESIS, 7, 1.5, "p/t1/status", True, journaled)
    chain = proof.Chain.from_properties(proof.Chain(proof.GENESIS, digest, 1.5).properties())
    assert chain is not None
    assert chain.holds(7, "p/t1/status", True, proof.marked(journaled, republished=True))
    assert not chain.holds(8, "p/t1/status", True, journaled)
    assert not chain.holds(7, "p/t1/status", True, journaled.replace(b"online", b"offline"))


def test_malformed_chain_properties_are_refused() -> None:
    assert proof.Chain.from_properties([("chain-prev", "00")]) is None
    with pytest.raises(ValueError, match="chain-hash"):
        proof.Chain.from_properties(
            [("chain-prev", "0" * 64), ("chain-hash", "xyz"), ("chain-ts", "1.0")]
        )


def test_a_checkpoint_verifies_only_with_its_key(tmp_path: Path) -> None:
    key = proof.load_or_create_key(tmp_path)
    assert (tmp_path / proof.KEY_FILE).stat().st_mode & 0o777 == 0o600
    assert proof.public_key_hex(proof.load_or_create_key(tmp_path)) == proof.public_key_hex(key)
    head = b"\x01" * 32
    signature = proof.sign_checkpoint(key, "t1", 41, head)
    public = proof.trusted_key(proof.public_key_hex(key))
    assert proof.verify_checkpoint(public, "t1", 41, head, signature)
    assert not proof.verify_checkpoint(public, "t1", 42, head, signature)
    assert not proof.verify_checkpoint(public, "t2", 41, head, signature)
    other = proof.trusted_key(proof.public_key_hex(proof.load_or_create_key(tmp_path / "x")))
    assert not proof.verify_checkpoint(other, "t1", 41, head, signature)
    with pytest.raises(ValueError, match="64 hex"):
        proof.trusted_key("not a key")


def test_a_table_with_an_unreadable_key_does_not_start(tmp_path: Path) -> None:
    """A key file that is no Ed25519 key stops the daemon before it goes online, saying what
    to do; it is never replaced by a new key silently (the floor trusts the old one)."""
    from tableside.daemon.app import KeyUnreadable, TableDaemon

    from .hil import make_config

    (tmp_path / "hil-1").mkdir()
    (tmp_path / "hil-1" / proof.KEY_FILE).write_text("not a key\n")
    config = make_config("mqtt://127.0.0.1:1", "socket://127.0.0.1:1", tmp_path)
    with pytest.raises(KeyUnreadable, match=r"cannot be read .* enrol the new one on the floor"):
        TableDaemon(config)
    assert (tmp_path / "hil-1" / proof.KEY_FILE).read_text() == "not a key\n"


def test_a_new_key_is_synced_with_its_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The key file is synced, and so is its directory (its name): a power cut before the
    directory reached the disk lost the file, and the next start made a key the floor never
    enrolled."""
    synced: list[bool] = []
    fsync = os.fsync

    def recording(fd: int) -> None:
        synced.append(stat.S_ISDIR(os.fstat(fd).st_mode))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", recording)
    proof.load_or_create_key(tmp_path / "t1")
    assert synced == [False, True]  # the file, then its directory


async def test_a_table_whose_key_went_missing_does_not_make_another(tmp_path: Path) -> None:
    """A journal holding records signed with a key that is no longer there: the daemon does
    not start, and makes no new key (the floor would never have enrolled it), saying how to
    recover."""
    from tableside.daemon.app import KeyUnreadable, TableDaemon

    from .hil import make_config, stop, until

    config = make_config("mqtt://127.0.0.1:1", "socket://127.0.0.1:1", tmp_path)
    first = TableDaemon(config)
    task = asyncio.create_task(first.run())
    await until(lambda: first.journal.next_seq > 0)
    await stop(task)
    (tmp_path / "hil-1" / proof.KEY_FILE).unlink()
    with pytest.raises(KeyUnreadable, match=r"is missing.* Put back .*tableside key --create"):
        TableDaemon(config)
    assert not (tmp_path / "hil-1" / proof.KEY_FILE).exists()


@pytest.mark.parametrize("pairs", [
    proof.Chain(proof.GENESIS, b"\x02" * 32, 1764590000.123456).properties(),
    [("k", "v")],
    [("ü" * 40, "x" * 300)],
])  # fmt: skip
def test_the_chain_properties_pack_as_paho_packs_them(pairs: list[tuple[str, str]]) -> None:
    """The publisher's PUBLISH (mqtt/codec.py) carries the chain entry's user properties byte
    for byte as paho would pack them, short and long (a 1- and 2-byte length)."""
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    from tableside.mqtt import codec

    reference = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
    reference.UserProperty = pairs
    packed: bytes = reference.pack()  # type: ignore[no-untyped-call]
    ours = codec.publish("t", b"payload", qos=1, packet_id=7, user_properties=pairs)
    assert ours.endswith(b"\x00\x01t\x00\x07" + packed + b"payload")
