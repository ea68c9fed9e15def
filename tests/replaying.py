"""Record a live simulated session through the recorder, and replay a capture into the real
daemon: the harness of tests/test_replay.py, and of the captures it ships (tests/captures/).

A capture case is three files side by side (docs/replay.md):

* ``NAME.capture``: what the device links carried;
* ``NAME.toml``: the table's config; each device named like a capture link gets its URL from
  the replay;
* ``NAME.expect``: the rulings the daemon must publish, in order, and device events that must
  be among the events it publishes.

``python -m tests.replaying`` records the shipped cases again from the simulators.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import io
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tableside import __version__
from tableside.daemon.app import TableDaemon
from tableside.daemon.config import Config, load_config
from tableside.simulators.base import FramedSimulator
from tableside.simulators.capture import Framing, LinkInfo, read_capture
from tableside.simulators.listen import Connection, serve_socket
from tableside.simulators.record import RecordedLink, Recorder
from tableside.simulators.replay import Replay

from .hil import Received, Subscriber, stop, until

CAPTURES = Path(__file__).parent / "captures"


def ruling_line(m: Received) -> str:
    """How a ruling is written in an .expect file: ``ruling CLAUSE -> ACTION,ACTION``."""
    return f"ruling {m.payload['clause']} -> {','.join(m.payload['actions'])}"


@dataclass(frozen=True)
class Expected:
    rulings: list[str]
    #: ``event DEVICE NAME [KEY=VALUE …]``: an event of that device and name whose data has
    #: those values (strings bare, others compact JSON: ``seats=[1,2]``) must be published
    events: list[str]

    @classmethod
    def read(cls, path: Path) -> Expected:
        rulings: list[str] = []
        events: list[str] = []
        for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            if line.startswith("ruling "):
                rulings.append(line)
            elif line.startswith("event "):
                events.append(line)
            else:
                raise ValueError(f"{path}:{number}: expected 'ruling …' or 'event …': {line!r}")
        return cls(rulings, events)

    def missing_events(self, messages: list[Received]) -> list[str]:
        return [want for want in self.events if not any(_is_event(m, want) for m in messages)]


def _is_event(m: Received, want: str) -> bool:
    _, device, name, *pairs = want.split()
    if m.kind != "event" or f"/{device}/" not in m.topic or m.payload["event"] != name:
        return False
    data = m.payload["data"]
    return all(_text(data.get(k)) == v for k, v in (p.split("=", 1) for p in pairs))


def _text(value: Any) -> str:
    """A value as an .expect line writes it: strings bare, anything else compact JSON."""
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def rulings_of(messages: list[Received]) -> list[str]:
    return [ruling_line(m) for m in messages if m.kind == "ruling" and not m.retained]


def table_config(toml: Path, broker: str, urls: Mapping[str, str], state_dir: Path) -> Config:
    config = load_config(toml, broker=broker, devices=urls, use_env=False)
    table = config.table.model_copy(update={"state_dir": state_dir})
    return config.model_copy(update={"table": table})


@dataclass
class Played:
    replay: Replay
    messages: list[Received]
    handling_errors: int

    @property
    def rulings(self) -> list[str]:
        return rulings_of(self.messages)


async def replay_into_daemon(
    capture: Path,
    toml: Path,
    broker: str,
    state_dir: Path,
    *,
    expected: Expected,
    mode: str = "socket",
    speed: float = 1.0,
) -> Played:
    """Play ``capture`` to a real daemon configured by ``toml``; until the replay is done and
    every ruling and event ``expected`` came (or 20 s more went by: what is missing is then
    for the caller to show)."""
    replay = Replay(read_capture(capture), speed=speed)
    urls: dict[str, str] = {}
    where = "pty" if mode == "pty" else "socket://127.0.0.1:0"
    links = list(replay.capture.links)
    serving = asyncio.create_task(
        replay.serve(dict.fromkeys(links, where), urls.__setitem__), name="replay"
    )
    sub = Subscriber(broker, "tableside/#")
    sub_task = asyncio.create_task(sub.run(), name="subscriber")
    tasks = [serving, sub_task]
    try:
        await until(lambda: len(urls) == len(links), within=10)
        await asyncio.wait_for(sub.connected.wait(), 10)
        daemon = TableDaemon(table_config(toml, broker, urls, state_dir))
        tasks.append(asyncio.create_task(daemon.run(), name="daemon"))
        duration_s = replay.capture.records[-1].t_ms / 1000 / speed
        await asyncio.wait_for(replay.done.wait(), duration_s + 30)
        if not replay.stopped:
            # the last messages may still be on their way (a fast replay ends a few ms after
            # its last frame): wait for all of them, not only the rulings
            def came() -> bool:
                messages = list(sub.messages)
                return (len(rulings_of(messages)) >= len(expected.rulings)
                        and not expected.missing_events(messages))  # fmt: skip

            with contextlib.suppress(TimeoutError):
                await until(came, within=20)
    finally:
        await stop(*tasks)
    return Played(replay, list(sub.messages), daemon.handling_errors)


@dataclass
class Recorded:
    capture: str
    messages: list[Received]

    @property
    def rulings(self) -> list[str]:
        return rulings_of(self.messages)


async def record_live(
    devices: Mapping[str, tuple[Connection, Framing]],  # as Devices below
    toml: Path,
    broker: str,
    state_dir: Path,
    *,
    until_done: Callable[[list[Received]], Awaitable[None]],
    comment: str,
) -> Recorded:
    """Simulators (one per link) ← recorder ← real daemon; until ``until_done`` returns."""
    sim_urls: dict[str, str] = {}
    tasks: list[asyncio.Task[Any]] = []
    for name, (serve, _) in devices.items():
        tasks.append(
            asyncio.create_task(
                serve_socket(
                    "socket://127.0.0.1:0", serve, functools.partial(sim_urls.__setitem__, name)
                ),
                name=f"sim {name}",
            )
        )
    await until(lambda: len(sim_urls) == len(devices), within=10)
    drivers = load_config(toml, use_env=False).devices  # for the capture's header
    links = [
        RecordedLink(
            LinkInfo(name, sim_urls[name], framing, extra=(("driver", drivers[name].driver),)),
            "socket://127.0.0.1:0",
        )
        for name, (_, framing) in devices.items()
    ]
    out = io.StringIO()
    recorder = Recorder(links, out, comment=comment, version=__version__)
    urls: dict[str, str] = {}
    rec_task = asyncio.create_task(recorder.run(urls.__setitem__), name="recorder")
    sub = Subscriber(broker, "tableside/#")
    tasks.append(asyncio.create_task(sub.run(), name="subscriber"))
    try:
        await until(lambda: len(urls) == len(devices), within=10)
        await asyncio.wait_for(sub.connected.wait(), 10)
        daemon = TableDaemon(table_config(toml, broker, urls, state_dir))
        daemon_task = asyncio.create_task(daemon.run(), name="daemon")
        try:
            await until_done(sub.messages)
        finally:
            await stop(rec_task)  # the capture ends here, before the daemon goes
            await stop(daemon_task)
    finally:
        await stop(*tasks)
    return Recorded(out.getvalue(), list(sub.messages))


def wait_done(
    *sims: FramedSimulator, settle: float = 0.5
) -> Callable[[list[Received]], Awaitable[None]]:
    async def wait(_messages: list[Received]) -> None:
        for sim in sims:
            await asyncio.wait_for(sim.done.wait(), 60)
        await asyncio.sleep(settle)  # the last frames and their ACKs cross

    return wait


# -- the shipped cases, and how they were recorded ----------------------------------------------

#: link name → (the simulator's serve, how replay compares the host's bytes on that link)
Devices = dict[str, tuple[Connection, Framing]]
#: the devices, the simulators whose ``done`` ends the session, the capture's comment
Case = tuple[Devices, list[FramedSimulator], str]


def _shuffler(faults: list[str], shuffles: int, seed: int, comment: str) -> Case:
    from tableside.simulators.faults import parse_fault
    from tableside.simulators.shuffler import FAULTS, ShufflerSimulator

    sim = ShufflerSimulator(
        interval=0.3, faults=[parse_fault(f, FAULTS) for f in faults], shuffle_time=0.05,
        fault_clear_time=0.1, heartbeat=0.25, max_cycles=shuffles, seed=seed,
    )  # fmt: skip
    comment = f"shuffler simulator, {shuffles} shuffles, faults {' '.join(faults)}{comment}"
    return {"shuffler": (sim.serve, Framing.TABLESIDE)}, [sim], comment


def _shuffler_case() -> Case:
    return _shuffler(["count=51@2", "jam@3", "noise=40@4"], 5, 3, ", seed 3")


def _disconnect_case() -> Case:
    return _shuffler(["disconnect@2", "count=53@4"], 4, 4, ": two sessions")


def _shoe_case() -> Case:
    from tableside.simulators.registry import build_simulator

    faults = ["short=4@2", "faceup@3"]
    sim = build_simulator(
        "shoe",
        {"interval": 0.3, "stack_time": 0.01, "fault_clear_time": 0.05, "heartbeat": 0.25,
         "reads_cards": True, "max_cycles": 4, "seed": 5},
        faults,
    )  # fmt: skip
    comment = f"shoe simulator, 4 rounds of its own plan, faults {' '.join(faults)}, seed 5"
    return {"shoe": (sim.serve, Framing.TABLESIDE)}, [sim], comment


def _progressive_case() -> Case:
    from tableside.simulators.progressive import progressive_table

    faults = ["late_wager=2@1", "ignore_inhibit=2@1", "late_wager=2@2", "jam=3@2"]
    controller, bus = progressive_table(
        {1: 3, 2: 4}, faults, interval=1.0, heartbeat=0.25, betting_time=0.2, players=(1, 2),
        max_cycles=3, seed=9,
    )  # fmt: skip
    comment = f"progressive simulator, seats 1=3 2=4, 3 betting rounds, faults {' '.join(faults)}"
    devices: Devices = {
        "progressive": (controller.serve, Framing.TABLESIDE),
        "acceptors": (bus.serve, Framing.CCTALK),
    }
    return devices, [controller], comment


CASES: dict[str, Callable[[], Case]] = {
    "shuffler-count-jam-noise": _shuffler_case,
    "shoe-short-faceup": _shoe_case,
    "shuffler-disconnect": _disconnect_case,
    "progressive-late-wager": _progressive_case,
}


async def _record_cases(names: list[str]) -> None:
    import tempfile

    from .conftest import Mosquitto

    for name in names:
        devices, sims, comment = CASES[name]()
        with tempfile.TemporaryDirectory() as tmp:
            broker = Mosquitto(Path(tmp))
            broker.start()
            try:
                recorded = await record_live(
                    devices, CAPTURES / f"{name}.toml", broker.url, Path(tmp),
                    until_done=wait_done(*sims), comment=comment,
                )  # fmt: skip
            finally:
                broker.stop()
        (CAPTURES / f"{name}.capture").write_text(recorded.capture, encoding="utf-8")
        print(f"{name}: {len(recorded.capture.splitlines())} lines")
        for line in recorded.rulings:
            print(f"  {line}")
        for m in recorded.messages:
            if m.kind == "event":
                print(f"  event {m.topic.split('/')[-2]} {m.payload['event']} {m.payload['data']}")


if __name__ == "__main__":
    import sys

    asyncio.run(_record_cases(sys.argv[1:] or list(CASES)))
