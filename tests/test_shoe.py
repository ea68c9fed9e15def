"""The dealing shoe: codec round trips, plans, the game's dispense pattern, and every shoe
fault reaching the daemon as a typed event through the real stack."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tableside.drivers.cards import card_code
from tableside.drivers.commands import Deal
from tableside.drivers.framing import Frame, FrameDecoder
from tableside.drivers.messages import Message
from tableside.drivers.shoe import protocol as p
from tableside.drivers.shoe.events import CardDrawn
from tableside.drivers.wire import MalformedPayload
from tableside.rules.model import Game
from tableside.rules.patterns import dispense_pattern
from tableside.simulators.base import FramedSimulator
from tableside.simulators.registry import build_simulator
from tableside.simulators.shoe import DEFAULT_PLAN, parse_plan_spec, plan_spec

from .conftest import Mosquitto
from .hil import Predicate, Received, event, ruling, simulated_table

u8, u16, u32 = st.integers(0, 255), st.integers(0, 65535), st.integers(0, 2**32 - 1)
faults = st.none() | st.sampled_from(p.ShoeFaultCode)
targets = st.sampled_from(p.Target)
stacks = st.lists(st.builds(p.Stack, targets, st.integers(1, 52)), min_size=1, max_size=10).map(
    tuple
)
cards = st.lists(st.builds(card_code, st.integers(1, 13), st.integers(0, 3)), max_size=10).map(
    tuple
)

messages: st.SearchStrategy[Message] = st.one_of(
    st.builds(p.ShoeStatus, st.sampled_from(p.ShoeState), faults, u16, u16),
    st.builds(p.CardsLoaded, st.integers(0, 65535)),
    st.builds(p.DealStarted, u32, stacks),
    st.builds(p.StackDispensed, u32, st.integers(0, 255), targets, st.integers(0, 255), cards),
    st.builds(p.FaceUpCard, u32, st.integers(0, 255), st.integers(0, 255),
              st.just(0) | st.builds(card_code, st.integers(1, 13), st.integers(0, 3))),
    st.builds(p.ShoeFault, u32, st.sampled_from(p.ShoeFaultCode), u8, st.text(max_size=20)),
    st.builds(p.StubRemoved, u32, st.integers(0, 65535)),
    st.builds(p.DealComplete, u32, st.integers(0, 255), st.integers(0, 65535)),
    st.builds(p.CardDrawn, u32, u8, st.builds(card_code, st.integers(1, 13), st.integers(0, 3))),
    st.builds(p.FirstCardBurned, st.builds(card_code, st.integers(1, 13), st.integers(0, 3)), u8),
    st.builds(p.DealRound, u32, stacks),
)  # fmt: skip


@given(messages, st.integers(0, 255))
def test_every_shoe_message_round_trips(message: Message, seq: int) -> None:
    wire = p.PROTOCOL.encode(message, seq).to_bytes()
    decoder = FrameDecoder()
    for byte in wire:  # byte by byte, as a slow line delivers it
        decoder.feed(bytes((byte,)))
    frame = decoder.next_event()
    assert isinstance(frame, Frame)
    assert p.PROTOCOL.decode(frame) == message


@pytest.mark.parametrize(
    ("message_type", "payload", "complaint"),
    [
        (p.StackDispensed.TYPE, bytes([0, 0, 0, 1, 0, 0x09, 5, 0]), "no stack target"),
        (p.DealRound.TYPE, bytes([0, 0, 0, 1, 0]), "empty plan"),
        (p.DealRound.TYPE, bytes([0, 0, 0, 1, 1, 1, 0]), "stack of 0 cards"),
        (p.DealRound.TYPE, bytes([0, 0, 0, 1, 40]), "exceed 32"),
        (p.FaceUpCard.TYPE, bytes([0, 0, 0, 1, 0, 1, 0x4F]), "not a card"),
        (p.StackDispensed.TYPE, bytes([0, 0, 0, 1, 0, 1, 1, 1, 0x4F]), "not a card"),
    ],
)
def test_malformed_shoe_payloads(message_type: int, payload: bytes, complaint: str) -> None:
    with pytest.raises(MalformedPayload, match=complaint):
        p.PROTOCOL.decode(Frame(seq=0, type=message_type, payload=payload))


def test_plans() -> None:
    def plan(stacks: list[dict[str, object]]) -> tuple[p.Stack, ...]:
        """The shoe's plan from a deal's stacks, checked once, by the ``Deal`` model."""
        return tuple(s.stack() for s in Deal.model_validate({"round": 1, "stacks": stacks}).stacks)

    assert plan([{"target": "seat2", "size": 5}, {"target": "dealer", "size": 5}]) == (
        p.Stack(p.Target.SEAT2, 5),
        p.Stack(p.Target.DEALER, 5),
    )
    assert plan([{"target": 3, "size": 5}]) == (p.Stack(p.Target.SEAT3, 5),)
    with pytest.raises(ValueError, match=r"stacks\.0\.target\n.*'seat9' is none of seat1"):
        plan([{"target": "seat9", "size": 5}])
    with pytest.raises(ValueError, match=r"stacks\.0\.size"):
        plan([{"target": 1, "size": 0}])
    assert parse_plan_spec("1:3,C:3") == (
        p.Stack(p.Target.SEAT1, 3),
        p.Stack(p.Target.COMMUNITY, 3),
    )
    assert parse_plan_spec(plan_spec(DEFAULT_PLAN)) == DEFAULT_PLAN
    with pytest.raises(ValueError, match="bad item"):
        parse_plan_spec("9:5")


def test_dispense_patterns_follow_each_chapter() -> None:
    def sizes(game: Game) -> list[tuple[object, int]]:
        return [(s.target.spelt(), s.size) for s in dispense_pattern(game, [3, 1])]

    # 555.10(b): a five-card stack per player with an Ante, then the dealer's five
    assert sizes(Game.CARIBBEAN_STUD) == [("seat1", 5), ("seat3", 5), ("dealer", 5)]
    # 557.10(b): then one more five-card stack whose bottom card is the dealer's sixth
    assert sizes(Game.FOUR_CARD_POKER) == [
        ("seat1", 5),
        ("seat3", 5),
        ("dealer", 5),
        ("dealer_extra", 5),
    ]
    # 559.12(b): three per player, then a three-card community stack
    assert sizes(Game.LET_IT_RIDE) == [("seat1", 3), ("seat3", 3), ("community", 3)]
    with pytest.raises(ValueError, match="not dealt from an automated dealing shoe"):
        dispense_pattern(Game.SPANISH_21, [1])
    with pytest.raises(ValueError, match="positions"):
        dispense_pattern(Game.CARIBBEAN_STUD, [8])


def shoe(*faults: str, **settings: object) -> FramedSimulator:
    return build_simulator(
        "shoe",
        {"interval": 0.15, "stack_time": 0.01, "fault_clear_time": 0.05, "heartbeat": 0.2,
         "reads_cards": True, **settings},
        faults,
    )  # fmt: skip


def of_round(n: int, kind: str) -> Predicate:
    return lambda m: (
        m.kind == "event" and m.payload["event"] == kind and m.payload["data"]["round"] == n
    )


@pytest.mark.parametrize("mode", ["socket", "pty"])
async def test_every_shoe_fault_reaches_the_daemon(
    mosquitto: Mosquitto, tmp_path: Path, mode: str
) -> None:
    from .hil import simulator

    sim = shoe("jam@1", "stop@2", "short=4@3", "faceup@4", "faceup=2@5", "extra=1@6", "noise=50@7")
    async with simulated_table(
        mosquitto.url,
        tmp_path,
        simulator(interval=None),
        others={"shoe": sim},
        mode=mode,
    ) as table:
        sub = table.subscriber
        await sub.wait_for(of_round(8, "deal_complete"))

        def data(kind: str, n: int) -> list[dict[str, object]]:
            return [m.payload["data"] for m in sub.matching(of_round(n, kind))]

        assert data("fault", 1)[0]["fault"] == "jam"
        assert data("fault", 2)[0]["fault"] == "stopped"
        assert not data("deal_complete", 1) and not data("deal_complete", 2)
        short = data("stack_dispensed", 3)[0]
        assert (short["count"], short["expected"], short["target"]) == (4, 5, "seat1")
        assert [d["total"] for d in data("card_face_up", 4)] == [1]
        assert [d["total"] for d in data("card_face_up", 5)] == [1, 2]
        extra = data("stack_dispensed", 6)[0]
        assert (extra["count"], extra["expected"]) == (6, 5)
        assert sub.matching(event("line_noise"))
        full = data("deal_complete", 8)[0]
        assert full == {
            "round": 8,
            "stacks": 4,
            "cards": 20,
            "expected_stacks": 4,
            "expected_cards": 20,
        }
        # Card identities stay on the table: the shoe read them, the subscriber does not see them.
        assert all("cards" not in d for d in data("stack_dispensed", 8))
        assert all("card" not in d for d in data("card_face_up", 5))
        # And each becomes the ruling its clause requires (Caribbean Stud, 555.14).
        rulings = [
            (r.payload["clause"], r.payload["actions"], r.payload["affected"],
             r.payload["event"]["data"].get("round"))
            for r in sub.matching(ruling())
        ]  # fmt: skip
        void = ["void_all_hands", "return_wagers", "reshuffle"]
        for expected in [
            ("58 Pa. Code § 555.14(f)", void, ["all"], 1),  # jam
            ("58 Pa. Code § 555.14(f)", void, ["all"], 2),  # stopped
            ("58 Pa. Code § 555.14(d)", ["void_hand"], ["seat1"], 3),  # short stack
            ("58 Pa. Code § 555.14(b)", ["discard_card"], [], 4),  # one face up: no hand
            ("58 Pa. Code § 555.14(b)", void, ["all"], 5),  # two face up
            ("58 Pa. Code § 555.14(d)", ["void_hand"], ["seat1"], 6),  # extra card
        ]:
            assert expected in rulings, expected
        state = [
            m for m in sub.matching(lambda m: m.kind == "state" and m.topic.endswith("/shoe/state"))
        ]
        assert state[-1].payload["identity"]["model"] == "SIM-SHOE-1"


async def test_deal_round_command_uses_the_game_pattern(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    import json

    import aiomqtt

    from .hil import simulator

    sim = shoe(interval=None)
    async with simulated_table(
        mosquitto.url,
        tmp_path,
        simulator(interval=None),
        others={"shoe": sim},
        game=Game.FOUR_CARD_POKER,
    ) as table:
        sub = table.subscriber
        await sub.wait_for(
            lambda m: (
                m.kind == "state"
                and m.topic.endswith("/shoe/state")
                and m.payload["connection"] == "connected"
            )
        )
        await table.daemon.publisher.connected.wait()
        async with aiomqtt.Client("127.0.0.1", mosquitto.port) as client:
            opening = {"command": "open_table", "device": "table", "request_id": "o1"}
            await client.publish("tableside/hil-1/command/floorperson", json.dumps(opening), qos=1)
            request = {
                "command": "deal_round",
                "device": "shoe",
                "args": {"round": 41, "positions": [2, 5]},
                "request_id": "d1",
            }
            await client.publish("tableside/hil-1/command/dealer", json.dumps(request), qos=1)
            bad = {
                "command": "deal_round",
                "device": "shoe",
                "args": {"round": 42, "positions": [9]},
                "request_id": "d2",
            }
            await client.publish("tableside/hil-1/command/dealer", json.dumps(bad), qos=1)
        done = await sub.wait_for(of_round(41, "deal_complete"))
        results: list[Received] = await sub.wait_for(lambda m: m.kind == "command_result", count=3)
    started = sub.matching(of_round(41, "deal_started"))[0].payload["data"]["plan"]
    assert [(s["target"], s["size"]) for s in started] == [
        ("seat2", 5),
        ("seat5", 5),
        ("dealer", 5),
        ("dealer_extra", 5),
    ]
    assert done[0].payload["data"]["cards"] == 20
    by_id = {r.payload["request_id"]: r.payload for r in results}
    assert by_id["d1"]["ok"] and not by_id["d2"]["ok"]
    assert "positions.0: Input should be less than or equal to 7 (got 9)" in by_id["d2"]["error"]


async def test_a_baccarat_shoe_that_reads_cards(mosquitto: Mosquitto, tmp_path: Path) -> None:
    """Coups drawn card by card by the simulated dealer (who follows the drawing rules on its
    own); the daemon deals them to the hands and judges each: only the coup with a card too
    many gives a ruling. The cards themselves never reach MQTT."""
    from .hil import simulator

    baccarat = shoe("extra_card@3", baccarat=True, interval=0.1, stack_time=0.005)
    async with simulated_table(
        mosquitto.url, tmp_path, simulator(interval=None), others={"shoe": baccarat},
        game=Game.BACCARAT,
    ) as table:  # fmt: skip
        sub = table.subscriber
        await sub.wait_for(lambda m: m.kind == "table" and m.payload["round"] >= 6, within=30)
        drawn = sub.matching(event("card_drawn"))
        assert drawn and all("card" not in m.payload["data"] for m in drawn)
        rulings = sub.matching(ruling())
        assert rulings and {r.payload["round"] for r in rulings} == {3}
        assert all(r.payload["clause"].startswith("58 Pa. Code § 545.") for r in rulings)
        states = [m for m in sub.matching(lambda m: m.kind == "table")]
        assert all("coup" not in m.payload["state"] for m in states)


async def test_the_baccarat_simulator_skips_a_draw_when_told() -> None:
    """skip_draw: the Player's Hand stays where it must draw (P 2+2 = 4), so the only third
    card is the Banker's (B 0 draws). A shoe reports cards, not hands: the table deals the
    fifth card to the Player as the rules would, and so finds the coup a card short on the
    Banker's side — an irregularity either way, which is what the rule must catch."""
    from tableside.drivers.cards import Card
    from tableside.rules import Game, TableFacts, evaluate
    from tableside.rules.table import DeviceReport, TableState, step
    from tableside.simulators.shoe import ShoeSimulator

    class Link:
        def __init__(self) -> None:
            self.sent: list[object] = []

        async def send(self, message: object) -> None:
            self.sent.append(message)

    sim = build_simulator("shoe", {"baccarat": True, "stack_time": 0}, [])
    assert isinstance(sim, ShoeSimulator)
    spades = [card_code(r, 3) for r in (2, 13, 2, 12, 9, 8, 7, 6, 5, 4)]
    sim._deck = list(spades)
    link = Link()
    await sim._coup(link, 1, {"skip_draw": None})  # type: ignore[arg-type]
    drawn = [m for m in link.sent if isinstance(m, p.CardDrawn)]
    assert [m.card for m in drawn] == spades[:5]
    facts, state, found = TableFacts(Game.BACCARAT), TableState(), []
    reported = [(1, m.index, Card.of(m.card)) for m in drawn] + [(2, 0, Card.named("AS"))]
    for coup, index, card in reported:
        drawn_event = CardDrawn(device="shoe", round=coup, index=index, card=card)
        event = DeviceReport.of("shoe", drawn_event, 0.0)
        state, seen = step(facts, state, event)
        found += [r.rule.citation for o in seen for r in evaluate(facts, o)]
    assert found == ["58 Pa. Code § 545.11(c)"]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        # set to deal four cards to each player: the plan and every player's stack are wrong
        ("1:4,2:4,D:5", {("555.10(b)", None), ("555.14(d)", "seat1"), ("555.14(d)", "seat2")}),
        # set for Let It Ride: three each and a community stack, no dealer hand
        ("1:3,2:3,C:3", {("555.10(b)", None), ("555.14(d)", "seat1"), ("555.14(d)", "seat2")}),
    ],
)
async def test_a_shoe_set_for_another_game_is_judged_by_this_one(
    mosquitto: Mosquitto, tmp_path: Path, spec: str, expected: set[tuple[str, str | None]]
) -> None:
    """The Caribbean Stud table judges the shoe's plan and each stack against 555.10(b) and
    555.14(d), not against the sizes the shoe itself announced."""
    from .hil import simulator

    async with simulated_table(
        mosquitto.url, tmp_path, simulator(interval=None),
        others={"shoe": shoe(interval=0.3, plan=spec)},
    ) as table:  # fmt: skip
        (done,) = await table.subscriber.wait_for(event("deal_complete"))
        round_ = done.payload["data"]["round"]
        found = table.subscriber.matching(ruling())
    got = {
        (r.payload["clause"].removeprefix("58 Pa. Code § "),
         r.payload["affected"][0] if r.payload["affected"] else None)
        for r in found
        # the shuffler is left idle: 555.5(a) (no shuffle before the round) is not this test's
        if r.payload["event"]["data"].get("round") == round_
        and "555.5(a)" not in r.payload["clause"]
    }  # fmt: skip
    assert got == expected


async def test_faults_at_any_stack_in_the_dealing_order(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    """Every misdeal of 555.14 at the stack the regulation speaks of, from the simulator:
    the dealer's four of five, the dealer's six, a later player's short stack, a jam before the
    dealer's stack, two face-up cards in the third stack."""
    from .hil import simulator

    sim = shoe("short=4:dealer@1", "extra=1:dealer@2", "short=3:2@3", "jam=dealer@4",
               "faceup=2:3@5", "stop=3@6")  # fmt: skip
    async with simulated_table(
        mosquitto.url, tmp_path, simulator(interval=None), others={"shoe": sim}
    ) as table:
        sub = table.subscriber
        await sub.wait_for(of_round(7, "deal_complete"))

        def data(kind: str, n: int) -> list[dict[str, object]]:
            return [m.payload["data"] for m in sub.matching(of_round(n, kind))]

        rulings = {
            (r.payload["clause"].removeprefix("58 Pa. Code § "), tuple(r.payload["affected"]),
             r.payload["event"]["data"].get("round"))
            for r in sub.matching(ruling()) if "555.5(a)" not in r.payload["clause"]
        }  # fmt: skip
    assert ("555.14(d)", ("dealer",), 1) in rulings  # four of five: one more card
    assert ("555.14(d)", ("all",), 2) in rulings  # the dealer's six: all void
    assert ("555.14(d)", ("seat2",), 3) in rulings  # the second player's stack
    assert ("555.14(f)", ("all",), 4) in rulings
    assert [d["index"] for d in data("stack_dispensed", 4)] == [0, 1, 2]  # all but the dealer's
    assert [(d["index"], d["total"]) for d in data("card_face_up", 5)] == [(2, 1), (2, 2)]
    assert ("555.14(b)", ("all",), 5) in rulings
    assert data("fault", 6)[0]["fault"] == "stopped"
    assert len(data("stack_dispensed", 6)) == 2  # stopped before the third


@pytest.mark.parametrize(
    ("fault", "complaint"),
    [("short=4:seat9@1", "is no stack"), ("jam=under@1", "is no stack"),
     ("short=four@1", "whole number"), ("faceup=x:2@1", "whole number")],
)  # fmt: skip
def test_a_stack_fault_that_names_no_stack_is_refused(fault: str, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        shoe(fault)


async def test_a_reading_shoe_reports_its_burn(mosquitto: Mosquitto, tmp_path: Path) -> None:
    """The simulated baccarat shoe burns at every new shoe (FirstCardBurned); told no_burn, the
    first coup of the shoe comes without it and the table rules 545.5(f) — through the daemon."""
    from .hil import simulator

    baccarat = shoe("no_burn@1", baccarat=True, interval=0.1, stack_time=0.005)
    async with simulated_table(
        mosquitto.url, tmp_path, simulator(interval=None), others={"shoe": baccarat},
        game=Game.BACCARAT,
    ) as table:  # fmt: skip
        (found,) = await table.subscriber.wait_for(ruling())
    assert found.payload["rule_id"] == "545.5(f).no-burn"
    assert found.payload["round"] == 1

    burning = shoe(baccarat=True, interval=0.1, stack_time=0.005)
    async with simulated_table(
        mosquitto.url, tmp_path / "2", simulator(interval=None), others={"shoe": burning},
        game=Game.BACCARAT,
    ) as table:  # fmt: skip
        sub = table.subscriber
        (burn,) = await sub.wait_for(event("first_card_burned"))
        assert "card" not in burn.payload["data"] and 1 <= burn.payload["data"]["burned"] <= 10
        await sub.wait_for(lambda m: m.kind == "table" and m.payload["round"] >= 3)
        assert not [r for r in sub.matching(ruling()) if "545.5(f)" in r.payload["clause"]]


def test_the_documented_burn_example_decodes() -> None:
    """docs/protocols/shoe.md: FirstCardBurned, the king of spades, ten more burned, SEQ 2."""
    frame = Frame.from_bytes(bytes.fromhex("a5 02 02 2b 3d 0a 1c 53".replace(" ", "")))
    assert (frame.seq, p.PROTOCOL.decode(frame)) == (2, p.FirstCardBurned(card_code(13, 3), 10))
