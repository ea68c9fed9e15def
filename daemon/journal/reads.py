"""Reads for the publisher: the newest records from memory (at most ``limit``, none the broker
has acknowledged), older ones read back from disk on a thread of asyncio's (docs/journal.md:
while the broker is away, records wait on disk, not in memory)."""

from __future__ import annotations

import asyncio
import collections
import itertools
import sqlite3
from collections.abc import Callable
from pathlib import Path

from tableside.daemon.journal.file import Record, connect_db


class Reads:
    """Records by seq; what is asked for is up to ``durable`` (the caller's ``durable_seq``)."""

    def __init__(self, path: Path, limit: int, stored: Callable[[int], None]) -> None:
        self.path = path
        #: returns once SQLite holds the records up to a seq (a durable record may be a
        #: transaction away from it: the log is synced first)
        self._stored = stored
        self._limit = limit
        self._cache: collections.deque[Record] = collections.deque()
        self._reader: sqlite3.Connection | None = None
        self._read_lock = asyncio.Lock()

    def add(self, record: Record) -> None:
        """The newest record (on the loop, as it is appended)."""
        self._cache.append(record)
        if len(self._cache) > self._limit:
            self._cache.popleft()  # still on disk; read back from there when needed

    def acked(self, seq: int) -> None:
        """The broker has everything up to ``seq``: memory need not keep it."""
        while self._cache and self._cache[0].seq <= seq:
            self._cache.popleft()

    def cached(self, seq: int, limit: int, durable: int) -> list[Record] | None:
        """Records ``seq``.. (at most ``limit``, none past ``durable``) when memory has them
        all; None: they are to be read from disk (``read``)."""
        end = min(durable, seq + limit - 1)
        if end < seq:
            return []
        if self._cache and self._cache[0].seq <= seq:
            start = seq - self._cache[0].seq
            return list(itertools.islice(self._cache, start, start + end - seq + 1))
        return None

    async def read(self, seq: int, limit: int, durable: int) -> list[Record]:
        """Records ``seq``.. (at most ``limit``, none past ``durable``); from memory when it
        has them, else from disk, one read at a time."""
        cached = self.cached(seq, limit, durable)
        if cached is not None:
            return cached
        end = min(durable, seq + limit - 1)
        async with self._read_lock:
            return await asyncio.to_thread(self._read_disk, seq, end)

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def _read_disk(self, first: int, last: int) -> list[Record]:
        self._stored(last)
        if self._reader is None:
            self._reader = connect_db(self.path, readonly=True)
        rows = self._reader.execute(
            "SELECT seq, ts, topic, retain, payload, prev_hash, hash FROM records "
            "WHERE seq BETWEEN ? AND ? ORDER BY seq",
            (first, last),
        ).fetchall()
        return [Record(s, t, tp, bool(r), bytes(p), bytes(ph), bytes(h))
                for s, t, tp, r, p, ph, h in rows]  # fmt: skip
