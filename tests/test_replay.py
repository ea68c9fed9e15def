"""Record and replay (docs/replay.md): the shipped captures replayed into the real daemon must
give the rulings stored beside them; a live session recorded through ``tableside record`` replays
to the same rulings; a host that does not do what the recording says is reported."""

from __future__ import annotations

import asyncio
import contextlib
import io
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tableside.daemon.app import TableDaemon
from tableside.drivers.cctalk.protocol import CcTalkFrame, Header
from tableside.drivers.framing import ACK, Frame
from tableside.drivers.transport import open_transport
from tableside.simulators.capture import (
    Capture,
    CaptureError,
    Framing,
    LinkInfo,
    Record,
    What,
    format_record,
    parse_capture,
    read_capture,
    write_header,
)
from tableside.simulators.record import RecordedLink, Recorder
from tableside.simulators.replay import Replay

from .conftest import Mosquitto, free_port
from .hil import Subscriber, stop, until
from .replaying import CAPTURES, Expected, replay_into_daemon, rulings_of, table_config

CASES = sorted(p.stem for p in CAPTURES.glob("*.capture"))


@pytest.mark.parametrize(("mode", "speed"), [("socket", 1.0), ("pty", 1.0), ("socket", 4.0)])
@pytest.mark.parametrize("name", CASES)
async def test_shipped_capture_gives_its_rulings(
    mosquitto: Mosquitto, tmp_path: Path, name: str, mode: str, speed: float
) -> None:
    expected = Expected.read(CAPTURES / f"{name}.expect")
    played = await replay_into_daemon(
        CAPTURES / f"{name}.capture", CAPTURES / f"{name}.toml", mosquitto.url, tmp_path,
        expected=expected, mode=mode, speed=speed,
    )  # fmt: skip
    assert played.replay.divergences == []
    assert played.rulings == expected.rulings
    assert expected.missing_events(played.messages) == []
    assert played.handling_errors == 0


# -- both ends real: a live session through `tableside record`, replayed by `simulate replay` --

CMD = [sys.executable, "-m", "tableside"]


async def start(*args: str) -> tuple[asyncio.subprocess.Process, str]:
    """A tableside process, and the first line it prints (where it listens)."""
    proc = await asyncio.create_subprocess_exec(
        *CMD, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 20)
    assert line, (await proc.communicate())[1].decode()
    return proc, line.decode().strip()


async def finish(proc: asyncio.subprocess.Process, *, terminate: bool = True) -> tuple[int, str]:
    if terminate and proc.returncode is None:
        proc.terminate()
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode is not None
    return proc.returncode, err.decode()


async def test_a_live_session_recorded_through_tableside_record_replays_to_its_rulings(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    toml = CAPTURES / "shuffler-count-jam-noise.toml"
    sim, sim_url = await start(
        "simulate", "shuffler", "--listen", "socket://127.0.0.1:0", "--interval", "0.3",
        "--heartbeat", "0.25", "--cycles", "4", "--fault", "count=53@2", "--fault", "stop@3",
        "--set", "shuffle_time=0.05", "--set", "fault_clear_time=0.1",
    )  # fmt: skip
    capture = tmp_path / "live.capture"
    recorder, pty = await start(
        "record", "--device", f"shuffler={sim_url}", "--listen", "shuffler=pty",
        "--driver", "shuffler=tableside.shuffler", "-o",
        str(capture), "--comment", "a live shuffler, count=53@2 stop@3",
    )  # fmt: skip
    assert pty.startswith("/dev/")
    sub = Subscriber(mosquitto.url, "tableside/#")
    sub_task = asyncio.create_task(sub.run(), name="subscriber")
    try:
        await asyncio.wait_for(sub.connected.wait(), 10)
        live = await _live_session(sub, sim, recorder, pty, toml, tmp_path / "live")
        assert "ruling 58 Pa. Code § 555.5(b) -> remove_deck" in live  # 53 cards counted
        text = capture.read_text(encoding="utf-8")
        assert "# comment: a live shuffler, count=53@2 stop@3" in text
        assert (
            f"# link shuffler: device={sim_url} framing=tableside baudrate=9600 "
            "driver=tableside.shuffler\n" in text
        )
        assert " shuffler close dev" in text  # the simulator exited: the device ended it

        # The capture, played by `tableside simulate replay` to a fresh daemon.
        sub.messages.clear()
        replayer, pty = await start("simulate", "replay", str(capture), "--pty", "--speed", "2")
        config = table_config(toml, mosquitto.url, {"shuffler": pty}, tmp_path / "replay")
        daemon_task = asyncio.create_task(TableDaemon(config).run(), name="daemon")
        try:
            code, err = await finish(replayer, terminate=False)
            assert code == 0, err
            assert "played to the end, 0 divergence(s)" in err, err
            await until(lambda: len(rulings_of(sub.messages)) >= len(live), within=20)
        finally:
            await stop(daemon_task)
            await finish(replayer)
        assert rulings_of(sub.messages) == live
    finally:
        await stop(sub_task)


async def _live_session(
    sub: Subscriber,
    sim: asyncio.subprocess.Process,
    recorder: asyncio.subprocess.Process,
    pty: str,
    toml: Path,
    state_dir: Path,
) -> list[str]:
    """The daemon on the recorder's pty until the simulator is done; the rulings it gave."""
    config = table_config(toml, sub.url, {"shuffler": pty}, state_dir)
    daemon_task = asyncio.create_task(TableDaemon(config).run(), name="daemon")
    try:
        code, err = await finish(sim, terminate=False)  # its 4 shuffles are done
        assert code == 0, err
        await sub.wait_for(lambda m: m.kind == "ruling", count=2)
    finally:
        await stop(daemon_task)
        await finish(sim)
        code, err = await finish(recorder)
    assert code == 0, err
    return rulings_of(sub.messages)


# -- the replay's idea of a match, with a scripted host over a real socket ----------------------


def capture_of(
    *records: Record, framing: Framing = Framing.TABLESIDE, links: tuple[str, ...] = ("dev",)
) -> Capture:
    text = io.StringIO()
    infos = [LinkInfo(name, "socket://127.0.0.1:1", framing) for name in links]
    write_header(text, infos, "test", version="t")
    for record in records:
        text.write(format_record(record) + "\n")
    return parse_capture(text.getvalue())


def dev(t_ms: float, data: bytes) -> Record:
    return Record(t_ms, "dev", What.DEV, data)


def host(t_ms: float, data: bytes) -> Record:
    return Record(t_ms, "dev", What.HOST, data)


OPEN = Record(0.0, "dev", What.OPEN)
F1, F2, F3 = (Frame(n, 0x25, bytes(4)).to_bytes() for n in range(3))  # device heartbeats
ACK0, ACK1 = (Frame(n, ACK).to_bytes() for n in range(2))
QUERY = Frame(0, 0x41).to_bytes()  # QueryStatus


@contextlib.asynccontextmanager
async def host_of(
    replay: Replay, link: str = "dev"
) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    async with hosts_of(replay, link) as [streams]:
        yield streams


@contextlib.asynccontextmanager
async def hosts_of(
    replay: Replay, *links: str
) -> AsyncIterator[list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]:
    urls: dict[str, str] = {}
    listen = dict.fromkeys(links, "socket://127.0.0.1:0")
    task = asyncio.create_task(replay.serve(listen, urls.__setitem__), name="replay")
    streams = []
    try:
        await until(lambda: len(urls) == len(links), within=5)
        for link in links:
            streams.append(await open_transport(urls[link]))
        yield streams
    finally:
        for _, writer in streams:
            writer.close()
        await stop(task)


async def nothing_more(reader: asyncio.StreamReader, within: float = 0.3) -> None:
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(reader.read(1), within)


async def test_device_bytes_wait_for_the_host_frames_recorded_before_them() -> None:
    replay = Replay(capture_of(OPEN, dev(1, F1), host(2, ACK0), dev(3, F2 + b"\x00junk")))
    async with host_of(replay) as (reader, writer):
        assert await reader.readexactly(len(F1)) == F1
        await nothing_more(reader)  # F2 waits for the ACK the host gave in the recording
        writer.write(ACK0)
        assert await reader.readexactly(len(F2) + 5) == F2 + b"\x00junk"  # byte-exact
        await asyncio.wait_for(replay.done.wait(), 5)
    assert replay.divergences == []


async def test_host_frames_between_two_device_records_may_come_in_any_order() -> None:
    replay = Replay(capture_of(OPEN, dev(1, F1), host(2, ACK0), host(3, QUERY), dev(4, F2)))
    async with host_of(replay) as (reader, writer):
        await reader.readexactly(len(F1))
        writer.write(QUERY[:3])  # split, and before the ACK
        writer.write(QUERY[3:] + ACK0)
        assert await reader.readexactly(len(F2)) == F2
        await asyncio.wait_for(replay.done.wait(), 5)
    assert replay.divergences == []


async def test_a_host_frame_may_come_one_group_early() -> None:
    # The host sends its QueryStatus at once, before the device's first frame (as a driver
    # does on connect); the recording has it after.
    replay = Replay(
        capture_of(OPEN, dev(1, F1), host(2, ACK0 + QUERY), dev(3, F2), host(4, ACK1), dev(5, F3))
    )
    async with host_of(replay) as (reader, writer):
        writer.write(QUERY)
        await reader.readexactly(len(F1))
        writer.write(ACK0)
        await reader.readexactly(len(F2))
        writer.write(ACK1)
        assert await reader.readexactly(len(F3)) == F3
        await asyncio.wait_for(replay.done.wait(), 5)
    assert replay.divergences == []


async def test_a_host_frame_sent_again_is_a_retransmission_not_a_divergence() -> None:
    # The device's heartbeat F1 crosses the host's query; the host ACKs it; the device ACKs
    # the query only at 300 ms, and sends F2 (seq 1).
    replay = Replay(
        capture_of(
            OPEN, dev(1, F1), host(2, QUERY + ACK0), dev(300, ACK0), dev(301, F2),
            host(302, ACK1), dev(303, F3),
        )
    )  # fmt: skip
    async with host_of(replay) as (reader, writer):
        writer.write(QUERY)
        await reader.readexactly(len(F1))
        writer.write(ACK0)
        await until(lambda: replay.clock.now_ms() > 2)
        writer.write(QUERY)  # no ACK yet (the device answers at 300 ms): the host sends it again
        assert await reader.readexactly(len(ACK0 + F2)) == ACK0 + F2
        writer.write(ACK1)
        assert await reader.readexactly(len(F3)) == F3
        await asyncio.wait_for(replay.done.wait(), 5)
    assert replay.divergences == []
    assert replay.retransmissions == 1


async def test_a_host_frame_two_groups_early_is_a_divergence() -> None:
    ack2 = Frame(2, ACK).to_bytes()
    replay = Replay(
        capture_of(
            OPEN, dev(1, F1), host(2, ACK0), dev(3, F2), host(4, ACK1), dev(5, F3),
            host(6, ack2 + QUERY),
        )
    )  # fmt: skip
    async with host_of(replay) as (reader, writer):
        await reader.readexactly(len(F1))
        writer.write(QUERY)
        await asyncio.wait_for(replay.done.wait(), 5)
    assert replay.divergences[0].what == (
        f"the host sent {QUERY.hex(' ')}; the recording expects {ACK0.hex(' ')}"
    )


async def test_one_clock_stops_while_a_link_waits_for_the_host() -> None:
    # Link a's device waits for the host's ACK, recorded at 2 ms; link b's device spoke at
    # 300 ms. However late the ACK comes, b waits for it, and then keeps the recorded gap.
    a, b = "a", "b"
    replay = Replay(
        capture_of(
            Record(0, a, What.OPEN), Record(0, b, What.OPEN),
            Record(1, a, What.DEV, F1), Record(2, a, What.HOST, ACK0),
            Record(300, b, What.DEV, F2), Record(301, a, What.DEV, F3),
            links=(a, b),
        )
    )  # fmt: skip
    async with hosts_of(replay, a, b) as [(a_in, a_out), (b_in, _)]:
        await a_in.readexactly(len(F1))
        await nothing_more(b_in, within=0.6)  # the host is late with its ACK: b waits too
        a_out.write(ACK0)
        acked = time.monotonic()
        assert await b_in.readexactly(len(F2)) == F2
        assert time.monotonic() - acked >= 0.2  # the recorded gap is kept, not eaten by the wait
        assert await a_in.readexactly(len(F3)) == F3
        await asyncio.wait_for(replay.done.wait(), 5)
    assert replay.divergences == []


async def test_a_host_frame_the_recording_does_not_have_is_a_divergence() -> None:
    replay = Replay(capture_of(OPEN, dev(1, F1), host(2, ACK0), dev(3, F2)))
    async with host_of(replay) as (reader, writer):
        await reader.readexactly(len(F1))
        writer.write(ACK1)  # the wrong seq
        await asyncio.wait_for(replay.done.wait(), 5)
        assert await reader.read() == b""  # stopped: F2 is never sent, the line closes
    assert replay.stopped
    [divergence] = replay.divergences
    assert divergence.what == (
        f"the host sent {ACK1.hex(' ')}; the recording expects {ACK0.hex(' ')}"
    )


async def test_a_host_frame_that_never_comes_is_a_divergence_after_patience() -> None:
    replay = Replay(capture_of(OPEN, dev(1, F1), host(2, ACK0), dev(3, F2)), patience=0.2)
    async with host_of(replay) as (reader, _writer):
        await reader.readexactly(len(F1))
        await asyncio.wait_for(replay.done.wait(), 5)
    [divergence] = replay.divergences
    assert divergence.what == f"waited 0.2 s for the host's {ACK0.hex(' ')} (recorded at 2.0 ms)"


async def test_keep_going_plays_on_after_a_divergence() -> None:
    replay = Replay(
        capture_of(OPEN, dev(1, F1), host(2, ACK0), dev(3, F2)), patience=0.2, keep_going=True
    )
    async with host_of(replay) as (reader, _writer):
        await reader.readexactly(len(F1))
        assert await reader.readexactly(len(F2)) == F2
        await asyncio.wait_for(replay.done.wait(), 5)
    assert len(replay.divergences) == 1 and not replay.stopped


async def test_raw_framing_compares_the_host_stream_in_order() -> None:
    capture = capture_of(OPEN, host(1, b"ab"), dev(2, b"1"), framing=Framing.RAW)
    replay = Replay(capture)
    async with host_of(replay) as (_reader, writer):
        writer.write(b"ba")
        await asyncio.wait_for(replay.done.wait(), 5)
    assert replay.divergences[0].what == "the host sent 62; the recording expects 61"


async def test_speed_shortens_the_recorded_gaps() -> None:
    replay = Replay(capture_of(OPEN, dev(1, F1), dev(3000, F2)), speed=20)
    async with host_of(replay) as (reader, _writer):
        await reader.readexactly(len(F1))
        began = time.monotonic()
        await reader.readexactly(len(F2))
        # 3 s recorded; at 20 times, about 0.15 s (bounded loosely: the machine is shared)
        assert time.monotonic() - began < 1.5


def cc(dest: int, source: int, header: int, data: bytes = b"") -> bytes:
    return CcTalkFrame(dest, source, header, data).to_bytes()


async def test_cctalk_each_request_gets_the_reply_recorded_for_it_as_of_now() -> None:
    poll = cc(3, 1, Header.READ_BUFFERED_CREDIT)
    ident = cc(3, 1, Header.REQUEST_SERIAL_NUMBER)
    before, after = cc(1, 3, 0, bytes(11)), cc(1, 3, 0, bytes((1, 1, 0)) + bytes(8))
    capture = capture_of(
        OPEN,
        host(1, poll), dev(3, poll), dev(5, before),  # an echo, then the reply
        host(100, ident), dev(102, ident + cc(1, 3, 0, b"\x01\x02\x03")),
        host(1500, poll), dev(1502, poll + after),
        framing=Framing.CCTALK,
    )  # fmt: skip
    replay = Replay(capture)
    async with host_of(replay) as (reader, writer):
        writer.write(ident)  # asked in another order than recorded
        assert await reader.readexactly(len(ident) + 8) == ident + cc(1, 3, 0, b"\x01\x02\x03")
        for _ in range(2):  # asked again before 1500 ms: the device's state is still "before"
            writer.write(poll)
            assert await reader.readexactly(len(poll) + len(before)) == poll + before
        await until(lambda: replay.clock.now_ms() > 1500, within=5)
        writer.write(poll)
        assert await reader.readexactly(len(poll) + len(after)) == poll + after
        await asyncio.wait_for(replay.done.wait(), 5)
        assert replay.divergences == []
        writer.write(cc(4, 1, Header.SIMPLE_POLL))  # an address the recording never asks
        await until(lambda: bool(replay.divergences), within=5)
    assert "which the recording never asks" in replay.divergences[0].what


# -- the recorder -------------------------------------------------------------------------------


async def test_the_recorder_forwards_both_ways_unchanged_and_records_each_chunk() -> None:
    async def device(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"\xa5hello")  # unasked, at connect
        writer.write(b"X" + await reader.read(100))
        await writer.drain()
        writer.close()  # the device ends the session

    server = await asyncio.start_server(device, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    out = io.StringIO()
    recorder = Recorder(
        [RecordedLink(LinkInfo("shuffler", f"socket://127.0.0.1:{port}"), "socket://127.0.0.1:0")],
        out, comment="two lines\nof comment", version="9.9",
    )  # fmt: skip
    where: dict[str, str] = {}
    task = asyncio.create_task(recorder.run(where.__setitem__), name="recorder")
    try:
        await until(lambda: "shuffler" in where, within=5)
        reader, writer = await open_transport(where["shuffler"])
        assert await reader.readexactly(6) == b"\xa5hello"
        writer.write(b"\x00\x01")
        assert await reader.read() == b"X\x00\x01"  # then the line closes, as the device did
        writer.close()
    finally:
        await stop(task)
        server.close()
    capture = parse_capture(out.getvalue())
    [session] = capture.sessions("shuffler")
    assert b"".join(r.data for r in session.records if r.what is What.DEV) == b"\xa5helloX\x00\x01"
    assert [r.data for r in session.records if r.what is What.HOST] == [b"\x00\x01"]
    assert session.closed_by == "dev"
    assert ("tableside", "9.9") in capture.header
    assert capture.comment() == "two lines\nof comment"
    assert capture.links["shuffler"].device == f"socket://127.0.0.1:{port}"


async def test_a_device_the_recorder_cannot_open_is_said_in_the_capture() -> None:
    port = free_port()  # nothing listens there
    out = io.StringIO()
    recorder = Recorder(
        [RecordedLink(LinkInfo("shoe", f"socket://127.0.0.1:{port}"), "socket://127.0.0.1:0")],
        out, version="9.9",
    )  # fmt: skip
    where: dict[str, str] = {}
    task = asyncio.create_task(recorder.run(where.__setitem__), name="recorder")
    try:
        await until(lambda: "shoe" in where, within=5)
        reader, writer = await open_transport(where["shoe"])
        assert await asyncio.wait_for(reader.read(), 10) == b""  # the host sees the line close
        writer.close()
    finally:
        await stop(task)
    assert f"# shoe: cannot open socket://127.0.0.1:{port}" in out.getvalue()
    assert parse_capture(out.getvalue()).sessions("shoe") == []


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["record", "--device", "a=socket://127.0.0.1:1", "--listen", "b=pty", "-o", "x"],
         "name each link the same in --device, --listen, --framing and --driver"),
        (["record", "--device", "socket://127.0.0.1:1", "--listen", "pty", "--framing", "hdlc",
          "-o", "x"], "--framing device=hdlc: use tableside, cctalk or raw"),
        (["record", "--device", "socket://127.0.0.1:1", "--listen", "/dev/pts/1", "-o", "x"],
         "--listen device=/dev/pts/1: use pty or socket://HOST:PORT"),
        (["simulate", "shuffler", "x.capture", "--pty"],
         "give a capture only to replay: tableside simulate replay FILE"),
        (["simulate", "replay", "nowhere.capture", "--pty"], "nowhere.capture: cannot read"),
        (["simulate", "replay", "x.capture", "--pty", "--fault", "jam@1"],
         "a capture plays what was recorded: no --fault, --scenario or --set"),
    ],
)  # fmt: skip
def test_record_and_replay_refuse_bad_arguments_saying_why(
    tmp_path: Path, args: list[str], error: str
) -> None:
    result = subprocess.run(
        [*CMD, *args], capture_output=True, text=True, cwd=tmp_path, timeout=60, check=False
    )
    assert result.returncode == 2
    assert error in result.stderr


# -- the capture file --------------------------------------------------------------------------


def test_capture_round_trips_through_its_text() -> None:
    capture = capture_of(
        OPEN, dev(1.5, F1), host(2.25, ACK0), Record(9, "dev", What.CLOSE, by="dev")
    )
    [session] = capture.sessions("dev")
    assert [r.data for r in session.records] == [F1, ACK0]
    assert session.closed_by == "dev"
    assert capture.comment() == "test"


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("  1.0 dev dev zz", "t.capture:9: bytes must be hex pairs"),
        ("  1.0 other dev a5", "t.capture:9: link 'other' is not declared in the header"),
        ("  1.0 dev sent a5", "t.capture:9: 'sent': expected open, host, dev or close"),
        ("  0.5 dev dev a5", "t.capture:9: time goes backwards (0.5 ms)"),
        ("  1.0 dev close", "t.capture:9: close must say who closed"),
        ("  x dev dev a5", "t.capture:9: time 'x' is not a number of milliseconds"),
        ("  1.0 dev close dev\n 2.0 dev dev a5", "t.capture:10: dev on dev outside a session"),
    ],
)
def test_a_bad_capture_line_is_refused_with_file_and_line(
    tmp_path: Path, line: str, error: str
) -> None:
    text = io.StringIO()
    write_header(text, [LinkInfo("dev", "x")], "c", version="t")
    text.write("    0.000 dev open\n     0.900 dev dev a5\n" + line + "\n")
    path = tmp_path / "t.capture"
    path.write_text(text.getvalue(), encoding="utf-8")
    with pytest.raises(CaptureError) as caught:
        read_capture(path)
    assert str(caught.value).startswith(str(tmp_path / error.split(":")[0]))
    assert error.split(":", 1)[1].split(":", 1)[1].strip() in str(caught.value)
    assert f":{error.split(':')[1]}:" in str(caught.value)


def test_a_file_that_is_no_capture_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.capture"
    path.write_text("hello\n", encoding="utf-8")
    with pytest.raises(CaptureError, match=r"x.capture:1: not a tableside capture"):
        read_capture(path)
