"""The table's in-flight window, as bookkeeping only (no I/O, no clock of its own): records in,
publishes out, PUBACKs in, acknowledged seqs out.

The publisher (daemon/publisher.py) sends the journal's records in seq order, QoS 1, at most
``size`` unacknowledged; a seq counts as acknowledged here only once every seq before it is,
so the journal's acknowledged mark never passes a hole. A record that may already have reached
the broker (at or below ``attempted``: sent on an earlier connection or by an earlier run) is a
redelivery, and goes out marked so (docs/mqtt.md). A record the broker refuses (a PUBACK with a
reason code of 0x80 or more) is not acknowledged: it keeps its place and is due again after a
growing pause (``due``), and every seq after it waits behind it for the mark. One window per
connection: what it had in flight when the connection dropped is sent again from the journal's
acknowledged mark on the next.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

__all__ = ["REFUSED_RETRY_MAX_S", "Sent", "Window"]

#: a refused record goes again after 1 s, then 2, 4 … at most this long
REFUSED_RETRY_MAX_S = 60.0


@dataclass(slots=True)
class Sent:
    """One record in the window: its seq, the packet id it last went with (0 while refused),
    when (the caller's clock), whether it goes marked redelivered; after a refusal, how many
    there were, the last reason code, and when it is due again."""

    seq: int
    packet_id: int
    at: float
    again: bool
    refusals: int = 0
    reason: int = 0
    #: the broker's reason string with it, if it gave one
    said: str | None = None
    due_at: float = 0.0


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
        self._sent: dict[int, Sent] = {}  # seq → its entry, while in the window

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
        sent = Sent(seq, packet_id, at, again)
        self._inflight.append(sent)
        self._seq_of[packet_id] = seq
        self._sent[seq] = sent
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
            del self._sent[first]
            out.append(first)
        return out

    def refused(
        self, packet_id: int, reason: int, at: float, said: str | None = None
    ) -> Sent | None:
        """A PUBACK refusing ``packet_id``: its record stays unacknowledged and in its place,
        due again after 1 s, 2 s, 4 s … (``REFUSED_RETRY_MAX_S`` at most); its entry, or None
        for a packet id not in flight."""
        seq = self._seq_of.pop(packet_id, None)
        if seq is None:
            return None
        sent = self._sent[seq]
        sent.packet_id = 0
        sent.refusals += 1
        sent.reason, sent.said = reason, said
        sent.due_at = at + min(REFUSED_RETRY_MAX_S, 2.0 ** (sent.refusals - 1))
        return sent

    def due(self, at: float) -> list[Sent]:
        """The refused records due to go again by ``at``, in seq order."""
        return [s for s in self._inflight if not s.packet_id and s.due_at <= at]

    def resend(self, seq: int, packet_id: int, at: float) -> Sent:
        """A refused record goes again with ``packet_id``."""
        sent = self._sent.get(seq)
        if sent is None or sent.packet_id:
            raise ValueError(f"seq {seq} is not waiting to go again")
        if packet_id in self._seq_of:
            held = self._seq_of[packet_id]
            raise ValueError(f"packet id {packet_id} is in flight already (seq {held})")
        sent.packet_id, sent.at = packet_id, at
        self._seq_of[packet_id] = seq
        return sent

    def refusing(self) -> Sent | None:
        """The oldest record the broker has refused and not taken since, if any."""
        return next((s for s in self._inflight if s.refusals and s.seq not in self._done), None)

    def oldest(self) -> Sent | None:
        """The longest unanswered record (sent, no PUBACK yet), to find a broker that never
        answers; a refused one waiting to go again is not waiting for the broker."""
        waiting = [s for s in self._inflight if s.packet_id and s.seq not in self._done]
        return min(waiting, key=lambda s: s.at) if waiting else None
