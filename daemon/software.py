"""Software identity on the record (docs/software.md): which software the table runs, held to
its release manifest before any device opens and at a technician's ``verify_software``.

A check's outcome (daemon/integrity.py ``SoftwareCheck``) becomes the retained ``software``
record; a mismatch also becomes a ruling that halts dealing (``SOFTWARE_MISMATCH``): not a
ruling of 58 Pa. Code, which has no clause on the controller's own software, but a
surveillance alert with the ruling's lifecycle, as the shuffle monitor's is
(daemon/shuffles.py). Its halt ends when a later check passes (a technician put the approved
software back and ran ``verify_software``, or the next start's check passed); the ruling stays
for a floorperson to acknowledge and resolve, who may also resolve it first.

No I/O: the daemon (daemon/app.py) and the router (daemon/routing.py) run the check in a
thread and hand its outcome to the runtime (daemon/runtime.py).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tableside.rules.model import Action, Game, Rule
from tableside.wire.payloads import SoftwareBody

__all__ = ["MAX_NAMED", "SOFTWARE_MISMATCH", "SoftwareResult", "SoftwareVerdict"]

#: files named per list in a record (the count says how many differ in all)
MAX_NAMED = 50

SOFTWARE_MISMATCH = Rule(
    id="software.mismatch",
    games=frozenset(Game),
    on="table.software",
    when=(),
    actions=(Action.HALT_DEALING, Action.ALERT),
    citation="AGCO Registrar's Standards 12.2.1",
    words=(
        "… verify the integrity of its Critical Software prior to the Critical Software being "
        "executed, and verify the integrity of its Critical Software automatically thereafter."
    ),
    summary=(
        "Alert (not a Pennsylvania ruling): the table's installed software differs from its "
        "release manifest. No dealing until a technician puts the approved software back and "
        "verify_software passes (docs/software.md)."
    ),
)


class SoftwareResult(enum.StrEnum):
    OK = "ok"
    #: a file changed, missing or added, or a configured manifest that cannot be read
    MISMATCH = "mismatch"
    #: no manifest configured and none installed (a checkout, the demo): nothing to hold to
    UNVERIFIED = "unverified"


#: each result as the record spells it (the payload's field is a Literal, its schema an enum)
_SAID: dict[SoftwareResult, Literal["ok", "mismatch", "unverified"]] = {
    SoftwareResult.OK: "ok",
    SoftwareResult.MISMATCH: "mismatch",
    SoftwareResult.UNVERIFIED: "unverified",
}


@dataclass(frozen=True, slots=True)
class SoftwareVerdict:
    """One check of the installed software, as the ``software`` record says it."""

    result: SoftwareResult
    version: str
    manifest: Path | None
    manifest_sha256: str | None = None
    changed: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    added: tuple[str, ...] = ()
    problem: str | None = None
    files: int = 0
    seconds: float = 0.0

    def message(self, checked_by: str) -> SoftwareBody:
        """The ``software`` record's message (wire/payloads.py SoftwarePayload)."""
        return SoftwareBody(
            result=_SAID[self.result],
            version=self.version,
            manifest=None if self.manifest is None else str(self.manifest),
            manifest_sha256=self.manifest_sha256,
            files=self.files,
            differ=len(self.changed) + len(self.missing) + len(self.added),
            changed=list(self.changed[:MAX_NAMED]),
            missing=list(self.missing[:MAX_NAMED]),
            added=list(self.added[:MAX_NAMED]),
            problem=self.problem,
            checked_by=checked_by,
            seconds=round(self.seconds, 3),
        )
