"""What the floor makes of one MQTT message: which table, what kind, its seq and flags, and the
verdict on its proof (docs/floor.md). Pure: no I/O; the keys the floor trusts are given.

Bad input is never dropped: a message that is oversized, not JSON, not a table's payload, from
a topic of no table or with a malformed chain entry is kept as ``rejected`` with the reason.

Two things the table sends to a broker that limits it (docs/mqtt.md, "What each broker
allows") are judged by their chain entry: a withheld stand-in (``<prefix>/<table>/withheld``,
in place of a record larger than the broker's Maximum Packet Size) is a record of its seq with
the record's chain entry and no content to hash (verdict ``withheld``); and a record whose
chain entry says ``chain-retain: true`` was journaled retained and sent unretained, so its hash
is checked, and it is kept, as retained (and only then: the hash decides)."""

from __future__ import annotations

import json
from collections.abc import Mapping

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from pydantic import BaseModel

from tableside.floor.store import Kind, Message, Verdict
from tableside.wire import proof
from tableside.wire.payloads import (
    CheckpointPayload,
    Envelope,
    ReplayPayload,
    StatusPayload,
    WithheldPayload,
    model_of,
    parse_payload,
)
from tableside.wire.topics import Topic, TopicKind, parse_topic, table_named

__all__ = ["MAX_PAYLOAD", "judge", "withheld_words"]

#: a payload larger than this is kept only as its first bytes, rejected (a table's largest, the
#: table state, is a few KiB)
MAX_PAYLOAD = 256 * 1024


def withheld_words(body: WithheldPayload) -> str:
    """What a withheld stand-in says, in the words the floor shows and keeps."""
    return (f"seq {body.seq}: a {body.size}-byte record for {body.topic} withheld: larger than "
            f"the broker's limit {body.limit}; in the table's journal")  # fmt: skip


def _text(value: object) -> str | None:
    """A payload's ``ts`` as the store keeps it: text, at most 64 characters, no NUL."""
    return value[:64].replace("\x00", "") if isinstance(value, str) else None


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
    where = parse_topic(prefix, topic)
    table = where.table if where is not None else table_named(prefix, topic)

    def rejected(why: str, body: bytes = payload) -> Message:
        return Message(table, topic, "rejected", None, body, retain, arrival, "rejected", why)

    if where is None:
        return rejected(f"{topic!r} is not a table's topic (<{prefix}>/<table>/<kind>, "
                        "docs/mqtt.md)")  # fmt: skip
    if len(payload) > MAX_PAYLOAD:
        return rejected(
            f"{len(payload)} bytes, more than {MAX_PAYLOAD}: only the first kept",
            payload[:MAX_PAYLOAD],
        )
    if where.kind is TopicKind.COMMAND:  # a person's (or this floor's) request to the table
        why = "a request to the table, not the table's message"
        return Message(table, topic, "request", None, payload, retain, arrival, "unverifiable", why)
    if where.kind is TopicKind.REPLAY:
        return _replayed(prefix, table, topic, payload, retain, arrival, keys)
    try:
        body: Envelope | None = parse_payload(_envelope(where), payload)
        malformed = ""
    except ValueError as exc:
        body, malformed = None, str(exc)
    seq: int
    if body is not None:
        seq = body.seq
        if body.table != table:
            return rejected(f"says table {body.table[:40]!r} on table {table!r}'s topic")
    else:
        found = _seq(table, payload)
        if isinstance(found, str):
            return rejected(found)
        seq = found
    try:
        chain = proof.Chain.from_properties(properties)
        unretained = chain is not None and _retained_as(properties) and not retain
    except ValueError as exc:
        return rejected(f"malformed chain entry: {exc}")
    will = isinstance(body, StatusPayload) and body.will
    retain = retain or unretained  # as journaled: what its hash covers

    def kept(kind: Kind, verdict: Verdict, reason: str, with_chain: bool = False) -> Message:
        entry = chain if with_chain else None
        if malformed and verdict in ("ok", "unverifiable", "withheld"):
            verdict, reason = "malformed", f"seq {seq}: {malformed}"
        return Message(
            table, topic, kind, seq, payload, retain, arrival, verdict, reason,
            republished=body is not None and body.republished,
            redelivered=body is not None and body.redelivered,
            will=will,
            prev=entry.prev if entry else None,
            hash=entry.hash if entry else None,
            chain_ts=entry.ts if entry else None,
            ts=_text(body.ts) if body is not None else None,
            what=where.kind,
            unretained=unretained,
        )  # fmt: skip

    if where.kind is TopicKind.RESPONSE:  # a copy of a command_result record, for its requester
        return kept("response", "unverifiable", "a copy of a command result (on command_result)")
    if will:
        return kept("will", "unverifiable", "the last will: not a journal record")
    if chain is None:
        return kept("record", "unverifiable", "no chain entry (an MQTT 3.1.1 table?)")
    if where.kind is TopicKind.WITHHELD:
        return kept("record", *_stand_in(prefix, table, seq, body), with_chain=True)
    verdict, reason = _proof(table, where, seq, topic, retain, payload, body, chain, keys)
    return kept("record", verdict, reason, with_chain=True)


def _retained_as(properties: list[tuple[str, str]] | None) -> bool:
    """Whether a chain entry says its record was journaled retained (``chain-retain: true``,
    sent unretained to a broker that keeps none). ValueError for any other value."""
    values = [value for name, value in properties or () if name == proof.CHAIN_RETAIN]
    if not values:
        return False
    if values != ["true"]:
        raise ValueError(f"{proof.CHAIN_RETAIN} is {values[0][:16]!r}, not 'true' (once)")
    return True


def _stand_in(prefix: str, table: str, seq: int, body: Envelope | None) -> tuple[Verdict, str]:
    """A withheld stand-in's verdict: ``withheld`` (its chain entry is the record's, there is
    no content to hash), or ``malformed`` when it stands for no record of this table's."""
    if not isinstance(body, WithheldPayload):
        return "withheld", f"seq {seq}: a withheld stand-in"  # malformed: ``kept`` says why
    target = parse_topic(prefix, body.topic)
    if target is None or target.table != table or target.kind in (
        TopicKind.REPLAY, TopicKind.COMMAND, TopicKind.RESPONSE, TopicKind.WITHHELD
    ):  # fmt: skip
        return "malformed", (f"seq {seq}: a withheld stand-in for {body.topic[:80]!r}, not a "
                             f"topic of table {table}'s records")  # fmt: skip
    return "withheld", withheld_words(body)


def _envelope(where: Topic) -> type[Envelope]:
    model = model_of(where.kind)
    assert issubclass(model, Envelope)  # every kind but command and replay, handled before
    return model


def _seq(table: str, payload: bytes) -> int | str:
    """A payload its model refused: its seq, for the store to keep it under; or why it is
    not a table's message at all (the reason it is rejected)."""
    try:
        body = json.loads(payload)
    except ValueError as exc:
        return f"not JSON: {exc}"
    if not isinstance(body, dict):
        return "not a JSON object"
    seq = body.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        return f"no seq (a table's messages carry one): {str(seq)[:40]!r}"
    if body.get("table") != table:
        return f"says table {str(body.get('table'))[:40]!r} on table {table!r}'s topic"
    return seq


def _proof(
    table: str,
    where: Topic,
    seq: int,
    topic: str,
    retain: bool,
    payload: bytes,
    body: BaseModel | None,
    chain: proof.Chain,
    keys: Mapping[str, Ed25519PublicKey],
) -> tuple[Verdict, str]:
    if not chain.holds(seq, topic, retain, payload):
        return "altered", f"seq {seq}: its chain-hash is not the hash of what arrived"
    if where.kind is not TopicKind.CHECKPOINT:
        return "ok", ""
    if not isinstance(body, CheckpointPayload):
        try:
            body = parse_payload(CheckpointPayload, proof.unmarked(payload))
        except ValueError as exc:
            return "rejected", f"seq {seq}: a checkpoint that is {exc}"
    return _checkpoint(table, seq, body, keys)


def _checkpoint(
    table: str, seq: int, body: CheckpointPayload, keys: Mapping[str, Ed25519PublicKey]
) -> tuple[Verdict, str]:
    trusted = keys.get(table)
    if trusted is None:
        return "not-enrolled", (
            f"seq {seq}: checkpoint signed by key {body.key}, but no key is enrolled for "
            f"table {table} (tableside floor enroll)"
        )
    if body.key != proof.public_key_hex(trusted):
        return "forged", f"seq {seq}: checkpoint names key {body.key[:16]}…, not the enrolled one"
    head, signature = bytes.fromhex(body.head), bytes.fromhex(body.signature)
    if not proof.verify_checkpoint(trusted, table, body.upto_seq, head, signature):
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
        replay = parse_payload(ReplayPayload, payload)
    except ValueError as exc:
        return rejected(f"not a replayed record: {exc}")
    if replay.table != table:
        return rejected(f"a replay for table {replay.table!r} on table {table!r}'s topic")
    target = parse_topic(prefix, replay.topic)
    if target is None or target.table != table or "\x00" in replay.topic or target.kind in (
        TopicKind.REPLAY, TopicKind.COMMAND, TopicKind.RESPONSE
    ):  # fmt: skip
        return rejected(f"a replayed record's topic {replay.topic!r} is not table {table}'s")
    original = replay.payload.encode()
    chain = proof.Chain(bytes.fromhex(replay.prev), bytes.fromhex(replay.hash), replay.ts)
    body: Envelope | None = None
    malformed = ""
    try:
        body = parse_payload(_envelope(target), proof.unmarked(original))
    except ValueError as exc:
        malformed = f"seq {replay.seq}: {exc}"
    verdict, reason = _proof(
        table, target, replay.seq, replay.topic, replay.retain, original, body, chain, keys
    )
    if malformed and verdict == "ok":
        verdict, reason = "malformed", malformed
    return Message(
        table, replay.topic, "record", replay.seq, original, replay.retain, arrival, verdict,
        reason, replayed=True, prev=chain.prev, hash=chain.hash, chain_ts=chain.ts,
        ts=_text(body.ts) if body is not None else None, what=target.kind,
    )  # fmt: skip
