"""floor/order.py: a seq is believed when it is chained; which live records go backwards, and
which repeats are exempt (pure)."""

from __future__ import annotations

import json
from dataclasses import replace

from tableside.floor.judge import judge
from tableside.floor.order import MAX_AHEAD, SeqOrder
from tests.floorpeer import PeerTable


def test_only_a_live_record_below_the_chained_head_is_marked() -> None:
    one, two = PeerTable(), PeerTable(table="cs-02")
    a = [one.event() for _ in range(6)]
    b = [two.event() for _ in range(2)]
    order = SeqOrder()
    marked = order.mark([
        *(one.judged(r) for r in a),  # 0..5, each linked to the one before
        *(two.judged(r) for r in b),  # another table: its own head
        one.judged(a[5]),  # the head again: not below it (a conflict if other content)
        one.judged(a[2], redelivered=True), one.judged(a[2], republished=True),
        one.replayed(a[2]), replace(one.judged(a[2]), retain=True),  # exempt, each
        one.judged(a[3]),  # live, below 5
        two.judged(b[0]),  # live, below 1
    ])  # fmt: skip
    assert [m.behind for m in marked] == [None] * 13 + [5, 1]
    assert {t: h.seq for t, h in order.heads.items()} == {"cs-01": 5, "cs-02": 1}
    later = order.mark([one.judged(one.event())])  # seq 6 goes on
    assert later[0].behind is None and order.heads["cs-01"].seq == 6


def test_a_record_that_links_to_nothing_verified_never_moves_the_head() -> None:
    peer = PeerTable()
    order = SeqOrder()
    order.mark([peer.judged(peer.event()) for _ in range(3)])  # 0..2
    skipped = [peer.event() for _ in range(3)]  # 3, 4 lost on the way; 5 arrives
    (after_gap,) = order.mark([peer.judged(skipped[2])])
    assert after_gap.ahead is None and after_gap.behind is None
    assert order.heads["cs-01"].seq == 2  # linked to nothing verified: the head stays
    far = judge("tableside", "tableside/cs-01/ruling", b'{"table":"cs-01","seq":999999999}',
                False, None, 0.0, {})  # fmt: skip
    (held,) = order.mark([far])
    assert held.ahead == MAX_AHEAD and order.heads["cs-01"].seq == 2
    (next_,) = order.mark([peer.judged(skipped[0])])  # the table's seq 3, late: it links
    assert next_.ahead is None and order.heads["cs-01"].seq == 3
    stranger = PeerTable()
    alien = [stranger.event(99) for _ in range(5)][4]  # seq 4 of another chain
    (refused,) = order.mark([stranger.judged(alien)])
    assert refused.ahead == 0  # the next seq, not linked to the head: not the table's
    order.verified("cs-01", 5, skipped[2].hash)  # the chain walk got there (a replay of 4)
    assert order.heads["cs-01"].seq == 5


def test_a_checkpoint_signed_with_the_enrolled_key_is_the_head() -> None:
    peer = PeerTable()
    keys = {"cs-01": peer.public}
    for _ in range(4):
        peer.event()
    signed = SeqOrder()
    signed.mark([peer.judged(peer.checkpoint(), keys)])  # nothing heard before
    assert signed.heads["cs-01"].seq == 4
    unenrolled = SeqOrder()
    unenrolled.mark([peer.judged(peer.checkpoint())])
    assert unenrolled.heads == {}


def test_a_record_without_chain_entry_past_the_head_of_a_chained_table_is_held_apart() -> None:
    """Issue 27: a table whose own messages this floor heard chained sends every record with
    its chain entry, so one without, at any seq past the head, is not the table's. A table
    this floor never heard chained (MQTT 3.1.1, its head only from replays, or a floor that
    knows the head only from its walk) keeps such records as they come."""
    peer = PeerTable()
    order = SeqOrder()
    order.mark([peer.judged(peer.event()) for _ in range(3)])  # 0..2, heard chained
    assert order.chained == {"cs-01"}

    def status(seq: int) -> bytes:
        body = {"table": "cs-01", "ts": "x", "seq": seq, "republished": False,
                "redelivered": False, "status": "online", "version": "0"}  # fmt: skip
        return json.dumps(body).encode()

    far, near, retained, below = (
        judge("tableside", "tableside/cs-01/status", status(seq), retain, None, 0.0, {})
        for seq, retain in ((9, False), (3, False), (40, True), (1, False))
    )
    marked = order.mark([far, near, retained, below])
    assert [m.ahead for m in marked] == [0, 0, 0, None]
    assert marked[3].behind == 2  # below the head: going backwards, as before
    assert order.heads["cs-01"].seq == 2

    plain = PeerTable(table="cs-02")  # an MQTT 3.1.1 table: its gap repaired by replays
    records = [plain.event() for _ in range(4)]
    replays = SeqOrder()
    replays.mark([plain.replayed(records[0]), plain.replayed(records[1])])
    assert replays.heads["cs-02"].seq == 1 and replays.chained == set()
    later = judge("tableside", records[3].topic, records[3].payload, False, None, 0.0, {})
    (kept,) = replays.mark([later])
    assert kept.ahead is None
    walked = SeqOrder()  # a floor started again: the head from its walk, nothing heard yet
    walked.verified("cs-01", 2, peer.records[2].hash)
    (kept,) = walked.mark([far])
    assert kept.ahead is None and walked.chained == set()
