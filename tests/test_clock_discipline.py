"""Trusted time (issue 31): the kernel's clock discipline read with adjtimex, journaled on
``<table>/clock`` at start and when its verdict changes, each record made while the clock is
not trusted saying so (``untrusted_time``, under the record's hash), and an alert ruling. The
daemon is driven through the lab's discipline file (daemon/discipline.py), as the lab's test
clock drives its time; the kernel's own reading is checked on this machine."""

from __future__ import annotations

import asyncio
import ctypes
import json
import time
from pathlib import Path

import pytest

from tableside.daemon.app import TableDaemon
from tableside.daemon.config import ConfigError, validate_config
from tableside.daemon.discipline import (
    CLOCK_ALERT,
    DISCIPLINE_FILE_ENV,
    POLL_S,
    STA_UNSYNC,
    ClockWatch,
    Discipline,
    KernelClockState,
    _Timex,
    read_discipline,
    read_kernel,
)
from tableside.daemon.journal.file import record_hash
from tableside.wire.payloads import ClockPayload, RulingPayload, parse_payload

from .conftest import SYNCHRONISED, Mosquitto
from .hil import Received, make_config, simulated_table, simulator, stop, until

#: adjtimex's status bit: the time's second field counts nanoseconds (linux/timex.h)
STA_NANO = 0x2000


def test_the_kernels_discipline_reads_sane_on_this_machine() -> None:
    """Whatever this machine's clock is doing: the struct is read where glibc lays it out
    (its time is now, its tick the kernel's 10,000 µs at USER_HZ 100) and the verdict agrees
    with the kernel's own return and status bit."""
    if ctypes.sizeof(ctypes.c_long) == 8:
        assert ctypes.sizeof(_Timex) == 208  # glibc's sizeof(struct timex) on LP64
    before = time.time()
    found = read_kernel()
    assert found.source == "adjtimex"
    assert isinstance(found.state, KernelClockState) and found.status is not None
    unsync = bool(found.status & STA_UNSYNC) or found.state is KernelClockState.ERROR
    assert found.synchronised is not unsync
    # the kernel caps maxerror at NTP_PHASE_LIMIT (16 s) and esterror is no larger
    assert 0 <= found.esterror_us <= 16_000_000 and 0 <= found.maxerror_us <= 16_000_000
    libc = ctypes.CDLL(None, use_errno=True)
    timex = _Timex()
    assert libc.adjtimex(ctypes.byref(timex)) == found.state
    # with STA_NANO set (by the time service) the kernel gives nanoseconds in tv_usec
    per_s = 1_000_000_000 if found.status & STA_NANO else 1_000_000
    assert abs(timex.time.tv_sec - before) <= 2 and 0 <= timex.time.tv_usec < per_s
    assert 9_000 <= timex.tick <= 11_000


def _reading(synchronised: bool = True, esterror_us: int = 1000) -> Discipline:
    return Discipline(synchronised, esterror_us, esterror_us * 10, source="file lab.json")


def test_a_reading_is_journaled_at_start_and_when_its_verdict_changes() -> None:
    watch = ClockWatch(bound_s=1.0)
    first = watch.observe(_reading())
    assert first is not None and first.trusted and first.why() == ""
    assert watch.observe(_reading(esterror_us=900_000)) is None  # within the bound: the same
    past = watch.observe(_reading(esterror_us=1_500_000))
    assert past is not None and past.synchronised and not past.trusted
    assert "estimated error, 1.5 s, is past the bound of 1 s" in past.why()
    assert watch.observe(_reading(esterror_us=3_000_000)) is None  # still past it
    unsync = watch.observe(_reading(synchronised=False))
    assert unsync is not None and not unsync.trusted and "not synchronised" in unsync.why()
    assert watch.observe(_reading(synchronised=False, esterror_us=16_000_000)) is None
    back = watch.observe(_reading())
    assert back is not None and back.trusted
    assert unsync.rule().id == CLOCK_ALERT.id and "not synchronised" in unsync.rule().summary


def test_a_discipline_nobody_can_read_is_not_trusted(tmp_path: Path) -> None:
    path = tmp_path / "lab.json"
    for text in ("not json", '{"synchronised": "yes", "esterror_us": 1, "maxerror_us": 1}',
                 '{"synchronised": true, "esterror_us": -1, "maxerror_us": 1}'):  # fmt: skip
        path.write_text(text, encoding="utf-8")
        found = read_discipline(path)
        assert not found.synchronised and found.source.startswith(f"file {path}: unreadable")
        assert not ClockWatch(1.0).verdict(found).trusted
    path.unlink()
    assert "unreadable" in read_discipline(path).source
    path.write_text(SYNCHRONISED, encoding="utf-8")
    assert read_discipline(path) == Discipline(True, 1000, 20000, source=f"file {path}")


def test_the_bound_is_a_config_key_with_a_default_of_one_second() -> None:
    base = '[table]\nid = "t1"\ngame = "caribbean_stud"\n{clock}\n[devices.shuffler]\n' \
           'driver = "tableside.shuffler"\nurl = "socket://127.0.0.1:7001"\n'  # fmt: skip
    assert validate_config(base.format(clock=""), "t.toml", use_env=False).clock.max_error_s == 1
    set_ = validate_config(base.format(clock="[clock]\nmax_error_s = 0.25"), "t.toml",
                           use_env=False)  # fmt: skip
    assert set_.clock.max_error_s == 0.25
    for bad in ('max_error_s = "1"', "max_error_s = 0", "poll_s = 5"):
        with pytest.raises(ConfigError, match=r"t\.toml:5: clock\."):
            validate_config(base.format(clock=f"[clock]\n{bad}"), "t.toml", use_env=False)


def _lab(path: Path, synchronised: bool, esterror_us: int = 1000) -> None:
    body = {"synchronised": synchronised, "esterror_us": esterror_us, "maxerror_us": 16_000_000}
    path.write_text(json.dumps(body), encoding="utf-8")


def _clock(m: Received, trusted: bool) -> bool:
    return m.kind == "clock" and not m.retained and m.payload["trusted"] is trusted


async def test_an_untrusted_clock_is_journaled_stamped_on_each_record_and_alerted(
    mosquitto: Mosquitto, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real daemon, a simulated shuffler and a real broker: the clock record at start and
    on each change (not on every poll), ``untrusted_time`` on every record made meanwhile and
    only then, inside each record's hash, and one alert ruling per bad spell."""
    lab = tmp_path / "discipline.json"
    _lab(lab, synchronised=True)
    monkeypatch.setenv(DISCIPLINE_FILE_ENV, str(lab))
    async with simulated_table(mosquitto.url, tmp_path, simulator(interval=0.3)) as table:
        sub = table.subscriber
        (start,) = await sub.wait_for(lambda m: _clock(m, True))
        assert start.payload | {"ts": "", "seq": 0} == {
            "table": "hil-1", "ts": "", "seq": 0, "republished": False, "redelivered": False,
            "test_clock": None, "synchronised": True, "trusted": True, "esterror_us": 1000,
            "maxerror_us": 16_000_000, "bound_s": 1.0, "source": f"file {lab}",
        }  # fmt: skip
        parse_payload(ClockPayload, json.dumps(start.payload).encode())
        await sub.wait_for(lambda m: m.kind == "event" and m.payload["seq"] > start.payload["seq"])

        _lab(lab, synchronised=False, esterror_us=16_000_000)
        (bad,) = await sub.wait_for(lambda m: _clock(m, False), within=POLL_S + 10)
        assert not bad.payload["synchronised"] and "untrusted_time" not in bad.payload
        (alert,) = await sub.wait_for(lambda m: m.kind == "ruling")
        ruling = parse_payload(RulingPayload, json.dumps(alert.payload).encode())
        assert ruling.rule_id == "integrity.clock-untrusted" and ruling.actions == ["alert"]
        assert ruling.clause == "13 Miss. Code R. 8-4.5(a)" and "not synchronised" in ruling.summary
        assert ruling.event.device == "table" and ruling.event.seq == bad.payload["seq"]
        assert ruling.untrusted_time == bad.payload["seq"]
        await sub.wait_for(lambda m: m.kind == "event" and m.payload["seq"] > ruling.seq)

        _lab(lab, synchronised=True, esterror_us=2_000_000)  # synchronised, error past 1 s
        (past,) = await sub.wait_for(lambda m: _clock(m, False) and m.payload["synchronised"],
                                     within=POLL_S + 10)  # fmt: skip
        assert past.payload["untrusted_time"] == bad.payload["seq"]  # made before it said so
        await sub.wait_for(lambda m: m.kind == "event" and m.payload["seq"] > past.payload["seq"])

        _lab(lab, synchronised=True)
        (good,) = await sub.wait_for(lambda m: _clock(m, True) and m is not start,
                                     within=POLL_S + 10)  # fmt: skip
        await sub.wait_for(lambda m: m.kind == "event" and m.payload["seq"] > good.payload["seq"])
        fresh = [m for m in sub.messages if not m.retained and m.kind != "status"]
        for m in fresh:
            seq = m.payload["seq"]
            if bad.payload["seq"] < seq <= past.payload["seq"]:  # a clock record is made under
                # the verdict before it: the next records carry the one it gives
                assert m.payload["untrusted_time"] == bad.payload["seq"], m
            elif past.payload["seq"] < seq <= good.payload["seq"]:
                assert m.payload["untrusted_time"] == past.payload["seq"], m
            else:
                assert "untrusted_time" not in m.payload, m
        clocks = [m for m in fresh if m.kind == "clock"]
        assert [m.payload["seq"] for m in clocks] == [
            start.payload["seq"], bad.payload["seq"], past.payload["seq"], good.payload["seq"]
        ]  # fmt: skip
        rulings = [m for m in fresh if m.kind == "ruling"]
        assert len(rulings) == 1  # the second bad reading found the first alert unresolved

        # each stamp is inside its record's hash, as journaled
        journal = table.daemon.journal
        (record,) = [r for r in await journal.read_from(ruling.seq, 1) if r.seq == ruling.seq]
        assert f'"untrusted_time":{bad.payload["seq"]}'.encode() in record.payload
        assert record.hash == record_hash(record.prev_hash, record.seq, record.ts, record.topic,
                                          record.retain, record.payload)  # fmt: skip


async def _clock_records(daemon: TableDaemon) -> list[dict[str, object]]:
    """Run the daemon (no broker) until its first reading is durable; its journal's clock
    records."""
    task = asyncio.create_task(daemon.run())
    try:
        await until(lambda: daemon.clock_watch.last is not None)
        await until(lambda: daemon.journal.durable_seq >= daemon.journal.next_seq - 1)
        records = await daemon.journal.read_from(0, daemon.journal.next_seq)
    finally:
        await stop(task)
    return [json.loads(r.payload) for r in records if r.topic.endswith("/clock")]


async def test_each_start_journals_the_kernels_reading_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the lab's hook the daemon reads the kernel: its first clock record says
    ``adjtimex`` and what the kernel says now; a second start journals one again."""
    monkeypatch.delenv(DISCIPLINE_FILE_ENV)
    config = make_config("mqtt://127.0.0.1:1", "socket://127.0.0.1:1", tmp_path)
    seen = [await _clock_records(TableDaemon(config)) for _ in range(2)]
    kernel = read_kernel()
    assert [len(s) for s in seen] == [1, 2]
    for record in seen[1]:
        assert record["source"] == "adjtimex" and record["synchronised"] is kernel.synchronised
