"""What the acceptor bus knows of each seat, and the event-counter arithmetic: no I/O, no clock.

One ``SeatBook`` per bus holds, per seat, the last event counter read, when it was read, whether
its next read follows a gap (the seat or the bus was out of reach), whether it is offline and
when it is next probed, and whether its master inhibit is unconfirmed. The driver
(drivers/cctalk/driver.py) asks it what a credit buffer means (``read``) and acts on the
answer; every time it needs is passed in (``now``), so the book is tested without a bus.

ccTalk's event counter (header 229) runs 1..255 and wraps to 1; it is 0 only after a reset or
a power cycle. The buffer holds the last five events, newest first.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = ["ABSENT_PROBE_INTERVAL", "Reading", "SeatBook", "SeatRecord"]

#: an absent seat is probed this often, with one try, so it never holds the bus for long
ABSENT_PROBE_INTERVAL = 2.0


@dataclass(slots=True)
class SeatRecord:
    """One seat, as the bus master knows it."""

    #: the last event counter read. Kept across reconnections: the counter returns to 0 only
    #: after a reset, so what a seat took while out of reach is read (and counted) when back.
    counter: int | None = None
    #: when it was last read (the caller's clock)
    read_at: float | None = None
    #: its next read follows a gap (offline, the bus down)
    gap: bool = False
    offline: bool = False
    #: an offline seat is tried again from then
    next_probe: float = 0.0
    #: its inhibit (or release) is not confirmed: tried again at every poll
    unconfirmed: bool = False


@dataclass(frozen=True, slots=True)
class Reading:
    """What one credit buffer says of a seat, against the book's last read of it.

    ``baseline``: the first read since start (``held``: what the buffer held, newest first,
    which is said, not counted); ``reset``: the acceptor was reset since ``last`` (its earlier
    events are gone, nobody can say how many); ``lost``: events beyond the buffer's five,
    unaccounted for; ``events``: ``(result A, result B, event number)`` to act on, oldest
    first; ``read_at``: when the seat was read before this one (this one's time on a baseline);
    ``gap``: seconds since that read when this read follows a gap, else None."""

    counter: int
    last: int | None
    read_at: float
    gap: float | None
    baseline: bool = False
    reset: bool = False
    lost: int = 0
    held: tuple[tuple[int, int], ...] = ()
    events: tuple[tuple[int, int, int], ...] = ()


@dataclass(slots=True)
class SeatBook:
    """Every seat of one bus, by betting position."""

    records: dict[int, SeatRecord] = field(default_factory=dict)

    @classmethod
    def of(cls, seats: Iterable[int]) -> SeatBook:
        """A book for ``seats`` (betting positions), nothing read yet."""
        return cls({seat: SeatRecord() for seat in seats})

    def __getitem__(self, seat: int) -> SeatRecord:
        return self.records[seat]

    @property
    def offline(self) -> tuple[int, ...]:
        return tuple(seat for seat, r in sorted(self.records.items()) if r.offline)

    @property
    def online(self) -> tuple[int, ...]:
        return tuple(seat for seat, r in sorted(self.records.items()) if not r.offline)

    @property
    def unconfirmed(self) -> tuple[int, ...]:
        return tuple(seat for seat, r in sorted(self.records.items()) if r.unconfirmed)

    @property
    def all_offline(self) -> bool:
        return all(r.offline for r in self.records.values())

    # -- reach ------------------------------------------------------------------------------

    def bus_opened(self) -> None:
        """The bus (re)opened: every seat read before has its next read after a gap."""
        for r in self.records.values():
            if r.counter is not None:
                r.gap = True

    def went_offline(self, seat: int, now: float) -> bool:
        """The seat did not answer: probed again ``ABSENT_PROBE_INTERVAL`` from ``now``, its
        next read after a gap. True when it was online until now (to be said)."""
        r = self.records[seat]
        r.gap = True
        r.next_probe = now + ABSENT_PROBE_INTERVAL
        was_online, r.offline = not r.offline, True
        return was_online

    def probe_due(self, seat: int, now: float) -> bool:
        """Whether to read the seat now: always when online; when offline, once its probe is due."""
        r = self.records[seat]
        return not r.offline or now >= r.next_probe

    def came_back(self, seat: int) -> bool:
        """The seat answered: True when it was offline (to be said)."""
        r = self.records[seat]
        was_offline, r.offline = r.offline, False
        return was_offline

    # -- inhibits ---------------------------------------------------------------------------

    def confirmed(self, seat: int) -> None:
        self.records[seat].unconfirmed = False

    def not_confirmed(self, seats: Iterable[int]) -> None:
        for seat in seats:
            self.records[seat].unconfirmed = True

    def forget_unconfirmed(self) -> None:
        """A new lock-out or release: what the last one left unconfirmed no longer matters."""
        for r in self.records.values():
            r.unconfirmed = False

    # -- the event counter ------------------------------------------------------------------

    def read(
        self, seat: int, counter: int, results: Sequence[tuple[int, int]], now: float
    ) -> Reading:
        """The seat's credit buffer (``counter`` and its ``results``, newest first) read at
        ``now``: recorded, and what it means returned."""
        r = self.records[seat]
        last, read_at = r.counter, now if r.read_at is None else r.read_at
        gap = round(now - read_at, 3) if r.gap else None
        r.counter, r.read_at, r.gap = counter, now, False
        if last is None:
            # The first read since the daemon started is the baseline; what it holds is said,
            # not lost.
            held = tuple(results[age] for age in range(min(counter, len(results))))
            return Reading(counter, last, read_at, gap, baseline=True, held=held)
        if counter == last:
            return Reading(counter, last, read_at, gap)
        # The counter runs 1..255 and wraps to 1; it is 0 only after a reset.
        new = counter - last if counter > last else counter + 255 - last
        reset, lost = False, 0
        if counter == 0 or (counter < last and new > len(results)):
            # Reset or power-cycled since the last read (a counter that went back further than
            # the buffer holds is read as a reset too: the buffer then holds only events since
            # the reset). What it took before the reset is gone with its buffer, and nobody
            # can say how much that was.
            reset, new = True, min(counter, len(results))
        elif new > len(results):
            # More than the buffer holds: the five in the buffer are new and are read; the rest
            # are unaccounted for.
            lost, new = new - len(results), len(results)
        events = tuple(
            (*results[age], (counter - age - 1) % 255 + 1)
            for age in reversed(range(new))  # oldest first
        )
        return Reading(counter, last, read_at, gap, reset=reset, lost=lost, events=events)
