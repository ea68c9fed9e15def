"""The shuffler message set: every message round-trips; bad payloads are refused clearly."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tableside.drivers.cards import card_code, card_name
from tableside.drivers.framing import Frame, FrameDecoder
from tableside.drivers.messages import Message, UnknownMessageType
from tableside.drivers.shuffler import protocol as p
from tableside.drivers.wire import MAX_STRING, MalformedPayload

text = st.text(max_size=20)
u32 = st.integers(0, 2**32 - 1)
cards = st.lists(st.builds(card_code, st.integers(1, 13), st.integers(0, 3)), max_size=20).map(
    tuple
)

messages: st.SearchStrategy[Message] = st.one_of(
    st.builds(p.Identity, text, text, text, text, st.binary(min_size=32, max_size=32)),
    st.builds(
        p.Status, st.sampled_from(p.ShufflerState), st.none() | st.sampled_from(p.FaultCode), u32
    ),
    st.builds(p.ShuffleStarted, u32),
    st.builds(
        p.ShuffleComplete,
        u32,
        st.integers(0, 65535),
        st.booleans(),
        st.booleans(),
        st.sampled_from(p.Deck),
        text,
        cards,
        cards,
    ),
    st.builds(p.ShuffleOrder, u32, cards, cards, st.sampled_from(p.Deck)),
    st.builds(p.Fault, u32, st.sampled_from(p.FaultCode), text),
    st.builds(p.Heartbeat, u32),
    st.just(p.StartShuffle()),
    st.just(p.QueryStatus()),
    st.just(p.QueryIdentity()),
)


@given(messages, st.integers(0, 255))
def test_every_message_round_trips(message: Message, seq: int) -> None:
    frame = p.PROTOCOL.encode(message, seq)
    wire = frame.to_bytes()
    assert p.PROTOCOL.decode(Frame.from_bytes(wire)) == message


def test_every_message_class_is_covered() -> None:
    covered = {
        p.Identity, p.Status, p.ShuffleStarted, p.ShuffleComplete, p.ShuffleOrder, p.Fault,
        p.Heartbeat,
        p.StartShuffle, p.QueryStatus, p.QueryIdentity,
    }  # fmt: skip
    assert set(p.PROTOCOL.classes) == covered


def test_message_split_across_reads() -> None:
    message = p.ShuffleComplete(9, 51, missing=(card_code(1, 3),), identifies_cards=True)
    wire = p.PROTOCOL.encode(message, 1).to_bytes()
    decoder = FrameDecoder()
    decoder.feed(wire[:5])
    assert not isinstance(decoder.next_event(), Frame)
    decoder.feed(wire[5:])
    frame = decoder.next_event()
    assert isinstance(frame, Frame)
    assert p.PROTOCOL.decode(frame) == message


def test_unknown_type_is_named() -> None:
    with pytest.raises(UnknownMessageType, match="0x7f"):
        p.PROTOCOL.decode(Frame(seq=0, type=0x7F))


@pytest.mark.parametrize(
    ("type_", "payload", "complaint"),
    [
        (p.Heartbeat.TYPE, b"\x00\x01", "needed 4 more"),
        (p.Heartbeat.TYPE, b"\x00\x00\x00\x01\xff", "trailing"),
        (p.Status.TYPE, b"\x09\x00\x00\x00\x00\x00", "no ShufflerState"),
        (p.Fault.TYPE, b"\x00\x00\x00\x01\x63\x00", "no FaultCode"),
        (p.ShuffleComplete.TYPE, b"\x00\x00\x00\x01\x00\x34\x80\x00\x00\x00\x00", "reserved"),
        (p.ShuffleComplete.TYPE, b"\x00\x00\x00\x01\x00\x34\x01\x00\x00\x01\x4f\x00", "not a card"),
        (p.Identity.TYPE, b"\x02\xff\xfe", "not UTF-8"),
        (p.Identity.TYPE, bytes((MAX_STRING + 1,)), "exceeds"),
        (p.StartShuffle.TYPE, b"\x00", "takes no payload"),
    ],
)
def test_malformed_payloads_say_what_is_wrong(type_: int, payload: bytes, complaint: str) -> None:
    with pytest.raises(MalformedPayload, match=complaint):
        p.PROTOCOL.decode(Frame(seq=0, type=type_, payload=payload))


@given(st.integers(0x20, 0x5F), st.binary(max_size=250))
def test_random_payloads_raise_only_protocol_errors(type_: int, payload: bytes) -> None:
    with contextlib.suppress(UnknownMessageType, MalformedPayload):
        p.PROTOCOL.decode(Frame(seq=0, type=type_, payload=payload))


def test_card_names() -> None:
    assert card_name(card_code(1, 3)) == "AS"
    assert card_name(card_code(10, 2)) == "10H"
    with pytest.raises(ValueError, match="not a card"):
        card_name(0x0E)
