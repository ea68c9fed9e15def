"""Two ``tableside floor run`` processes sharing one MQTT v5 subscription into one PostgreSQL;
one SIGKILLed mid-stream: the other takes its share and repairs what the dead one had taken but
not stored, so the store ends with every seq. The survivor's /metrics says so too."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import urllib.request
from collections.abc import AsyncIterator

from tableside.floor.store import open_store
from tests.conftest import Mosquitto
from tests.floorpeer import PeerTable
from tests.ports import free_port
from tests.test_floor import table_on, until_true


@contextlib.asynccontextmanager
async def floor_process(
    broker: Mosquitto, store: str, name: str, *extra: str
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``tableside floor run`` sharing the load as group ``g``; yields once it has subscribed."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tableside", "floor", "run", "--broker", broker.url,
        "--store", store, "--share", "g", "--client-id", name, "--repair-interval", "0.2",
        "--retry", "0.5", "--replay-rate", "200", "--session-expiry", "2", *extra,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        async with asyncio.timeout(20):
            while "floor_subscribed" not in (line := (await proc.stdout.readline()).decode()):
                if not line:
                    raise AssertionError(f"{name} ended: {''.join(lines)}")
                lines.append(line)

        async def drain() -> None:
            assert proc.stdout is not None
            while line := (await proc.stdout.readline()).decode():
                lines.append(line)
                if os.environ.get("FLOOR_DEBUG"):
                    print(name, line, end="")

        drainer = asyncio.create_task(drain(), name=f"drain-{name}")
        try:
            yield proc
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
            async with asyncio.timeout(15):
                await proc.wait()
            await drainer
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_two_floors_share_the_load_and_one_killed_loses_nothing(
    mosquitto: Mosquitto, postgres: str
) -> None:
    async with open_store(postgres) as store:  # the schema, before two floors race for it
        pass
    peer = PeerTable()
    port = free_port()
    metrics = ("--metrics", f"127.0.0.1:{port}")
    async with (
        table_on(mosquitto, peer) as client,
        floor_process(mosquitto, postgres, "floor-one") as one,
        floor_process(mosquitto, postgres, "floor-two", *metrics),
    ):
        for n in range(400):
            await peer.publish(client, peer.event(n))
            if n == 200:
                os.kill(one.pid, signal.SIGKILL)  # mid-stream, batches in its hands
            await asyncio.sleep(0.002)  # a table's pace, not a flood
        async with open_store(postgres) as store:
            beat = asyncio.get_running_loop().time()

            async def complete() -> bool:
                # The table lives on as a daemon does (its status, its checkpoint at an
                # interval): a message now and then. The newest records (a replay's answers
                # among them) may have gone to the dead floor's session while it lasted; a gap
                # past the highest seq stored is seen only once a later message arrives.
                nonlocal beat
                if asyncio.get_running_loop().time() - beat > 0.5:
                    beat = asyncio.get_running_loop().time()
                    await peer.publish(client, peer.event())
                state = await store.state("cs-01")
                return state is not None and state.progress.contiguous_upto == (
                    peer.head.seq if peer.head else -1
                )

            try:
                await until_true(complete, within=60)
            finally:
                state = await store.state("cs-01")
                print(state, peer.asked[-10:], len(peer.records))
            assert state is not None and state.gaps == [] and state.problems == 0
            records = await store.records("cs-01", limit=10_000)
            assert [m.seq for m in records] == list(range(len(peer.records)))
            assert all(m.hash == peer.records[m.seq or 0].hash for m in records)
            assert state.progress.verified_upto == state.highest_seq
            # the dead floor's session took its share for a while: repaired from the journal
            assert peer.asked
        text = await asyncio.to_thread(
            lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        )
        assert b'tableside_floor_messages_stored_total{kind="record"}' in text
        assert b"tableside_floor_lag_seconds_bucket" in text
