"""Checking a table's stored chain (pure: records in, findings out).

``walk`` goes through a table's records in seq order from where it last stopped: each record's
``chain-prev`` must be the hash of the record before it (so a record altered, inserted or
dropped between two stored ones is found from either side, whichever arrived last), and a
checkpoint's signed head must be the stored hash of the record it names. The floor walks after
every batch it stores, as far as the records are contiguous; ``tableside floor verify`` walks
the whole store across its gaps, and compares it with the table's own ``journal export``.

A record stored under its seq is a claim until the walk links it. The floor's walk stops at one
that does not link (``contested``: no chain entry, or a chain-prev that is not the hash of the
record before it) and settles it (floor/service.py ``Floor.walk``): the seq goes to the
conflict kept for it that the chain vouches for (``vouched``), if one is stored; otherwise the
walk waits there for the table's own record of that seq, as at a gap (``waits``), or, when
nothing of the table's is to come, passes it as a break.

A withheld stand-in (a record larger than the broker's limit: its seq and chain entry, not its
content) has a chain-hash nothing can recompute, so it is a link only when it links at both
ends: its chain-prev is the hash of the record before it, and the record after it has its
chain-hash for chain-prev. The walk stops before one until the record after it is stored, and
one the record after it does not link to is contested as one that does not link.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from tableside.floor.judge import _proof, judge
from tableside.floor.store import (
    FAILED,
    UNTRUSTED,
    Enrolment,
    Message,
    Progress,
    Verdict,
    stands_in,
)
from tableside.wire import proof
from tableside.wire.payloads import WithheldPayload, parse_payload
from tableside.wire.topics import TopicKind, parse_topic

__all__ = [
    "Finding",
    "KeyHistory",
    "against_export",
    "export_line",
    "recheck",
    "vouched",
    "waits",
    "walk",
]


@dataclass(frozen=True, slots=True)
class Finding:
    seq: int
    what: str
    #: the verdict the record now gets (None: it keeps its own)
    verdict: Verdict | None = None

    def __str__(self) -> str:
        return f"seq {self.seq}: {self.what}"


def _checkpoint_head(record: Message) -> tuple[int, bytes] | None:
    try:
        body = json.loads(proof.unmarked(record.payload))
        return int(body["upto_seq"]), bytes.fromhex(body["head"])
    except (ValueError, KeyError, TypeError):
        return None


#: what leaves a record out of the chain that is verified (a checkpoint not trusted is no break
#: in the chain, and a malformed payload whose chain entry holds is still a link of it)
_BREAKS = FAILED - UNTRUSTED - {"malformed"}


def walk(
    progress: Progress,
    records: Iterable[Message],
    start: int = 0,
    *,
    across_gaps: bool = False,
    linked: list[Message] | None = None,
    contested: list[int] | None = None,
    passes: Collection[int] = (),
    standing: list[int] | None = None,
) -> tuple[Progress, list[Finding]]:
    """Progress after these records (seq order, from ``progress.contiguous_upto + 1``; the
    chain starts at ``start``: seq 0, a table's first, or the first its journal still has). Without
    ``across_gaps`` it stops at the first missing seq; with it, a gap is a finding and the
    link across it is not checked. ``linked`` gets each record walked whose ``chain-prev`` is
    the stored hash of the record before it and whose own verdict is ``ok``: what the web view
    shows (a record after a break links again from the next one on). With ``contested``, it
    stops before a record that does not link to a record before it that has a hash (it carries
    no chain entry, or its chain-prev is another) and puts its seq there, for the caller to
    settle, unless the seq is in ``passes`` (settled as a break).

    A withheld stand-in is walked only with the record after it: it stops before one that is
    the last of ``records`` (its seq put in ``standing``); one the record after it does not
    link to is ``contested`` too (or, passed, a finding that leaves the chain unverified from
    there); with ``across_gaps``, one with a gap after it leaves the chain unverified."""
    p, found = progress, []
    expected = p.contiguous_upto + 1 if p.contiguous_upto is not None else start
    before = p.contiguous_hash if p.contiguous_upto is not None else None
    rs = records if isinstance(records, list) else list(records)
    for i, r in enumerate(rs):
        if r.seq is None or r.seq < expected:
            continue
        broken = p.broken
        if r.seq != expected:
            if not across_gaps:
                break
            found.append(Finding(expected, f"seq {expected}..{r.seq - 1} missing"))
            before, broken = None, True
        if r.seq == 0:  # a table's first record chains from nothing
            before = proof.GENESIS
        if (
            contested is not None
            and before is not None
            and (r.hash is None or r.prev != before)
            and r.seq not in passes
        ):
            contested.append(r.seq)
            break
        held = stands_in(r) and r.hash is not None  # linked only at both ends
        if held:
            after = rs[i + 1] if i + 1 < len(rs) else None
            if after is None or (after.seq != r.seq + 1 and not across_gaps):
                if standing is not None:
                    standing.append(r.seq)
                break  # the record after it is not here yet: nothing vouches for it
            if after.seq != r.seq + 1:
                broken, held = True, False  # a gap after it (a finding of its own)
            elif after.prev != r.hash:
                if contested is not None and r.seq not in passes:
                    contested.append(r.seq)
                    break
                found.append(
                    Finding(
                        r.seq,
                        f"a withheld stand-in seq {r.seq + 1} does not "
                        "link to (its chain-hash is not that record's chain-prev)",
                    )
                )
                broken, held = True, False
        if r.hash is None:
            if before is not None:  # a chained table's record without its chain entry
                found.append(Finding(r.seq, "carries no chain entry: the chain stops here"))
            broken = True
        elif before is not None and r.prev != before:
            found.append(Finding(
                r.seq, f"chain break: its chain-prev is not the stored hash of seq {r.seq - 1} "
                "(a record altered, inserted or dropped between them)", "break",
            ))  # fmt: skip
            broken = True
        if r.verdict in _BREAKS:
            broken = True
        elif (
            linked is not None
            and (r.verdict == "ok" or (held and r.verdict == "withheld"))
            and r.hash is not None
            and (before is not None and r.prev == before)
        ):
            linked.append(r)
        signed = p.signed_upto
        if r.what is TopicKind.CHECKPOINT and r.verdict == "ok":
            head = _checkpoint_head(r)
            if head is None or head[0] != r.seq - 1:
                found.append(Finding(r.seq, "a checkpoint that does not name the record before "
                                     "it"))  # fmt: skip
                broken = True
            elif before is not None and head[1] != before:
                found.append(Finding(
                    r.seq, f"checkpoint's signed head is not the stored hash of seq {head[0]}",
                    "break",
                ))  # fmt: skip
                broken = True
            elif not broken:
                signed = head[0]
        p = Progress(
            contiguous_upto=r.seq,
            contiguous_hash=r.hash,
            verified_upto=p.verified_upto if broken else r.seq,
            signed_upto=signed,
            broken=broken,
        )
        before, expected = r.hash, r.seq + 1
    return p, found


def vouched(
    prefix: str,
    before: bytes,
    claims: Iterable[Message],
    keys: Mapping[str, Ed25519PublicKey],
    *,
    after: bytes | None = None,
) -> Message | None:
    """The first of a seq's claims (``Store.claims``, oldest first) that the chain vouches for:
    its chain-prev is ``before``, the hash of the record before it, and its chain-hash is the
    hash of what it carried; a withheld stand-in (no content to hash) only when its chain-hash
    is ``after``, the chain-prev of the record after it. One that the record after it links to
    comes first. It comes back as the record for its seq, its verdict worked out again (its
    payload against its model, a checkpoint's signature against ``keys``). None: none is."""
    for c in sorted(claims, key=lambda c: after is None or c.hash != after):
        if c.hash is None or c.prev != before or c.chain_ts is None or c.seq is None:
            continue
        if stands_in(c) and c.hash != after:
            continue
        entry = proof.Chain(c.prev, c.hash, c.chain_ts)
        again = judge(prefix, c.topic, c.payload, c.retain, entry.properties(), c.arrival, keys)
        if again.kind != "record" or again.seq != c.seq or again.verdict in ("altered", "rejected"):
            continue
        return replace(c, kind="record", verdict=again.verdict, reason=again.reason)
    return None


def waits(
    occupant: Message,
    previous: Message | None,
    rivals: Iterable[Message],
    *,
    start: int,
    told: bool,
) -> bool:
    """Whether the walk waits at a record it could not link (``walk``'s ``contested``, with no
    claim ``vouched`` for) for the table's own record of that seq, as at a gap, rather than
    pass it as a break. ``previous`` is the record before it, ``rivals`` the conflicts kept for
    that seq before, ``start`` the first seq the table's journal still has, ``told`` whether
    the table answered a replay request for this seq (and its answer did not take it).

    It waits unless the table's own record cannot come or has come: its journal no longer has
    that seq; it answered for it; the record has no chain entry and the one before it came by
    replay or without one (a table that sends none, MQTT 3.1.1: only a table whose own
    messages carry chain entries is waited for); or the record links to a rival of the seq
    before it that links where the stored one does (two records of that seq link to the one
    before, the first came first: linking is not signing, and the break is real)."""
    seq = occupant.seq
    if seq is None or seq < start or told:
        return False
    if occupant.hash is None:
        return previous is not None and previous.hash is not None and not previous.replayed
    if previous is None:
        return True
    return not any(r.hash == occupant.prev and r.prev == previous.prev for r in rivals)


@dataclass(frozen=True, slots=True)
class KeyHistory:
    """Which key the floor trusted for a table's checkpoint, by when the floor stored it (its
    arrival, the floor's own clock: a table's word on its time is no proof), from the
    enrolments and revocations on the record (``Store.enrolments``).

    The key of the newest enrolment or revocation at or before the arrival: an enrolment's key,
    nothing after a revocation (a key revoked, even enrolled again later, vouches for nothing
    stored between the two). Before the first of them, its key: a checkpoint stored before its
    table's key was enrolled verifies once it is, and the key a revocation revoked was trusted
    until then. A table with none on the record (enrolled before they were kept) has the key
    enrolled now, for all time."""

    events: Mapping[str, list[Enrolment]]
    now: Mapping[str, Ed25519PublicKey]

    def key_at(self, table: str, arrival: float) -> Ed25519PublicKey | None:
        events = self.events.get(table)
        if not events:
            return self.now.get(table)
        before = [e for e in events if e.at <= arrival]
        chosen = before[-1] if before else events[0]
        if before and chosen.action == "revoked":
            return None
        try:
            return proof.trusted_key(chosen.key_hex)
        except ValueError:
            return None

    def keys_at(self, table: str, arrival: float) -> dict[str, Ed25519PublicKey]:
        key = self.key_at(table, arrival)
        return {} if key is None else {table: key}


def recheck(
    prefix: str,
    records: Iterable[Message],
    keys: Mapping[str, Ed25519PublicKey],
    history: KeyHistory | None = None,
) -> Iterator[Message]:
    """Each record with its verdict worked out again from what is stored (against the keys
    enrolled now: a checkpoint stored before its table's key was enrolled verifies now; with
    ``history``, against the key trusted when it was stored: one stored after its key was
    revoked is not vouched for, one stored before stays verified)."""
    for r in records:
        if r.hash is None or r.prev is None or r.chain_ts is None or r.seq is None or stands_in(r):
            yield r  # (a stand-in has no content to hash: its verdict stays)
            continue
        where = parse_topic(prefix, r.topic)
        if where is None:
            yield r
            continue
        chain = proof.Chain(r.prev, r.hash, r.chain_ts)
        trusted = keys if history is None else history.keys_at(r.table, r.arrival)
        verdict, reason = _proof(r.table, where, r.seq, r.topic, r.retain, r.payload, None, chain,
                                 trusted)  # fmt: skip
        if r.verdict in ("break", "conflict", "malformed") and verdict == "ok":
            yield r  # a finding of the walk, or of the payload, not of the chain entry alone
        else:
            yield replace(r, verdict=verdict, reason=reason)


def export_line(r: Message) -> dict[str, object]:
    """A stored record as ``tableside journal export`` writes one (daemon/journal/
    ``export_records``): the payload as journaled (flags a resend set, cleared). A withheld
    stand-in has no payload (``null``): its topic and retain flag are the record's, as it says,
    and ``withheld`` says why (``size``, ``limit``, ``reason``)."""
    if stands_in(r):
        return _stand_in_line(r)
    raw = proof.unmarked(r.payload)
    try:
        body: object = json.loads(raw)
    except ValueError:
        body = {"raw_hex": raw.hex()}
    return {
        "seq": r.seq,
        "journal_ts": r.chain_ts,
        "topic": r.topic,
        "retain": r.retain,
        "payload": body,
        "prev_hash": r.prev.hex() if r.prev is not None else None,
        "hash": r.hash.hex() if r.hash is not None else None,
        **({"flagged": r.flagged} if r.flagged is not None else {}),
    }


def _stand_in_line(r: Message) -> dict[str, object]:
    try:
        body: WithheldPayload | None = parse_payload(WithheldPayload, proof.unmarked(r.payload))
    except ValueError:
        body = None
    return {
        "seq": r.seq,
        "journal_ts": r.chain_ts,
        "topic": body.topic if body is not None else None,
        "retain": body.retain if body is not None else None,
        "payload": None,
        "prev_hash": r.prev.hex() if r.prev is not None else None,
        "hash": r.hash.hex() if r.hash is not None else None,
        "withheld": {
            "size": body.size if body is not None else None,
            "limit": body.limit if body is not None else None,
            "reason": r.reason or "a withheld stand-in: the record is in the table's journal",
        },
        **({"flagged": r.flagged} if r.flagged is not None else {}),
    }


def against_export(
    stored: Mapping[int, Message], lines: Iterable[tuple[int, dict[str, object]]]
) -> Iterator[str]:
    """Where the store and the table's journal export (line number, record) disagree, within the
    export's range: a record only one of them has, or different in either."""
    seen: set[int] = set()
    low = high = None
    for number, line in lines:
        seq = line.get("seq")
        if not isinstance(seq, int):
            yield f"export line {number}: no seq"
            continue
        seen.add(seq)
        low = seq if low is None else min(low, seq)
        high = seq if high is None else max(high, seq)
        mine = stored.get(seq)
        if mine is None:
            yield f"seq {seq}: in the table's journal, not in the store"
            continue
        ours = export_line(mine)
        for name in ("hash", "prev_hash", "topic", "retain", "payload", "journal_ts"):
            if ours[name] is None and name in ("hash", "prev_hash", "journal_ts"):
                continue  # it came without a chain entry: only its content can be compared
            if name == "payload" and "withheld" in ours:
                continue  # a stand-in: the content never came (its hash is compared)
            if ours[name] != line.get(name):
                yield f"seq {seq}: {name} differs from the table's journal (export line {number})"
                break
    if low is not None and high is not None:
        for seq in sorted(s for s in stored if low <= s <= high and s not in seen):
            yield f"seq {seq}: in the store, not in the table's journal (inserted?)"
