"""What the floor makes of one MQTT message: which table, what kind, its seq and flags, and the
verdict on its proof (docs/floor.md). Pure: no I/O; the keys the floor trusts are given.

Bad input is never dropped: a message that is oversized, not JSON, not a table's payload, from
a topic of no table or with a malformed chain entry is kept as ``rejected`` with the reason."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tableside.daemon import proof
from tableside.floor.store import Kind, Message, Verdict

__all__ = ["MAX_PAYLOAD", "ReplayRecord", "judge", "table_of"]

#: a payload larger than this is kept only as its first bytes, rejected (a table's largest, the
#: table state, is a few KiB)
MAX_PAYLOAD = 256 * 1024


class ReplayRecord(BaseModel):
    """``<prefix>/<table>/replay``: a journal record the table sent again (docs/floor.md; the
    table's side is daemon/payloads.py ``ReplayPayload``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    table: str
    replayed: Literal[True] = True
    seq: int = Field(ge=0)
    topic: str
    retain: bool
    ts: float
    prev: str = Field(pattern=r"^[0-9a-f]{64}$")
    hash: str = Field(pattern=r"^[0-9a-f]{64}$")
    payload: str


def _text(value: object) -> str | None:
    """A payload's ``ts`` as the store keeps it: text, at most 64 characters, no NUL."""
    return value[:64].replace("\x00", "") if isinstance(value, str) else None


def table_of(prefix: str, topic: str) -> tuple[str, str] | None:
    """(table, the rest) of ``<prefix>/<table>/<rest>``; None for a topic of no table."""
    head = f"{prefix}/"
    if not topic.startswith(head):
        return None
    table, sep, rest = topic[len(head) :].partition("/")
    if not table or not sep or not rest:
        return None
    return table, rest


def judge(
    prefix: str,
    topic: str,
    payload: bytes,
    retain: bool,
    properties: list[tuple[str, str]] | None,
    arrival: float,
    keys: Mapping[str, Ed25519PublicKey],
) -> Message:
    """The message as the floor keeps it, with its verdict."""
    where = table_of(prefix, topic)
    table, rest = where if where is not None else ("", "")

    def rejected(why: str, body: bytes = payload) -> Message:
        return Message(table, topic, "rejected", None, body, retain, arrival, "rejected", why)

    if where is None:
        return rejected(f"{topic!r} is not a table's topic (<{prefix}>/<table>/…)")
    if len(payload) > MAX_PAYLOAD:
        return rejected(
            f"{len(payload)} bytes, more than {MAX_PAYLOAD}: only the first kept",
            payload[:MAX_PAYLOAD],
        )
    if rest.startswith("command/"):  # a person's (or this floor's) request to the table
        why = "a request to the table, not the table's message"
        return Message(table, topic, "request", None, payload, retain, arrival, "unverifiable", why)
    if rest == "replay":
        return _replayed(prefix, table, topic, payload, retain, arrival, keys)
    try:
        body = json.loads(payload)
    except ValueError as exc:
        return rejected(f"not JSON: {exc}")
    if not isinstance(body, dict):
        return rejected("not a JSON object")
    seq = body.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        return rejected(f"no seq (a table's messages carry one): {str(seq)[:40]!r}")
    if body.get("table") != table:
        return rejected(f"says table {str(body.get('table'))[:40]!r} on table {table!r}'s topic")
    try:
        chain = proof.Chain.from_properties(properties)
    except ValueError as exc:
        return rejected(f"malformed chain entry: {exc}")

    def kept(kind: Kind, verdict: Verdict, reason: str, with_chain: bool = False) -> Message:
        entry = chain if with_chain else None
        return Message(
            table, topic, kind, seq, payload, retain, arrival, verdict, reason,
            republished=body.get("republished") is True,
            redelivered=body.get("redelivered") is True,
            will=body.get("will") is True,
            prev=entry.prev if entry else None,
            hash=entry.hash if entry else None,
            chain_ts=entry.ts if entry else None,
            ts=_text(body.get("ts")),
        )  # fmt: skip

    if rest.startswith("response/"):  # a copy of a command_result record, for its requester
        return kept("response", "unverifiable", "a copy of a command result (on command_result)")
    if body.get("will") is True:
        return kept("will", "unverifiable", "the last will: not a journal record")
    if chain is None:
        return kept("record", "unverifiable", "no chain entry (an MQTT 3.1.1 table?)")
    verdict, reason = _proof(table, rest, seq, topic, retain, payload, body, chain, keys)
    return kept("record", verdict, reason, with_chain=True)


def _proof(
    table: str,
    rest: str,
    seq: int,
    topic: str,
    retain: bool,
    payload: bytes,
    body: Mapping[str, Any] | None,
    chain: proof.Chain,
    keys: Mapping[str, Ed25519PublicKey],
) -> tuple[Verdict, str]:
    if not chain.holds(seq, topic, retain, payload):
        return "altered", f"seq {seq}: its chain-hash is not the hash of what arrived"
    if rest != "checkpoint":
        return "ok", ""
    if body is None:
        try:
            body = json.loads(proof.unmarked(payload))
        except ValueError:
            return "rejected", f"seq {seq}: a checkpoint that is not JSON"
        if not isinstance(body, dict):
            return "rejected", f"seq {seq}: a checkpoint that is not a JSON object"
    return _checkpoint(table, seq, body, keys)


def _checkpoint(
    table: str, seq: int, body: Mapping[str, Any], keys: Mapping[str, Ed25519PublicKey]
) -> tuple[Verdict, str]:
    try:
        upto, head = int(body["upto_seq"]), bytes.fromhex(body["head"])
        signature, key = bytes.fromhex(body["signature"]), str(body["key"])
    except (KeyError, TypeError, ValueError) as exc:
        return "rejected", f"seq {seq}: a checkpoint without a readable {exc}"
    trusted = keys.get(table)
    if trusted is None:
        return "not-enrolled", (
            f"seq {seq}: checkpoint signed by key {key}, but no key is enrolled for "
            f"table {table} (tableside floor enroll)"
        )
    if key != proof.public_key_hex(trusted):
        return "forged", f"seq {seq}: checkpoint names key {key[:16]}…, not the enrolled one"
    if not proof.verify_checkpoint(trusted, table, upto, head, signature):
        return "forged", f"seq {seq}: checkpoint signature fails against the enrolled key"
    return "ok", ""


def _replayed(
    prefix: str,
    table: str,
    topic: str,
    payload: bytes,
    retain: bool,
    arrival: float,
    keys: Mapping[str, Ed25519PublicKey],
) -> Message:
    def rejected(why: str) -> Message:
        return Message(table, topic, "rejected", None, payload, retain, arrival, "rejected", why)

    try:
        replay = ReplayRecord.model_validate_json(payload)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "payload"
        return rejected(f"not a replayed record: {where}: {first['msg']}")
    if replay.table != table:
        return rejected(f"a replay for table {replay.table!r} on table {table!r}'s topic")
    target = table_of(prefix, replay.topic)
    if target is None or target[0] != table or "\x00" in replay.topic:
        return rejected(f"a replayed record's topic {replay.topic!r} is not table {table}'s")
    rest = target[1]
    original = replay.payload.encode()
    chain = proof.Chain(bytes.fromhex(replay.prev), bytes.fromhex(replay.hash), replay.ts)
    body: dict[str, Any] | None = None
    ts = None
    try:
        loaded = json.loads(original)
        if isinstance(loaded, dict):
            body = loaded
            ts = _text(loaded.get("ts"))
    except ValueError:
        pass
    verdict, reason = _proof(
        table, rest, replay.seq, replay.topic, replay.retain, original, body, chain, keys
    )
    return Message(
        table,
        replay.topic,
        "record",
        replay.seq,
        original,
        replay.retain,
        arrival,
        verdict,
        reason,
        replayed=True,
        prev=chain.prev,
        hash=chain.hash,
        chain_ts=chain.ts,
        ts=ts,
    )
