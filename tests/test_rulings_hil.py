"""A ruling people act on, through the real daemon, a simulated shuffler and shoe and a real
Mosquitto: a counting shuffler's miscount (555.5(b)) is a ruling that halts dealing; nobody
acknowledges it in time and it escalates; a floorperson acknowledges it, the table restarts
with it still acknowledged, then resolves it; the stream and the journal carry every step; a
dealer's resolve is refused; the deal is refused until the resolution, and allowed after."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tableside.daemon.config import Config, RulingsConfig
from tableside.daemon.journal import export_records

from .conftest import Mosquitto
from .hil import ask, event, simulated_table, simulator
from .test_shoe import shoe

ESCALATE_AFTER_S = 1.5


def _quick_escalation(config: Config) -> Config:
    return config.model_copy(update={"rulings": RulingsConfig(escalate_after_s=ESCALATE_AFTER_S)})


def _lifecycle(ruling: int, state: str) -> Any:
    return lambda m: (
        m.kind == "ruling_state" and m.payload["ruling"] == ruling and m.payload["state"] == state
    )


async def test_a_miscount_is_acknowledged_then_resolved_and_only_then_dealing_resumes(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    port = mosquitto.port
    sims = {"shuffler": simulator("count=51@1", interval=None), "shoe": shoe(interval=None)}
    async with simulated_table(
        mosquitto.url, tmp_path, sims["shuffler"], others={"shoe": sims["shoe"]},
        adjust=_quick_escalation,
    ) as table:  # fmt: skip
        sub = table.subscriber
        await table.daemon.publisher.connected.wait()
        assert (await ask(table, port, "floorperson", "open_table", "o"))["ok"]
        shuffled = await ask(table, port, "dealer", "start_shuffle", "sh", device="shuffler")
        assert shuffled["ok"], shuffled
        (ruling,) = await sub.wait_for(lambda m: m.kind == "ruling")
        rid = ruling.payload["seq"]
        assert ruling.payload["clause"] == "58 Pa. Code § 555.5(b)"
        assert ruling.payload["halts"] is True and ruling.payload["actions"] == ["remove_deck"]

        # Nobody acknowledges it: escalated after [rulings] escalate_after_s, by the table's clock.
        (escalated,) = await sub.wait_for(_lifecycle(rid, "escalated"), within=10)
        assert escalated.payload["open_s"] >= ESCALATE_AFTER_S
        assert escalated.at - ruling.at >= ESCALATE_AFTER_S * 0.9
        assert escalated.payload["halts"] and escalated.payload["by"] is None

        # While it is unresolved the deal is refused, naming it.
        refused = await ask(table, port, "dealer", "deal_round", "d1", device="shoe",
                             positions=[1, 2])  # fmt: skip
        assert not refused["ok"]
        assert refused["error"].startswith(
            f"deal_round: dealing is halted — ruling {rid} is escalated (58 Pa. Code § 555.5(b): "
            "remove_deck; a floorperson resolves it)"
        ), refused["error"]
        assert table.daemon.runtime.state.round == 0, "nothing was dealt"

        # Who may: a dealer neither acknowledges nor resolves; nothing is resolved unacknowledged.
        by_dealer = await ask(table, port, "dealer", "acknowledge_ruling", "a0", ruling=rid,
                               by="dee")  # fmt: skip
        assert by_dealer["error"] == (
            "a dealer may not give 'acknowledge_ruling' (it needs: floorperson)"
        )
        early = await ask(table, port, "floorperson", "resolve_ruling", "r0", ruling=rid,
                           action="remove_deck", by="ann")  # fmt: skip
        assert (
            "is escalated: a floorperson acknowledges it (acknowledge_ruling) before"
            in (early["error"])
        )
        unknown = await ask(table, port, "floorperson", "acknowledge_ruling", "a9",
                             ruling=rid + 1000, by="ann")  # fmt: skip
        assert f"no ruling {rid + 1000} at this table (unresolved: {rid})" in unknown["error"]
        acked = await ask(table, port, "floorperson", "acknowledge_ruling", "a1", ruling=rid,
                           by="ann")  # fmt: skip
        assert acked["ok"], acked
        (ack,) = await sub.wait_for(_lifecycle(rid, "acknowledged"))
        assert ack.payload["by"] == "ann" and ack.payload["halts"] is True
        assert ack.payload["seq"] < acked["seq"], "the change comes before the request's result"
        still = await ask(table, port, "dealer", "deal_round", "d2", device="shoe",
                           positions=[1, 2])  # fmt: skip
        assert f"ruling {rid} is acknowledged" in still["error"], "acknowledging lifts no halt"
    first_run = list(table.subscriber.messages)

    # The table restarts: the ruling comes back acknowledged (from the journal), still halting.
    async with simulated_table(
        mosquitto.url, tmp_path, simulator(interval=None), others={"shoe": shoe(interval=None)},
        adjust=_quick_escalation,
    ) as table:  # fmt: skip
        sub = table.subscriber
        await table.daemon.publisher.connected.wait()
        (restored,) = [r for r in table.daemon.runtime.state.rulings if r.id == rid]
        assert (restored.state.value, restored.acknowledged_by) == ("acknowledged", "ann")
        refused = await ask(table, port, "floorperson", "deal_round", "d3", device="shoe",
                             positions=[1, 2])  # fmt: skip
        assert f"ruling {rid} is acknowledged" in refused["error"]

        by_dealer = await ask(table, port, "dealer", "resolve_ruling", "r1", ruling=rid,
                               action="remove_deck", by="dee")  # fmt: skip
        assert by_dealer["error"] == (
            "a dealer may not give 'resolve_ruling' (it needs: floorperson)"
        )
        wrong = await ask(table, port, "floorperson", "resolve_ruling", "r2", ruling=rid,
                           action="reshuffle", by="ann")  # fmt: skip
        assert "requires remove_deck; 'reshuffle' is none of them" in wrong["error"]
        resolved = await ask(table, port, "floorperson", "resolve_ruling", "r3", ruling=rid,
                              action="remove_deck", note="deck 4411 out, new deck in",
                              by="ann")  # fmt: skip
        assert resolved["ok"], resolved
        (done,) = await sub.wait_for(_lifecycle(rid, "resolved"))
        assert (done.payload["action"], done.payload["note"], done.payload["by"]) == (
            "remove_deck", "deck 4411 out, new deck in", "ann")  # fmt: skip
        assert done.payload["halts"] is False
        again = await ask(table, port, "floorperson", "resolve_ruling", "r4", ruling=rid,
                           action="remove_deck", by="bob")  # fmt: skip
        assert "is already resolved, by ann (remove_deck)" in again["error"]

        # Resolved: the table deals again.
        dealt = await ask(table, port, "dealer", "deal_round", "d4", device="shoe",
                           positions=[1, 2])  # fmt: skip
        assert dealt["ok"], dealt
        await sub.wait_for(event("deal_complete"))
        retained = await sub.wait_for(
            lambda m: m.kind == "table" and m.payload["cause"] == "shoe.deal_complete"
        )
        (kept,) = [r for r in retained[-1].payload["state"]["rulings"] if r["id"] == rid]
        assert kept["state"] == "resolved" and kept["resolved_by"] == "ann"
    second_run = list(table.subscriber.messages)

    # The stream carried every step, in order; the journal holds the same records.
    steps = [m for m in first_run + second_run
             if m.kind == "ruling_state" and not m.retained]  # fmt: skip
    assert [m.payload["state"] for m in steps] == ["escalated", "acknowledged", "resolved"]
    journal = list(export_records(tmp_path / "hil-1" / "journal.sqlite"))
    journaled = [r for r in journal if r["topic"] == "tableside/hil-1/ruling_state"]
    assert [r["payload"] for r in journaled] == [m.payload for m in steps]
    refusals = [_result(journal, rid_) for rid_ in ("a0", "r1", "d1", "d3")]
    assert all(r is not None and not r["ok"] for r in refusals), "refusals are journaled too"


def _result(journal: list[dict[str, Any]], request_id: str) -> dict[str, Any] | None:
    return next((r["payload"] for r in journal if r["topic"].endswith("/command_result")
                 and r["payload"]["request_id"] == request_id), None)  # fmt: skip


async def test_a_broken_card_reader_halts_dealing_until_replaced(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    """551.16(m): the reader malfunctions; dealing is halted until it is repaired or replaced
    (a technician's device_installed): then dealing goes on, and the ruling stays open for a
    floorperson to acknowledge and resolve."""
    from tableside.rules.model import Game

    from .test_card_reader import reader

    port = mosquitto.port
    async with simulated_table(
        mosquitto.url, tmp_path, simulator(interval=None),
        others={"card_reader": reader("malfunction@1", interval=0.1)}, game=Game.SPANISH_21,
    ) as table:  # fmt: skip
        sub = table.subscriber
        await table.daemon.publisher.connected.wait()
        (halt,) = await sub.wait_for(
            lambda m: m.kind == "ruling" and m.payload["clause"] == "58 Pa. Code § 551.16(m)"
        )
        rid = halt.payload["seq"]
        assert halt.payload["halts"] and halt.payload["actions"] == ["halt_dealing", "alert"]
        for role, command, name, args in (("floorperson", "open_table", "o", {}),
                                          ("floorperson", "reader_inspected", "i", {}),
                                          ("technician", "device_removed", "dr",
                                           {"device_class": "card_reader"}),
                                          ("technician", "device_installed", "di",
                                           {"device_class": "card_reader"})):  # fmt: skip
            assert (await ask(table, port, role, command, name, **args))["ok"], name
        assert table.daemon.runtime.state.halted_by is None, "the reader is back"
        dealt = await ask(table, port, "dealer", "start_round", "s1")
        assert dealt["ok"], dealt
        (open_,) = [r for r in table.daemon.runtime.state.rulings if r.id == rid]
        assert open_.unresolved and not open_.halts, "open, for a floorperson; no longer halting"
        assert (await ask(table, port, "floorperson", "acknowledge_ruling", "a", ruling=rid,
                           by="fl"))["ok"]  # fmt: skip
        resolved = await ask(table, port, "floorperson", "resolve_ruling", "r", ruling=rid,
                              action="halt_dealing", note="reader replaced", by="fl")  # fmt: skip
        assert resolved["ok"], resolved


async def test_a_ruling_left_open_across_a_restart_escalates_when_its_time_is_past(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    """The deadline is the ruling's own (given at, plus escalate_after_s by the table's clock),
    not the run's: a ruling still open when the table comes back past its time is escalated at
    once, and one acknowledged meanwhile never is."""
    from tableside.rules.rulings import RulingState

    def after(seconds: float) -> Any:
        return lambda c: c.model_copy(update={"rulings": RulingsConfig(escalate_after_s=seconds)})

    port = mosquitto.port
    async with simulated_table(
        mosquitto.url, tmp_path, simulator("count=51@1", "count=53@2", interval=None),
        adjust=after(3600),
    ) as table:  # fmt: skip
        await table.daemon.publisher.connected.wait()
        for n in (1, 2):
            assert (await ask(table, port, "dealer", "start_shuffle", f"s{n}",
                               device="shuffler"))["ok"]  # fmt: skip
            await table.subscriber.wait_for(lambda m: m.kind == "ruling", count=n)
        first, second = (r.id for r in table.daemon.runtime.state.rulings)
        assert (await ask(table, port, "floorperson", "acknowledge_ruling", "a", ruling=second,
                           by="fl"))["ok"]  # fmt: skip
        assert not table.subscriber.matching(lambda m: m.kind == "ruling_state"
                                             and m.payload["state"] == "escalated")  # fmt: skip
    async with simulated_table(
        mosquitto.url, tmp_path, simulator(interval=None), adjust=after(0.5)
    ) as table:
        (escalated,) = await table.subscriber.wait_for(_lifecycle(first, "escalated"), within=10)
        assert escalated.payload["halts"] is True
        states = {r.id: r.state for r in table.daemon.runtime.state.rulings}
        assert states == {first: RulingState.ESCALATED, second: RulingState.ACKNOWLEDGED}
