"""Whether the table's wall clock can be trusted: the kernel's clock discipline, read with
``adjtimex(2)`` (modes 0: a read, no privilege), and the verdict the table journals.

The journal keeps order by the monotonic clock (daemon/clock.py); the wall time in each
record's ``ts`` is what an auditor reads, and it is only as good as the machine's time service
(NTP, chrony, systemd-timesyncd), which tells the kernel how it is doing: ``STA_UNSYNC`` set
(the kernel's return ``TIME_ERROR``) while nothing disciplines the clock, and ``esterror``
(estimated error) and ``maxerror`` (the error's bound, grown by 500 ppm between updates) in
microseconds. The table trusts its clock while it is synchronised and its estimated error is
within ``[clock] max_error_s`` (docs/journal.md, "Time").

``ClockWatch`` decides, with no I/O, which readings are journaled: the first, then one each
time the verdict (synchronised, within the bound) changes, not every poll. The daemon polls
every ``POLL_S`` (daemon/app.py). A lab drives it through a file instead of the kernel
(``DISCIPLINE_FILE_ENV``: its JSON is ``{"synchronised": bool, "esterror_us": int,
"maxerror_us": int}``); every ``clock`` record names the source it read.
"""

from __future__ import annotations

import ctypes
import dataclasses
import enum
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from tableside.drivers.events import DeviceEvent
from tableside.rules.model import Action, Game, Rule

__all__ = [
    "CLOCK_ALERT",
    "DISCIPLINE_FILE_ENV",
    "POLL_S",
    "ClockRecord",
    "ClockWatch",
    "Discipline",
    "KernelClockState",
    "read_discipline",
    "read_discipline_file",
    "read_kernel",
]

#: the kernel is asked this often (a syscall that copies 208 bytes): an unsynchronised clock is
#: journaled, and on the floor's tile, within this long (plus the broker's delivery)
POLL_S = 5.0
#: a lab's hook, never a production setting: the discipline is read from this JSON file
#: instead of the kernel (docs/journal.md, "Time"); the ``clock`` record says so in ``source``
DISCIPLINE_FILE_ENV = "TABLESIDE_TEST_CLOCK_DISCIPLINE"

#: the ``STA_UNSYNC`` bit of ``struct timex``'s status (include/uapi/linux/timex.h)
STA_UNSYNC = 0x0040


class KernelClockState(enum.IntEnum):
    """What ``adjtimex`` returns (include/uapi/linux/timex.h): the leap-second state, or
    ``ERROR`` (``TIME_ERROR``, also ``TIME_BAD``) while the clock is not synchronised."""

    OK = 0
    INS = 1  # a leap second is to be inserted
    DEL = 2  # a leap second is to be deleted
    OOP = 3  # the leap second is in progress
    WAIT = 4  # the leap second has passed
    ERROR = 5


_LONG = ctypes.c_long


class _Timeval(ctypes.Structure):
    _fields_ = (("tv_sec", _LONG), ("tv_usec", _LONG))


class _Timex(ctypes.Structure):
    """``struct timex`` as glibc declares it for Linux (``long`` fields; on a 32-bit machine
    the ``adjtimex`` symbol is the one with 32-bit ``long`` and ``time_t``)."""

    _fields_ = (
        ("modes", ctypes.c_uint),
        ("offset", _LONG),
        ("freq", _LONG),
        ("maxerror", _LONG),
        ("esterror", _LONG),
        ("status", ctypes.c_int),
        ("constant", _LONG),
        ("precision", _LONG),
        ("tolerance", _LONG),
        ("time", _Timeval),
        ("tick", _LONG),
        ("ppsfreq", _LONG),
        ("jitter", _LONG),
        ("shift", ctypes.c_int),
        ("stabil", _LONG),
        ("jitcnt", _LONG),
        ("calcnt", _LONG),
        ("errcnt", _LONG),
        ("stbcnt", _LONG),
        ("tai", ctypes.c_int),
        ("_reserved", ctypes.c_int * 11),
    )


@dataclass(frozen=True, slots=True)
class Discipline:
    """One reading of the clock's discipline."""

    synchronised: bool
    #: the estimated error and the error's bound, microseconds
    esterror_us: int
    maxerror_us: int
    #: where it was read: "adjtimex", or "file <path>" (a lab's hook)
    source: str
    #: the kernel's return (None from a lab's file)
    state: KernelClockState | None = None
    #: the ``struct timex`` status bits (None from a lab's file)
    status: int | None = None


_libc: ctypes.CDLL | None = None


def read_kernel() -> Discipline:
    """The kernel's clock discipline, read-only (``adjtimex`` with modes 0); OSError when the
    call fails."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    timex = _Timex()  # modes 0: nothing is set
    ret = _libc.adjtimex(ctypes.byref(timex))
    if ret < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"adjtimex: {os.strerror(errno)}")
    state = KernelClockState(ret) if ret in KernelClockState._value2member_map_ else None
    unsync = bool(timex.status & STA_UNSYNC) or state is KernelClockState.ERROR
    return Discipline(
        synchronised=not unsync, esterror_us=int(timex.esterror),
        maxerror_us=int(timex.maxerror), source="adjtimex", state=state,
        status=int(timex.status),
    )  # fmt: skip


def read_discipline_file(path: Path) -> Discipline:
    """A lab's discipline from ``path`` (JSON: ``synchronised``, ``esterror_us``,
    ``maxerror_us``); ValueError (or OSError) when it cannot be read as one."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object")
    synchronised, est, most = (data.get(k) for k in ("synchronised", "esterror_us", "maxerror_us"))
    if not isinstance(synchronised, bool) or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (est, most)
    ):
        raise ValueError(f"{path}: expected synchronised (true or false), esterror_us and "
                         f"maxerror_us (microseconds, integers), got {data!r}")  # fmt: skip
    assert isinstance(est, int) and isinstance(most, int)
    return Discipline(synchronised, est, most, source=f"file {path}")


def read_discipline(file: Path | None) -> Discipline:
    """The kernel's discipline, or a lab's from ``file``. A reading that fails is an
    unsynchronised clock of unknown error (the source says why): a clock nobody can vouch for
    is not trusted."""
    try:
        return read_kernel() if file is None else read_discipline_file(file)
    except (OSError, ValueError) as exc:
        source = "adjtimex" if file is None else f"file {file}"
        return Discipline(False, -1, -1, source=f"{source}: unreadable ({exc})")


#: the alert's "rule": not a ruling of 58 Pa. Code (which says nothing of clocks); its reference
#: is a gaming rule that asks for a clock a system's records can be stamped by
CLOCK_ALERT = Rule(
    id="integrity.clock-untrusted",
    games=frozenset(Game),
    on="table.clock",
    when=(),
    actions=(Action.ALERT,),
    citation="13 Miss. Code R. 8-4.5(a)",
    words=(
        "The on-line slot system shall maintain an internal clock that accurately reflects "
        "the current time (in hours, minutes and seconds) and date that shall be used to "
        "provide for the following: 1. Time stamping of significant events;"
    ),
    summary="Alert (not a Pennsylvania ruling): the table's clock is not trusted.",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClockRecord(DeviceEvent):
    """The ``clock`` record's fields (wire/payloads.py ClockPayload): a reading and the
    verdict on it. ``device`` is "table"."""

    kind: ClassVar[str] = "clock"
    synchronised: bool
    #: synchronised, and the estimated error within the bound
    trusted: bool
    esterror_us: int
    maxerror_us: int
    bound_s: float
    source: str

    def why(self) -> str:
        """Why it is not trusted, in words ("" when it is)."""
        if not self.synchronised:
            return f"the clock is not synchronised ({self.source})"
        if not self.trusted:
            return (f"the clock's estimated error, {self.esterror_us / 1e6:g} s, is past the "
                    f"bound of {self.bound_s:g} s ({self.source})")  # fmt: skip
        return ""

    def rule(self) -> Rule:
        """The alert's ruling, its reason in its summary."""
        return dataclasses.replace(
            CLOCK_ALERT,
            summary=(
                f"Alert (not a Pennsylvania ruling): {self.why()}. The times on the table's "
                "records are not to be trusted until it is synchronised again (each carries "
                "untrusted_time meanwhile): mend the controller's time service (NTP)."
            ),
        )


class ClockWatch:
    """Which readings go on the record: the first, and each that changes the verdict
    (synchronised or not, within ``bound_s`` or not). No I/O."""

    def __init__(self, bound_s: float) -> None:
        self.bound_s = bound_s
        #: the newest reading journaled
        self.last: ClockRecord | None = None

    def verdict(self, reading: Discipline) -> ClockRecord:
        within = 0 <= reading.esterror_us <= self.bound_s * 1e6
        return ClockRecord(
            device="table", synchronised=reading.synchronised,
            trusted=reading.synchronised and within, esterror_us=reading.esterror_us,
            maxerror_us=reading.maxerror_us, bound_s=self.bound_s, source=reading.source,
        )  # fmt: skip

    def observe(self, reading: Discipline) -> ClockRecord | None:
        """The record to journal for ``reading``, or None: nothing changed that is journaled."""
        record = self.verdict(reading)
        last = self.last
        if last is not None and (last.synchronised, last.trusted) == (
            record.synchronised, record.trusted
        ):  # fmt: skip
            return None
        self.last = record
        return record
