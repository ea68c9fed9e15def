"""Who may give what, as rules/commands.py declares it, and the refusals' wording."""

from __future__ import annotations

import pytest

from tableside.drivers.registry import available_drivers, get_driver
from tableside.rules.commands import COMMANDS, Refused, Role, authorise


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
    ],
)
def test_who_may_give_what(role: str, command: str, allowed: bool) -> None:
    assert (refusal(role, command) is None) is allowed


def test_refusals_say_why() -> None:
    assert refusal("pit_boss", "deal") == (
        "unknown role 'pit_boss' (roles: dealer, floorperson, technician)"
    )
    assert (
        refusal("dealer", "set_meter")
        == "a dealer may not give 'set_meter' (it needs: floorperson)"
    )
    unknown = refusal(Role.FLOORPERSON, "open_vault")
    assert unknown is not None and unknown.startswith(
        "unknown command 'open_vault' (commands: acknowledge_ruling, bets_open, "
    )
