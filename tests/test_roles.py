"""Who may give what, as rules/commands.py declares it, and the refusals' wording."""

from __future__ import annotations

import pytest

from tableside.drivers.registry import available_drivers, get_driver
from tableside.rules.commands import COMMANDS, Refused, Role, admit, authorise
from tableside.rules.table import Phase


def refusal(role: str, command: str) -> str | None:
    """Why ``role`` may not give ``command`` at all, or None when it may."""
    try:
        authorise(command, role)
    except Refused as exc:
        return str(exc)
    return None


def test_every_device_command_is_declared() -> None:
    """A driver's command that is not declared would be unreachable: every one is, for its
    device class or for any device."""
    for name in available_drivers():
        driver = get_driver(name)
        for command in driver.commands:
            assert command in COMMANDS, (name, command)
            assert COMMANDS[command].target in ("device", driver.device_class), (name, command)


def test_every_declared_device_command_has_a_driver() -> None:
    """And every declared device command is carried out by some built-in driver."""
    drivers = [get_driver(name) for name in available_drivers()]
    for command in COMMANDS.values():
        if command.target == "table":
            continue
        takers = [d for d in drivers if command.device_command in d.commands
                  and command.target in ("device", d.device_class)]  # fmt: skip
        assert takers, command.name


@pytest.mark.parametrize(
    ("role", "command", "allowed"),
    [
        ("dealer", "deal_round", True),
        ("dealer", "set_meter", False),
        ("dealer", "release", False),
        ("dealer", "deal", False),
        ("floorperson", "release", True),
        ("floorperson", "set_meter", True),
        ("technician", "deal", True),
        ("technician", "deal_round", False),
        ("technician", "lock_out", False),
        ("technician", "self_test", True),
        ("auditor", "replay", True),
        ("dealer", "replay", False),
        ("floorperson", "replay", False),
        ("technician", "replay", False),
    ],
)
def test_who_may_give_what(role: str, command: str, allowed: bool) -> None:
    assert (refusal(role, command) is None) is allowed


def test_refusals_say_why() -> None:
    assert refusal("pit_boss", "deal") == (
        "unknown role 'pit_boss' (roles: dealer, floorperson, technician, auditor)"
    )
    assert (
        refusal("dealer", "set_meter")
        == "a dealer may not give 'set_meter' (it needs: floorperson)"
    )
    unknown = refusal(Role.FLOORPERSON, "open_vault")
    assert unknown is not None and unknown.startswith(
        "unknown command 'open_vault' (commands: acknowledge_ruling, bets_open, "
    )


def test_the_auditor_may_ask_for_replays_and_nothing_else() -> None:
    """docs/floor.md: the floor's collector logs in as the auditor; every other command is
    refused to it, and nobody else may ask for a replay."""
    for name in COMMANDS:
        why = refusal(Role.AUDITOR, name)
        if name == "replay":
            assert why is None
        else:
            assert why is not None and why.startswith(f"an auditor may not give {name!r}"), name
    assert refusal("dealer", "replay") == "a dealer may not give 'replay' (it needs: auditor)"


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        ({"from_seq": 5, "to_seq": 4}, "to_seq 4 is before from_seq 5"),
        ({"from_seq": 0, "to_seq": 5000}, "5001 records asked for: at most 5000 a request"),
        ({"from_seq": -1, "to_seq": 3}, "from_seq: Input should be greater than or equal to 0"),
        ({"from_seq": "1", "to_seq": 3}, "from_seq: Input should be a valid integer"),
        ({"from_seq": 1}, "to_seq: Field required"),
        ({"from_seq": 1, "to_seq": 2, "all": True}, "all: unknown argument"),
    ],
)
def test_a_replay_range_is_checked(args: dict[str, object], complaint: str) -> None:
    with pytest.raises(Refused, match=complaint):
        admit("replay", "auditor", args, Phase.CLOSED)
    for phase in Phase:  # any phase: a gap is repaired whatever the table is doing
        _, ok = admit("replay", "auditor", {"from_seq": 10, "to_seq": 5009}, phase)
        assert ok.model_dump() == {"from_seq": 10, "to_seq": 5009}
