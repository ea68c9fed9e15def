"""One exception tree for everything below the daemon.

Line noise is not an exception (the decoder counts and skips it). A device that breaks the
protocol, a device that reports a fault, and a link that is gone are different errors.
"""

from tableside.errors import WireError

__all__ = [
    "DeviceRejected",
    "DeviceUnavailable",
    "LinkError",
    "LinkLost",
    "LinkTimeout",
    "ProtocolViolation",
    "TablesideDriverError",
    "TransportOpenError",
]


class TablesideDriverError(WireError):
    """Base of every error raised by tableside.drivers (the wire family of tableside/errors.py)."""


class LinkError(TablesideDriverError):
    """The byte link to a device failed."""


class TransportOpenError(LinkError):
    """The device URL could not be opened (no such tty, connection refused, bad URL)."""


class LinkLost(LinkError):
    """An open link closed or broke (EOF, EIO, reset)."""


class LinkTimeout(LinkError):
    """A frame was not acknowledged after every retry."""


class ProtocolViolation(TablesideDriverError):
    """The device sent something intact that the protocol does not allow."""


class DeviceRejected(TablesideDriverError):
    """The device refused a command (a NAK that asks us not to resend)."""


class DeviceUnavailable(TablesideDriverError):
    """A command was given while the device is not connected."""
