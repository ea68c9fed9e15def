"""Retention: acknowledged records older than ``retain_days`` or beyond ``max_mb`` are deleted,
never one the broker has not acknowledged; the hash of the last one deleted is the anchor the
remaining chain starts from. Age is the run's clock's (docs/journal.md, "Retention and size")."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import structlog

from tableside.daemon.clock import RunClock
from tableside.daemon.journal.file import read_meta, seq_range

log = structlog.get_logger("tableside.journal")


def last_before(conn: sqlite3.Connection, cutoff: float, through: int) -> int:
    """The last seq at or below ``through`` whose time is before ``cutoff``, -1 if none.

    Record times never go back along the seqs (the run's clock starts after the newest time
    the journal holds: docs/journal.md, Time), so a binary search by seq finds it in some
    twenty lookups. A scan of ``ts`` took 30-44 ms for 200,000 records, on the writer thread
    every minute, and grows with the journal."""
    lo, hi = seq_range(conn)
    if lo is None or hi is None:
        return -1
    hi = min(hi, through)
    found = -1
    while lo <= hi:
        mid = (lo + hi) // 2
        row = conn.execute("SELECT ts FROM records WHERE seq >= ? ORDER BY seq LIMIT 1",
                           (mid,)).fetchone()  # fmt: skip
        if row is None or row[0] >= cutoff:
            hi = mid - 1
        else:
            found, lo = mid, mid + 1
    return found


class Retention:
    """What may go, and deleting it (in one transaction, the caller holding the write lock)."""

    def __init__(self, path: Path, retain_days: float | None, max_mb: float | None) -> None:
        self.path = path
        self.retain_days = retain_days
        self.max_mb = max_mb
        self.pruned = 0
        self._wall_offset_said = 0.0

    def prune(self, conn: sqlite3.Connection, clock: RunClock) -> int:
        """Delete what may go; returns how many records went."""
        acked = int(read_meta(conn)["acked"])
        limit_seq = max(self._by_age(conn, clock, acked), self._by_size(conn, acked))
        if limit_seq < 0:
            return 0
        row = conn.execute(
            "SELECT hash, (SELECT max(ts) FROM records WHERE seq <= ?) FROM records WHERE seq = ?",
            (limit_seq, limit_seq),
        ).fetchone()
        if row is None:
            return 0
        conn.execute("BEGIN")
        deleted = conn.execute("DELETE FROM records WHERE seq <= ?", (limit_seq,)).rowcount
        conn.execute("UPDATE meta SET value = ? WHERE key = 'anchor_seq'", (str(limit_seq),))
        conn.execute("UPDATE meta SET value = ? WHERE key = 'anchor_hash'", (bytes(row[0]).hex(),))
        # the newest time deleted: the clock of a later run never starts before it
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('clock_floor', ?)", (repr(row[1]),))
        conn.execute("COMMIT")
        self.pruned += deleted
        log.info("journal_pruned", records=deleted, through_seq=limit_seq)
        return deleted

    def _by_age(self, conn: sqlite3.Connection, clock: RunClock, acked: int) -> int:
        """The last acknowledged seq older than ``retain_days``, -1 if none (or no limit)."""
        if self.retain_days is None:
            return -1
        # the run's clock: a wall clock stepped forward must not make records older
        return last_before(conn, clock.now() - self.retain_days * 86400, acked)

    def _by_size(self, conn: sqlite3.Connection, acked: int) -> int:
        """The last seq to go to bring the file under 90% of ``max_mb``, at most ``acked``."""
        if self.max_mb is None:
            return -1
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        pages, free = (conn.execute(f"PRAGMA {p}").fetchone()[0]
                       for p in ("page_count", "freelist_count"))  # fmt: skip
        used = (pages - free) * page_size
        budget = self.max_mb * 1_000_000 * 0.9
        if used <= budget:
            return -1
        lo, hi = seq_range(conn)
        if lo is None or hi is None:
            return -1
        count = hi - lo + 1  # seqs have no gaps (verify says so)
        excess = int(count * (1 - budget / used)) + 1
        if lo + excess - 1 > acked:
            log.error("journal_over_size_with_unsent", path=str(self.path),
                      used_mb=round(used / 1e6, 1), unsent=hi - acked)  # fmt: skip
        return min(lo + excess - 1, acked)

    def say_wall_offset(self, clock: RunClock) -> None:
        """A stepped wall clock changes nothing here (daemon/clock.py), but it is said (on the
        writer thread, with each retention check)."""
        if clock.test is not None:
            return  # a lab's clock runs away from the wall clock on purpose
        offset = clock.wall_offset()
        if abs(offset - self._wall_offset_said) > 60:
            self._wall_offset_said = offset
            log.warning("wall_clock_stepped", path=str(self.path), offset_s=round(offset, 1))
