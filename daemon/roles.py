"""Who may give which command: the dealer, the floorperson, the technician.

The role is the topic a request arrives on (``<prefix>/<table>/command/<role>``). The daemon
cannot tell who published a message; the broker can: its ACL lets each person's MQTT user
write only their own role's topic (systemd/mosquitto-acl.conf). The daemon then enforces what
each role may do, and refuses the rest with the reason, which is journaled and published like
every other result (docs/commands.md).
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["PERMISSIONS", "Role", "refusal"]


class Role(StrEnum):
    DEALER = "dealer"
    FLOORPERSON = "floorperson"
    TECHNICIAN = "technician"


_EVERYONE = frozenset(Role)

#: command → the roles that may give it. A command not listed is refused for every role.
PERMISSIONS: dict[str, frozenset[Role]] = {
    # the round as the dealer runs it
    "start_shuffle": _EVERYONE,
    "deal_round": frozenset({Role.DEALER, Role.FLOORPERSON}),
    "set_lights": _EVERYONE,
    "lock_out": frozenset({Role.DEALER, Role.FLOORPERSON}),  # closing bets by hand
    # reopening betting by hand, and the progressive meter, are a supervisor's
    "release": frozenset({Role.FLOORPERSON}),
    "set_meter": frozenset({Role.FLOORPERSON}),
    # device work: raw stacks from the shoe are for testing a shoe, not for dealing a round
    "deal": frozenset({Role.TECHNICIAN}),
    "self_test": _EVERYONE,
    "query_status": _EVERYONE,
    "query_identity": _EVERYONE,
    # the table itself (device "table", rules/table.py)
    "open_table": frozenset({Role.FLOORPERSON}),
    "close_table": frozenset({Role.FLOORPERSON}),
    # reopens betting: releases the acceptors' lock-out, as "release" does (a supervisor's)
    "bets_open": frozenset({Role.FLOORPERSON}),
    "no_more_bets": frozenset({Role.DEALER, Role.FLOORPERSON}),
    "start_round": frozenset({Role.DEALER, Role.FLOORPERSON}),
    "deal_done": frozenset({Role.DEALER, Role.FLOORPERSON}),
    "reveal": frozenset({Role.DEALER, Role.FLOORPERSON}),
    "round_settled": frozenset({Role.DEALER, Role.FLOORPERSON}),
    "shuffled": frozenset({Role.DEALER, Role.FLOORPERSON}),
    "stub_count": frozenset({Role.DEALER, Role.FLOORPERSON}),
    "new_cards": frozenset({Role.DEALER, Role.FLOORPERSON}),
    "declare_method": frozenset({Role.FLOORPERSON}),
    # 551.2(e): the floorperson inspects the card reader at the start of each gaming day
    "reader_inspected": frozenset({Role.FLOORPERSON}),
    "device_removed": frozenset({Role.FLOORPERSON, Role.TECHNICIAN}),
    "device_installed": frozenset({Role.FLOORPERSON, Role.TECHNICIAN}),
    # 555.12(b): the dealer verifies the hand and the light; a floorperson validates
    "progressive_hand": frozenset({Role.DEALER, Role.FLOORPERSON}),
    "validate_payout": frozenset({Role.FLOORPERSON}),
    "pay_progressive": frozenset({Role.DEALER, Role.FLOORPERSON}),
    "pay_bonus": frozenset({Role.DEALER, Role.FLOORPERSON}),
    "chips_collected": frozenset({Role.DEALER, Role.FLOORPERSON}),
    "card_exposed": frozenset({Role.DEALER, Role.FLOORPERSON}),
    "misdeal": frozenset({Role.DEALER, Role.FLOORPERSON}),
    # Spanish 21: what the dealer does around the card reader, and what turns up in the shoe
    "up_card": frozenset({Role.DEALER, Role.FLOORPERSON}),
    "more_cards": frozenset({Role.DEALER, Role.FLOORPERSON}),
    "insurance_placed": frozenset({Role.DEALER, Role.FLOORPERSON}),
    "insurance_collected": frozenset({Role.DEALER, Role.FLOORPERSON}),
    "match_the_dealer_settled": frozenset({Role.DEALER, Role.FLOORPERSON}),
    "card_face_up": frozenset({Role.DEALER, Role.FLOORPERSON}),
    "ten_found": frozenset({Role.DEALER, Role.FLOORPERSON}),
    "too_few_cards": frozenset({Role.DEALER, Role.FLOORPERSON}),
    # baccarat: what the dealer (or a shoe that reads cards) reports
    "first_card": frozenset({Role.DEALER, Role.FLOORPERSON}),
    "cover_card": frozenset({Role.DEALER, Role.FLOORPERSON}),
    "drawn_in_error": frozenset({Role.DEALER, Role.FLOORPERSON}),
    "card_face_up_in_shoe": frozenset({Role.DEALER, Role.FLOORPERSON}),
    "coup": frozenset({Role.DEALER, Role.FLOORPERSON}),
}


def refusal(role: str, command: str) -> str | None:
    """Why ``role`` may not give ``command``, or None when it may."""
    try:
        who = Role(role)
    except ValueError:
        known = ", ".join(r.value for r in Role)
        return f"unknown role {role!r} (roles: {known})"
    allowed = PERMISSIONS.get(command)
    if allowed is None:
        return f"unknown command {command!r} (commands: {', '.join(sorted(PERMISSIONS))})"
    if who not in allowed:
        may = ", ".join(sorted(r.value for r in allowed))
        return f"a {who.value} may not give {command!r} (it needs: {may})"
    return None
