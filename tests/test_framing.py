"""The sans-IO frame codec: round trips, every way of feeding, and hostile bytes."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tableside.drivers.crc import crc16_ccitt
from tableside.drivers.framing import (
    MAX_FRAME_SIZE,
    MAX_PAYLOAD,
    NEED_DATA,
    START,
    CorruptFrame,
    Frame,
    FrameDecoder,
)

frames = st.builds(
    Frame,
    seq=st.integers(0, 255),
    type=st.integers(0, 255),
    payload=st.binary(max_size=MAX_PAYLOAD),
)


def decode_all(decoder: FrameDecoder) -> list[Frame | CorruptFrame]:
    out: list[Frame | CorruptFrame] = []
    while (item := decoder.next_event()) is not NEED_DATA:
        assert isinstance(item, Frame | CorruptFrame)
        out.append(item)
    return out


def test_crc_catalogue_check_value() -> None:
    assert crc16_ccitt(b"123456789") == 0x29B1


def _crc_bitwise(data: bytes, crc: int = 0xFFFF) -> int:
    """The CRC as its definition reads: poly 0x1021, MSB first, one bit at a time."""
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


@given(st.binary(max_size=300), st.integers(0, 0xFFFF))
def test_crc_matches_its_definition(data: bytes, start: int) -> None:
    assert crc16_ccitt(data, start) == _crc_bitwise(data, start)
    assert crc16_ccitt(data[7:], crc16_ccitt(data[:7])) == crc16_ccitt(data)


def test_documented_example_frame() -> None:
    # docs/protocols/shuffler.md, "Example": Heartbeat, seq 7, uptime 1000 ms
    raw = bytes.fromhex("a5 04 07 25 00 00 03 e8 fa df".replace(" ", ""))
    assert Frame.from_bytes(raw) == Frame(seq=7, type=0x25, payload=b"\x00\x00\x03\xe8")
    assert Frame(seq=7, type=0x25, payload=b"\x00\x00\x03\xe8").to_bytes() == raw


@given(frames)
def test_round_trip(frame: Frame) -> None:
    assert Frame.from_bytes(frame.to_bytes()) == frame
    assert len(frame.to_bytes()) <= MAX_FRAME_SIZE


@given(st.lists(frames, min_size=1, max_size=8), st.data())
def test_split_anywhere(batch: list[Frame], data: st.DataObject) -> None:
    wire = b"".join(f.to_bytes() for f in batch)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=10)))
    decoder = FrameDecoder()
    got: list[Frame | CorruptFrame] = []
    last = 0
    for cut in [*cuts, len(wire)]:
        decoder.feed(wire[last:cut])
        got += decode_all(decoder)
        last = cut
    assert got == batch


def test_byte_by_byte() -> None:
    batch = [Frame(seq=i, type=0x20 + i, payload=bytes(range(i * 3))) for i in range(10)]
    decoder = FrameDecoder()
    got: list[Frame | CorruptFrame] = []
    for byte in b"".join(f.to_bytes() for f in batch):
        decoder.feed(bytes((byte,)))
        got += decode_all(decoder)
    assert got == batch
    assert decoder.buffered == 0


@given(st.binary(max_size=300), frames, st.binary(max_size=300))
def test_frame_wrapped_in_garbage_is_found(before: bytes, frame: Frame, after: bytes) -> None:
    decoder = FrameDecoder()
    decoder.feed(before + frame.to_bytes() + after)
    found = [x for x in decode_all(decoder) if isinstance(x, Frame)]
    # Garbage may itself contain a valid-looking frame by chance (CRC collisions are 1/65536),
    # but the real frame must be among what is found, unless garbage in front of it is a
    # partial frame still waiting for bytes; a resync (what the link does on a timeout)
    # releases it.
    for _ in range(len(before) + 1):
        if frame in found:
            break
        decoder.resync()
        found += [x for x in decode_all(decoder) if isinstance(x, Frame)]
    assert frame in found


@settings(max_examples=500)
@given(st.lists(st.binary(max_size=600), max_size=6))
def test_random_bytes_never_raise(chunks: list[bytes]) -> None:
    decoder = FrameDecoder()
    for chunk in chunks:
        decoder.feed(chunk)
        decode_all(decoder)
        decoder.resync()
        decode_all(decoder)
    assert decoder.buffered <= decoder.max_buffer


def test_real_frame_hidden_inside_a_false_one_is_recovered() -> None:
    real = Frame(seq=1, type=0x25, payload=b"\x00\x00\x00\x01").to_bytes()
    # A stray start byte claiming 20 payload bytes swallows the real frame.
    wire = bytes((START, 20, 0, 0)) + real + bytes(20)
    decoder = FrameDecoder()
    decoder.feed(wire)
    items = decode_all(decoder)
    assert isinstance(items[0], CorruptFrame)
    assert Frame.from_bytes(real) in items
    assert decoder.stats.crc_errors >= 1


def test_damaged_frame_is_reported_with_its_header_seq() -> None:
    raw = bytearray(Frame(seq=42, type=0x23, payload=b"abc").to_bytes())
    raw[5] ^= 0x01
    decoder = FrameDecoder()
    decoder.feed(bytes(raw))
    item = decoder.next_event()
    assert isinstance(item, CorruptFrame)
    assert (item.seq, item.type) == (42, 0x23)


def test_length_over_the_limit_is_not_a_frame() -> None:
    decoder = FrameDecoder()
    good = Frame(seq=3, type=0x21, payload=b"\x00\x00\x00\x00\x00\x01").to_bytes()
    decoder.feed(bytes((START, MAX_PAYLOAD + 1)) + good)
    assert decode_all(decoder) == [Frame.from_bytes(good)]
    assert decoder.stats.discarded_bytes == 2


def test_buffer_is_capped() -> None:
    decoder = FrameDecoder(max_buffer=1000)
    decoder.feed(bytes((START, 250)) + bytes(5000))
    assert decoder.buffered <= 1000


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"seq": 256, "type": 1}, "seq"),
        ({"seq": 0, "type": -1}, "type"),
        ({"seq": 0, "type": 1, "payload": bytes(MAX_PAYLOAD + 1)}, "payload"),
    ],
)
def test_frame_refuses_out_of_range_fields(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Frame(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "doc", ["shuffler.md", "shoe.md", "card-reader.md", "progressive-controller.md"]
)
def test_every_example_in_the_protocol_documents_is_an_intact_frame(doc: str) -> None:
    from pathlib import Path

    text = (Path(__file__).parents[1] / "docs" / "protocols" / doc).read_text()
    examples = re.findall(r"`(a5(?: [0-9a-f]{2})+)`", text)
    assert len(examples) >= 3
    for example in examples:
        Frame.from_bytes(bytes.fromhex(example.replace(" ", "")))
