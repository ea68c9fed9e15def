"""The floor's Prometheus metrics (``tableside floor run --metrics HOST:PORT`` serves them)."""

from __future__ import annotations

from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

__all__ = ["FloorMetrics"]


class FloorMetrics:
    """One registry per floor (so two floors in one process, as in the tests, do not collide)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.stored = Counter(
            "tableside_floor_messages_stored", "messages stored, by kind", ["kind"], registry=r
        )
        self.duplicates = Counter(
            "tableside_floor_duplicates", "records that came again (counted, not stored)",
            registry=r,
        )  # fmt: skip
        self.missing = Gauge(
            "tableside_floor_missing_records", "seqs missing (in gaps), all tables", registry=r
        )
        self.replays_requested = Counter(
            "tableside_floor_replays_requested", "replay requests sent to tables", registry=r
        )
        self.replays_received = Counter(
            "tableside_floor_replayed_records", "replayed records received", registry=r
        )
        self.failures = Counter(
            "tableside_floor_verification_failures",
            "messages or links that failed verification, by verdict", ["verdict"], registry=r,
        )  # fmt: skip
        self.withheld = Counter(
            "tableside_floor_withheld_records",
            "withheld stand-ins (records larger than the broker's limit) stored as the record "
            "for their seq (stand-in), and those whose record came since (filled-in)", ["what"],
            registry=r,
        )  # fmt: skip
        self.lag = Histogram(
            "tableside_floor_lag_seconds",
            "arrival at the floor minus the record's journal time (live records only)",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=r,
        )
        self.logins = Counter(
            "tableside_floor_web_logins",
            "web view logins, by outcome (ok, wrong, locked)", ["outcome"], registry=r,
        )  # fmt: skip
        self.login_locks = Counter(
            "tableside_floor_web_login_locks",
            "logins locked after wrong passwords, by scope (address, user)", ["scope"], registry=r,
        )  # fmt: skip
        self.sessions_ended = Counter(
            "tableside_floor_web_sessions_ended",
            "web view sessions ended, by why (logout, user-changed, idle)", ["why"], registry=r,
        )  # fmt: skip
        self._server: WSGIServer | None = None

    def serve(self, host: str, port: int) -> None:
        """Serve ``/metrics`` on ``host:port`` (a thread of its own)."""
        self._server, _ = start_http_server(port, host, registry=self.registry)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
