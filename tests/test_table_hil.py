"""The table's state through the real daemon: people's table commands by role, the devices
moving the round, its rulings with the round number, the retained table topic, and the table
taken back from the journal after a restart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiomqtt

from .conftest import Mosquitto
from .hil import Predicate, Received, SimulatedTable, event, simulated_table, simulator
from .test_shoe import shoe


def table_state(m: Received) -> bool:
    return m.kind == "table" and not m.retained and not m.payload.get("republished")


async def ask(port: int, role: str, command: str, request_id: str, **args: Any) -> None:
    async with aiomqtt.Client("127.0.0.1", port) as client:
        body = {"command": command, "device": "table", "args": args, "request_id": request_id}
        await client.publish(f"tableside/hil-1/command/{role}", json.dumps(body), qos=1)


async def result(table: SimulatedTable, request_id: str) -> dict[str, Any]:
    found = await table.subscriber.wait_for(
        lambda m: m.kind == "command_result" and m.payload["request_id"] == request_id
    )
    return found[0].payload


async def shoe_idle(table: SimulatedTable) -> None:
    """The shoe is done with its last round (stub removed, idle again): a deal sent before is
    refused BUSY, as the device says (the host reads the device's answer at once)."""
    from .hil import until

    await until(lambda: table.daemon.runtime.devices["shoe"].device_state == "idle")


async def deal(port: int, round_: int) -> None:
    async with aiomqtt.Client("127.0.0.1", port) as client:
        body = {"command": "deal_round", "device": "shoe",
                "args": {"round": round_, "positions": [1, 2]}}  # fmt: skip
        await client.publish("tableside/hil-1/command/dealer", json.dumps(body), qos=1)


async def test_the_round_through_the_daemon(mosquitto: Mosquitto, tmp_path: Path) -> None:
    port = mosquitto.port
    async with simulated_table(
        mosquitto.url, tmp_path, simulator(interval=None), others={"shoe": shoe(interval=None)}
    ) as table:
        sub = table.subscriber
        await table.daemon.publisher.connected.wait()
        (start,) = await sub.wait_for(table_state)
        assert start.payload["phase"] == "closed" and start.payload["cause"] == "start"
        # Only a floorperson opens the table.
        await ask(port, "dealer", "open_table", "o1")
        assert (await result(table, "o1"))["error"] == (
            "a dealer may not give 'open_table' (it needs: floorperson)"
        )
        await ask(port, "floorperson", "open_table", "o2")
        assert (await result(table, "o2"))["ok"]
        # A shuffle, then a round from the shoe: no ruling.
        async with aiomqtt.Client("127.0.0.1", port) as client:
            body = {"command": "start_shuffle", "device": "shuffler"}
            await client.publish("tableside/hil-1/command/dealer", json.dumps(body), qos=1)
        await sub.wait_for(event("shuffle_complete"))
        await deal(port, 1)
        await sub.wait_for(lambda m: table_state(m) and m.payload["phase"] == "decisions")
        # A second round with no shuffle in between: 555.5(a), given with the round.
        await table.subscriber.wait_for(event("stub_removed"))
        await shoe_idle(table)
        await deal(port, 2)
        (ruling,) = await sub.wait_for(lambda m: m.kind == "ruling")
        assert ruling.payload["clause"] == "58 Pa. Code § 555.5(a)"
        assert ruling.payload["round"] == 2
        assert ruling.payload["event"]["device"] == "table"
        source = [m for m in sub.messages if m.payload["seq"] == ruling.payload["event"]["seq"]]
        assert source[0].kind == "table" and source[0].payload["round"] == 2
        # A person's bad arguments are refused with the reason.
        await ask(port, "dealer", "stub_count", "s1", count="many")
        assert (
            "count: Input should be a valid integer (got 'many')"
            in (await result(table, "s1"))["error"]
        )
        await ask(port, "dealer", "shuffle_deck", "s2")
        assert (await result(table, "s2"))["error"].startswith("unknown command 'shuffle_deck'")
        # The second round's deal is complete before the daemon stops.
        await sub.wait_for(
            lambda m: table_state(m) and m.payload["round"] == 2
            and m.payload["phase"] == "decisions"
        )  # fmt: skip
    # Started again, the table carries on from the journal: round 2, dealt, not closed.
    async with simulated_table(
        mosquitto.url, tmp_path, simulator(interval=None), others={"shoe": shoe(interval=None)}
    ) as table:
        (start,) = await table.subscriber.wait_for(table_state)
        assert start.payload["cause"] == "start"
        assert start.payload["round"] == 2 and start.payload["phase"] == "decisions"
        assert table.daemon.restored["table_state"] == 1


async def test_the_command_line_asks_as_a_role(mosquitto: Mosquitto, tmp_path: Path) -> None:
    import asyncio

    from tableside.cli import main

    async with simulated_table(
        mosquitto.url, tmp_path, simulator(interval=None), others={"shoe": shoe(interval=None)}
    ) as table:
        await table.daemon.publisher.connected.wait()
        common = ["--table", "hil-1", "--broker", mosquitto.url]

        def ask(*argv: str) -> int:
            return main(["command", *argv, *common])

        assert await asyncio.to_thread(ask, "floorperson", "table", "open_table") == 0
        # a role that may not give it: refused at once, before anything is sent (exit 2)
        assert await asyncio.to_thread(ask, "dealer", "table", "declare_method",
                                       "dealing=hand") == 2  # fmt: skip
        assert await asyncio.to_thread(ask, "dealer", "table", "stub_count", "count=52",
                                       "misdealt=false") == 0  # fmt: skip
        assert table.daemon.runtime.state.phase.value == "open"
        assert table.daemon.runtime.state.rounds_since_stub_count == 0
        assert main(["command", "dealer", "table", "open_table", "--broker", mosquitto.url]) == 2


async def test_mqtt_v5_request_and_response(mosquitto: Mosquitto, tmp_path: Path) -> None:
    """A v5 request with a response topic and correlation data gets its answer there, with the
    same correlation data; the result is also journaled and published on command_result."""
    import asyncio

    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    async with simulated_table(
        mosquitto.url, tmp_path, simulator(interval=None), others={"shoe": shoe(interval=None)}
    ) as table:
        await table.daemon.publisher.connected.wait()
        mine = "tableside/hil-1/response/pit-7"
        async with aiomqtt.Client(
            "127.0.0.1", mosquitto.port, protocol=aiomqtt.ProtocolVersion.V5
        ) as client:
            await client.subscribe(mine, qos=1)
            answers = []
            for correlation, role in ((b"\x01req-1", "floorperson"), (b"\x02req-2", "dealer")):
                props = Properties(PacketTypes.PUBLISH)  # type: ignore[no-untyped-call]
                props.ResponseTopic = mine
                props.CorrelationData = correlation
                body = {"command": "open_table", "device": "table"}
                await client.publish(f"tableside/hil-1/command/{role}", json.dumps(body), qos=1,
                                     properties=props)  # fmt: skip
                async with asyncio.timeout(10):
                    async for message in client.messages:
                        correlated = getattr(message.properties, "CorrelationData", None)
                        assert isinstance(message.payload, bytes)
                        answers.append((correlated, json.loads(message.payload)))
                        break
        assert answers[0][0] == b"\x01req-1" and answers[0][1]["ok"] is True
        assert (
            answers[1][0] == b"\x02req-2" and "may not give 'open_table'" in answers[1][1]["error"]
        )
        results = await table.subscriber.wait_for(lambda m: m.kind == "command_result", count=2)
        assert [r.payload["ok"] for r in results] == [True, False]


def dealt(n: int) -> Predicate:
    return lambda m: (
        table_state(m) and m.payload["round"] == n and m.payload["phase"] == "decisions"
    )


async def test_stub_count_and_alternating_decks_from_the_devices(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    """A shuffler that does not count cards and alternates two decks, and a shoe dealing each
    round: the sixth round without a stub count is a ruling (555.10(d)); a deck dealt twice
    running is one (555.3(b)(4)); the dealer's stub count of 52 resets the count."""
    shuffler = simulator(interval=None, two_deck=True)
    async with simulated_table(
        mosquitto.url, tmp_path, shuffler, others={"shoe": shoe(interval=None)},
        counts_cards=False,
    ) as table:  # fmt: skip
        sub = table.subscriber
        await table.daemon.publisher.connected.wait()
        port = mosquitto.port
        async with aiomqtt.Client("127.0.0.1", port) as client:

            async def shuffle() -> None:
                body = {"command": "start_shuffle", "device": "shuffler"}
                done = len(sub.matching(event("shuffle_complete")))
                await client.publish("tableside/hil-1/command/dealer", json.dumps(body), qos=1)
                await sub.wait_for(event("shuffle_complete"), count=done + 1)

            await ask(port, "floorperson", "open_table", "o1")
            assert (await result(table, "o1"))["ok"]
            for n in range(1, 7):
                await shuffle()
                await deal(port, n)
                await sub.wait_for(dealt(n))
        rulings = [m.payload for m in sub.matching(lambda m: m.kind == "ruling")]
        assert [(r["clause"], r["round"]) for r in rulings] == [("58 Pa. Code § 555.10(d)", 6)]
        await ask(port, "dealer", "stub_count", "s1", count=52, misdealt=False)
        assert (await result(table, "s1"))["ok"]
        assert table.daemon.runtime.state.rounds_since_stub_count == 0
        # Deal again without a shuffle: the deck dealt last round comes round again.
        await shoe_idle(table)
        await deal(port, 7)
        found = await sub.wait_for(
            lambda m: m.kind == "ruling" and m.payload["round"] == 7, count=2
        )
        assert {f.payload["clause"] for f in found} == {"58 Pa. Code § 555.5(a)",
                                                        "58 Pa. Code § 555.3(b)(4)"}  # fmt: skip


async def test_a_hand_shuffle_with_the_shuffler_installed(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    """The dealer says "shuffled" at a table whose shuffler is connected: 555.14(g), the same
    ruling as a declared manual shuffle, through the running daemon."""
    async with simulated_table(
        mosquitto.url, tmp_path, simulator(interval=None), others={"shoe": shoe(interval=None)}
    ) as table:
        await table.daemon.publisher.connected.wait()
        await ask(mosquitto.port, "floorperson", "open_table", "o1")
        await ask(mosquitto.port, "dealer", "shuffled", "h1")
        assert (await result(table, "h1"))["ok"]
        (found,) = await table.subscriber.wait_for(lambda m: m.kind == "ruling")
        assert found.payload["clause"] == "58 Pa. Code § 555.14(g)"
        assert found.payload["actions"] == ["remove_device"]
        source = found.payload["event"]
        assert (source["device"], source["event"]) == ("table", "other_method")


async def test_spanish_21_tens_through_the_daemon(mosquitto: Mosquitto, tmp_path: Path) -> None:
    """A six-deck set counted as 6 x 52 cards says the tens were left in (551.3(a)); a 10 given
    as the dealer's up card is a ten found (551.16(b)), never the up card."""
    from tableside.rules.model import Game

    shuffler = simulator("count=312@1", interval=None)
    async with simulated_table(mosquitto.url, tmp_path, shuffler, game=Game.SPANISH_21) as table:
        sub = table.subscriber
        await table.daemon.publisher.connected.wait()
        port = mosquitto.port
        async with aiomqtt.Client("127.0.0.1", port) as client:
            body = {"command": "start_shuffle", "device": "shuffler"}
            await client.publish("tableside/hil-1/command/dealer", json.dumps(body), qos=1)
        (tens,) = await sub.wait_for(lambda m: m.kind == "ruling")
        assert tens.payload["rule_id"] == "551.3(a).tens-left-in"
        # the decks leave the table (remove_deck halts dealing until a floorperson says so)
        ruling = tens.payload["seq"]
        for role, command, rid, args in (("floorperson", "open_table", "o", {}),
                                         ("floorperson", "acknowledge_ruling", "a",
                                          {"ruling": ruling, "by": "fl"}),
                                         ("floorperson", "resolve_ruling", "r",
                                          {"ruling": ruling, "action": "remove_deck",
                                           "by": "fl"}),
                                         ("floorperson", "reader_inspected", "i", {}),
                                         ("dealer", "start_round", "s", {}),
                                         ("dealer", "up_card", "u", {"rank": "10"})):  # fmt: skip
            await ask(port, role, command, rid, **args)
            assert (await result(table, rid))["ok"], rid
        found = await sub.wait_for(lambda m: m.kind == "ruling", count=2)
        assert found[-1].payload["clause"] == "58 Pa. Code § 551.16(b)"
        assert table.daemon.runtime.state.up_card is None


async def test_baccarat_card_values_through_the_daemon(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    """A king found face up in the shoe burns none more (543.6(a)(2): its value is zero); a
    Player's third card the rules do not allow is the Banker's third when the Banker must draw
    (545.15(b)), and the ruling says so."""
    from tableside.rules.model import Game

    async with simulated_table(
        mosquitto.url, tmp_path, simulator(interval=None), game=Game.BACCARAT
    ) as table:
        sub = table.subscriber
        await table.daemon.publisher.connected.wait()
        port = mosquitto.port
        await ask(port, "floorperson", "open_table", "o")
        await ask(port, "dealer", "card_face_up_in_shoe", "f", rank="K")
        (face_up,) = await sub.wait_for(lambda m: m.kind == "ruling")
        assert face_up.payload["clause"] == "58 Pa. Code § 545.15(d)"
        assert face_up.payload["event"]["data"]["burn"] == 0
        await ask(port, "dealer", "coup", "c", player=["K", "6", "2"], banker=["K", "2"])
        assert (await result(table, "c"))["ok"]
        found = await sub.wait_for(lambda m: m.kind == "ruling", count=2)
        assert found[-1].payload["rule_id"] == "545.15(b).player-third-to-banker"
        assert "is the Banker's third card" in found[-1].payload["summary"]
