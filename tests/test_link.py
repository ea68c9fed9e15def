"""The link layer over real loopback sockets: ACK, NAK, retransmission, duplicates, noise."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from tableside.drivers.errors import DeviceRejected, LinkTimeout
from tableside.drivers.framing import Frame, NakReason
from tableside.drivers.link import (
    HELD_FRAMES,
    ArqPolicy,
    Flooding,
    FrameBudget,
    FramedLink,
    LineNoise,
    Notice,
    ProtocolError,
)
from tableside.drivers.shuffler import protocol as p

from .nullmodem import Mangle, byte_by_byte, null_modem, passthrough

#: A test that counts retransmissions must not see one for an ACK a loaded machine was slow
#: to deliver (byte by byte through the null modem, an ACK took over 0.1 s): half a second
#: for an ACK, and for the rest of a frame, bounds those waits.
PATIENT = ArqPolicy(ack_timeout=0.5, retries=3, frame_timeout=0.5)
#: where nothing but timeouts is waited for, they are short
FAST = ArqPolicy(ack_timeout=0.1, retries=3, frame_timeout=0.2)
#: a sender that sends again every 0.1 s until it is acknowledged (for 2 s)
RESENDS = ArqPolicy(ack_timeout=0.1, retries=20, frame_timeout=0.5)


class Pair:
    def __init__(self) -> None:
        self.host_got: list[Notice] = []
        self.device_got: list[Notice] = []
        self.device_answer: NakReason | None = None
        self.host: FramedLink
        self.device: FramedLink

    def on_host(self, message: Notice) -> NakReason | None:
        self.host_got.append(message)
        return None

    def on_device(self, message: Notice) -> NakReason | None:
        self.device_got.append(message)
        return None if isinstance(message, ProtocolError | LineNoise) else self.device_answer

    def device_messages(self) -> list[Notice]:
        return [m for m in self.device_got if not isinstance(m, LineNoise)]


@contextlib.asynccontextmanager
async def linked(
    mangle: Mangle = passthrough,
    device_budget: FrameBudget | None = None,
    host_policy: ArqPolicy = PATIENT,
    device_settle: Callable[[], Awaitable[None]] | None = None,
) -> AsyncIterator[Pair]:
    """A host and a device link; ``device_budget``: what the device takes from the host;
    ``device_settle``: what the device waits on before it acknowledges (the daemon's journal)."""
    pair = Pair()
    async with null_modem(mangle) as ((hr, hw), (dr, dw)):
        pair.host = FramedLink(hr, hw, p.PROTOCOL, pair.on_host, name="host", policy=host_policy)
        pair.device = FramedLink(dr, dw, p.PROTOCOL, pair.on_device, name="device",
                                 policy=PATIENT, budget=device_budget,
                                 settle=device_settle)  # fmt: skip
        tasks = [asyncio.create_task(pair.host.run()), asyncio.create_task(pair.device.run())]
        try:
            yield pair
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)
            pair.host.close()
            pair.device.close()


async def settle(condition: object, within: float = 5.0) -> None:
    async with asyncio.timeout(within):
        while not callable(condition) or not condition():
            await asyncio.sleep(0.01)


@pytest.mark.parametrize("mangle", [passthrough, byte_by_byte], ids=["whole", "byte-by-byte"])
async def test_messages_arrive_once_in_order(mangle: Mangle) -> None:
    sent = [p.Heartbeat(i) for i in range(20)]
    async with linked(mangle) as pair:
        for message in sent:
            await pair.host.send(message)
        await settle(lambda: len(pair.device_got) == len(sent))
    assert pair.device_got == sent
    assert pair.host.stats.retransmits == 0


def first_chunk(direction: str, change: Callable[[bytes], list[bytes]]) -> Mangle:
    """A line that does ``change`` to the first chunk going ``direction``, once."""
    done: list[bytes] = []

    def mangle(going: str, data: bytes) -> list[bytes]:
        if going == direction and not done:
            done.append(data)
            return change(data)
        return [data]

    return mangle


def flip_last_byte(data: bytes) -> list[bytes]:
    return [data[:-1] + bytes((data[-1] ^ 0x40,))]


async def test_lost_frame_is_retransmitted() -> None:
    async with linked(first_chunk("h2d", lambda _: [])) as pair:
        await pair.host.send(p.Heartbeat(1))
    assert pair.device_messages() == [p.Heartbeat(1)]
    assert pair.host.stats.retransmits == 1


async def test_lost_ack_gives_a_duplicate_that_is_not_delivered_twice() -> None:
    async with linked(first_chunk("d2h", lambda _: [])) as pair:
        await pair.host.send(p.Heartbeat(7))
    assert pair.device_messages() == [p.Heartbeat(7)]
    assert pair.device.stats.duplicates == 1


async def test_damaged_frame_is_nakked_and_resent() -> None:
    async with linked(first_chunk("h2d", flip_last_byte)) as pair:
        await pair.host.send(p.ShuffleStarted(3))
        await settle(lambda: pair.device_messages() == [p.ShuffleStarted(3)])
    assert pair.device.stats.naks_sent == 1
    assert pair.host.stats.naks_received == 1
    assert pair.host.stats.retransmits == 1
    assert any(isinstance(m, LineNoise) and m.crc_errors == 1 for m in pair.device_got)


async def test_silence_ends_in_link_timeout_after_every_retry() -> None:
    def black_hole(direction: str, data: bytes) -> list[bytes]:
        return []

    async with linked(black_hole, host_policy=FAST) as pair:
        with pytest.raises(LinkTimeout, match="not acknowledged after 4 tries"):
            await pair.host.send(p.QueryStatus())
    assert pair.host.stats.retransmits == 3


async def test_refusal_is_not_retried() -> None:
    async with linked() as pair:
        pair.device_answer = NakReason.BUSY
        with pytest.raises(DeviceRejected, match="BUSY"):
            await pair.host.send(p.StartShuffle())
    assert pair.host.stats.retransmits == 0


async def test_unknown_message_type_is_nakked_and_reported() -> None:
    async with linked() as pair:
        pair.host.write_raw(Frame(seq=9, type=0x7E, payload=b"?").to_bytes())
        await settle(lambda: any(isinstance(m, ProtocolError) for m in pair.device_got))
        error = next(m for m in pair.device_got if isinstance(m, ProtocolError))
        assert (error.seq, error.type, error.reason) == (9, 0x7E, NakReason.UNKNOWN_TYPE)
        assert "0x7e" in error.detail
        assert pair.device.stats.naks_sent == 1


async def test_garbage_between_frames_is_skipped_and_reported() -> None:
    def noisy(direction: str, data: bytes) -> list[bytes]:
        return [b"\x00\xff\x13garbage", data] if direction == "h2d" else [data]

    async with linked(noisy) as pair:
        for i in range(5):
            await pair.host.send(p.Heartbeat(i))
        await settle(lambda: len(pair.device_messages()) == 5)
    assert pair.device_messages() == [p.Heartbeat(i) for i in range(5)]
    noise = [m for m in pair.device_got if isinstance(m, LineNoise)]
    assert noise and noise[0].discarded_bytes > 0


async def test_ack_waits_until_the_receiver_has_settled() -> None:
    """With ``settle`` (the daemon's journal commit), a frame is acknowledged only once the
    receiver says what it reported is durable; a slow settle costs retransmissions, which are
    recognised as duplicates, never a second delivery."""
    durable = asyncio.Event()
    calls = 0

    async def journal_committed() -> None:
        nonlocal calls
        calls += 1
        await durable.wait()

    # the host sends again every 0.1 s, and goes on long enough for a loaded machine
    async with linked(host_policy=RESENDS, device_settle=journal_committed) as pair:
        send = asyncio.create_task(pair.host.send(p.Heartbeat(3)))
        await settle(lambda: pair.device_got == [p.Heartbeat(3)] and calls == 1)
        await asyncio.sleep(RESENDS.ack_timeout * 1.5)
        assert not send.done(), "acknowledged before the receiver settled"
        durable.set()
        await asyncio.wait_for(send, 5)
        assert pair.device_got == [p.Heartbeat(3)]


async def test_a_settle_done_at_once_is_acknowledged_at_once_held_frames_and_all() -> None:
    """A settle whose future is done on return (a quiet journal syncs there and then) has its
    frame acknowledged in the same turn; frames held for the budget meanwhile are still taken
    in turn, each once, with no retransmission."""
    settles = 0

    def synced_at_once() -> asyncio.Future[None]:
        nonlocal settles
        settles += 1
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    sent = [p.Heartbeat(i) for i in range(12)]
    budget = FrameBudget(per_s=50, burst=2)
    async with linked(device_budget=budget, device_settle=synced_at_once) as pair:
        for message in sent:
            await pair.host.send(message)
    assert [m for m in pair.device_got if isinstance(m, p.Heartbeat)] == sent
    assert settles == len(sent) and pair.host.stats.retransmits == 0


async def test_frames_that_wait_for_a_settle_are_not_a_flood() -> None:
    """Frames read while a slow settle is under way wait for it, not for the budget: within
    the burst they are all taken once it is done, and no flood is reported (a slow journal is
    not a device over its budget)."""
    durable = asyncio.Event()

    async def journal_committed() -> None:
        await durable.wait()

    frames = [p.PROTOCOL.encode(p.Heartbeat(i), i) for i in range(4)]
    budget = FrameBudget(per_s=10, burst=10)
    async with linked(device_budget=budget, device_settle=journal_committed) as pair:
        got = pair.device_got
        pair.host.write_raw(frames[0].to_bytes())
        await settle(lambda: got == [p.Heartbeat(0)])
        for frame in frames[1:]:  # read while the first one's settle waits
            pair.host.write_raw(frame.to_bytes())
        await settle(lambda: pair.device.stats.frames_in == len(frames))
        durable.set()
        await settle(lambda: sum(isinstance(m, p.Heartbeat) for m in got) == len(frames))
    assert got == [p.Heartbeat(i) for i in range(4)]
    assert pair.device.stats.throttled == 0


async def test_a_sender_over_budget_is_slowed_and_loses_nothing() -> None:
    """Stop-and-wait over the budget: every frame arrives once, in order, each ACKed late
    rather than refused, so the sender goes no faster than the budget; the flood is reported
    when it begins and when it is over."""
    budget = FrameBudget(per_s=20, burst=5)
    sent = [p.Heartbeat(i) for i in range(15)]
    # The budget holds each ACK up to 50 ms; the host waits a whole second for one, so a busy
    # machine's scheduling delay cannot pass for a lost ACK (a retransmit would be a failure).
    # A sender slower than the budget is never held: at 20 frames a second a loaded machine's
    # loopback round trip (a few ms) still outpaces it many times over.
    patient = ArqPolicy(ack_timeout=1.0, retries=3, frame_timeout=0.5)
    async with linked(device_budget=budget, host_policy=patient) as pair:
        began_at = time.monotonic()
        for message in sent:
            await pair.host.send(message)  # no LinkTimeout: each wait is < ack_timeout
        took = time.monotonic() - began_at
        # Quiet for a while: the burst fills again, and the next frame ends the flood.
        await settle(lambda: pair.device._bucket is not None and pair.device._bucket.full)
        await pair.host.send(p.Heartbeat(99))

        def floods() -> list[Flooding]:
            return [m for m in pair.device_got if isinstance(m, Flooding)]

        await settle(lambda: bool(floods()) and not floods()[-1].active)
    delivered = [m for m in pair.device_messages() if not isinstance(m, Flooding)]
    assert delivered == [*sent, p.Heartbeat(99)]
    # Each frame is ACKed only once the budget has taken it: past the burst, the sender went
    # no faster than per_s however fast the machine let it go.
    assert took >= (len(sent) - budget.burst) / budget.per_s * 0.99, took
    # Reported when it began and when it was over (once each, unless the sender stalled for
    # a whole burst mid-stream), with every frame held counted once.
    assert [f.active for f in floods()] == [True, False] * (len(floods()) // 2)
    assert sum(f.held for f in floods() if not f.active) == pair.device.stats.throttled > 0
    assert pair.device.stats.unacknowledged == 0 and pair.host.stats.retransmits == 0


async def test_frames_beyond_the_held_ones_are_left_unacknowledged() -> None:
    """A sender that does not wait for ACKs: the first frames are held and delivered, the
    excess read with them is neither delivered nor ACKed (the sender still has it), and
    counted."""
    budget = FrameBudget(per_s=5, burst=1)
    blast = [p.Heartbeat(i) for i in range(HELD_FRAMES + 20)]
    async with linked(device_budget=budget) as pair:
        for i, message in enumerate(blast):
            pair.host.write_raw(p.PROTOCOL.encode(message, i).to_bytes())

        def delivered() -> list[Notice]:
            return [m for m in pair.device_messages() if isinstance(m, p.Heartbeat)]

        await settle(lambda: len(delivered()) + pair.device.stats.unacknowledged == len(blast))
    # The first frames are held (one more if it was taken before the rest came), in order.
    assert delivered() == blast[: len(delivered())]
    assert HELD_FRAMES <= len(delivered()) <= HELD_FRAMES + 1
    # The link closed mid-flood: its end is reported, with what it cost.
    began, ended = [m for m in pair.device_got if isinstance(m, Flooding)]
    assert began.active and not ended.active
    assert ended.unacknowledged == pair.device.stats.unacknowledged > 0
