"""One exception tree for the whole product: every error tableside raises of its own is a
``TablesideError``, in one of five families, so that what a person asked wrongly, what a peer
did wrongly on the wire, and what failed inside the table are told apart where they are caught
(a family is translated at the boundary with ``raise … from``).

- ``Refused``: a person's request the table does not take; the message says why. Never a
  failure of the table: a handler that raises anything else has failed (daemon/routing.py
  answers it as an internal error, never as "refused").
- ``WireError``: a device or the broker broke its protocol, or the link to it failed
  (drivers/errors.py, mqtt/).
- ``JournalError``: the journal cannot be written or fails its checks (daemon/journal/).
- ``ConfigurationError``: a configuration, or a file a person gives a tool, that cannot be used.
- ``StoreError``: the floor's store failed (floor/store.py).

Some also derive from a built-in exception that callers or libraries rely on: those are named
where they are declared (a codec's ``MalformedPacket`` is a ``ValueError``, as every parser's
is; ``JournalError`` a ``RuntimeError``, which ``tableside run`` catches for the errors that
stop a start). Nothing here does I/O or imports anything: every layer may import it.
"""

from __future__ import annotations

__all__ = ["ConfigurationError", "Refused", "TablesideError", "WireError"]


class TablesideError(Exception):
    """The root: every error of tableside's own."""


class Refused(TablesideError):
    """A request the table does not take; the message says why (a person's mistake, or the
    table's state: never a failure of the table)."""


class WireError(TablesideError):
    """A device or the broker broke its protocol, or the link to it failed."""


class ConfigurationError(TablesideError):
    """A configuration (or a file a person gives a tool) that cannot be used; the message says
    which key or line, and why."""
