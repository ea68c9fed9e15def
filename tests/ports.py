"""Free loopback ports for the servers a test starts."""

from __future__ import annotations

import random
import socket
from pathlib import Path

_EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _below_ephemeral() -> range:
    try:
        low = int(_EPHEMERAL.read_text(encoding="ascii").split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    return range(10000, max(low, 10001))


def free_port() -> int:
    """A free loopback port below the kernel's ephemeral range. A server a test stops and starts
    again on the same port finds it still free: an ephemeral port may meanwhile be taken by any
    outgoing connection or by another worker binding port 0 (seen in CI as a restarted
    Mosquitto's "Address already in use")."""
    ports = _below_ephemeral()
    for _ in range(200):
        port = random.choice(ports)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port in {ports.start}-{ports.stop - 1} after 200 tries")
