"""Card recognition on the shuffler protocol: the ShuffleOrder message and its event."""

from __future__ import annotations

import re

import pytest

from tableside.drivers import DeviceEvent, DriverSettings
from tableside.drivers.cards import Card
from tableside.drivers.framing import Frame, NakReason
from tableside.drivers.shuffler import protocol as p
from tableside.drivers.shuffler.driver import ShufflerDriver, ShufflerOptions
from tableside.drivers.shuffler.events import ShuffleOrdered
from tableside.drivers.shuffler.protocol import Deck
from tableside.drivers.wire import MalformedPayload


def _driver(options: ShufflerOptions | None, events: list[DeviceEvent]) -> ShufflerDriver:
    settings = DriverSettings(url="socket://127.0.0.1:9", options=options)
    return ShufflerDriver("shuffler", settings, events.append)


def test_the_documented_example_decodes() -> None:
    """docs/protocols/shuffler.md: SEQ 5, shuffle 12, made AS KC 10H, fed KC 10H AS."""
    wire = bytes.fromhex("a5 0d 05 26 00 00 00 0c 00 03 31 0d 2a 03 0d 2a 31 28 f3")
    message = p.PROTOCOL.decode(Frame.from_bytes(wire))
    assert message == p.ShuffleOrder(12, (0x31, 0x0D, 0x2A), (0x0D, 0x2A, 0x31))


def test_a_byte_that_is_no_card_is_malformed() -> None:
    payload = bytes.fromhex("00000001 00 01 0e 00")  # shuffle 1, single deck, "card" 0x0e
    with pytest.raises(MalformedPayload, match=r"ShuffleOrder.output: byte 0x0e is not a card"):
        p.ShuffleOrder.from_payload(payload)


def test_recognition_is_off_by_default_and_the_order_refused() -> None:
    events: list[DeviceEvent] = []
    driver = _driver(None, events)
    assert ShufflerOptions().recognises_cards is False
    assert driver.refuse(p.ShuffleOrder(1, (0x31,))) is NakReason.UNKNOWN_TYPE
    assert driver.refuse(p.ShuffleStarted(1)) is None


def test_with_recognition_on_the_order_becomes_a_typed_event() -> None:
    events: list[DeviceEvent] = []
    driver = _driver(ShufflerOptions(recognises_cards=True), events)
    message = p.ShuffleOrder(7, (0x31, 0x0D), (0x0D, 0x31), p.Deck.B)
    assert driver.refuse(message) is None
    assert driver.translate(message) == ShuffleOrdered(
        device="shuffler",
        shuffle_id=7,
        deck=Deck.B,
        output_count=2,
        input_count=2,
        output_cards=(Card.named("AS"), Card.named("KC")),
        input_cards=(Card.named("KC"), Card.named("AS")),
    )
    ordered = driver.translate(message)
    assert ordered is not None
    assert ordered.data(include_cards=True)["output_cards"] == ["AS", "KC"]
    assert ShuffleOrdered.card_fields == {"output_cards", "input_cards"}


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"shuffle": "perfect"}, "unknown shuffle 'perfect' in 'perfect' (expected fair"),
        ({"shuffle": "shelf:0"}, "shelves must be a whole number ≥ 1, got '0'"),
        ({"shuffle": "shelf:10", "cards": 51}, "a model shuffles one 52-card deck (cards is 51)"),
        ({"shuffle": 10}, "shuffler simulator: shuffle: Input should be a valid string, not 10"),
    ],
)
def test_the_simulators_shuffle_is_checked_where_it_is_given(
    settings: dict[str, object], says: str
) -> None:
    """``tableside simulate shuffler --shuffle SPEC`` (or a scenario's ``shuffle``)."""
    from tableside.simulators.registry import build_simulator

    with pytest.raises(ValueError, match=re.escape(says)):
        build_simulator("shuffler", settings)
