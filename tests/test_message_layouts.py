"""Every device message's payload, byte by byte, pinned as the hand-written codecs wrote it
(docs/protocols/): the layouts the messages derive from their fields' annotations
(drivers/layout.py) must write and read exactly these bytes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, ClassVar

import pytest

from tableside.drivers import common as c
from tableside.drivers.card_reader import protocol as r
from tableside.drivers.layout import U8, U16, Bit, Struct, layout
from tableside.drivers.messages import Message
from tableside.drivers.progressive import protocol as g
from tableside.drivers.shoe import protocol as s
from tableside.drivers.shuffler import protocol as f
from tableside.drivers.wire import MalformedPayload

T = s.Target

VECTORS: list[tuple[Message, str]] = [
    (
        c.Identity("Acme", "Shoe-9", "SN1", "1.2.3", bytes(range(32))),
        "04 41 63 6d 65 06 53 68 6f 65 2d 39 03 53 4e 31 05 31 2e 32 2e 33"
        " 00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f"
        " 10 11 12 13 14 15 16 17 18 19 1a 1b 1c 1d 1e 1f",
    ),
    (c.Heartbeat(0x01020304), "01 02 03 04"),
    (c.QueryStatus(), ""),
    (c.QueryIdentity(), ""),
    (s.ShoeStatus(s.ShoeState.DEALING, None, 416, 0xFFFF), "01 00 01 a0 ff ff"),
    (s.ShoeStatus(s.ShoeState.FAULT, s.ShoeFaultCode.DOOR_OPEN, 1, 2), "02 04 00 01 00 02"),
    (s.CardsLoaded(0x1234), "12 34"),
    (
        s.DealStarted(7, (s.Stack(T.SEAT1, 5), s.Stack(T.DEALER, 5), s.Stack(T.COMMUNITY, 3))),
        "00 00 00 07 03 01 05 80 05 82 03",
    ),
    (
        s.StackDispensed(7, 2, T.DEALER_EXTRA, 3, (0x11, 0x2D, 0x31)),
        "00 00 00 07 02 81 03 03 11 2d 31",
    ),
    (s.StackDispensed(0xFFFFFFFF, 0, T.SEAT7, 5), "ff ff ff ff 00 07 05 00"),
    (s.FaceUpCard(9, 1, 2), "00 00 00 09 01 02 00"),
    (s.FaceUpCard(9, 1, 2, 0x31), "00 00 00 09 01 02 31"),
    (s.CardDrawn(0x10000, 3, 0x0D), "00 01 00 00 03 0d"),
    (s.FirstCardBurned(0x2A, 10), "2a 0a"),
    (
        s.ShoeFault(3, s.ShoeFaultCode.SHORT_DEAL, 4, "short by 2"),
        "00 00 00 03 03 04 0a 73 68 6f 72 74 20 62 79 20 32",
    ),
    (s.ShoeFault(0, s.ShoeFaultCode.JAM, 0), "00 00 00 00 01 00 00"),
    (s.StubRemoved(5, 0xFFFF), "00 00 00 05 ff ff"),
    (s.DealComplete(5, 7, 300), "00 00 00 05 07 01 2c"),
    (s.DealRound(12, (s.Stack(T.SEAT3, 1), s.Stack(T.DEALER, 52))), "00 00 00 0c 02 03 01 80 34"),
    (f.Status(f.ShufflerState.SHUFFLING, None, 0xDEADBEEF), "01 00 de ad be ef"),
    (f.Status(f.ShufflerState.FAULT, f.FaultCode.INCOMPLETE, 1), "02 03 00 00 00 01"),
    (f.ShuffleStarted(42), "00 00 00 2a"),
    (f.ShuffleComplete(9, 51), "00 00 00 09 00 33 01 00 00 00 00"),
    (
        f.ShuffleComplete(9, 0, False, True, f.Deck.B, "red", (0x31,), (0x0D, 0x2A)),
        "00 00 00 09 00 00 02 02 03 72 65 64 01 31 02 0d 2a",
    ),
    (
        f.ShuffleComplete(1, 52, True, True, f.Deck.A, "blue"),
        "00 00 00 01 00 34 03 01 04 62 6c 75 65 00 00",
    ),
    (
        f.ShuffleOrder(12, (0x31, 0x0D, 0x2A), (0x0D, 0x2A, 0x31), f.Deck.A),
        "00 00 00 0c 01 03 31 0d 2a 03 0d 2a 31",
    ),
    (f.ShuffleOrder(1, (0x31,)), "00 00 00 01 00 01 31 00"),
    (
        f.Fault(3, f.FaultCode.JAM, "jammed at 14"),
        "00 00 00 03 01 0c 6a 61 6d 6d 65 64 20 61 74 20 31 34",
    ),
    (f.StartShuffle(), ""),
    (r.ReaderStatus(r.ReaderState.READY, None, True, 77), "00 00 01 00 00 00 4d"),
    (
        r.ReaderStatus(r.ReaderState.FAULT, r.ReaderFaultCode.TAMPER, False, 0),
        "02 02 00 00 00 00 00",
    ),
    (r.SelfTestResult(True), "01 00 00 00"),
    (r.SelfTestResult(False, 0x0102, "lens"), "00 01 02 04 6c 65 6e 73"),
    (r.HoleCardChecked(8, True), "00 00 00 08 01"),
    (r.HoleCardChecked(9, False), "00 00 00 09 00"),
    (r.ReaderFault(r.ReaderFaultCode.MALFUNCTION, "no light"), "01 08 6e 6f 20 6c 69 67 68 74"),
    (r.RunSelfTest(), ""),
    (g.ControllerStatus(True, 0x45, False, True, 123456), "01 45 00 01 00 01 e2 40"),
    (g.ButtonPressed(g.Button.BETS_OPEN), "02"),
    (g.LightsState(0x7F), "7f"),
    (g.KeySwitch(True), "01"),
    (g.KeySwitch(False), "00"),
    (g.DoorChanged(True), "01"),
    (g.SetLights(0x05), "05"),
    (g.SetMeter(99999), "00 01 86 9f"),
]


@pytest.mark.parametrize(("message", "payload"), VECTORS, ids=lambda v: type(v).__name__)
def test_each_message_writes_and_reads_its_pinned_bytes(message: Message, payload: str) -> None:
    wire = bytes.fromhex(payload)
    assert message.to_payload() == wire
    assert type(message).from_payload(wire) == message


def test_every_message_class_has_a_vector() -> None:
    pinned = {type(m) for m, _ in VECTORS}
    for protocol in (s.PROTOCOL, f.PROTOCOL, r.PROTOCOL, g.PROTOCOL):
        assert set(protocol.classes) <= pinned, protocol.name


@dataclass(frozen=True, slots=True)
class _Flags(Struct):
    a: Annotated[bool, Bit(0)]
    b: Annotated[bool, Bit(2)]
    c: Annotated[bool, Bit(0)]  # a bit not above the last one opens a byte of its own
    n: U16 = 0


def test_bits_share_a_byte_until_one_repeats() -> None:
    message = _Flags(True, True, True, 0x0102)
    assert message.to_payload() == bytes([0x05, 0x01, 0x01, 0x02])
    assert _Flags.from_payload(bytes([0x05, 0x01, 0x01, 0x02])) == message
    with pytest.raises(MalformedPayload, match="_Flags: reserved flag bits set in 0x02"):
        _Flags.from_payload(bytes([0x02, 0x00, 0x00, 0x00]))


def test_a_field_that_names_no_wire_type_is_refused_where_it_is_declared() -> None:
    @dataclass(frozen=True, slots=True)
    class Wide(Struct):
        count: int  # how many bytes?

    @dataclass(frozen=True, slots=True)
    class Misordered(Struct):
        WIRE_ORDER: ClassVar[tuple[str, ...]] = ("b",)
        a: U8
        b: U8

    with pytest.raises(TypeError, match=r"Wide.count: .* \(an int needs U8, U16 or U32\)"):
        layout(Wide)
    with pytest.raises(TypeError, match="WIRE_ORDER"):
        layout(Misordered)
