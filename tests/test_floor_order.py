"""floor/order.py: which live records go backwards, and which repeats are exempt (pure)."""

from __future__ import annotations

from dataclasses import replace

from tableside.floor.order import SeqOrder
from tests.floorpeer import PeerTable


def test_only_a_live_record_below_the_highest_heard_live_is_marked() -> None:
    one, two = PeerTable(), PeerTable(table="cs-02")
    a = [one.event() for _ in range(6)]
    b = [two.event() for _ in range(2)]
    order = SeqOrder()
    marked = order.mark([
        one.judged(a[5]),
        two.judged(b[1]),  # another table: its own highest
        one.judged(a[5]),  # the highest again: not below it (a conflict if other content)
        one.judged(a[2], redelivered=True), one.judged(a[2], republished=True),
        one.replayed(a[2]), replace(one.judged(a[2]), retain=True),  # exempt, each
        one.judged(a[3]),  # live, below 5
        two.judged(b[0]),  # live, below 1
    ])  # fmt: skip
    assert [m.behind for m in marked] == [None, None, None, None, None, None, None, 5, 1]
    assert order.highest == {"cs-01": 5, "cs-02": 1}
    later = order.mark([one.judged(one.event())])  # seq 6 goes on
    assert later[0].behind is None and order.highest["cs-01"] == 6
