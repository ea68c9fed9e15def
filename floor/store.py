"""The floor's audit store: every message of every table, per-table completeness and proof state,
and the keys the floor trusts. One interface (``Store``), two engines: SQLite (``sqlite:///path``,
the default, nothing to set up) and PostgreSQL (``postgresql://…``, production).

A journal record (a table message with a seq) is stored once per (table, seq): a second copy with
the same content (a redelivery, a republished retained state, a replay of one already here) is
counted as a duplicate, and one with other content is stored beside it as a ``conflict`` and
flagged. A withheld stand-in (``<prefix>/<table>/withheld``: a record larger than the broker's
Maximum Packet Size, its seq and chain entry without its content) is stored as the record for
its seq, verdict ``withheld``; the record itself, when it comes (replayed) with the stand-in's
chain entry and a hash that holds, takes the seq, and the stand-in is kept beside it (kind
``withheld``).

Which of a record and its conflicts is the record for the seq is the chain's to say, not the
order they came in: a conflict whose chain-prev is the hash of the record before it, and whose
chain-hash holds, takes the seq from a record that carries no chain entry or does not link
(``claims``, ``promote``; the chain walk decides, floor/service.py), and that record is kept as
the conflict.
A live record whose seq went backwards (floor/order.py) is a duplicate if it is the
stored record, and is otherwise stored as ``rejected``. Everything else (wills, requests to a
table, rejected input) is stored as it came. Every message of a flagged table (a forged or
unenrolled checkpoint, until a key is enrolled) is stored carrying the flag.

Both engines share the SQL below (``?`` placeholders; the PostgreSQL engine rewrites them) and
differ in how a batch reaches the disk: SQLite in one transaction on its own thread, PostgreSQL
by COPY into a staging table and one ``INSERT … ON CONFLICT DO NOTHING``.
"""

from __future__ import annotations

import abc
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from tableside.errors import TablesideError
from tableside.wire.topics import TopicKind, split_topic

__all__ = [
    "ADDED_COLUMNS",
    "FAILED",
    "N_COLUMNS",
    "UNTRUSTED",
    "Enrolment",
    "Kind",
    "Message",
    "Problem",
    "Progress",
    "Store",
    "StoreError",
    "TableState",
    "Verdict",
    "Written",
    "open_store",
    "stands_in",
]

#: what a stored message is: a journal record; the last will (it repeats a seq, carries no chain);
#: a request to the table (``command/<role>``); a response copy (``response/…``); a second,
#: different record for a seq already stored; input refused with its reason; a withheld
#: stand-in whose record has come since (it took the seq: ``Store.write``)
Kind = Literal["record", "will", "request", "response", "conflict", "rejected", "withheld"]
#: ok: its chain entry holds (and a checkpoint's signature verifies against the enrolled key);
#: unverifiable: it carries no chain entry (an MQTT 3.1.1 table, a will, a request); altered: its
#: chain entry is not its hash; forged: a checkpoint whose signature fails; not-enrolled: a
#: checkpoint from a table with no enrolled key; break: its chain-prev is not the stored hash of
#: the seq before it; malformed: its payload is not its topic's model (wire/payloads.py), so
#: nobody is shown it (its chain entry may hold: it stays a link of the chain); withheld: a
#: stand-in for a record larger than the broker's limit, its chain entry the record's, its
#: content not on the wire (nothing to hash: the chain links across it, the content is
#: unverified); conflict and rejected as the kinds
Verdict = Literal[
    "ok",
    "unverifiable",
    "altered",
    "forged",
    "not-enrolled",
    "break",
    "malformed",
    "withheld",
    "conflict",
    "rejected",
]
#: the verdicts that are a problem with the table's stream
FAILED = frozenset(
    {"altered", "forged", "not-enrolled", "break", "malformed", "conflict", "rejected"}
)
#: a checkpoint's signature not trusted: the table is flagged, and every message stored from it
#: carries the flag, until a key is enrolled
UNTRUSTED = frozenset({"forged", "not-enrolled"})


@dataclass(frozen=True, slots=True)
class Enrolment:
    """A key enrolled for a table's checkpoints, or revoked: on the record, who, when, how
    (``web``: a supervisor in the web view; ``cli``: ``tableside floor enroll``), and why."""

    table: str
    key_hex: str
    #: "enrolled" or "revoked"
    action: Literal["enrolled", "revoked"]
    #: the login: the web view's user, or the OS login that ran the command ("" if none said)
    by: str
    via: str
    #: the floor's clock (UTC seconds), when it was stored
    at: float
    reason: str = ""


class StoreError(TablesideError, RuntimeError):
    """The store cannot be opened or written."""


@dataclass(frozen=True, slots=True)
class Message:
    """One message as the floor keeps it."""

    table: str
    topic: str
    kind: Kind
    seq: int | None
    #: the bytes as received (a replayed record: the journaled payload it carried)
    payload: bytes
    #: the retain flag its hash covers: the MQTT flag as published (the floor subscribes with
    #: retain-as-published), or true for a record whose chain entry says ``chain-retain`` (it
    #: was journaled retained and sent unretained, to a broker that keeps none)
    retain: bool
    arrival: float
    verdict: Verdict
    reason: str = ""
    republished: bool = False
    redelivered: bool = False
    will: bool = False
    replayed: bool = False
    #: the chain entry it carried (None: it carried none)
    prev: bytes | None = None
    hash: bytes | None = None
    chain_ts: float | None = None
    #: the envelope's ``ts`` (UTC text), when it had one
    ts: str | None = None
    #: the table's flag (a forged or unenrolled checkpoint) when this was stored: every message
    #: of a flagged table carries it, until a key is enrolled (``Store.enrol``)
    flagged: str | None = None
    #: a live record with a seq below this one, the newest seq this floor holds chained from
    #: the table (floor/order.py); not stored: the store keeps it, if it is not a repeat, as
    #: rejected
    behind: int | None = None
    #: a record held apart by floor/order.py, not stored as the record for its seq but as
    #: rejected: 0, one that is not chained to the newest chained seq where the table's own
    #: record would be (the next seq, not linked to it; or any later seq, with no chain entry,
    #: from a table whose records carry one); otherwise, how far past that seq it was (more
    #: than ``MAX_AHEAD``, linked to nothing verified)
    ahead: int | None = None
    #: journaled retained and sent unretained (``chain-retain``): it came live all the same
    #: (floor/order.py ``live``); not stored
    unretained: bool = False
    #: the store's row id (None until stored)
    id: int | None = None
    #: what its topic carries, as the judge parsed it (wire/payloads.py's one topic parser;
    #: read back from the store, parsed again from the stored topic); None: no table's topic
    what: TopicKind | None = None


@dataclass(frozen=True, slots=True)
class Problem:
    table: str
    seq: int
    what: str
    at: float

    def __str__(self) -> str:
        return f"seq {self.seq}: {self.what}"


@dataclass(frozen=True, slots=True)
class Progress:
    """How far a table's chain has been checked (floor/verify.py ``walk``)."""

    #: every seq from the chain's start to here is stored (None: not even the first)
    contiguous_upto: int | None = None
    #: the hash of that record (None: it carried none)
    contiguous_hash: bytes | None = None
    #: the chain holds, link by link, from its start to here
    verified_upto: int | None = None
    #: the newest checkpoint at or below ``verified_upto`` whose signature and head check out
    signed_upto: int | None = None
    #: a break or an unverifiable record was met: ``verified_upto`` goes no further
    broken: bool = False


@dataclass(frozen=True, slots=True)
class TableState:
    table: str
    highest_seq: int | None
    records: int
    duplicates: int
    conflicts: int
    last_heard: float | None
    progress: Progress
    #: the table's journal no longer has the records before this seq (a replay's answer)
    pruned_before: int | None
    #: the enrolled public key, hex
    key: str | None
    #: set by a forged or unenrolled checkpoint, cleared by enrolling a key
    flagged: str | None
    gaps: list[tuple[int, int]] = field(default_factory=list)
    problems: int = 0
    #: the seqs whose record the store holds only as a withheld stand-in (the first 1,000)
    withheld: list[int] = field(default_factory=list)

    @property
    def missing(self) -> int:
        return sum(last - first + 1 for first, last in self.gaps)


@dataclass
class Written:
    """What a batch did to the store."""

    #: (table, seq) of the records stored for the first time
    stored: list[tuple[str, int]] = field(default_factory=list)
    duplicates: dict[str, int] = field(default_factory=dict)
    #: (table, seq) of the records that came again with other content
    conflicts: list[tuple[str, int]] = field(default_factory=list)
    #: (table, seq) of the live records whose seq went backwards, stored as rejected
    backwards: list[tuple[str, int]] = field(default_factory=list)
    #: (table, seq) of the records too far ahead of the chained seq, stored as rejected
    ahead: list[tuple[str, int]] = field(default_factory=list)
    #: (table, seq) of each record that came again with the content stored (a duplicate)
    repeated: list[tuple[str, int]] = field(default_factory=list)
    #: (table, seq) of each withheld stand-in whose record came, and took its seq
    filled: list[tuple[str, int]] = field(default_factory=list)
    others: int = 0

    @property
    def tables(self) -> set[str]:
        return (
            {table for table, _ in self.stored}
            | {t for t, _ in self.conflicts}
            | {t for t, _ in self.filled}
        )


_COLUMNS = (
    "table_id, topic, kind, seq, record_seq, payload, retain, republished, redelivered, will, "
    "replayed, arrival, ts, chain_prev, chain_hash, chain_ts, verdict, reason, flagged"
)
#: how many columns a stored message has (``_row``)
N_COLUMNS = len(_COLUMNS.split(","))
_SELECT = f"SELECT id, {_COLUMNS} FROM messages"


def _clean(text: str | None) -> str | None:
    """Text as both engines keep it (PostgreSQL's text holds no NUL)."""
    return text.replace("\x00", "\\x00") if text is not None and "\x00" in text else text


def _row(m: Message, record: bool) -> tuple[object, ...]:
    return (
        _clean(m.table), _clean(m.topic), m.kind, m.seq, m.seq if record else None, m.payload,
        int(m.retain), int(m.republished), int(m.redelivered), int(m.will), int(m.replayed),
        m.arrival, _clean(m.ts), m.prev, m.hash, m.chain_ts, m.verdict, _clean(m.reason),
        _clean(m.flagged),
    )  # fmt: skip


#: a blob as an engine gives it: bytes, or a buffer of them
_Blob = bytes | memoryview
#: a stored message as ``_SELECT`` reads it: its id, then ``_COLUMNS`` in the schema's types
#: (a SMALLINT flag as an int)
_StoredRow = tuple[
    int, str, str, Kind, int | None, int | None, _Blob, int, int, int, int, int, float,
    str | None, _Blob | None, _Blob | None, float | None, Verdict, str, str | None,
]  # fmt: skip


def _message(row: _StoredRow) -> Message:
    (id_, table, topic, kind, seq, _, payload, retain, republished, redelivered, will, replayed,
     arrival, ts, prev, digest, chain_ts, verdict, reason, flagged) = row  # fmt: skip
    return Message(
        table=table, topic=topic, kind=kind, seq=seq, payload=bytes(payload),
        retain=bool(retain), arrival=arrival, verdict=verdict, reason=reason,
        republished=bool(republished), redelivered=bool(redelivered), will=bool(will),
        replayed=bool(replayed), prev=bytes(prev) if prev is not None else None,
        hash=bytes(digest) if digest is not None else None, chain_ts=chain_ts, ts=ts,
        flagged=flagged, id=id_, what=_what(table, topic),
    )  # fmt: skip


def _what(table: str, topic: str) -> TopicKind | None:
    where = split_topic(table, topic)
    return where[1].kind if where is not None else None


def stands_in(m: Message) -> bool:
    """A withheld stand-in: a record's seq and chain entry, sent on ``<prefix>/<table>/withheld``
    in place of a record larger than the broker's Maximum Packet Size, its content not on the
    wire (docs/floor.md, "A record the broker could not carry")."""
    return m.what is TopicKind.WITHHELD


def _blob(value: object) -> bytes:
    """A stored blob (a chain hash, a payload) as bytes: both engines give bytes, or a buffer."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise StoreError(f"a stored chain hash or payload is {type(value).__name__}, not bytes")


def _fills(stored: tuple[object, object], m: Message) -> bool:
    """Whether ``m`` may be the record a stored stand-in stands for: its chain hash is the one
    stored and holds for what it carried (it is no stand-in itself), and its content is not the
    stored one (``Store._fill_in`` reads the stored one to be sure it is a stand-in)."""
    from tableside.wire.proof import unmarked

    return (
        m.hash is not None
        and not stands_in(m)
        and m.verdict in ("ok", "malformed")
        and unmarked(_blob(stored[1])) != unmarked(m.payload)
    )


def _same(stored: tuple[object, object], m: Message) -> bool:
    """Whether a record already stored (its chain hash, its payload) is this one again."""
    from tableside.wire.proof import unmarked

    digest, payload = stored
    if digest is not None and m.hash is not None:
        return _blob(digest) == m.hash
    return unmarked(_blob(payload)) == unmarked(m.payload)


def _backwards(m: Message) -> Message:
    return replace(
        m, kind="rejected", verdict="rejected", behind=None,
        reason=f"seq {m.seq} after {m.behind} from this table (not a redelivery: not marked "
        "redelivered or republished, not a replay, and not the record stored under that seq)",
    )  # fmt: skip


def _ahead(m: Message) -> Message:
    why = (
        f"seq {m.seq} is more than {m.ahead} ahead of the newest seq chained from this table "
        "and links to nothing verified" if m.ahead else
        f"seq {m.seq} carries no chain entry, from a table whose records carry one (its own "
        "record of that seq links to the one before it)" if m.hash is None else
        f"seq {m.seq} does not link to seq {(m.seq or 0) - 1}, the newest chained from this "
        "table (the table's own record of it does)"
    )  # fmt: skip
    return replace(m, kind="rejected", verdict="rejected", ahead=None,
                   reason=f"{why}: held apart, never the record for its seq")  # fmt: skip


def _gave_way(m: Message) -> str:
    """Why a record stored under its seq was moved beside the one the chain vouches for."""
    seq = m.seq or 0
    linked = f"the hash of seq {seq - 1}" if seq else "the chain's start"
    what = "it carries no chain entry" if m.hash is None else f"its chain-prev is not {linked}"
    return (f"seq {seq}: {what}; it gave its seq to the record whose chain-prev is {linked} "
            "(the table's own), and is kept as a claim the chain does not vouch for")  # fmt: skip


def _conflict(m: Message, stored: tuple[object, object]) -> Message:
    theirs = _blob(stored[0]).hex()[:16] if stored[0] is not None else "no chain entry"
    ours = m.hash.hex()[:16] if m.hash is not None else "no chain entry"
    return replace(
        m, kind="conflict", verdict="conflict",
        reason=f"seq {m.seq} is already stored with other content (stored hash {theirs}…, "
        f"this one {ours}…): one of them was altered or inserted",
    )  # fmt: skip


class Store(abc.ABC):
    """The audit store. Every method is a coroutine that never blocks the event loop."""

    #: SQL that differs between the engines
    _GREATEST = "MAX"

    def __init__(self, url: str) -> None:
        self.url = url

    # -- what an engine provides ----------------------------------------------------------------

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect, and create the schema when it is not there."""

    @abc.abstractmethod
    async def close(self) -> None: ...

    @abc.abstractmethod
    async def _query(self, sql: str, params: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        """Rows of one statement (``?`` placeholders)."""

    @abc.abstractmethod
    async def _execute(self, statements: Sequence[tuple[str, Sequence[object]]]) -> None:
        """Statements in one transaction."""

    @abc.abstractmethod
    async def _write(
        self, records: Sequence[Message], others: Sequence[Message]
    ) -> list[tuple[Message, tuple[object, object]]]:
        """Store ``others`` as they are and each of ``records`` (one per (table, seq)) unless
        its (table, seq) is already stored; in one transaction. Returns each record that was
        not stored, with the stored one's (chain hash, payload)."""

    async def __aenter__(self) -> Store:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- writing --------------------------------------------------------------------------------

    async def write(self, batch: Sequence[Message]) -> Written:
        """Store a batch; records once per (table, seq). The tables' counters move with it.

        A record marked ``behind`` (its seq went backwards, floor/order.py) is a duplicate if
        it is the record stored (or earlier in the batch) under its seq, and is otherwise kept
        as rejected, never as the record; one marked ``ahead`` (too far past the chained seq,
        linked to nothing verified) is kept as rejected. Each message of a flagged table (a
        forged or unenrolled checkpoint, the batch's own included) is stored carrying the
        flag."""
        batch = await self._flag_batch(batch)
        first: dict[tuple[str, int], Message] = {}
        others: list[Message] = []
        repeats: list[tuple[Message, tuple[object, object]]] = []
        behind: list[Message] = []
        went_back: list[tuple[str, int]] = []
        went_ahead: list[tuple[str, int]] = []
        for m in batch:
            if m.kind != "record" or m.seq is None:
                others.append(m)
            elif m.ahead is not None:
                others.append(_ahead(m))
                went_ahead.append((m.table, m.seq))
            elif m.behind is not None:
                behind.append(m)
            elif (key := (m.table, m.seq)) in first:  # twice in one batch
                repeats.append((m, (first[key].hash, first[key].payload)))
            else:
                first[key] = m
        if behind:
            keys = [(m.table, m.seq or 0) for m in behind]
            found = await self._stored_records([key for key in keys if key not in first])
            found.update({key: (first[key].hash, first[key].payload) for key in keys
                          if key in first})  # fmt: skip
            for m in behind:
                stored = found.get((m.table, m.seq or 0))
                if stored is not None and _same(stored, m):
                    repeats.append((m, stored))
                else:
                    others.append(_backwards(m))
                    went_back.append((m.table, m.seq or 0))
        not_stored = await self._write(list(first.values()), others)
        repeats.extend(not_stored)
        written = Written(others=len(others))
        written.backwards, written.ahead = went_back, went_ahead
        gone = {(m.table, m.seq) for m, _ in not_stored}
        written.stored = [key for key in first if key not in gone]
        conflicts: list[Message] = []
        for m, stored in repeats:
            if _same(stored, m):
                if _fills(stored, m) and await self._fill_in(m):
                    written.filled.append((m.table, m.seq or 0))
                    continue
                written.duplicates[m.table] = written.duplicates.get(m.table, 0) + 1
                written.repeated.append((m.table, m.seq or 0))
            else:
                conflicts.append(_conflict(m, stored))
                written.conflicts.append((m.table, m.seq or 0))
        if conflicts:
            await self._write([], conflicts)
        kept = [first[key] for key in written.stored]
        await self._count(batch, written, [*kept, *others, *conflicts])
        return written

    async def _flag_batch(self, batch: Sequence[Message]) -> Sequence[Message]:
        """The batch with each message of a flagged table carrying the flag: the tables
        flagged in the store, and from a failed checkpoint in the batch on, its table."""
        failing = {m.table for m in batch if m.kind == "record" and m.verdict in UNTRUSTED}
        flags = await self.flags() if batch else {}
        if not failing and not flags.keys() & {m.table for m in batch}:
            return batch
        out: list[Message] = []
        for m in batch:
            if m.kind == "record" and m.verdict in UNTRUSTED:
                flags[m.table] = m.reason
            flag = flags.get(m.table)
            out.append(replace(m, flagged=flag) if flag is not None else m)
        return out

    async def _stored_records(
        self, keys: Sequence[tuple[str, int]]
    ) -> dict[tuple[str, int], tuple[object, object]]:
        """The (chain hash, payload) stored for each (table, seq) that is stored."""
        found: dict[tuple[str, int], tuple[object, object]] = {}
        for table, seq in dict.fromkeys(keys):
            rows = await self._query(
                "SELECT chain_hash, payload FROM messages WHERE table_id = ? AND record_seq = ?",
                (table, seq),
            )
            if rows:
                found[(table, seq)] = (rows[0][0], rows[0][1])
        return found

    async def _count(self, batch: Sequence[Message], written: Written, kept: list[Message]) -> None:
        """The tables' counters, and a problem for each message kept with a failed verdict."""
        by_table: dict[str, list[Message]] = {}
        for m in batch:
            by_table.setdefault(m.table, []).append(m)
        statements: list[tuple[str, Sequence[object]]] = []
        g = self._GREATEST
        stored = Counter(t for t, _ in written.stored)  # not a scan of the batch per table
        conflicted = Counter(t for t, _ in written.conflicts)
        for table, ms in by_table.items():
            # (a seq held apart, ``ahead``, is not the table's)
            seqs = [
                m.seq for m in ms if m.kind == "record" and m.seq is not None and m.ahead is None
            ]
            statements.append((
                "INSERT INTO floor_tables (table_id, highest_seq, records, duplicates, conflicts, "
                "last_heard) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (table_id) DO UPDATE SET "
                f"highest_seq = {g}(COALESCE(floor_tables.highest_seq, excluded.highest_seq), "
                "COALESCE(excluded.highest_seq, floor_tables.highest_seq)), "
                "records = floor_tables.records + excluded.records, "
                "duplicates = floor_tables.duplicates + excluded.duplicates, "
                "conflicts = floor_tables.conflicts + excluded.conflicts, "
                f"last_heard = {g}(COALESCE(floor_tables.last_heard, 0), excluded.last_heard)",
                (table, max(seqs) if seqs else None,
                 stored[table], written.duplicates.get(table, 0), conflicted[table],
                 max(m.arrival for m in ms)),
            ))  # fmt: skip
        statements.extend(
            self._problem_sql(m.table, m.seq, m.reason or m.verdict, m.arrival)
            for m in kept
            if m.verdict in FAILED
        )
        # a forged or unenrolled checkpoint flags its table (until a key is enrolled)
        statements.extend(
            ("UPDATE floor_tables SET flagged = ? WHERE table_id = ?", (m.reason, m.table))
            for m in batch
            if m.kind == "record" and m.verdict in UNTRUSTED
        )
        await self._execute(statements)

    def _problem_sql(
        self, table: str, seq: int | None, what: str, at: float | None = None
    ) -> tuple[str, Sequence[object]]:
        return (
            "INSERT INTO floor_problems (table_id, seq, what, at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (table_id, seq, what) DO NOTHING",
            (table, seq if seq is not None else -1, what, at if at is not None else _now()),
        )

    async def flag(self, table: str, seq: int, verdict: Verdict, what: str) -> None:
        """Mark a stored record (a break the chain check found) and note the problem."""
        await self._execute([
            ("UPDATE messages SET verdict = ?, reason = ? WHERE table_id = ? AND record_seq = ?",
             (verdict, what, table, seq)),
            self._problem_sql(table, seq, what),
        ])  # fmt: skip

    async def problem(self, table: str, seq: int, what: str) -> None:
        await self._execute([self._ensure(table), self._problem_sql(table, seq, what)])

    async def _fill_in(self, record: Message) -> bool:
        """The record a stored withheld stand-in stands for (the same seq and chain entry, its
        hash holding for what it carried) takes the seq; the stand-in is kept beside it (kind
        ``withheld``). One transaction; False, nothing done, when what is stored under the seq
        is not such a stand-in."""
        found = await self.records(record.table, record.seq or 0, record.seq or 0, 1)
        if not found or not stands_in(found[0]):
            return False
        stand_in = found[0]
        if (stand_in.hash, stand_in.prev) != (record.hash, record.prev) or stand_in.id is None:
            return False
        how = "replayed" if record.replayed else "sent"
        why = (f"seq {record.seq}: a withheld stand-in; its record came since ({how}), with its "
               "chain entry and a hash that holds, and took the seq")  # fmt: skip
        await self._execute([
            ("UPDATE messages SET kind = 'withheld', record_seq = NULL, reason = ? "
             "WHERE id = ? AND record_seq = ?", (why, stand_in.id, record.seq)),
            (f"INSERT INTO messages ({_COLUMNS}) VALUES ({', '.join('?' * N_COLUMNS)}) "
             "ON CONFLICT (table_id, record_seq) DO NOTHING", _row(record, True)),
        ])  # fmt: skip
        return True

    async def promote(self, occupant: Message, claim: Message) -> None:
        """Give a stored record's seq to one of its ``claims``, the one the chain vouches for
        (its verdict and reason worked out again as the record's: floor/verify.py
        ``vouched``); the record is kept beside it as a conflict, with why, and noted as a
        problem. One transaction; nothing happens when the seq is no longer the occupant's
        (another floor sharing the store promoted first)."""
        if occupant.id is None or claim.id is None or occupant.seq is None:
            raise ValueError("promote: the record and the claim must both be stored")
        why = _gave_way(occupant)
        await self._execute([
            ("UPDATE messages SET kind = 'conflict', record_seq = NULL, verdict = 'conflict', "
             "reason = ? WHERE id = ? AND record_seq = ?", (why, occupant.id, occupant.seq)),
            ("UPDATE messages SET kind = 'record', record_seq = ?, verdict = ?, reason = ? "
             "WHERE id = ? AND kind = 'conflict' AND NOT EXISTS (SELECT 1 FROM messages AS m "
             "WHERE m.table_id = ? AND m.record_seq = ?)",
             (occupant.seq, claim.verdict, _clean(claim.reason), claim.id, occupant.table,
              occupant.seq)),
            self._problem_sql(occupant.table, occupant.seq, why),
        ])  # fmt: skip

    def _ensure(self, table: str) -> tuple[str, Sequence[object]]:
        return ("INSERT INTO floor_tables (table_id) VALUES (?) ON CONFLICT (table_id) DO NOTHING",
                (table,))  # fmt: skip

    async def advance(self, table: str, progress: Progress) -> None:
        """Save how far the table's chain has been checked."""
        await self.advance_all({table: progress})

    async def advance_all(self, progress: Mapping[str, Progress]) -> None:
        """Save how far each table's chain has been checked, in one transaction."""
        await self._execute([(
            "UPDATE floor_tables SET contiguous_upto = ?, contiguous_hash = ?, verified_upto = ?, "
            "signed_upto = ?, broken = ? WHERE table_id = ?",
            (p.contiguous_upto, p.contiguous_hash, p.verified_upto, p.signed_upto,
             int(p.broken), table),
        ) for table, p in progress.items()])  # fmt: skip

    async def note_pruned(self, table: str, before: int) -> None:
        """The table's journal starts at ``before``: what precedes it cannot be replayed."""
        await self._execute([self._ensure(table), (
            f"UPDATE floor_tables SET pruned_before = {self._GREATEST}"
            "(COALESCE(pruned_before, 0), ?) WHERE table_id = ?", (before, table)
        )])  # fmt: skip

    async def set_flag(self, table: str, why: str | None) -> None:
        await self._execute([self._ensure(table), (
            "UPDATE floor_tables SET flagged = ? WHERE table_id = ?", (why, table)
        )])  # fmt: skip

    async def enrol(
        self, table: str, key_hex: str, *, by: str = "", via: str = "", reason: str = ""
    ) -> Enrolment:
        """Trust this public key (64 hex digits) for the table's checkpoints; clears a flag
        a forged or unenrolled checkpoint set. On the record (``enrolments``), in the same
        transaction."""
        done = Enrolment(table, key_hex, "enrolled", by, via, _now(), reason)
        await self._execute([self._ensure(table), (
            "UPDATE floor_tables SET key_hex = ?, flagged = NULL WHERE table_id = ?",
            (key_hex, table),
        ), self._enrolment_sql(done)])  # fmt: skip
        return done

    async def revoke(
        self, table: str, key_hex: str, *, by: str, via: str, reason: str
    ) -> Enrolment:
        """Trust the table's enrolled key no more: from now on its checkpoints are not vouched
        for (docs/floor.md, "Enrolment and revocation"). ``key_hex`` must be the key enrolled
        now (ValueError otherwise: none, or another since the caller looked)."""
        if not reason.strip():
            raise ValueError("a revocation needs a reason")
        done = Enrolment(table, key_hex, "revoked", by, via, _now(), reason)
        rows = await self._query("SELECT key_hex FROM floor_tables WHERE table_id = ?", (table,))
        enrolled = rows[0][0] if rows else None
        if enrolled != key_hex:
            raise ValueError(
                f"table {table!r}: key {key_hex[:16]}… is not the one enrolled "
                f"({'none is' if enrolled is None else enrolled[:16] + '…'})"
            )
        await self._execute([(
            "UPDATE floor_tables SET key_hex = NULL WHERE table_id = ? AND key_hex = ?",
            (table, key_hex),
        ), self._enrolment_sql(done)])  # fmt: skip
        return done

    def _enrolment_sql(self, e: Enrolment) -> tuple[str, Sequence[object]]:
        return ("INSERT INTO floor_enrolments (table_id, key_hex, action, by_login, via, at, "
                "reason) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (e.table, e.key_hex, e.action, _clean(e.by) or "", e.via, e.at,
                 _clean(e.reason) or ""))  # fmt: skip

    async def enrolments(
        self, table: str | None = None, since: float = 0.0, until: float = 2.0**62
    ) -> list[Enrolment]:
        """Every enrolment and revocation on the record (of one table if given), oldest first."""
        where, params = ["at >= ?", "at < ?"], [since, until]
        if table is not None:
            where.append("table_id = ?")
            params.append(table)  # type: ignore[arg-type]
        rows = await self._query(
            "SELECT table_id, key_hex, action, by_login, via, at, reason FROM floor_enrolments "
            f"WHERE {' AND '.join(where)} ORDER BY at, id",
            params,
        )
        return [Enrolment(t, k, a, b, v, float(at), r) for t, k, a, b, v, at, r in rows]

    async def records_between(
        self,
        table: str,
        since: float,
        until: float,
        *,
        topics: Sequence[str] = (),
        like: Sequence[str] = (),
        limit: int = 100_000,
    ) -> list[Message]:
        """The table's records whose journal time (the arrival, for one with no chain entry)
        is in [since, until), on one of ``topics`` or a topic matching one of ``like`` (SQL
        LIKE patterns), oldest first."""
        which = ["topic = ?"] * len(topics) + ["topic LIKE ?"] * len(like)
        if not which:
            return []
        rows = await self._query(
            f"{_SELECT} WHERE table_id = ? AND record_seq IS NOT NULL AND "
            f"({' OR '.join(which)}) AND COALESCE(chain_ts, arrival) >= ? AND "
            "COALESCE(chain_ts, arrival) < ? ORDER BY record_seq LIMIT ?",
            (table, *topics, *like, since, until, limit),
        )
        return [_message(row) for row in rows]

    async def approve_software(self, manifest_sha256: str, note: str | None = None) -> None:
        """Approve a release manifest (its SHA-256, docs/software.md): a table whose software
        record names it is not flagged; approved again, the note and time are the new ones."""
        await self._execute([(
            "INSERT INTO floor_software (manifest_sha256, note, approved_at) VALUES (?, ?, ?) "
            "ON CONFLICT (manifest_sha256) DO UPDATE SET note = excluded.note, "
            "approved_at = excluded.approved_at",
            (manifest_sha256, note, _now()),
        )])  # fmt: skip

    async def revoke_software(self, manifest_sha256: str) -> bool:
        """Take a manifest off the approved list; False when it was not on it."""
        rows = await self._query(
            "SELECT 1 FROM floor_software WHERE manifest_sha256 = ?", (manifest_sha256,)
        )
        await self._execute(
            [("DELETE FROM floor_software WHERE manifest_sha256 = ?", (manifest_sha256,))]
        )
        return bool(rows)

    async def approved_software(self) -> dict[str, str | None]:
        """The approved manifests' SHA-256s, each with its note."""
        rows = await self._query("SELECT manifest_sha256, note FROM floor_software")
        return {digest: note for digest, note in rows}

    # -- reading --------------------------------------------------------------------------------

    async def flags(self) -> dict[str, str]:
        """The flagged tables, each with its flag."""
        rows = await self._query(
            "SELECT table_id, flagged FROM floor_tables WHERE flagged IS NOT NULL"
        )
        return {table: flag for table, flag in rows}

    async def keys(self) -> dict[str, str]:
        rows = await self._query(
            "SELECT table_id, key_hex FROM floor_tables WHERE key_hex IS NOT NULL"
        )
        return {table: key for table, key in rows}

    async def tables(self) -> list[str]:
        rows = await self._query("SELECT table_id FROM floor_tables ORDER BY table_id")
        return [table for (table,) in rows]

    async def incomplete(self) -> list[str]:
        """The tables whose records are not all contiguous from the chain's start (a gap, or
        the chain walk not caught up)."""
        rows = await self._query(
            "SELECT table_id FROM floor_tables WHERE highest_seq IS NOT NULL AND "
            "(contiguous_upto IS NULL OR contiguous_upto < highest_seq) ORDER BY table_id"
        )
        return [table for (table,) in rows]

    async def state(self, table: str, *, with_gaps: bool = True) -> TableState | None:
        """The table's completeness and proof state, its gaps included (unless not asked)."""
        rows = await self._query(
            "SELECT highest_seq, records, duplicates, conflicts, last_heard, contiguous_upto, "
            "contiguous_hash, verified_upto, signed_upto, broken, pruned_before, key_hex, "
            "flagged FROM floor_tables WHERE table_id = ?",
            (table,),
        )
        if not rows:
            return None
        (high, records, dups, conflicts, heard, cont, cont_hash, verified, signed, broken,
         pruned, key, flagged) = rows[0]  # fmt: skip
        progress = Progress(
            cont, bytes(cont_hash) if cont_hash is not None else None, verified, signed,
            bool(broken),
        )  # fmt: skip
        (problems,) = (await self._query(
            "SELECT COUNT(*) FROM floor_problems WHERE table_id = ?", (table,)
        ))[0]  # fmt: skip
        withheld = await self._query(
            "SELECT record_seq FROM messages WHERE table_id = ? AND verdict = 'withheld' "
            "AND record_seq IS NOT NULL ORDER BY record_seq LIMIT 1000",
            (table,),
        )
        state = TableState(table, high, records, dups, conflicts, heard, progress, pruned, key,
                           flagged, problems=problems,
                           withheld=[seq for (seq,) in withheld])  # fmt: skip
        if with_gaps:
            state.gaps.extend(await self.gaps(table, state))
        return state

    async def states(self) -> list[TableState]:
        """Every table's state, by table id (the floor view's overview)."""
        found = []
        for table in await self.tables():
            state = await self.state(table)
            if state is not None:
                found.append(state)
        return found

    async def gaps(
        self, table: str, state: TableState | None = None, limit: int = 1000
    ) -> list[tuple[int, int]]:
        """The seq ranges missing between the chain's start (seq 0, or the first the table's
        journal still has) and the highest seq stored."""
        state = state or await self.state(table)
        if state is None:
            return []
        cont = state.progress.contiguous_upto
        start = max(cont + 1 if cont is not None else 0, state.pruned_before or 0)
        base = start - 1  # every seq up to here is stored, or gone from the table's journal
        found: list[tuple[int, int]] = []
        first = await self._query(
            "SELECT MIN(record_seq) FROM messages WHERE table_id = ? AND record_seq > ?",
            (table, base),
        )
        if first and first[0][0] is not None and first[0][0] > start:
            found.append((start, first[0][0] - 1))
        rows = await self._query(
            "SELECT prev + 1, seq - 1 FROM (SELECT record_seq AS seq, LAG(record_seq) OVER "
            "(ORDER BY record_seq) AS prev FROM messages WHERE table_id = ? AND record_seq > ?) "
            "AS w WHERE prev IS NOT NULL AND seq > prev + 1 ORDER BY seq LIMIT ?",
            (table, base, limit),
        )
        found.extend((a, b) for a, b in rows)
        return found

    async def problems(self, table: str, limit: int = 100) -> list[Problem]:
        rows = await self._query(
            "SELECT table_id, seq, what, at FROM floor_problems WHERE table_id = ? "
            "ORDER BY seq, at LIMIT ?",
            (table, limit),
        )
        return [Problem(*row) for row in rows]

    async def claims(self, table: str, seq: int) -> list[Message]:
        """The conflicts kept for the table's seq (records that came for it with other content
        than the one stored), oldest first: one the chain vouches for takes the seq
        (``promote``)."""
        rows = await self._query(
            f"{_SELECT} WHERE table_id = ? AND seq = ? AND kind = 'conflict' ORDER BY id",
            (table, seq),
        )
        return [_message(row) for row in rows]

    async def records(
        self, table: str, first: int = 0, last: int = 2**62, limit: int = 10_000
    ) -> list[Message]:
        """The table's journal records stored, in seq order, ``first``..``last``."""
        rows = await self._query(
            f"{_SELECT} WHERE table_id = ? AND record_seq >= ? AND record_seq <= ? "
            "ORDER BY record_seq LIMIT ?",
            (table, first, last, limit),
        )
        return [_message(row) for row in rows]

    async def messages(
        self, table: str, topic: str | None = None, limit: int = 100, kind: Kind | None = None
    ) -> list[Message]:
        """The table's newest messages (every kind), newest first; of one topic if given."""
        where, params = ["table_id = ?"], [table]
        if topic is not None:
            where.append("topic = ?")
            params.append(topic)
        if kind is not None:
            where.append("kind = ?")
            params.append(kind)
        rows = await self._query(
            f"{_SELECT} WHERE {' AND '.join(where)} ORDER BY id DESC LIMIT ?", (*params, limit)
        )
        return [_message(row) for row in rows]

    async def count(self, table: str | None = None) -> int:
        """Messages stored, of one table or of all."""
        if table is None:
            rows = await self._query("SELECT COUNT(*) FROM messages")
        else:
            rows = await self._query("SELECT COUNT(*) FROM messages WHERE table_id = ?", (table,))
        return int(rows[0][0])


_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    id {id},
    table_id TEXT NOT NULL,
    topic TEXT NOT NULL,
    kind TEXT NOT NULL,
    seq BIGINT,
    record_seq BIGINT,
    payload {blob} NOT NULL,
    retain SMALLINT NOT NULL,
    republished SMALLINT NOT NULL,
    redelivered SMALLINT NOT NULL,
    will SMALLINT NOT NULL,
    replayed SMALLINT NOT NULL,
    arrival DOUBLE PRECISION NOT NULL,
    ts TEXT,
    chain_prev {blob},
    chain_hash {blob},
    chain_ts DOUBLE PRECISION,
    verdict TEXT NOT NULL,
    reason TEXT NOT NULL,
    flagged TEXT,
    UNIQUE (table_id, record_seq)
);
CREATE INDEX IF NOT EXISTS messages_by_topic ON messages (table_id, topic, id);
CREATE INDEX IF NOT EXISTS messages_by_table ON messages (table_id, id);
CREATE INDEX IF NOT EXISTS messages_claims ON messages (table_id, seq) WHERE kind = 'conflict';
CREATE INDEX IF NOT EXISTS messages_withheld ON messages (table_id, record_seq)
    WHERE verdict = 'withheld';
CREATE TABLE IF NOT EXISTS floor_tables (
    table_id TEXT PRIMARY KEY,
    highest_seq BIGINT,
    records BIGINT NOT NULL DEFAULT 0,
    duplicates BIGINT NOT NULL DEFAULT 0,
    conflicts BIGINT NOT NULL DEFAULT 0,
    last_heard DOUBLE PRECISION,
    contiguous_upto BIGINT,
    contiguous_hash {blob},
    verified_upto BIGINT,
    signed_upto BIGINT,
    broken SMALLINT NOT NULL DEFAULT 0,
    pruned_before BIGINT,
    key_hex TEXT,
    flagged TEXT
);
CREATE TABLE IF NOT EXISTS floor_software (
    manifest_sha256 TEXT PRIMARY KEY,
    note TEXT,
    approved_at DOUBLE PRECISION NOT NULL
);
CREATE TABLE IF NOT EXISTS floor_enrolments (
    id {id},
    table_id TEXT NOT NULL,
    key_hex TEXT NOT NULL,
    action TEXT NOT NULL,
    by_login TEXT NOT NULL,
    via TEXT NOT NULL,
    at DOUBLE PRECISION NOT NULL,
    reason TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS floor_enrolments_by_table ON floor_enrolments (table_id, at);
CREATE TABLE IF NOT EXISTS floor_problems (
    table_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    what TEXT NOT NULL,
    at DOUBLE PRECISION NOT NULL,
    UNIQUE (table_id, seq, what)
);
"""


#: columns added since the first schema, for a store made before them: (name, type)
ADDED_COLUMNS = (("flagged", "TEXT"),)


def schema(*, id: str, blob: str) -> list[str]:
    """The schema's statements in an engine's types."""
    text = _SCHEMA.format(id=id, blob=blob)
    return [s.strip() for s in text.split(";") if s.strip()]


def _now() -> float:
    import time

    return time.time()


def open_store(url: str) -> Store:
    """The store a URL names: ``sqlite:///path/floor.db`` or ``postgresql://user@host/db``.
    ValueError says what is wrong with it. Call ``open()`` (or ``async with``) before use."""
    if url.startswith("sqlite:///"):
        from tableside.floor.sqlite import SqliteStore

        # sqlite:///var/lib/x.db and sqlite:////var/lib/x.db are absolute, sqlite:///./x.db not
        path = url.removeprefix("sqlite:///")
        if not path.strip("/"):
            raise ValueError(f"{url}: name a file, e.g. sqlite:///var/lib/tableside-floor/floor.db")
        if not path.startswith(("/", "./", "../")):
            path = "/" + path
        return SqliteStore(url, path)
    if url.startswith(("postgresql://", "postgres://")):
        from tableside.floor.postgres import PostgresStore

        return PostgresStore(url)
    raise ValueError(
        f"{url!r}: a store is sqlite:///PATH (e.g. sqlite:///tmp/floor.db) or postgresql://…"
    )
