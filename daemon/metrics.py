"""Prometheus metrics of one table daemon, on ``http://<listen>/metrics`` (``[metrics] listen``
or ``tableside run --metrics HOST:PORT``; off unless asked for).

Read at scrape time from what the daemon already counts (the journal's seqs, the publisher's
counters, each device's connection state, the rulings and command results the daemon tallies),
so nothing on the daemon's path waits on metrics. The registry is this daemon's own, not
prometheus-client's global one (a test process runs several daemons). The HTTP server runs on
the daemon's event loop (asyncio, no thread), so a scrape reads the daemon between two of its
steps, never in the middle of one.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

import structlog
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from tableside import __version__
from tableside.daemon.config import parse_listen
from tableside.drivers.events import ConnectionState
from tableside.errors import ConfigurationError
from tableside.rules.rulings import RulingState

if TYPE_CHECKING:
    from tableside.daemon.app import TableDaemon

__all__ = ["DaemonCollector", "MetricsUnavailable", "registry_for", "serving"]

log = structlog.get_logger("tableside.metrics")

#: a request line and headers longer than this are refused (a scrape sends a few hundred bytes)
MAX_REQUEST_BYTES = 8192
#: a client that has not sent its request within this long is dropped
REQUEST_TIMEOUT_S = 10.0


class MetricsUnavailable(ConfigurationError, RuntimeError):
    """The metrics endpoint cannot listen where it was told to."""


class DaemonCollector(Collector):
    """Every metric of one daemon, read from it when Prometheus asks."""

    def __init__(self, daemon: TableDaemon) -> None:
        self.daemon = daemon
        # journaled in this process: counters start at zero with the process, as Prometheus
        # expects (the seq itself, which survives restarts, is a gauge)
        self._first_seq = daemon.journal.next_seq

    def collect(self) -> Iterator[Metric]:
        d = self.daemon
        info = GaugeMetricFamily(
            "tableside_info", "The table this daemon runs (value 1).", labels=["table", "game",
                                                                            "version"]
        )  # fmt: skip
        info.add_metric([d.table, d.runtime.facts.game.value, __version__], 1)
        yield info
        yield from self._messages()
        yield from self._rulings()
        yield from self._devices()

    def _counter(self, name: str, doc: str, value: float) -> CounterMetricFamily:
        family = CounterMetricFamily(name, doc, labels=["table"])
        family.add_metric([self.daemon.table], value)
        return family

    def _gauge(self, name: str, doc: str, value: float) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, doc, labels=["table"])
        family.add_metric([self.daemon.table], value)
        return family

    def _messages(self) -> Iterator[Metric]:
        """The journal and the broker: what was numbered, sent, acknowledged, and the link."""
        journal, publisher = self.daemon.journal, self.daemon.publisher
        counter, gauge = self._counter, self._gauge
        yield counter(
            "tableside_messages_journaled",
            "Messages journaled by this process (each has its own seq).",
            max(0, journal.next_seq - self._first_seq),
        )
        yield counter(
            "tableside_messages_published",
            "Journaled messages the broker acknowledged (PUBACK), this process.",
            publisher.published,
        )
        yield counter(
            "tableside_messages_redelivered",
            "Messages sent again, marked redelivered, after an unacknowledged send.",
            publisher.redelivered,
        )
        yield gauge(
            "tableside_journal_seq",
            "The seq of the newest journaled message.",
            journal.next_seq - 1,
        )
        yield gauge(
            "tableside_journal_acked_seq",
            "The seq up to which the broker acknowledged everything.",
            journal.acked,
        )
        yield gauge(
            "tableside_journal_backlog",
            "Messages journaled and not yet acknowledged by the broker.",
            publisher.pending,
        )
        yield gauge(
            "tableside_broker_connected",
            "1 while the table is connected to its broker.",
            int(publisher.connected.is_set()),
        )
        yield counter(
            "tableside_broker_connections",
            "Connections made to the broker by this process.",
            publisher.connections,
        )
        yield counter(
            "tableside_messages_refused",
            "PUBACKs refusing a record (reason 0x80 or more): each record goes again.",
            publisher.refusals,
        )
        yield counter(
            "tableside_messages_withheld",
            "Records sent as a withheld stand-in (larger than the broker's Maximum Packet Size).",
            publisher.withheld,
        )
        undelivered = publisher.undelivered
        yield gauge(
            "tableside_broker_refused_seq",
            "The oldest record the broker refuses now (-1: none).",
            -1 if undelivered is None else undelivered.seq,
        )
        yield gauge(
            "tableside_broker_commands_subscribed",
            "1 while the broker takes the table's command subscription.",
            int(publisher.commands_subscribed),
        )

    def _rulings(self) -> Iterator[Metric]:
        """Rulings given by clause, what waits for a person, and the requests answered."""
        d, table = self.daemon, self.daemon.table
        rulings = CounterMetricFamily(
            "tableside_rulings", "Rulings given, by rule and clause.", labels=["table", "rule",
                                                                              "clause"]
        )  # fmt: skip
        for (rule, clause), n in sorted(d.runtime.rulings_by_clause.items()):
            rulings.add_metric([table, rule, clause], n)
        yield rulings

        # the lifecycle (rules/rulings.py): what waits for a floorperson, escalated included
        unresolved = GaugeMetricFamily(
            "tableside_rulings_unresolved",
            "Rulings not yet resolved, by state (open, escalated: nobody acknowledged it in "
            "[rulings] escalate_after_s, acknowledged).",
            labels=["table", "state"],
        )
        by_state = collections.Counter(r.state for r in d.runtime.state.rulings)
        for state in (s for s in RulingState if s.unresolved):  # open, escalated, acknowledged
            unresolved.add_metric([table, state.value], by_state[state])
        yield unresolved
        yield self._gauge(
            "tableside_rulings_halting",
            "Unresolved rulings that halt dealing.",
            sum(1 for r in d.runtime.state.rulings if r.halts),
        )

        commands = CounterMetricFamily(
            "tableside_commands",
            "Requests answered, by command and result (ok or refused).",
            labels=["table", "command", "result"],
        )
        for (command, result), n in sorted(d.router.commands_by_result.items()):
            commands.add_metric([table, command, result], n)
        yield commands

    def _devices(self) -> Iterator[Metric]:
        """Each device's link and its events, and the events whose handling failed."""
        d, table = self.daemon, self.daemon.table
        connection = GaugeMetricFamily(
            "tableside_device_connection",
            "Each device's link state: 1 for the state it is in, 0 for the others.",
            labels=["table", "device", "device_class", "state"],
        )
        connected = GaugeMetricFamily(
            "tableside_device_connected",
            "1 while the device's link is up and answering.",
            labels=["table", "device", "device_class"],
        )
        events = CounterMetricFamily(
            "tableside_device_events",
            "Events the device reported, this process.",
            labels=["table", "device", "device_class"],
        )
        for name, rt in sorted(d.runtime.devices.items()):
            cls = rt.device_class
            for state in ConnectionState:
                connection.add_metric([table, name, cls, state.value], int(rt.connection is state))
            connected.add_metric(
                [table, name, cls], int(rt.connection is ConnectionState.CONNECTED)
            )
            events.add_metric([table, name, cls], rt.events)
        yield connection
        yield connected
        yield events
        yield self._counter(
            "tableside_handling_errors",
            "Device events whose handling failed (each logged with its traceback).",
            d.handling_errors,
        )


def registry_for(daemon: TableDaemon) -> CollectorRegistry:
    """A registry of its own holding this daemon's collector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DaemonCollector(daemon))
    return registry


def _response(status: str, body: bytes, content_type: str = "text/plain; charset=utf-8") -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


async def _answer(
    registry: CollectorRegistry, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """One request, one response, then close (HTTP/1.1 with ``Connection: close``)."""
    try:
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            writer.write(_response("431 Request Header Fields Too Large", b"request too large\n"))
            return
        except (asyncio.IncompleteReadError, TimeoutError):
            return  # the client went away, or never asked
        method, _, rest = head.split(b"\r\n", 1)[0].decode("latin-1").partition(" ")
        path = rest.split(" ", 1)[0].split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            writer.write(_response("405 Method Not Allowed", b"GET /metrics\n"))
        elif path != "/metrics":
            writer.write(_response("404 Not Found", b"metrics are at /metrics\n"))
        else:
            body = generate_latest(registry)
            response = _response("200 OK", body, CONTENT_TYPE_LATEST)
            if method == "HEAD":
                response = response[: len(response) - len(body)]
            writer.write(response)
        await writer.drain()
    except ConnectionError:
        pass  # the scraper hung up first
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


@contextlib.asynccontextmanager
async def serving(daemon: TableDaemon, listen: str) -> AsyncIterator[asyncio.Server]:
    """Serve ``/metrics`` for ``daemon`` on ``listen`` (HOST:PORT) until the block ends;
    MetricsUnavailable says why it cannot listen there."""
    host, port = parse_listen(listen)
    registry = registry_for(daemon)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _answer(registry, reader, writer)

    try:
        server = await asyncio.start_server(answer, host, port, limit=MAX_REQUEST_BYTES)
    except OSError as exc:
        raise MetricsUnavailable(f"metrics: cannot listen on {listen}: {exc.strerror}") from exc
    log.info("metrics_listening", url=f"http://{listen}/metrics")
    try:
        yield server
    finally:
        server.close()
        await server.wait_closed()
