"""Checking a table's stored chain (pure: records in, findings out).

``walk`` goes through a table's records in seq order from where it last stopped: each record's
``chain-prev`` must be the hash of the record before it (so a record altered, inserted or
dropped between two stored ones is found from either side, whichever arrived last), and a
checkpoint's signed head must be the stored hash of the record it names. The floor walks after
every batch it stores, as far as the records are contiguous; ``tableside floor verify`` walks
the whole store across its gaps, and compares it with the table's own ``journal export``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from tableside.daemon import proof
from tableside.daemon.payloads import TopicKind, parse_topic
from tableside.floor.judge import _proof
from tableside.floor.store import FAILED, UNTRUSTED, Message, Progress, Verdict

__all__ = ["Finding", "against_export", "export_line", "recheck", "walk"]


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
) -> tuple[Progress, list[Finding]]:
    """Progress after these records (seq order, from ``progress.contiguous_upto + 1``; the
    chain starts at ``start``: seq 0, a table's first, or the first its journal still has). Without
    ``across_gaps`` it stops at the first missing seq; with it, a gap is a finding and the
    link across it is not checked. ``linked`` gets each record walked whose ``chain-prev`` is
    the stored hash of the record before it and whose own verdict is ``ok``: what the web view
    shows (a record after a break links again from the next one on)."""
    p, found = progress, []
    expected = p.contiguous_upto + 1 if p.contiguous_upto is not None else start
    before = p.contiguous_hash if p.contiguous_upto is not None else None
    for r in records:
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
            and r.verdict == "ok"
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


def recheck(
    prefix: str, records: Iterable[Message], keys: Mapping[str, Ed25519PublicKey]
) -> Iterator[Message]:
    """Each record with its verdict worked out again from what is stored (against the keys
    enrolled now: a checkpoint stored before its table's key was enrolled verifies now)."""
    for r in records:
        if r.hash is None or r.prev is None or r.chain_ts is None or r.seq is None:
            yield r
            continue
        where = parse_topic(prefix, r.topic)
        if where is None:
            yield r
            continue
        chain = proof.Chain(r.prev, r.hash, r.chain_ts)
        verdict, reason = _proof(r.table, where, r.seq, r.topic, r.retain, r.payload, None, chain,
                                 keys)  # fmt: skip
        if r.verdict in ("break", "conflict", "malformed") and verdict == "ok":
            yield r  # a finding of the walk, or of the payload, not of the chain entry alone
        else:
            yield replace(r, verdict=verdict, reason=reason)


def export_line(r: Message) -> dict[str, object]:
    """A stored record as ``tableside journal export`` writes one (daemon/journal/
    ``export_records``): the payload as journaled (flags a resend set, cleared)."""
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
            if ours[name] != line.get(name):
                yield f"seq {seq}: {name} differs from the table's journal (export line {number})"
                break
    if low is not None and high is not None:
        for seq in sorted(s for s in stored if low <= s <= high and s not in seen):
            yield f"seq {seq}: in the store, not in the table's journal (inserted?)"
