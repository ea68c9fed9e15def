"""Which firmware each device ran last, so that a change is noticed, across restarts too.

A device (or an acceptor on a ccTalk bus) that reports another firmware hash or ROM checksum
than the table last saw is published as a ``firmware_changed`` event: regulators expect approved
software only, and a silent swap must not go unnoticed. What the table last saw is the device's
identity in its retained state (``device/<name>/state``: ``identity``, and ``parts`` for each
seat's acceptor), which the journal keeps and a restart restores (daemon/restore.py): no
second store beside the journal.
"""

from __future__ import annotations

from tableside.drivers.cctalk.events import AcceptorIdentity
from tableside.drivers.events import DeviceEvent, IdentityEvent
from tableside.wire.events import FirmwareChanged

__all__ = ["firmware_change"]


def firmware_change(
    device: str,
    identity_firmware: str | None,
    parts: dict[str, dict[str, object]],
    event: DeviceEvent,
) -> FirmwareChanged | None:
    """``event`` (an identity) against what the table knew of ``device`` before it: its
    firmware hash, and its parts' ROM checksums; None when nothing was known (first sight) or
    nothing changed."""
    match event:
        case IdentityEvent():
            part, previous, current = "", identity_firmware, event.firmware_sha256
        case AcceptorIdentity():
            part, current = f"seat{event.seat}", event.rom_checksum
            known = parts.get(part, {}).get("rom_checksum")
            previous = known if isinstance(known, str) else None
        case _:
            return None
    if previous is None or previous == current:
        return None
    return FirmwareChanged(device=device, part=part, previous=previous, current=current)
