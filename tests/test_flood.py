"""One device flooding the table cannot starve the others (HIL: the real daemon, two
simulators over ptys, the test's own Mosquitto)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tableside.drivers.link import FramedLink
from tableside.simulators.faults import FaultSpec
from tableside.simulators.shoe import ShoeSimulator
from tableside.simulators.shuffler import ShufflerSimulator
from tests.conftest import Mosquitto
from tests.hil import event, simulated_table, until

FLOOD_S = 8.0


@dataclass
class _TimedShuffler(ShufflerSimulator):
    """A shuffler that notes when each shuffle begins (just before its first frame)."""

    began: dict[int, float] = field(default_factory=dict)

    async def cycle(
        self, link: FramedLink, n: int, faults: Mapping[str, str | None], request: Any
    ) -> None:
        self.began[n] = time.monotonic()
        await super().cycle(link, n, faults, request)


async def test_a_flooding_device_is_throttled_and_the_others_still_get_through(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    shuffler = _TimedShuffler(interval=0.1, shuffle_time=0.02, heartbeat=0.2)
    flooder = ShoeSimulator(
        interval=0.1, heartbeat=0.2, faults=[FaultSpec("flood", str(FLOOD_S), 1)],
        stack_time=0.01, fault_clear_time=0.05,
    )  # fmt: skip
    async with simulated_table(
        mosquitto.url, tmp_path, shuffler, others={"shoe": flooder}, mode="pty",
        heartbeat_timeout=2.0,
    ) as table:  # fmt: skip
        sub = table.subscriber
        await until(lambda: flooder.flooded > 0)
        flood_began = time.monotonic()
        # The shuffler's shuffles begun while the shoe floods, each to its shuffle_started.
        await until(lambda: time.monotonic() - flood_began > FLOOD_S / 2, within=FLOOD_S)
        window = {n: t for n, t in shuffler.began.items() if t >= flood_began}
        last = max(window)
        await sub.wait_for(lambda m: event("shuffle_started")(m)
                           and m.payload["data"]["shuffle_id"] == last)  # fmt: skip
        arrived = {
            m.payload["data"]["shuffle_id"]: m.at
            for m in sub.matching(event("shuffle_started"))
            if m.payload["device"] == "shuffler"
        }
        delays = sorted(arrived[n] - t for n, t in window.items())
        assert len(delays) >= 10, delays
        p99 = delays[min(len(delays) - 1, int(0.99 * len(delays)))]
        assert p99 < 1.0, f"the shuffler's events waited behind the flood: p99 {p99:.3f} s"
        # The flooder is reported once as flooding, and again when it has stopped.
        began = (await sub.wait_for(event("flooding")))[0]
        assert began.payload["device"] == "shoe" and began.payload["data"]["active"] is True
        await until(lambda: flooder.cycles > 1, within=FLOOD_S + 5)  # the flood is over
        floods = await sub.wait_for(event("flooding"), count=2, within=10)
        assert len(floods) == 2, [m.payload["data"] for m in floods]  # once, not per frame
        ended = floods[1]
        assert ended.payload["data"]["active"] is False
        assert ended.payload["data"]["held"] > 0
        # It was slowed: far fewer of its frames were taken than it sent.
        taken = len(sub.matching(lambda m: event("status")(m) and m.payload["device"] == "shoe"))
        assert taken < flooder.flooded / 2, (taken, flooder.flooded)
