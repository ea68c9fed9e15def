"""The acceptor bus's per-seat book (drivers/cctalk/book.py), no I/O and no clock: the event
counter's arithmetic (baseline, wrap, lost events, reset) and each seat's reach and inhibit."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tableside.drivers.cctalk.book import ABSENT_PROBE_INTERVAL, SeatBook

CREDIT, REFUSED = (1, 0), (0, 2)


def buffer(*newest_first: tuple[int, int]) -> list[tuple[int, int]]:
    """A five-event buffer, newest first, padded with empty results."""
    return [*newest_first, *[(0, 0)] * (5 - len(newest_first))]


def test_the_first_read_is_the_baseline_and_says_what_the_buffer_held() -> None:
    book = SeatBook.of([1])
    reading = book.read(1, 2, buffer(CREDIT, REFUSED), now=10.0)
    assert reading.baseline and reading.events == () and reading.lost == 0
    assert reading.held == (CREDIT, REFUSED)
    assert (reading.read_at, reading.gap) == (10.0, None)
    assert book[1].counter == 2 and book[1].read_at == 10.0


def test_a_baseline_holds_no_more_than_the_counter_has_counted() -> None:
    assert SeatBook.of([1]).read(1, 1, buffer(CREDIT, CREDIT), now=0.0).held == (CREDIT,)
    assert SeatBook.of([1]).read(1, 0, buffer(CREDIT), now=0.0).held == ()


def test_new_events_come_oldest_first_with_their_numbers() -> None:
    book = SeatBook.of([1])
    book.read(1, 3, buffer(), now=0.0)
    reading = book.read(1, 5, buffer(CREDIT, REFUSED), now=1.0)
    assert reading.events == ((0, 2, 4), (1, 0, 5))
    assert (reading.last, reading.read_at, reading.gap) == (3, 0.0, None)
    assert not (reading.baseline or reading.reset or reading.lost)


def test_an_unmoved_counter_means_nothing_new() -> None:
    book = SeatBook.of([1])
    book.read(1, 7, buffer(CREDIT), now=0.0)
    reading = book.read(1, 7, buffer(CREDIT), now=1.0)
    assert reading.events == () and not reading.reset and reading.lost == 0
    assert book[1].read_at == 1.0


def test_the_counter_wraps_from_255_to_1_not_0() -> None:
    book = SeatBook.of([1])
    book.read(1, 254, buffer(), now=0.0)
    reading = book.read(1, 2, buffer(CREDIT, CREDIT, CREDIT, CREDIT), now=1.0)
    assert [number for _, _, number in reading.events] == [255, 1, 2]
    assert not reading.reset


def test_more_than_the_buffer_holds_is_counted_as_lost() -> None:
    book = SeatBook.of([1])
    book.read(1, 10, buffer(), now=0.0)
    reading = book.read(1, 18, buffer(*[CREDIT] * 5), now=1.0)
    assert reading.lost == 3 and not reading.reset
    assert [number for _, _, number in reading.events] == [14, 15, 16, 17, 18]


def test_a_counter_at_0_is_a_reset() -> None:
    book = SeatBook.of([1])
    book.read(1, 40, buffer(), now=0.0)
    reading = book.read(1, 0, buffer(), now=1.0)
    assert reading.reset and reading.last == 40 and reading.events == () and reading.lost == 0


def test_a_counter_gone_back_past_the_buffer_is_a_reset_read_from_its_start() -> None:
    book = SeatBook.of([1])
    book.read(1, 100, buffer(), now=0.0)
    reading = book.read(1, 2, buffer(CREDIT, REFUSED), now=1.0)
    assert reading.reset and reading.lost == 0
    assert reading.events == ((0, 2, 1), (1, 0, 2))


def test_a_read_after_a_gap_says_how_long_the_gap_was() -> None:
    book = SeatBook.of([1, 2])
    book.read(1, 1, buffer(), now=5.0)
    book.bus_opened()  # seat 1 was read before, seat 2 never
    assert (book[1].gap, book[2].gap) == (True, False)
    reading = book.read(1, 2, buffer(CREDIT), now=7.25)
    assert (reading.read_at, reading.gap) == (5.0, 2.25)
    assert (book[1].gap, book[2].gap) == (False, False)
    assert book.read(1, 2, buffer(CREDIT), now=8.0).gap is None


def test_offline_probes_and_coming_back() -> None:
    book = SeatBook.of([1, 2])
    assert (book.online, book.offline, book.all_offline) == ((1, 2), (), False)
    assert [book.went_offline(2, now=10.0), book.went_offline(2, now=11.0)] == [True, False]
    assert (book.offline, book.online, book[2].gap) == ((2,), (1,), True)
    assert not book.probe_due(2, now=11.0 + ABSENT_PROBE_INTERVAL - 0.01)
    assert book.probe_due(2, now=11.0 + ABSENT_PROBE_INTERVAL)
    assert book.probe_due(1, now=0.0)
    book.went_offline(1, now=12.0)
    assert (book.offline, book.all_offline) == ((1, 2), True)
    assert [book.came_back(1), book.came_back(1)] == [True, False]
    assert (book.offline, book.all_offline) == ((2,), False)


def test_unconfirmed_inhibits() -> None:
    book = SeatBook.of([3, 1, 2])
    seen = []
    book.not_confirmed([3, 1])
    seen.append(book.unconfirmed)
    book.confirmed(3)
    seen.append(book.unconfirmed)
    book.forget_unconfirmed()
    seen.append(book.unconfirmed)
    assert seen == [(1, 3), (1,), ()]


@given(
    last=st.integers(1, 255),
    moved=st.integers(1, 254),
    results=st.lists(st.tuples(st.integers(0, 255), st.integers(0, 255)), min_size=5, max_size=5),
)
def test_every_event_the_counter_moved_is_read_or_counted_lost(
    last: int, moved: int, results: list[tuple[int, int]]
) -> None:
    """Without a reset, events read + events lost = how far the counter moved, and the events
    read are the newest, numbered up to the counter, in order."""
    counter = (last + moved - 1) % 255 + 1
    book = SeatBook.of([1])
    book.read(1, last, buffer(), now=0.0)
    reading = book.read(1, counter, results, now=1.0)
    if reading.reset:  # only a counter gone back further than the buffer holds
        assert counter < last and moved > len(results)
        return
    assert len(reading.events) + reading.lost == moved
    numbers = [number for _, _, number in reading.events]
    assert numbers[-1] == counter
    assert all(1 <= n <= 255 for n in numbers)
    assert [(a, b) for a, b, _ in reading.events] == list(reversed(results[: len(numbers)]))
