"""Which of a table's live records go backwards (docs/floor.md, "A seq going backwards").
Pure: no I/O; one per floor instance, fed its messages in the order they arrived.

A table's journal numbers its records 0, 1, 2, … and its publisher sends them in that order
(daemon/publisher.py), and one broker delivers one publisher's messages to one subscriber in
the order they were sent. So a record a floor hears *live* (first sent: not replayed, not
marked ``redelivered`` or ``republished``, not retained) carries a higher seq than every live
record it heard from that table before. One that does not has gone backwards. Then:

* if it is the record already stored under its seq (same chain hash, or the same payload
  without one) it is a repeat the table or a broker did not mark (a bridge or the floor's own
  broker resending what it had not seen acknowledged), counted as a duplicate;
* anything else (another record under a stored seq, or a seq the store lacks) is stored as
  ``rejected``: the table's counter went back (its journal was replaced, it re-uses seqs) or
  someone injected it. It is never the record for its seq: a gap it would fill stays, and the
  table's own record comes by a replay.

What is exempt, and why each is no evidence of a counter going back: replays (``/replay``, the
floor asked for them), ``redelivered`` and ``republished`` (the table says it is sending again),
retained messages (a broker sends the retained state, an old seq, to every new subscription).
The MQTT DUP flag is not used: a broker sets it per hop (a bridge's resend arrives with it
cleared), and a repeat is found by its content anyway. The highest seq is this floor
instance's own: floors sharing a subscription each hear part of every table, in order.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from tableside.floor.store import Message

__all__ = ["SeqOrder", "live"]


def live(m: Message) -> bool:
    """A record as first sent: the ones whose seq must go up."""
    return (
        m.kind == "record"
        and m.seq is not None
        and not (m.replayed or m.redelivered or m.republished or m.retain)
    )


@dataclass
class SeqOrder:
    """Per table, the highest seq this floor has heard live."""

    highest: dict[str, int] = field(default_factory=dict)

    def mark(self, batch: Iterable[Message]) -> list[Message]:
        """The batch, each live record with a seq below the table's highest marked ``behind``."""
        out: list[Message] = []
        for m in batch:
            seq = m.seq
            if live(m) and seq is not None:
                high = self.highest.get(m.table)
                if high is not None and seq < high:
                    m = replace(m, behind=high)
                else:
                    self.highest[m.table] = seq
            out.append(m)
        return out
