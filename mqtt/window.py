"""The table's in-flight window, as bookkeeping only (no I/O, no clock of its own): records in,
publishes out, PUBACKs in, acknowledged seqs out.

The publisher (daemon/publisher.py) sends the journal's records in seq order, QoS 1, at most
``size`` unacknowledged; the broker acknowledges in order on one connection, but a seq counts
as acknowledged here only once every seq before it is, so the journal's acknowledged mark
never passes a hole. A record that may already have reached the broker (at or below
``attempted``: sent on an earlier connection or by an earlier run) is a redelivery, and goes
out marked so (docs/mqtt.md). One window per connection: what it had in flight when the
connection dropped is sent again from the journal's acknowledged mark on the next.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

__all__ = ["Sent", "Window"]


@dataclass(frozen=True, slots=True)
class Sent:
    """One record in flight: its seq, the packet id it went with, when (the caller's clock)."""

    seq: int
    packet_id: int
    at: float


class Window:
    """``cursor``: the next seq to send; ``attempted``: the highest seq that may have reached
    the broker on any connection so far."""

    def __init__(self, size: int, *, cursor: int, attempted: int) -> None:
        if size < 1:
            raise ValueError(f"a window of {size}: at least 1")
        self.size = size
        self.cursor = cursor
        self.attempted = attempted
        self._inflight: collections.deque[Sent] = collections.deque()
        self._seq_of: dict[int, int] = {}  # packet id → seq, until its PUBACK
        self._done: set[int] = set()  # seqs acknowledged behind an older one that is not

    @property
    def room(self) -> int:
        return self.size - len(self._inflight)

    def __len__(self) -> int:
        return len(self._inflight)

    def send(self, seq: int, packet_id: int, at: float) -> bool:
        """Record ``seq`` as sent with ``packet_id``; True when it is a redelivery. Records go
        in seq order, one at a time, while there is room."""
        if seq != self.cursor:
            raise ValueError(f"seq {seq} sent out of order: the next is {self.cursor}")
        if not self.room:
            raise ValueError(f"seq {seq} sent into a full window of {self.size}")
        if packet_id in self._seq_of:
            held = self._seq_of[packet_id]
            raise ValueError(f"packet id {packet_id} is in flight already (seq {held})")
        again = seq <= self.attempted
        self.attempted = max(self.attempted, seq)
        self.cursor = seq + 1
        self._inflight.append(Sent(seq, packet_id, at))
        self._seq_of[packet_id] = seq
        return again

    def acknowledged(self, packet_id: int) -> list[int]:
        """A PUBACK for ``packet_id``: the seqs now acknowledged in order (none while an older
        one is still out; an unknown or repeated packet id acknowledges nothing)."""
        seq = self._seq_of.pop(packet_id, None)
        if seq is None:
            return []
        self._done.add(seq)
        out: list[int] = []
        inflight, done = self._inflight, self._done
        while inflight and inflight[0].seq in done:
            first = inflight.popleft().seq
            done.discard(first)
            out.append(first)
        return out

    def oldest(self) -> Sent | None:
        """The longest unacknowledged record, to find a broker that never answers."""
        return self._inflight[0] if self._inflight else None
