"""The table's in-flight window (mqtt/window.py), without a broker: seqs acknowledged only in
order, redeliveries known, the window's bound kept, hostile PUBACKs ignored."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tableside.mqtt.window import Window


def test_in_order_pubacks_acknowledge_each_seq_at_once() -> None:
    window = Window(3, cursor=10, attempted=9)
    assert [window.send(seq, pid, 0.0) for seq, pid in ((10, 1), (11, 2), (12, 3))] == [
        False, False, False]  # fmt: skip
    assert window.room == 0
    assert window.acknowledged(1) == [10]
    assert window.acknowledged(2) == [11]
    assert window.room == 2 and window.cursor == 13


def test_an_early_puback_waits_for_the_older_seqs() -> None:
    """The journal's acknowledged mark must never pass a hole: 12 acknowledged before 10 and 11
    counts once they are."""
    window = Window(5, cursor=10, attempted=0)
    for seq, pid in ((10, 7), (11, 8), (12, 9)):
        window.send(seq, pid, 0.0)
    assert window.acknowledged(9) == []
    assert window.acknowledged(7) == [10]
    assert window.acknowledged(8) == [11, 12]
    assert len(window) == 0 and window.oldest() is None


def test_what_may_have_reached_the_broker_is_a_redelivery() -> None:
    """After a reconnect the window starts at the journal's acknowledged mark: seqs up to what
    an earlier connection (or run) attempted go out marked as redelivered, the rest not."""
    window = Window(10, cursor=5, attempted=7)
    assert [window.send(seq, seq, 0.0) for seq in range(5, 10)] == [True, True, True, False, False]
    assert window.attempted == 9
    again = Window(10, cursor=8, attempted=window.attempted)
    assert [again.send(seq, seq, 0.0) for seq in range(8, 11)] == [True, True, False]


def test_unknown_and_repeated_pubacks_acknowledge_nothing() -> None:
    window = Window(2, cursor=1, attempted=0)
    window.send(1, 100, 0.0)
    assert window.acknowledged(555) == []
    assert window.acknowledged(100) == [1]
    assert window.acknowledged(100) == []  # a broker repeating itself
    # the packet id is free again: the next record may take it
    window.send(2, 100, 1.0)
    assert window.acknowledged(100) == [2]


def test_the_oldest_unacknowledged_is_there_to_time_out() -> None:
    window = Window(4, cursor=1, attempted=0)
    window.send(1, 1, 10.0)
    window.send(2, 2, 11.0)
    oldest = window.oldest()
    assert oldest is not None and (oldest.seq, oldest.at) == (1, 10.0)
    window.acknowledged(1)
    oldest = window.oldest()
    assert oldest is not None and (oldest.seq, oldest.at) == (2, 11.0)


@pytest.mark.parametrize(
    ("seq", "pid", "why"),
    [(3, 9, "out of order"), (1, 1, "in flight already")],
)
def test_what_the_publisher_may_not_do_is_refused(seq: int, pid: int, why: str) -> None:
    window = Window(4, cursor=1, attempted=0)
    window.send(1, 1, 0.0)
    with pytest.raises(ValueError, match=why):
        window.send(seq if seq != 1 else 2, pid, 0.0)


def test_a_full_window_takes_no_more() -> None:
    window = Window(1, cursor=1, attempted=0)
    window.send(1, 1, 0.0)
    with pytest.raises(ValueError, match="full window"):
        window.send(2, 2, 0.0)
    with pytest.raises(ValueError, match="at least 1"):
        Window(0, cursor=1, attempted=0)


@given(st.permutations(list(range(1, 21))))
def test_any_order_of_pubacks_acknowledges_every_seq_once_in_order(order: list[int]) -> None:
    window = Window(20, cursor=1, attempted=0)
    for seq in range(1, 21):
        window.send(seq, 1000 + seq, 0.0)
    acked: list[int] = []
    for seq in order:
        acked += window.acknowledged(1000 + seq)
        assert acked == list(range(1, len(acked) + 1))  # a prefix, never a hole
    assert acked == list(range(1, 21))
    assert window.room == 20


def test_a_refused_record_keeps_its_place_and_holds_the_mark() -> None:
    """A PUBACK refusing seq 2 (0x87): it is not acknowledged, the seqs after it wait behind it
    for the mark, it is due again after 1 s, then 2 s after a second refusal, and once taken
    the mark moves past all of them."""
    window = Window(5, cursor=1, attempted=0)
    for seq in (1, 2, 3):
        window.send(seq, seq, 0.0)
    assert window.acknowledged(1) == [1]
    refused = window.refused(2, 0x87, 10.0, "denied")
    assert refused is not None
    assert (refused.seq, refused.reason, refused.said) == (2, 0x87, "denied")
    assert window.refused(2, 0x87, 10.0) is None  # its packet id is no longer in flight
    assert window.acknowledged(3) == []  # behind the refused one
    assert window.refusing() is refused and window.room == 3
    assert window.due(10.5) == [] and window.due(11.0) == [refused]
    assert window.oldest() is None  # nothing waits for the broker meanwhile
    window.resend(2, 7, 11.0)
    with pytest.raises(ValueError, match="not waiting to go again"):
        window.resend(2, 8, 11.0)
    again = window.refused(7, 0x97, 11.0)
    assert again is not None and again.due_at == 13.0  # 1 s, then 2 s
    window.resend(2, 9, 13.0)
    assert window.acknowledged(9) == [2, 3]
    assert window.refusing() is None and len(window) == 0


@given(st.lists(st.tuples(st.integers(1, 20), st.booleans()), max_size=60))
def test_refusals_and_acknowledgements_in_any_order_never_pass_a_hole(
    answers: list[tuple[int, bool]],
) -> None:
    """Whatever the broker answers, in whatever order (a PUBACK taking or refusing any seq in
    flight, refused ones sent again when due), the acknowledged seqs come out in order and
    never include one the broker has not taken."""
    window = Window(20, cursor=1, attempted=0)
    for seq in range(1, 21):
        window.send(seq, seq, 0.0)
    pid_of = {seq: seq for seq in range(1, 21)}  # the packet id each seq went with last
    taken: set[int] = set()
    acked: list[int] = []
    next_pid, now = 100, 0.0
    for seq, takes in answers:
        now += 100.0
        for due in window.due(now):
            next_pid += 1
            window.resend(due.seq, next_pid, now)
            pid_of[due.seq] = next_pid
        if takes:
            if seq not in taken and seq not in {s.seq for s in window.due(now)}:
                taken.add(seq)
                acked += window.acknowledged(pid_of[seq])
        else:
            window.refused(pid_of[seq], 0x87, now)
        assert acked == list(range(1, len(acked) + 1))
        assert set(acked) <= taken
