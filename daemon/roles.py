"""Who may give which command: the dealer, the floorperson, the technician.

The role is the topic a request arrives on (``<prefix>/<table>/command/<role>``). The daemon
cannot tell who published a message; the broker can: its ACL lets each person's MQTT user
write only their own role's topic (systemd/mosquitto-acl.conf). The daemon then enforces what
each role may do, as each command declares it (rules/commands.py), and refuses the rest with the
reason, which is journaled and published like every other result (docs/commands.md).
"""

from __future__ import annotations

from tableside.rules.commands import Refused, Role, authorise

__all__ = ["Role", "refusal"]


def refusal(role: str, command: str) -> str | None:
    """Why ``role`` may not give ``command`` at all, or None when it may."""
    try:
        authorise(command, role)
    except Refused as exc:
        return str(exc)
    return None
