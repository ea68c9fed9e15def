"""The role table on its own: who may give what, and the refusals' wording."""

from __future__ import annotations

import pytest

from tableside.daemon.roles import PERMISSIONS, Role, refusal
from tableside.drivers.registry import available_drivers, get_driver


def test_every_device_command_has_a_row() -> None:
    """A driver's command that no role may give would be unreachable: every one has a row."""
    commands = {c for name in available_drivers() for c in get_driver(name).commands}
    assert commands <= set(PERMISSIONS), commands - set(PERMISSIONS)


def test_every_table_command_has_a_row() -> None:
    from tableside.rules.table import TABLE_EVENTS

    assert set(TABLE_EVENTS) <= set(PERMISSIONS), set(TABLE_EVENTS) - set(PERMISSIONS)


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
        "unknown command 'open_vault' (commands: bets_open, "
    )
