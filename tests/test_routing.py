"""daemon/routing.py: people's requests, from their topic to what carries them out, through the
real daemon, simulators and a Mosquitto the test starts: the typed arguments reach the table's
handler as they were parsed; what is not a command, or not that carrier's, is refused with the
reason; who may open betting; a halt that ends when its clause's own end is seen."""

from __future__ import annotations

from pathlib import Path

from tableside.rules.model import Game
from tableside.rules.rulings import RulingState
from tableside.rules.table import DealingMethod, Phase

from .conftest import Mosquitto
from .hil import SimulatedTable, ask, event, simulated_table, simulator
from .test_card_reader import reader


def phase(table: SimulatedTable) -> Phase:
    """The table's phase now (a function: the type checker would keep it from before an
    await)."""
    return table.daemon.runtime.state.phase


async def test_typed_arguments_reach_the_table_and_wrong_carriers_are_refused(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    port = mosquitto.port
    async with simulated_table(mosquitto.url, tmp_path, simulator(interval=None)) as table:
        await table.daemon.publisher.connected.wait()
        runtime = table.daemon.runtime
        assert (await ask(table, port, "floorperson", "open_table", "o"))["ok"]
        declared = await ask(table, port, "floorperson", "declare_method", "m", dealing="hand")
        assert declared["ok"], declared
        assert runtime.state.dealing is DealingMethod.HAND, "the enum, as parsed"
        unknown = await ask(table, port, "dealer", "open_vault", "u")
        assert unknown["error"].startswith("unknown command 'open_vault' (commands: ")
        on_a_device = await ask(table, port, "dealer", "no_more_bets", "d", device="shuffler")
        assert on_a_device["error"] == (
            "'no_more_bets' is the table's: send it with \"device\": \"table\", not 'shuffler'"
        )
        not_its = await ask(table, port, "dealer", "self_test", "st", device="shuffler")
        assert not_its["error"].startswith("shuffler: a shuffler has no command 'self_test'")
        to_the_table = await ask(table, port, "dealer", "start_shuffle", "ss")
        assert to_the_table["error"].startswith("no device 'table' at table hil-1")
        bad = await ask(table, port, "dealer", "stub_count", "sc", count="52")
        assert bad["error"] == "stub_count: count: Input should be a valid integer (got '52')"
        assert runtime.state.phase is Phase.OPEN and runtime.state.rounds_since_stub_count == 0


async def test_the_dealer_opens_betting_and_only_a_floorperson_reopens_it_mid_round(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    """A table with no control device: opening the next round's betting is the dealer's, as
    pressing the control device's button is; once "no more bets" was said, reopening betting
    (the lock-out released in the middle of a round) needs a floorperson."""
    port = mosquitto.port
    async with simulated_table(mosquitto.url, tmp_path, simulator(interval=None)) as table:
        await table.daemon.publisher.connected.wait()
        assert (await ask(table, port, "floorperson", "open_table", "o"))["ok"]
        opened = await ask(table, port, "dealer", "bets_open", "b1")
        assert opened["ok"], opened
        assert phase(table) is Phase.BETTING
        assert (await ask(table, port, "dealer", "no_more_bets", "n1"))["ok"]
        reopened = await ask(table, port, "dealer", "bets_open", "b2")
        assert reopened["error"] == (
            "a dealer may not give 'bets_open' while the table is no_more_bets (it needs: "
            "floorperson)"
        ), reopened
        assert phase(table) is Phase.NO_MORE_BETS, "refused: nothing moved"
        assert (await ask(table, port, "floorperson", "bets_open", "b3"))["ok"]
        assert (await ask(table, port, "dealer", "no_more_bets", "n2"))["ok"]
        for name in ("start_round", "reveal", "round_settled"):
            assert (await ask(table, port, "dealer", name, name))["ok"], name
        assert (await ask(table, port, "dealer", "bets_open", "b4"))["ok"], "the next round"
        assert phase(table) is Phase.BETTING


async def test_a_repaired_card_reader_ends_the_halt_and_the_ruling_stays_open(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    """551.16(m) "may not continue dealing … until the card reader device is repaired or
    replaced": its self-test passing is the repair; dealing goes on, and the ruling stays open
    for a floorperson to acknowledge and resolve."""
    port = mosquitto.port
    async with simulated_table(
        mosquitto.url, tmp_path, simulator(interval=None),
        others={"card_reader": reader("malfunction@1", interval=0.1)}, game=Game.SPANISH_21,
    ) as table:  # fmt: skip
        sub, runtime = table.subscriber, table.daemon.runtime
        await table.daemon.publisher.connected.wait()
        (halt,) = await sub.wait_for(
            lambda m: m.kind == "ruling" and m.payload["clause"] == "58 Pa. Code § 551.16(m)"
        )
        rid = halt.payload["seq"]
        assert (await ask(table, port, "floorperson", "open_table", "o"))["ok"]
        assert (await ask(table, port, "floorperson", "reader_inspected", "i"))["ok"]
        refused = await ask(table, port, "dealer", "start_round", "s1")
        assert f"ruling {rid} is open (58 Pa. Code § 551.16(m)" in refused["error"]
        tested = await ask(table, port, "technician", "self_test", "t", device="card_reader")
        assert tested["ok"], tested
        (passed,) = await sub.wait_for(event("self_test"))
        assert passed.payload["data"]["passed"] is True
        dealt = await ask(table, port, "dealer", "start_round", "s2")
        assert dealt["ok"], dealt
        (ruling,) = [r for r in runtime.state.rulings if r.id == rid]
        assert ruling.state is RulingState.OPEN and not ruling.halts
        assert runtime.state.halted_by is None
        assert (await ask(table, port, "floorperson", "acknowledge_ruling", "a", ruling=rid,
                           by="fl"))["ok"]  # fmt: skip
        resolved = await ask(table, port, "floorperson", "resolve_ruling", "r", ruling=rid,
                              action="halt_dealing", note="reader repaired", by="fl")  # fmt: skip
        assert resolved["ok"], resolved
