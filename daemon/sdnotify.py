"""A small sd_notify: tell systemd we are ready, stopping, alive (the watchdog), and how we are.

Our own rather than the ``sdnotify`` package, which swallows every error: here a message that
cannot be sent raises, and the caller logs it. Outside systemd (no NOTIFY_SOCKET) it does
nothing. Protocol: a datagram of ``KEY=VALUE`` lines to the AF_UNIX socket named in
NOTIFY_SOCKET (``@`` at the start means the abstract namespace); see sd_notify(3).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

from tableside.errors import WireError

__all__ = ["Notifier", "NotifyError"]


class NotifyError(WireError, OSError):
    """A notification could not be delivered to systemd."""


class Notifier:
    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        address = env.get("NOTIFY_SOCKET", "")
        if address.startswith("@"):
            address = "\0" + address[1:]
        self.address = address or None
        self.watchdog_interval: float | None = None
        usec = env.get("WATCHDOG_USEC")
        pid = env.get("WATCHDOG_PID")
        if usec and usec.isdigit() and (not pid or pid == str(os.getpid())):
            # Ping at half the timeout, as sd_watchdog_enabled(3) advises.
            self.watchdog_interval = int(usec) / 2_000_000

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def notify(self, *assignments: str) -> None:
        if self.address is None:
            return
        data = "\n".join(assignments).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.sendto(data, self.address)
        except OSError as exc:
            raise NotifyError(exc.errno, f"sd_notify to {self.address!r} failed: {exc}") from exc

    def ready(self, status: str = "") -> None:
        self.notify("READY=1", *([f"STATUS={status}"] if status else []))

    def watchdog(self) -> None:
        self.notify("WATCHDOG=1")

    def status(self, text: str) -> None:
        self.notify(f"STATUS={text}")

    def stopping(self) -> None:
        self.notify("STOPPING=1")
