"""Which of a table's records the floor believes in seq order, and which go backwards
(docs/floor.md, "A seq is believed when it is chained" and "A seq going backwards"). Pure: no
I/O; one per floor instance, fed its messages in the order they arrived.

**The head.** Per table, the newest record this floor holds *chained*: seq 0 linked to nothing
(its ``chain-prev`` is the genesis), a record whose ``chain-prev`` is the head's hash and whose
seq is the head's plus one, a checkpoint whose signature verifies against the enrolled key (its
verdict ``ok``: the table itself says it reached that seq), or what the chain walk verified in
the store (``verified``). Only such a record moves the head; every other record, whatever seq
it claims, is held apart: it is stored (a gap it opens is repaired from the table) but never
decides what goes backwards; and three kinds are ``ahead``, stored as rejected, never the
record for their seq:

* one more than ``MAX_AHEAD`` past the head (a forged seq far ahead would otherwise open a gap
  of a billion seqs for the floor to ask the table for);
* a live one whose seq is the head's plus one and whose ``chain-prev`` is not the head's hash:
  the table's record of that seq links to it by construction, so this one is not it
  (``ahead`` 0). (One that links but whose own hash does not hold is kept as ``altered``.)
* one past the head that carries no chain entry, from a table whose own messages (not replays)
  this floor has heard chained (``chained``): such a table chains every record it sends, so
  this one is not the table's (``ahead`` 0). A table that sends none (MQTT 3.1.1) is never in
  ``chained``, and keeps its records as they come.

**A withheld stand-in** (``<prefix>/<table>/withheld``: a record larger than the broker's
Maximum Packet Size, its seq and chain entry without its content) carries a chain-hash nothing
can check: it is a link of the chain only when it links at both ends. So it does not move the
head itself: one that links to the head (or to the stand-in before it) is ``standing``, and the
record that links to the last standing one moves the head past them all. One at the head's
plus one that does not link to the head is held apart like any other record.

What it misses (a claim that reached the store first: one with a chain entry of its own, or one
that came before this floor knew the table's head) the chain walk settles: the seq goes to the
record whose ``chain-prev`` links (floor/service.py ``Floor.walk``).

Linking is not a signature: whoever sees a table's stream can make a record that links to its
head. What that wins is bounded: the genuine record for that seq is kept beside it as a
conflict, what the table sends next is stored and shown as it links, and the table's next
signed checkpoint is the head again.

**Going backwards.** A table's journal numbers its records 0, 1, 2, … and its publisher sends
them in that order, and one broker delivers one publisher's messages to one subscriber in the
order they were sent. So a record a floor hears *live* (first sent: not replayed, not marked
``redelivered`` or ``republished``, not retained by the broker: a record journaled retained and
sent unretained, ``chain-retain``, is live) carries a higher seq than the head. One that
does not has gone backwards (``behind``). Then:

* if it is the record already stored under its seq (same chain hash, or the same payload
  without one) it is a repeat the table or a broker did not mark, counted as a duplicate;
* anything else is stored as ``rejected``: the table's counter went back (its journal was
  replaced, it re-uses seqs) or someone injected it.

What is exempt from going backwards, and why each is no evidence of a counter going back:
replays (``/replay``, the floor asked for them), ``redelivered`` and ``republished`` (the table
says it is sending again), retained messages (a broker sends the retained state, an old seq, to
every new subscription). The MQTT DUP flag is not used: a broker sets it per hop. The head is
this floor instance's own: floors sharing a subscription each hear part of every table, in
order, and learn the rest from the chain walk over the shared store.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from tableside.floor.store import Message, stands_in
from tableside.wire import proof
from tableside.wire.topics import TopicKind

__all__ = ["MAX_AHEAD", "MAX_STANDING", "Head", "SeqOrder", "live"]

#: how far past the newest chained seq a record that links to nothing is still stored as the
#: record for its seq (a gap the floor repairs): twice the most a broker has out to the floor
MAX_AHEAD = 100_000
#: the most withheld stand-ins in a row a table's head waits to pass (a table sends a few: each
#: is a record too large for its broker; a forger's chain of them costs no more memory)
MAX_STANDING = 100


def live(m: Message) -> bool:
    """A record as first sent: the ones whose seq must go up."""
    return (
        m.kind == "record"
        and m.seq is not None
        and not (m.replayed or m.redelivered or m.republished or (m.retain and not m.unretained))
    )


@dataclass(frozen=True, slots=True)
class Head:
    """The newest record of a table this floor holds chained: its seq and chain hash."""

    seq: int
    hash: bytes


@dataclass
class SeqOrder:
    """Per table, the head: the newest record chained to what is verified."""

    heads: dict[str, Head] = field(default_factory=dict)
    #: the tables whose own messages (not replays) this floor has heard chained to the head:
    #: their records all carry chain entries
    chained: set[str] = field(default_factory=set)
    #: per table, the withheld stand-ins after the head, each linked to the one before it: the
    #: head passes them when a record links to the last
    standing: dict[str, list[Head]] = field(default_factory=dict)

    def verified(self, table: str, seq: int, digest: bytes) -> None:
        """The chain walk verified the table's records up to ``seq`` (its hash ``digest``)."""
        head = self.heads.get(table)
        if head is None or seq > head.seq:
            self._move(table, Head(seq, digest))

    def _move(self, table: str, head: Head) -> None:
        self.heads[table] = head
        standing = self.standing.get(table)
        if standing:
            standing[:] = [s for s in standing if s.seq > head.seq]

    def mark(self, batch: Iterable[Message]) -> list[Message]:
        """The batch, each record that goes backwards marked ``behind`` and each held apart
        ``ahead``; each chained one moves its table's head (and is returned as it came: a
        copy of every message would cost more than judging it)."""
        return [self._mark(m) for m in batch]

    def _mark(self, m: Message) -> Message:
        seq = m.seq
        if m.kind != "record" or seq is None:
            return m
        head = self.heads.get(m.table)
        standing = self.standing.get(m.table)
        tip = standing[-1] if standing else head
        if stands_in(m):
            digest = m.hash if m.verdict in ("withheld", "malformed") else None
            if digest is not None and _follows(m, seq, tip) and len(standing or ()) < MAX_STANDING:
                self.standing.setdefault(m.table, []).append(Head(seq, digest))
                return m
        elif self._links(m, seq, head, tip):
            assert m.hash is not None
            self._move(m.table, Head(seq, m.hash))
            if not m.replayed:
                self.chained.add(m.table)
            return m
        if head is None:
            return m
        if live(m) and seq < head.seq:
            return replace(m, behind=head.seq)
        if live(m) and seq == head.seq + 1 and m.prev != head.hash:  # the next seq, unlinked
            return replace(m, ahead=0)
        if seq > head.seq + MAX_AHEAD:
            return replace(m, ahead=MAX_AHEAD)
        if m.hash is None and seq > head.seq and m.table in self.chained:  # no chain entry
            return replace(m, ahead=0)
        return m

    @staticmethod
    def _links(m: Message, seq: int, head: Head | None, tip: Head | None) -> bool:
        """Whether the record moves the head: its chain entry holds, and it is a checkpoint
        signed with the enrolled key, or it links to the head (``tip``: or to the last
        withheld stand-in standing after it)."""
        if m.verdict not in ("ok", "malformed") or m.hash is None:  # its chain entry holds
            return False
        if m.what is TopicKind.CHECKPOINT:  # signed with the enrolled key (judge.py)
            return head is None or seq > head.seq
        return _follows(m, seq, tip)


def _follows(m: Message, seq: int, tip: Head | None) -> bool:
    """Whether the record is the one after ``tip`` (a table's first: after nothing)."""
    if tip is None:
        return seq == 0 and m.prev == proof.GENESIS
    return seq == tip.seq + 1 and m.prev == tip.hash
