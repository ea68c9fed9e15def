"""The durable journal: every message the table sends is written here before it is sent.

One SQLite file per table, ``<state_dir>/<table>/journal.sqlite``, in WAL mode with
``synchronous=FULL``: a committed record survives a crash of the daemon and a loss of power.

Appending never blocks the event loop. The loop numbers a record (its ``seq``), chains its hash
to the previous record and hands it to a dedicated writer thread, which commits whatever has
queued up in one transaction (group commit: one fsync for a burst of events, not one each —
docs/journal.md has the measured rates that decided this). The publisher sends only records
the writer has committed (``durable_seq``), so the broker never has a message the journal could
forget, and ``seq`` continues from the journal after any restart without a gap.

Tamper evidence: each record's hash covers the previous record's hash, its seq, time, topic,
retain flag and payload. ``verify()`` recomputes the chain and finds an edited, inserted or
removed record. Retention deletes only records the broker has acknowledged; the hash of the last
deleted record is kept as the anchor the remaining chain starts from.

Derived, not chained: ``latest`` keeps the newest payload per key (each retained topic, each
device's last event of each kind) so a restarted daemon restores the table without reading the
whole journal, and ``meta.acked`` is the highest seq the broker acknowledged (written lazily:
after a crash the records since the last write are sent again, marked ``redelivered``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import itertools
import json
import os
import queue
import sqlite3
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

__all__ = [
    "FORMAT",
    "Journal",
    "JournalCorrupt",
    "JournalError",
    "Problem",
    "Record",
    "export_records",
    "record_hash",
    "recover",
    "verify_file",
]

log = structlog.get_logger("tableside.journal")

FORMAT = "1"
_GENESIS = b"\x00" * 32

_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    seq INTEGER PRIMARY KEY,
    ts REAL NOT NULL,
    topic TEXT NOT NULL,
    retain INTEGER NOT NULL,
    payload BLOB NOT NULL,
    prev_hash BLOB NOT NULL,
    hash BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS latest (
    key TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    payload BLOB NOT NULL
);
"""


class JournalError(RuntimeError):
    """The journal cannot be written (disk full, I/O error): nothing more can be sent."""


class JournalCorrupt(JournalError):
    """The journal on disk fails its checks; the daemon will not start on it."""


def record_hash(
    prev: bytes, seq: int, ts: float, topic: str, retain: bool, payload: bytes
) -> bytes:
    topic_bytes = topic.encode()
    head = struct.pack(">qd?I", seq, ts, retain, len(topic_bytes))
    return hashlib.sha256(prev + head + topic_bytes + payload).digest()


@dataclass(frozen=True, slots=True)
class Record:
    seq: int
    ts: float
    topic: str
    retain: bool
    payload: bytes
    prev_hash: bytes
    hash: bytes
    #: where ``latest`` keeps it (not part of the hash: ``latest`` is derived)
    key: str | None = None


@dataclass(frozen=True, slots=True)
class Problem:
    seq: int
    what: str

    def __str__(self) -> str:
        return f"seq {self.seq}: {self.what}"


def _connect(path: Path, *, readonly: bool = False) -> sqlite3.Connection:
    if readonly:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    else:
        conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA busy_timeout=5000")
    return conn


def _meta(conn: sqlite3.Connection) -> dict[str, str]:
    return dict(conn.execute("SELECT key, value FROM meta").fetchall())


def verify_file(path: Path, *, table: str | None = None) -> tuple[dict[str, Any], list[Problem]]:
    """Check a journal: SQLite's own integrity check, then the whole hash chain.

    Returns a summary (first/last seq, records, acked) and the problems found, first first."""
    if not path.is_file():
        raise FileNotFoundError(f"no journal at {path}")
    conn = _connect(path, readonly=True)
    try:
        return _verify(conn, table)
    except sqlite3.DatabaseError as exc:
        return {"path": str(path)}, [Problem(-1, f"not a readable journal: {exc}")]
    finally:
        conn.close()


def _verify(conn: sqlite3.Connection, table: str | None) -> tuple[dict[str, Any], list[Problem]]:
    problems: list[Problem] = []
    check = [row[0] for row in conn.execute("PRAGMA quick_check").fetchall()]
    if check != ["ok"]:
        problems.append(Problem(-1, "sqlite: " + "; ".join(check[:5])))
        return {}, problems
    meta = _meta(conn)
    if meta.get("format") != FORMAT:
        problems.append(Problem(-1, f"unknown journal format {meta.get('format')!r}"))
        return meta, problems
    if table is not None and meta.get("table") != table:
        problems.append(Problem(-1, f"journal of table {meta.get('table')!r}, not {table!r}"))
    expected_seq = int(meta["anchor_seq"]) + 1
    prev = bytes.fromhex(meta["anchor_hash"])
    count = 0
    last = expected_seq - 1
    for seq, ts, topic, retain, payload, prev_hash, digest in conn.execute(
        "SELECT seq, ts, topic, retain, payload, prev_hash, hash FROM records ORDER BY seq"
    ):
        count += 1
        if seq != expected_seq:
            what = "missing" if seq > expected_seq else "unexpected"
            problems.append(Problem(expected_seq, f"{what}: next record is seq {seq}"))
        if bytes(prev_hash) != prev:
            problems.append(Problem(seq, "chain broken: previous hash does not match"))
        computed = record_hash(bytes(prev_hash), seq, ts, topic, bool(retain), bytes(payload))
        if computed != bytes(digest):
            problems.append(Problem(seq, "edited: content does not match its hash"))
        prev, expected_seq, last = bytes(digest), seq + 1, seq
        if len(problems) >= 100:
            break
    summary = {
        "table": meta.get("table"),
        "first_seq": int(meta["anchor_seq"]) + 1,
        "last_seq": last,
        "records": count,
        "acked": int(meta.get("acked", "-1")),
        "last_hash": prev.hex(),
    }
    return summary, problems


class Journal:
    """The table's journal; ``open()`` checks it, ``start()`` begins the writer thread."""

    def __init__(
        self,
        path: Path,
        table: str,
        *,
        retain_days: float | None = None,
        max_mb: float | None = None,
        cache: int = 10_000,
        batch: int = 2_000,
        prune_every_s: float = 60.0,
    ) -> None:
        self.prune_every_s = prune_every_s
        self.path = path
        self.table = table
        self.retain_days = retain_days
        self.max_mb = max_mb
        self._cache_limit = cache
        self._batch = batch
        self._conn: sqlite3.Connection | None = None
        self._reader: sqlite3.Connection | None = None
        self._read_lock = asyncio.Lock()
        self._queue: queue.SimpleQueue[Record | None] = queue.SimpleQueue()
        # the writer thread and a prune() called from outside never share a transaction
        self._db_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cache: collections.deque[Record] = collections.deque()
        self._durable_changed = asyncio.Event()
        self.failed: asyncio.Future[None] | None = None
        self.next_seq = 0
        self.durable_seq = -1
        self.acked = -1
        self._acked_written = -1
        self._last_hash = _GENESIS
        self.recovered_acked = -1
        self.commits = 0
        self.pruned = 0

    # -- opening ---------------------------------------------------------------------------

    def open(self) -> None:
        """Create or check the journal. A journal that fails its checks raises JournalCorrupt
        with the way to recover; it is never silently replaced."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.path.exists() or self.path.stat().st_size == 0
        try:
            conn = _connect(self.path)
            if new:
                self._initialise(conn)
            summary, problems = _verify(conn, self.table)
        except sqlite3.DatabaseError as exc:
            raise self._corrupt(f"not a readable journal ({exc})") from exc
        if problems:
            conn.close()
            listed = "; ".join(str(p) for p in problems[:3])
            raise self._corrupt(f"{len(problems)} problem(s): {listed}")
        self._conn = conn
        self.next_seq = summary["last_seq"] + 1
        self.durable_seq = summary["last_seq"]
        self.acked = self._acked_written = self.recovered_acked = summary["acked"]
        self._last_hash = bytes.fromhex(summary["last_hash"])
        log.info("journal_opened", path=str(self.path), next_seq=self.next_seq,
                 unsent=self.durable_seq - self.acked, records=summary["records"])  # fmt: skip

    def _initialise(self, conn: sqlite3.Connection) -> None:
        # A table that numbered its messages before the journal existed (seq.json) carries on
        # after the last number it may have used, so no subscriber sees a number twice.
        start = 0
        legacy = self.path.parent / "seq.json"
        with contextlib.suppress(FileNotFoundError, ValueError, KeyError, TypeError):
            state = json.loads(legacy.read_text(encoding="utf-8"))
            start = int(state["last"] if state.get("clean") else state["reserved"]) + 1
        _create(conn, self.table, start - 1, _GENESIS)

    def _corrupt(self, detail: str) -> JournalCorrupt:
        return JournalCorrupt(
            f"journal {self.path} fails its checks: {detail}. The daemon will not start on it, "
            "since sequence numbers and unsent messages would be lost. To recover: stop the "
            f"daemon, run `tableside journal verify {self.path}` to see where it breaks, keep "
            f"a copy for the auditors, then `tableside journal recover {self.path}` sets it "
            "aside and starts a new journal that carries on after its highest seq."
        )

    # -- the writer thread -----------------------------------------------------------------

    def start(self) -> None:
        """Start the writer thread; call from the event loop that appends."""
        if self._conn is None:
            self.open()
        self._loop = asyncio.get_running_loop()
        self.failed = self._loop.create_future()
        self._thread = threading.Thread(target=self._write_loop, name="journal-writer", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Commit what is queued, record the acknowledged mark, stop the thread."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._write_acked(self._conn)
            self._conn.close()
            self._conn = None
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def _write_loop(self) -> None:
        conn = self._conn
        assert conn is not None
        last_prune = time.monotonic()
        stopping = False
        while not stopping:
            items: list[Record | None] = []
            with contextlib.suppress(queue.Empty):
                items.append(self._queue.get(timeout=0.5))
            items.extend(_drain(self._queue, self._batch))
            batch = [item for item in items if item is not None]
            stopping = len(batch) < len(items)
            try:
                if batch:
                    self._commit(conn, batch)
                elif self.acked != self._acked_written:
                    with self._db_lock:
                        self._write_acked(conn)
                if time.monotonic() - last_prune > self.prune_every_s:
                    last_prune = time.monotonic()
                    self.prune()
            except Exception as exc:  # disk full, I/O error: loud, and the daemon stops
                log.critical("journal_write_failed", path=str(self.path), error=str(exc))
                self._tell_loop(self._fail, JournalError(f"journal {self.path}: {exc}"))
                return

    def _commit(self, conn: sqlite3.Connection, batch: list[Record]) -> None:
        latest = {r.key: r for r in batch if r.key is not None}
        with self._db_lock:
            self._commit_locked(conn, batch, latest)
        self.commits += 1
        self._tell_loop(self._on_durable, batch[-1].seq)

    def _commit_locked(
        self, conn: sqlite3.Connection, batch: list[Record], latest: dict[str, Record]
    ) -> None:
        conn.execute("BEGIN")
        try:
            conn.executemany(
                "INSERT INTO records VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(r.seq, r.ts, r.topic, r.retain, r.payload, r.prev_hash, r.hash) for r in batch],
            )
            conn.executemany(
                "INSERT OR REPLACE INTO latest VALUES (?, ?, ?)",
                [(k, r.seq, r.payload) for k, r in latest.items()],
            )
            if self.acked != self._acked_written:
                acked = self.acked
                conn.execute("UPDATE meta SET value = ? WHERE key = 'acked'", (str(acked),))
                self._acked_written = acked
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise

    def _write_acked(self, conn: sqlite3.Connection) -> None:
        acked = self.acked
        conn.execute("UPDATE meta SET value = ? WHERE key = 'acked'", (str(acked),))
        self._acked_written = acked

    def prune(self) -> int:
        """Delete acknowledged records older than ``retain_days`` or beyond ``max_mb``; never
        one the broker has not acknowledged. Returns how many went."""
        conn = self._conn
        if conn is None:
            return 0
        with self._db_lock:
            return self._prune_locked(conn)

    def _prune_locked(self, conn: sqlite3.Connection) -> int:
        acked = int(_meta(conn)["acked"])
        limit_seq = -1
        if self.retain_days is not None:
            cutoff = time.time() - self.retain_days * 86400
            row = conn.execute(
                "SELECT max(seq) FROM records WHERE ts < ? AND seq <= ?", (cutoff, acked)
            ).fetchone()
            limit_seq = max(limit_seq, row[0] if row[0] is not None else -1)
        if self.max_mb is not None:
            page_size = conn.execute("PRAGMA page_size").fetchone()[0]
            pages, free = (conn.execute(f"PRAGMA {p}").fetchone()[0]
                           for p in ("page_count", "freelist_count"))  # fmt: skip
            used = (pages - free) * page_size
            budget = self.max_mb * 1_000_000 * 0.9
            if used > budget:
                lo, hi, count = conn.execute(
                    "SELECT min(seq), max(seq), count(*) FROM records"
                ).fetchone()
                if count:
                    excess = int(count * (1 - budget / used)) + 1
                    limit_seq = max(limit_seq, min(lo + excess - 1, acked))
                    if lo + excess - 1 > acked:
                        log.error("journal_over_size_with_unsent", path=str(self.path),
                                  used_mb=round(used / 1e6, 1), unsent=hi - acked)  # fmt: skip
        if limit_seq < 0:
            return 0
        row = conn.execute("SELECT hash FROM records WHERE seq = ?", (limit_seq,)).fetchone()
        if row is None:
            return 0
        conn.execute("BEGIN")
        deleted = conn.execute("DELETE FROM records WHERE seq <= ?", (limit_seq,)).rowcount
        conn.execute("UPDATE meta SET value = ? WHERE key = 'anchor_seq'", (str(limit_seq),))
        conn.execute("UPDATE meta SET value = ? WHERE key = 'anchor_hash'", (bytes(row[0]).hex(),))
        conn.execute("COMMIT")
        self.pruned += deleted
        log.info("journal_pruned", records=deleted, through_seq=limit_seq)
        return deleted

    def _tell_loop(self, callback: Any, arg: Any) -> None:
        loop = self._loop
        if loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop has already closed
            loop.call_soon_threadsafe(callback, arg)

    def _on_durable(self, seq: int) -> None:
        self.durable_seq = max(self.durable_seq, seq)
        self._durable_changed.set()

    def _fail(self, exc: JournalError) -> None:
        if self.failed is not None and not self.failed.done():
            self.failed.set_exception(exc)

    # -- what the daemon calls (event loop) ------------------------------------------------

    def append(
        self, seq: int, topic: str, payload: bytes, *, retain: bool, key: str | None
    ) -> None:
        """Journal the next record. ``seq`` must be ``next_seq``: records go in order."""
        if seq != self.next_seq:
            raise JournalError(f"record {seq} out of order: the journal expects {self.next_seq}")
        if self._thread is None:
            raise JournalError("journal not started")
        ts = time.time()
        digest = record_hash(self._last_hash, seq, ts, topic, retain, payload)
        key = key or (topic if retain else None)
        record = Record(seq, ts, topic, retain, payload, self._last_hash, digest, key)
        self._last_hash = digest
        self.next_seq = seq + 1
        self._cache.append(record)
        if len(self._cache) > self._cache_limit:
            self._cache.popleft()  # still on disk; read back from there when needed
        self._queue.put(record)

    def mark_acked(self, seq: int) -> None:
        """The broker acknowledged everything up to ``seq``."""
        if seq > self.acked:
            self.acked = seq
            while self._cache and self._cache[0].seq <= seq:
                self._cache.popleft()

    async def wait_durable(self, seq: int) -> None:
        """Until the record ``seq`` has been committed."""
        while self.durable_seq < seq:
            self._durable_changed.clear()
            await self._durable_changed.wait()

    async def read_from(self, seq: int, limit: int) -> list[Record]:
        """Committed records from ``seq`` on, at most ``limit``; from memory when it has them."""
        end = min(self.durable_seq, seq + limit - 1)
        if end < seq:
            return []
        if self._cache and self._cache[0].seq <= seq:
            start = seq - self._cache[0].seq
            return list(itertools.islice(self._cache, start, start + end - seq + 1))
        async with self._read_lock:
            return await asyncio.to_thread(self._read_disk, seq, end)

    def _read_disk(self, first: int, last: int) -> list[Record]:
        if self._reader is None:
            self._reader = _connect(self.path, readonly=True)
        rows = self._reader.execute(
            "SELECT seq, ts, topic, retain, payload, prev_hash, hash FROM records "
            "WHERE seq BETWEEN ? AND ? ORDER BY seq",
            (first, last),
        ).fetchall()
        return [Record(s, t, tp, bool(r), bytes(p), bytes(ph), bytes(h))
                for s, t, tp, r, p, ph, h in rows]  # fmt: skip

    def latest(self) -> dict[str, bytes]:
        """The newest payload per key, as of the last start (for restoring the table)."""
        conn = self._conn
        if conn is None:
            raise JournalError("journal not open")
        return {k: bytes(p) for k, p in conn.execute("SELECT key, payload FROM latest")}


# -- export and recovery (the CLI's `tableside journal …`) ----------------------------------


def export_records(
    path: Path, first: int | None = None, last: int | None = None
) -> Iterator[dict[str, Any]]:
    """Every record as a JSON-able dict (payload decoded when it is JSON), in seq order."""
    conn = _connect(path, readonly=True)
    try:
        rows = conn.execute(
            "SELECT seq, ts, topic, retain, payload, prev_hash, hash FROM records "
            "WHERE seq >= ? AND seq <= ? ORDER BY seq",
            (first if first is not None else -1, last if last is not None else 2**62),
        )
        for seq, ts, topic, retain, payload, prev_hash, digest in rows:
            raw = bytes(payload)
            try:
                body: Any = json.loads(raw)
            except ValueError:
                body = {"raw_hex": raw.hex()}
            yield {
                "seq": seq,
                "journal_ts": ts,
                "topic": topic,
                "retain": bool(retain),
                "payload": body,
                "prev_hash": bytes(prev_hash).hex(),
                "hash": bytes(digest).hex(),
            }
    finally:
        conn.close()


def _create(
    conn: sqlite3.Connection, table: str, anchor_seq: int, anchor_hash: bytes, **extra: str
) -> None:
    meta = {
        "format": FORMAT,
        "table": table,
        "anchor_seq": str(anchor_seq),
        "anchor_hash": anchor_hash.hex(),
        "acked": str(anchor_seq),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **extra,
    }
    conn.executescript(_SCHEMA)
    conn.execute("BEGIN")
    conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", meta.items())
    conn.execute("COMMIT")


def recover(path: Path, table: str, *, after_seq: int | None = None) -> tuple[Path, int]:
    """Set a journal that fails its checks aside (nothing is deleted) and start a new one whose
    numbering carries on after the highest seq the old one holds or acknowledged, anchored to
    the newest record whose hash still checks. Returns (where the old one went, that seq)."""
    highest, anchor = -1, _GENESIS
    with contextlib.suppress(sqlite3.Error):
        conn = _connect(path, readonly=True)
        try:
            row = conn.execute("SELECT max(seq) FROM records").fetchone()
            highest = row[0] if row and row[0] is not None else -1
            with contextlib.suppress(sqlite3.Error, KeyError, ValueError):
                highest = max(highest, int(_meta(conn)["acked"]))
            for seq, ts, topic, retain, payload, prev, digest in conn.execute(
                "SELECT seq, ts, topic, retain, payload, prev_hash, hash FROM records "
                "ORDER BY seq DESC LIMIT 100"
            ):
                if record_hash(bytes(prev), seq, ts, topic, bool(retain), bytes(payload)) == bytes(
                    digest
                ):
                    anchor = bytes(digest)
                    break
        finally:
            conn.close()
    if after_seq is not None:
        highest = max(highest, after_seq)
    elif highest < 0:
        raise JournalError(
            f"{path}: cannot read how far its numbering went; give the last seq the table used "
            "(--after-seq, from a subscriber's record) so no number is used twice"
        )
    aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    for suffix in ("", "-wal", "-shm"):
        part = Path(str(path) + suffix)
        if part.exists():
            os.replace(part, Path(str(aside) + suffix))
    conn = _connect(path)
    try:
        _create(conn, table, highest, anchor, previous=str(aside))
    finally:
        conn.close()
    return aside, highest


def _drain(q: queue.SimpleQueue[Record | None], limit: int) -> Iterator[Record | None]:
    for _ in range(limit):
        try:
            yield q.get_nowait()
        except queue.Empty:
            return
