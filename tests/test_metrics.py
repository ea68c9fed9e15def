"""Prometheus metrics (daemon/metrics.py): a real daemon with a simulated shuffler and a real
Mosquitto, /metrics scraped over HTTP, the counters seen to move."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import aiomqtt
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tableside.daemon.config import Config, ConfigError, MetricsConfig, validate_config
from tableside.daemon.metrics import MetricsUnavailable
from tableside.drivers.events import ConnectionState

from .conftest import Mosquitto, free_port
from .hil import event, ruling, simulated_table, simulator, state, stop, until

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(port: int, path: str = "/metrics", method: str = "GET") -> tuple[str, str]:
    """(status line, body) of one plain HTTP request: what Prometheus sends."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"{method} {path} HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n".encode())
        await writer.drain()
        response = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
        await writer.wait_closed()
    head, _, body = response.decode().partition("\r\n\r\n")
    return head.split("\r\n", 1)[0], body


def samples(text: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: Samples, name: str, **labels: str) -> float:
    return found[name, frozenset({"table": "hil-1", **labels}.items())]


def with_metrics(port: int) -> Callable[[Config], Config]:
    def adjust(config: Config) -> Config:
        return config.model_copy(update={"metrics": MetricsConfig(listen=f"127.0.0.1:{port}")})

    return adjust


async def test_counters_move_with_a_shuffle_a_ruling_and_commands(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    port = free_port()
    sim = simulator("count=51@2", interval=None)  # shuffles on request; the 2nd counts 51
    async with simulated_table(mosquitto.url, tmp_path, sim, adjust=with_metrics(port)) as table:
        sub = table.subscriber
        await sub.wait_for(state("connected"))
        await table.daemon.publisher.connected.wait()
        status, body = await scrape(port)
        assert status == "HTTP/1.1 200 OK"
        before = samples(body)
        assert value(before, "tableside_broker_connected") == 1
        assert value(before, "tableside_device_connected", device="shuffler",
                     device_class="shuffler") == 1  # fmt: skip
        assert value(before, "tableside_device_connection", device="shuffler",
                     device_class="shuffler", state="disconnected") == 0  # fmt: skip
        assert not any(name == "tableside_rulings_total" for name, _ in before)

        start = json.dumps({"command": "start_shuffle", "device": "shuffler"})
        wrong = json.dumps({"command": "no_such_command", "device": "shuffler"})
        async with aiomqtt.Client("127.0.0.1", mosquitto.port) as client:
            await client.publish("tableside/hil-1/command/dealer", start, qos=1)
            await sub.wait_for(event("shuffle_complete"))
            await client.publish("tableside/hil-1/command/dealer", start, qos=1)
            await client.publish("tableside/hil-1/command/dealer", wrong, qos=1)
            await sub.wait_for(lambda m: m.kind == "command_result", count=3)
        (found,) = await sub.wait_for(ruling())
        clause, rule_id = found.payload["clause"], found.payload["rule_id"]
        await until(lambda: table.daemon.publisher.pending == 0)

        after = samples((await scrape(port))[1])
        assert value(after, "tableside_rulings_total", rule=rule_id, clause=clause) == 1
        # the miscount removes the deck: unresolved (open, or escalated by now), halting dealing
        waiting = sum(value(after, "tableside_rulings_unresolved", state=s)
                      for s in ("open", "escalated"))  # fmt: skip
        assert waiting == 1 and value(after, "tableside_rulings_halting") == 1
        assert value(after, "tableside_rulings_unresolved", state="acknowledged") == 0
        assert value(after, "tableside_commands_total", command="start_shuffle", result="ok") == 2
        assert value(after, "tableside_commands_total", command="no_such_command",
                     result="refused") == 1  # fmt: skip
        journaled = value(after, "tableside_messages_journaled_total")
        assert journaled > value(before, "tableside_messages_journaled_total")
        assert value(after, "tableside_messages_published_total") == journaled
        assert value(after, "tableside_journal_backlog") == 0
        assert value(after, "tableside_journal_seq") == table.daemon.journal.next_seq - 1
        assert value(after, "tableside_journal_acked_seq") == value(after, "tableside_journal_seq")
        events = value(after, "tableside_device_events_total", device="shuffler",
                       device_class="shuffler")  # fmt: skip
        assert events > value(before, "tableside_device_events_total", device="shuffler",
                              device_class="shuffler")  # fmt: skip

        # the broker goes away, then the shuffler: the table says both, and what it journals
        # meanwhile waits in the backlog
        mosquitto.kill()
        await until(lambda: not table.daemon.publisher.connected.is_set())
        await stop(table.tasks["sim"])
        shuffler = table.daemon.runtime.devices["shuffler"]
        await until(lambda: shuffler.connection is not ConnectionState.CONNECTED)
        down = samples((await scrape(port))[1])
        assert value(down, "tableside_broker_connected") == 0
        assert value(down, "tableside_device_connected", device="shuffler",
                     device_class="shuffler") == 0  # fmt: skip
        assert value(down, "tableside_device_connection", device="shuffler",
                     device_class="shuffler", state=shuffler.connection.value) == 1  # fmt: skip
        assert value(down, "tableside_journal_backlog") == table.daemon.publisher.pending > 0
        assert (await scrape(port, "/other"))[0] == "HTTP/1.1 404 Not Found"
        assert (await scrape(port, method="POST"))[0] == "HTTP/1.1 405 Method Not Allowed"
        head = await scrape(port, method="HEAD")
        assert head == ("HTTP/1.1 200 OK", "")
        mosquitto.start()
        await until(lambda: table.daemon.publisher.pending == 0)
        assert value(samples((await scrape(port))[1]), "tableside_journal_backlog") == 0
    # the endpoint closes with the daemon
    with pytest.raises(OSError):
        await scrape(port)


async def test_a_port_in_use_stops_the_daemon_before_it_starts(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(MetricsUnavailable, match=f"cannot listen on 127.0.0.1:{port}"):
            async with simulated_table(
                mosquitto.url, tmp_path, simulator(), adjust=with_metrics(port)
            ) as table:
                await table.tasks["daemon"]


def test_listen_is_checked_where_it_is_written() -> None:
    text = (
        '[table]\nid = "t1"\ngame = "caribbean_stud"\n[metrics]\nlisten = "9464"\n'
        '[devices.shuffler]\ndriver = "tableside.shuffler"\nurl = "socket://127.0.0.1:1"\n'
    )
    with pytest.raises(ConfigError, match=r"t.toml:5: metrics.listen: expected HOST:PORT"):
        validate_config(text, "t.toml", use_env=False)
    with pytest.raises(ConfigError, match=r"metrics.port: Extra inputs are not permitted"):
        validate_config(text.replace('listen = "9464"', "port = 9464"), "t.toml", use_env=False)
    config = validate_config(text.replace('"9464"', '"127.0.0.1:9464"'), "t.toml", use_env=False)
    assert config.metrics == MetricsConfig(listen="127.0.0.1:9464")
    assert (
        validate_config(text.replace('[metrics]\nlisten = "9464"\n', ""), use_env=False).metrics
        is None
    )  # off unless asked for


@pytest.mark.slow  # starts processes
def test_run_refuses_a_bad_metrics_flag_and_a_port_in_use(tmp_path: Path) -> None:
    config = tmp_path / "t.toml"
    config.write_text(
        f'[table]\nid = "t1"\ngame = "caribbean_stud"\nstate_dir = "{tmp_path}"\n'
        '[devices.shuffler]\ndriver = "tableside.shuffler"\nurl = "socket://127.0.0.1:1"\n',
        encoding="utf-8",
    )

    def run(metrics: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tableside", "run", "--config", str(config),
             "--metrics", metrics],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    done = run("x")
    assert done.returncode == 2
    assert "--metrics: expected HOST:PORT (e.g. 127.0.0.1:9464), got 'x'" in done.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run(f"127.0.0.1:{port}")
    assert done.returncode == 1
    assert f"tableside: metrics: cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr
