"""Numbering and chaining, on the event loop and with no I/O: each record gets the next seq, a
time that never goes back along the seqs, and a hash over the one before (docs/journal.md,
"Tamper evidence" and "Time")."""

from __future__ import annotations

from collections.abc import Callable

from tableside.daemon.clock import RunClock
from tableside.daemon.journal.file import GENESIS, Record, record_hash


class Chain:
    """The journal's one numbering: nothing is carried in and checked back."""

    def __init__(self) -> None:
        self.next_seq = 0
        self._last_hash = GENESIS
        self._last_ts = 0.0

    def reset(self, last_seq: int, last_hash: bytes, newest_ts: float) -> None:
        """Carry on after the journal's last record (``newest_ts``: the newest time it holds)."""
        self.next_seq = last_seq + 1
        self._last_hash = last_hash
        self._last_ts = newest_ts

    def mark(self) -> tuple[int, bytes, float]:
        """Where the chain is now, to ``rewind`` to."""
        return self.next_seq, self._last_hash, self._last_ts

    def rewind(self, mark: tuple[int, bytes, float]) -> None:
        """Back to ``mark``: the records numbered since are taken back (none was queued)."""
        self.next_seq, self._last_hash, self._last_ts = mark

    @property
    def head(self) -> tuple[int, bytes]:
        """The newest record's seq and hash."""
        return self.next_seq - 1, self._last_hash

    def next(
        self,
        topic: str,
        payload: Callable[[int], bytes],
        *,
        retain: bool,
        key: str | None,
        ts: float | None,
        clock: RunClock,
    ) -> Record:
        """The next record: its payload made with its seq (``payload(seq)``), its time ``ts``
        (``clock``'s now when not given; an older reading than the last record's takes that
        record's), chained to the last; ``key`` defaults to the topic of a retained message."""
        seq = self.next_seq
        data = payload(seq)
        if ts is None or ts < self._last_ts:  # never back along the seqs (an older reading)
            ts = clock.now() if ts is None else self._last_ts
        self._last_ts = ts
        prev = self._last_hash
        digest = record_hash(prev, seq, ts, topic, retain, data)
        key = key or (topic if retain else None)
        self._last_hash = digest
        self.next_seq = seq + 1
        return Record(seq, ts, topic, retain, data, prev, digest, key)
