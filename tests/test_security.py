"""The broker connection's security: TLS with a CA and client certificates, and
username/password, against a Mosquitto the test starts with certificates the test makes."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import aiomqtt
import pytest

from tableside.daemon.app import TableDaemon
from tableside.daemon.config import (
    BrokerConfig,
    Config,
    ConfigError,
    DeviceConfig,
    TableConfig,
    validate_config,
)
from tableside.rules.model import Game

from .conftest import Mosquitto
from .hil import simulator, start_simulator, stop, until


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    d = tmp_path / "pki"
    d.mkdir()
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
            "-days", "2", "-subj", "/CN=tableside test CA", cwd=d)  # fmt: skip
    for name, extra in (("server", ["-extfile", "san.ext"]), ("client", [])):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
                f"{name}.csr", "-subj", f"/CN=tableside-{name}", cwd=d)  # fmt: skip
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", *extra, cwd=d)  # fmt: skip
    return d


@pytest.fixture
def tls_broker(tmp_path: Path, pki: Path) -> Iterator[Mosquitto]:
    broker = Mosquitto(
        tmp_path,
        f"cafile {pki / 'ca.crt'}\ncertfile {pki / 'server.crt'}\nkeyfile {pki / 'server.key'}\n"
        "require_certificate true\nuse_identity_as_username true\n",
        scheme="mqtts",
    )
    broker.start()
    yield broker
    broker.stop()


def config(url: str, device_url: str, state: Path, **broker: object) -> Config:
    return Config(
        table=TableConfig(id="sec-1", game=Game.CARIBBEAN_STUD, state_dir=state),
        broker=BrokerConfig(url=url, **broker),  # type: ignore[arg-type]
        devices={"shuffler": DeviceConfig(driver="tableside.shuffler", url=device_url)},
    )


async def first_event(daemon: TableDaemon, subscriber: aiomqtt.Client) -> dict[str, object]:
    await subscriber.subscribe("tableside/sec-1/device/shuffler/event", qos=1)
    async with asyncio.timeout(20):
        async for message in subscriber.messages:
            assert isinstance(message.payload, bytes)
            payload: dict[str, object] = json.loads(message.payload)
            return payload
    raise AssertionError("no event")


async def test_tls_with_client_certificates(
    tls_broker: Mosquitto, pki: Path, tmp_path: Path
) -> None:
    sim = simulator()
    url, sim_task = await start_simulator(sim, "socket")
    tls = {
        "ca_file": pki / "ca.crt",
        "cert_file": pki / "client.crt",
        "key_file": pki / "client.key",
    }
    daemon = TableDaemon(config(tls_broker.url, url, tmp_path / "a", **tls))
    # The same table without a client certificate is refused by the broker.
    stranger = TableDaemon(config(tls_broker.url, url, tmp_path / "b", ca_file=pki / "ca.crt"))
    tasks = [asyncio.create_task(daemon.run()), asyncio.create_task(stranger.run())]
    try:
        params = aiomqtt.TLSParameters(
            ca_certs=str(pki / "ca.crt"),
            certfile=str(pki / "client.crt"),
            keyfile=str(pki / "client.key"),
        )
        async with aiomqtt.Client("127.0.0.1", tls_broker.port, tls_params=params) as subscriber:
            event = await first_event(daemon, subscriber)
        assert event["table"] == "sec-1"
        assert daemon.publisher.connections >= 1
        assert stranger.publisher.connections == 0
    finally:
        await stop(*tasks, sim_task)


async def test_username_and_password(tmp_path: Path) -> None:
    passwords = tmp_path / "passwords"
    await asyncio.to_thread(
        subprocess.run,
        ["mosquitto_passwd", "-b", "-c", str(passwords), "table-sec-1", "s3cret"],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    broker = Mosquitto(tmp_path, f"allow_anonymous false\npassword_file {passwords}\n")
    broker.start()
    sim = simulator()
    url, sim_task = await start_simulator(sim, "socket")
    good = TableDaemon(
        config(broker.url, url, tmp_path / "a", username="table-sec-1", password="s3cret")
    )
    bad = TableDaemon(
        config(broker.url, url, tmp_path / "b", username="table-sec-1", password="guess")
    )
    tasks = [asyncio.create_task(good.run()), asyncio.create_task(bad.run())]
    try:
        async with aiomqtt.Client(
            "127.0.0.1", broker.port, username="table-sec-1", password="s3cret"
        ) as subscriber:
            event = await first_event(good, subscriber)
        assert event["table"] == "sec-1"
        assert bad.publisher.connections == 0
    finally:
        await stop(*tasks, sim_task)
        broker.stop()


def test_tls_settings_are_checked(tmp_path: Path, pki: Path) -> None:
    base = (
        '[table]\nid = "t"\ngame = "let_it_ride"\n'
        '[devices.shuffler]\ndriver = "tableside.shuffler"\nurl = "/dev/x"\n[broker]\n'
    )

    def check(broker: str) -> Config:
        return validate_config(base + broker, use_env=False)

    with pytest.raises(ConfigError, match="need an mqtts:// url"):
        check(f'url = "mqtt://h:1883"\nca_file = "{pki / "ca.crt"}"\n')
    with pytest.raises(ConfigError, match="no such file"):
        check('url = "mqtts://h"\nca_file = "/nonexistent/ca.crt"\n')
    with pytest.raises(ConfigError, match="go together"):
        check(f'url = "mqtts://h"\ncert_file = "{pki / "client.crt"}"\n')
    ok = check('url = "mqtts://broker.casino.example"\n')
    assert ok.broker.port == 8883 and ok.broker.tls


@pytest.fixture
def shipped_broker(tmp_path: Path) -> Iterator[Mosquitto]:
    """systemd/mosquitto-tableside.conf and mosquitto-acl.conf, as shipped."""
    (tmp_path / "broker").mkdir()
    users = ("cs-01", "cs-02", "surveillance", "dealer-ann", "floor-bob", "auditor-dee",
             "floor", "floor-floorperson")  # fmt: skip
    broker = Mosquitto.shipped(tmp_path / "broker", users)
    broker.start()
    yield broker
    broker.stop()


def login(broker: Mosquitto, user: str, identifier: str | None = None) -> aiomqtt.Client:
    return aiomqtt.Client(
        "127.0.0.1", broker.port, username=user, password="pw", identifier=identifier
    )


async def collect(c: aiomqtt.Client, into: list[tuple[str, bytes]]) -> None:
    async for message in c.messages:
        assert isinstance(message.payload, bytes)
        into.append((str(message.topic), message.payload))


async def test_shipped_acl_keeps_each_table_to_its_own_topics(
    shipped_broker: Mosquitto,
) -> None:
    """Each case against Mosquitto running the shipped config and ACL: a table publishes its
    own topics and responses only (no requests, not even to itself; nothing of another table,
    its responses included); a person asks in their own role only and cannot answer in another
    person's name; a table reads nothing of another."""
    seen: list[tuple[str, bytes]] = []
    intruder_saw: list[tuple[str, bytes]] = []
    async with (
        login(shipped_broker, "surveillance") as watcher,
        login(shipped_broker, "cs-02") as intruder,
    ):
        await watcher.subscribe("tableside/#", qos=1)
        await intruder.subscribe("tableside/cs-01/#", qos=1)
        tasks = [asyncio.create_task(collect(watcher, seen)),
                 asyncio.create_task(collect(intruder, intruder_saw))]  # fmt: skip
        async with login(shipped_broker, "cs-01") as table:
            await table.publish("tableside/cs-01/ruling", b'{"ok": 1}', qos=1)
            await table.publish("tableside/cs-01/ruling_state", b'{"ok": 2}', qos=1)
            await table.publish("tableside/cs-01/response/floor-bob/1", b'{"answer": 1}', qos=1)
            await table.publish("tableside/cs-01/command/floorperson", b'{"self": 1}', qos=1)
            await table.publish("tableside/cs-02/response/floor-bob/1", b'{"forged": 3}', qos=1)
        await intruder.publish("tableside/cs-01/ruling", b'{"forged": 1}', qos=1)
        await intruder.publish("tableside/cs-02/ruling", b'{"own": 1}', qos=1)
        async with login(shipped_broker, "dealer-ann") as dealer:
            # a dealer may ask as a dealer, never as a floorperson, and forges nothing
            await dealer.publish("tableside/cs-01/command/dealer", b'{"as": "dealer"}', qos=1)
            await dealer.publish("tableside/cs-01/command/floorperson", b'{"as": "f"}', qos=1)
            await dealer.publish("tableside/cs-01/ruling", b'{"forged": 2}', qos=1)
            await dealer.publish("tableside/cs-01/ruling_state", b'{"forged": 5}', qos=1)
            await dealer.publish("tableside/cs-01/response/floor-bob/1", b'{"forged": 4}', qos=1)
            # the last of them all, so that everything before it has been through the broker
            await dealer.publish("tableside/cs-01/command/dealer", b'{"last": 1}', qos=1)
        async with asyncio.timeout(10):
            while ("tableside/cs-01/command/dealer", b'{"last": 1}') not in seen:
                await asyncio.sleep(0.02)
        await stop(*tasks)
    assert ("tableside/cs-01/ruling", b'{"ok": 1}') in seen
    assert ("tableside/cs-01/ruling_state", b'{"ok": 2}') in seen
    assert ("tableside/cs-01/response/floor-bob/1", b'{"answer": 1}') in seen
    assert ("tableside/cs-02/ruling", b'{"own": 1}') in seen
    assert ("tableside/cs-01/command/dealer", b'{"as": "dealer"}') in seen
    forged = [(t, p) for t, p in seen if b"forged" in p or b'"self"' in p or b'"f"' in p]
    assert forged == []
    assert intruder_saw == []  # cs-02 may not read cs-01's topics


async def test_shipped_acl_lets_the_auditor_ask_for_replays_only(
    shipped_broker: Mosquitto,
) -> None:
    """docs/floor.md: a table publishes its checkpoints and replays (and not another
    table's); the auditor reads every table and asks as the auditor, never in another role,
    and forges no table message; nobody else asks as the auditor."""
    seen: list[tuple[str, bytes]] = []
    auditor_saw: list[tuple[str, bytes]] = []
    async with (
        login(shipped_broker, "surveillance") as watcher,
        login(shipped_broker, "auditor-dee") as auditor,
    ):
        await watcher.subscribe("tableside/#", qos=1)
        await auditor.subscribe("tableside/#", qos=1)
        tasks = [asyncio.create_task(collect(watcher, seen)),
                 asyncio.create_task(collect(auditor, auditor_saw))]  # fmt: skip
        async with login(shipped_broker, "cs-01") as table:
            await table.publish("tableside/cs-01/checkpoint", b'{"ok": "c"}', qos=1)
            await table.publish("tableside/cs-01/replay", b'{"ok": "r"}', qos=1)
            await table.publish("tableside/cs-02/replay", b'{"forged": 1}', qos=1)
            await table.publish("tableside/cs-02/checkpoint", b'{"forged": 2}', qos=1)
        await auditor.publish("tableside/cs-01/command/auditor", b'{"as": "auditor"}', qos=1)
        await auditor.publish("tableside/cs-01/command/floorperson", b'{"forged": 3}', qos=1)
        await auditor.publish("tableside/cs-01/replay", b'{"forged": 4}', qos=1)
        await auditor.publish("tableside/cs-01/checkpoint", b'{"forged": 5}', qos=1)
        async with login(shipped_broker, "dealer-ann") as dealer:
            await dealer.publish("tableside/cs-01/command/auditor", b'{"forged": 6}', qos=1)
            await dealer.publish("tableside/cs-01/command/dealer", b'{"last": 1}', qos=1)
        async with asyncio.timeout(10):
            while ("tableside/cs-01/command/dealer", b'{"last": 1}') not in seen:
                await asyncio.sleep(0.02)
            while ("tableside/cs-01/command/dealer", b'{"last": 1}') not in auditor_saw:
                await asyncio.sleep(0.02)
        await stop(*tasks)
    for expected in (("tableside/cs-01/checkpoint", b'{"ok": "c"}'),
                     ("tableside/cs-01/replay", b'{"ok": "r"}'),
                     ("tableside/cs-01/command/auditor", b'{"as": "auditor"}')):  # fmt: skip
        assert expected in seen and expected in auditor_saw, expected
    assert [(t, p) for t, p in seen if b"forged" in p] == []


async def test_shipped_acl_gives_the_floor_replays_and_its_web_view_a_role(
    shipped_broker: Mosquitto,
) -> None:
    """The floor service reads every table and asks for replays as the auditor only; its web
    view's floorperson login sends a floorperson's requests and nothing a table sends."""
    seen: list[tuple[str, bytes]] = []
    floor_saw: list[tuple[str, bytes]] = []
    async with (
        login(shipped_broker, "surveillance") as watcher,
        login(shipped_broker, "floor") as floor,
    ):
        await watcher.subscribe("tableside/#", qos=1)
        await floor.subscribe("tableside/#", qos=1)
        tasks = [asyncio.create_task(collect(watcher, seen)),
                 asyncio.create_task(collect(floor, floor_saw))]  # fmt: skip
        await floor.publish("tableside/cs-01/command/auditor", b'{"ok": "replay"}', qos=1)
        await floor.publish("tableside/cs-01/command/floorperson", b'{"forged": 1}', qos=1)
        await floor.publish("tableside/cs-01/ruling_state", b'{"forged": 2}', qos=1)
        async with login(shipped_broker, "floor-floorperson") as web:
            await web.publish("tableside/cs-01/command/floorperson", b'{"ok": "ack"}', qos=1)
            await web.publish("tableside/cs-01/command/technician", b'{"forged": 3}', qos=1)
            await web.publish("tableside/cs-01/ruling_state", b'{"forged": 4}', qos=1)
        async with login(shipped_broker, "cs-01") as table:
            await table.publish("tableside/cs-01/status", b'{"last": 1}', qos=1)
        async with asyncio.timeout(10):
            while ("tableside/cs-01/status", b'{"last": 1}') not in seen:
                await asyncio.sleep(0.02)
            while ("tableside/cs-01/status", b'{"last": 1}') not in floor_saw:
                await asyncio.sleep(0.02)
        await stop(*tasks)
    for expected in (("tableside/cs-01/command/auditor", b'{"ok": "replay"}'),
                     ("tableside/cs-01/command/floorperson", b'{"ok": "ack"}')):  # fmt: skip
        assert expected in seen, expected
    assert [(t, p) for t, p in seen if b"forged" in p] == []


async def test_nobody_else_can_take_a_tables_client_id(
    shipped_broker: Mosquitto, tmp_path: Path
) -> None:
    """The real daemon logged in as its table; a person connects with the table's client id
    (its username, and the old default tableside-<id>): the table stays connected, and no
    forged offline will appears."""
    url, sim_task = await start_simulator(simulator(interval=0.05), "socket")
    table = Config(
        table=TableConfig(id="cs-01", game=Game.CARIBBEAN_STUD, state_dir=tmp_path),
        broker=BrokerConfig(url=shipped_broker.url, username="cs-01", password="pw"),
        devices={"shuffler": DeviceConfig(driver="tableside.shuffler", url=url)},
    )
    assert table.client_id == "cs-01"
    daemon = TableDaemon(table)
    seen: list[tuple[str, bytes]] = []
    task = asyncio.create_task(daemon.run())
    try:
        async with login(shipped_broker, "surveillance") as watcher:
            await watcher.subscribe("tableside/cs-01/#", qos=1)
            watching = asyncio.create_task(collect(watcher, seen))
            try:
                await until(lambda: daemon.publisher.connected.is_set())
                for identifier in ("cs-01", "tableside-cs-01"):
                    async with login(shipped_broker, "dealer-ann", identifier):
                        # what the table publishes after this connection is made, it publishes
                        # on its first connection still
                        mark = daemon.journal.next_seq + 3
                        await until(lambda mark=mark: daemon.journal.acked >= mark)  # type: ignore[misc]
            finally:
                await stop(watching)
        assert daemon.publisher.connections == 1
        wills = [p for t, p in seen if t.endswith("/status") and b'"will":true' in p]
        assert wills == []
    finally:
        await stop(task, sim_task)
