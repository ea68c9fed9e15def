"""Fuzz every codec with mutated frames: nothing but the codec's own errors may come out.

For each protocol, valid frames of every message type are mutated (bit flips, byte
insertions, deletions, truncations, splices of two frames, random garbage) and fed, in random
chunks, to the sans-IO decoder; every intact frame is then decoded into a message. Anything
raised other than the protocol's documented errors (MalformedPayload, UnknownMessageType) is a
finding. Reports frames per second and peak memory.

    .venv/bin/python bench/fuzz.py --frames 1000000
"""

from __future__ import annotations

import argparse
import random
import resource
import time
from collections.abc import Callable
from typing import Any

from tableside.drivers.card_reader import protocol as reader
from tableside.drivers.cctalk.protocol import CcTalkDecoder, CcTalkFrame, decode_credit_buffer
from tableside.drivers.common import Heartbeat, Identity
from tableside.drivers.framing import Frame, FrameDecoder, NeedData
from tableside.drivers.messages import MessageSet, UnknownMessageType
from tableside.drivers.progressive import protocol as controller
from tableside.drivers.shoe import protocol as shoe
from tableside.drivers.shoe.plan import Target
from tableside.drivers.shuffler import protocol as shuffler
from tableside.drivers.wire import MalformedPayload

IDENTITY = Identity("acme", "X-1", "S1", "1.0", bytes(32))
SAMPLES: dict[str, tuple[MessageSet, list[Any]]] = {
    "shuffler": (shuffler.PROTOCOL, [
        IDENTITY, Heartbeat(5), shuffler.Status(shuffler.ShufflerState.IDLE, None, 3),
        shuffler.ShuffleStarted(7), shuffler.ShuffleComplete(7, 51, missing=(0x31,)),
        shuffler.Fault(7, shuffler.FaultCode.JAM, "jam"), shuffler.StartShuffle(),
    ]),
    "shoe": (shoe.PROTOCOL, [
        shoe.DealRound(3, (shoe.Stack(Target.SEAT1, 5), shoe.Stack(Target.DEALER, 5))),
        shoe.StackDispensed(3, 0, Target.SEAT1, 5, (0x11, 0x12)), shoe.FaceUpCard(3, 0, 1, 0x21),
        shoe.ShoeFault(3, shoe.ShoeFaultCode.JAM, 1, "x"), shoe.DealComplete(3, 2, 10),
    ]),
    "card_reader": (reader.PROTOCOL, [
        reader.HoleCardChecked(4, True), reader.SelfTestResult(False, 3, "bad"),
        reader.ReaderStatus(reader.ReaderState.READY, None, True, 9), reader.RunSelfTest(),
    ]),
    "progressive_controller": (controller.PROTOCOL, [
        controller.ButtonPressed(controller.Button.NO_MORE_BETS), controller.SetLights(5),
        controller.ControllerStatus(True, 5, False, False, 123456), controller.SetMeter(99),
    ]),
}  # fmt: skip


def mutate(rng: random.Random, frames: list[bytes]) -> bytes:
    data = bytearray(rng.choice(frames))
    for _ in range(rng.randint(1, 3)):
        kind = rng.randrange(6)
        if kind == 0 and data:
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
        elif kind == 1:
            data.insert(rng.randrange(len(data) + 1), rng.randrange(256))
        elif kind == 2 and data:
            del data[rng.randrange(len(data))]
        elif kind == 3 and data:
            del data[rng.randrange(len(data)) :]
        elif kind == 4:
            data += rng.choice(frames)
        else:
            data[rng.randrange(len(data) + 1) : 0] = rng.randbytes(rng.randint(1, 16))
    return bytes(data)


def fuzz_framed(
    protocol: MessageSet, samples: list[Any], n: int, rng: random.Random
) -> dict[str, int]:
    frames = [protocol.encode(m, i).to_bytes() for i, m in enumerate(samples)]
    decoder = FrameDecoder()
    counts = {"frames_in": 0, "decoded": 0, "rejected": 0, "corrupt": 0}
    for _ in range(n):
        blob = mutate(rng, frames)
        cut = rng.randrange(len(blob) + 1)
        for chunk in (blob[:cut], blob[cut:]):
            decoder.feed(chunk)
            while not isinstance(item := decoder.next_event(), NeedData):
                if isinstance(item, Frame):
                    counts["frames_in"] += 1
                    try:
                        protocol.decode(item)
                        counts["decoded"] += 1
                    except (MalformedPayload, UnknownMessageType):
                        counts["rejected"] += 1
                else:
                    counts["corrupt"] += 1
        if rng.random() < 0.01:
            decoder.resync()
    return counts


def fuzz_cctalk(n: int, rng: random.Random) -> dict[str, int]:
    frames = [CcTalkFrame(3, 1, 229).to_bytes(),
              CcTalkFrame(1, 3, 0, bytes([7, 1, 0, 0, 2, 0, 0, 0, 0, 0, 0])).to_bytes(),
              CcTalkFrame(0, 1, 228, b"\x00").to_bytes()]  # fmt: skip
    decoder = CcTalkDecoder()
    counts = {"frames_in": 0, "credit_decoded": 0, "rejected": 0, "bad_checksum": 0}
    for _ in range(n):
        decoder.feed(mutate(rng, frames))
        for _ in range(64):
            item = decoder.next_event()
            if isinstance(item, CcTalkFrame):
                counts["frames_in"] += 1
                if item.header == 0:
                    try:
                        decode_credit_buffer(item.data)
                        counts["credit_decoded"] += 1
                    except ValueError:
                        counts["rejected"] += 1
            elif item.__class__.__name__ == "BadChecksum":
                counts["bad_checksum"] += 1
            else:
                break
        if rng.random() < 0.05:
            decoder.reset()  # the bus's inter-byte gap
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--frames", type=int, default=1_000_000, help="mutated frames per codec")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    def framed(
        protocol: MessageSet, samples: list[Any]
    ) -> Callable[[random.Random], dict[str, int]]:
        return lambda rng: fuzz_framed(protocol, samples, args.frames, rng)

    runs: list[tuple[str, Callable[[random.Random], dict[str, int]]]] = [
        (name, framed(protocol, samples)) for name, (protocol, samples) in SAMPLES.items()
    ]
    runs.append(("cctalk", lambda rng: fuzz_cctalk(args.frames, rng)))
    for name, run in runs:
        started = time.perf_counter()
        counts = run(random.Random(args.seed))  # any other exception ends the run: a finding
        elapsed = time.perf_counter() - started
        peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{name:<24} {args.frames:>9} mutated frames in {elapsed:6.1f} s "
              f"({args.frames / elapsed:>8.0f}/s), peak RSS {peak_mib:5.1f} MiB, "
              f"no unexpected exception; {counts}")  # fmt: skip


if __name__ == "__main__":
    main()
