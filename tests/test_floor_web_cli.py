"""``tableside floor user`` and ``tableside floor run --http`` as processes: users are added
with a hashed password, a web view without users is refused, and one with users serves the
floor, behind a login, from the store the floor fills."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import aiomqtt

from tests.ports import free_port

from .conftest import Mosquitto
from .floorpeer import PeerTable

PASSWORD = "correct horse battery"


def _tableside(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tableside", *args], input=stdin,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def _add_bob(tmp_path: Path) -> str:
    """A users file with bob, a floorperson; its path."""
    users = str(tmp_path / "users.json")
    added = _tableside("floor", "user", "--users", users, "add", "bob", "--role", "floorperson",
                       "--password-stdin", stdin=PASSWORD + "\n")  # fmt: skip
    assert added.returncode == 0, added.stderr
    return users


@contextlib.asynccontextmanager
async def _web_floor(mosquitto: Mosquitto, tmp_path: Path, *extra: str) -> AsyncIterator[str]:
    """``tableside floor run --http`` with bob as its user; yields the web view's address once
    it serves. What the floor logs meanwhile is read, so a full pipe never stops it."""
    floor = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tableside", "floor", "run", "--broker", mosquitto.url,
        "--store", f"sqlite:///{tmp_path}/floor.db", "--http", f"127.0.0.1:{free_port()}",
        "--users", _add_bob(tmp_path), *extra, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert floor.stderr is not None
    try:
        async with asyncio.timeout(30):
            while not (serving := re.search(r"web view at (\S+)/", line := (
                    await floor.stderr.readline()).decode())):  # fmt: skip
                assert line, "the floor ended before serving its web view"
        drain = asyncio.create_task(floor.stderr.read(), name="drain")
        try:
            yield serving.group(1)
        finally:
            floor.terminate()
            await floor.wait()
            await drain
    finally:
        if floor.returncode is None:
            floor.kill()
            await floor.wait()


def test_users_are_added_listed_and_refused_clearly(tmp_path: Path) -> None:
    users = str(tmp_path / "users.json")
    added = _tableside("floor", "user", "--users", users, "add", "bob", "--role", "floorperson",
                       "--password-stdin", stdin=PASSWORD + "\n")  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert PASSWORD not in Path(users).read_text()
    listed = _tableside("floor", "user", "--users", users, "list")
    assert listed.stdout.split() == ["bob", "floorperson"]
    wrong = _tableside("floor", "user", "--users", users, "add", "cy", "--role", "croupier",
                       "--password-stdin", stdin=PASSWORD + "\n")  # fmt: skip
    assert wrong.returncode == 2 and "role 'croupier'" in wrong.stderr
    short = _tableside("floor", "user", "--users", users, "add", "cy", "--role", "dealer",
                       "--password-stdin", stdin="short\n")  # fmt: skip
    assert short.returncode == 2 and "shorter" in short.stderr
    empty = _tableside("floor", "run", "--store", f"sqlite:///{tmp_path}/f.db", "--http",
                       "127.0.0.1:0", "--users", str(tmp_path / "none.json"))  # fmt: skip
    assert empty.returncode == 2 and "needs users" in empty.stderr
    login = _tableside("floor", "run", "--store", f"sqlite:///{tmp_path}/f.db", "--http",
                       "127.0.0.1:0", "--users", users, "--role-login", "croupier=x")  # fmt: skip
    assert login.returncode == 2 and "--role-login 'croupier=x'" in login.stderr


async def test_floor_run_serves_its_web_view_behind_a_login(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    async with _web_floor(mosquitto, tmp_path) as base:
        assert base.startswith("http://127.0.0.1:")
        # retained, as a table's status is: the floor gets it whenever it subscribes; chained
        # (the view shows only what the store vouches for: a record its chain walk linked)
        nine = PeerTable(table="t-9")
        async with aiomqtt.Client(
            "127.0.0.1", mosquitto.port, protocol=aiomqtt.ProtocolVersion.V5
        ) as client:
            status = nine.message("status", retain=True, status="online", version="x")
            await nine.publish(client, status)
        # unsafe: the jar keeps cookies from an IP address (the server's, 127.0.0.1)
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            async with http.get(base + "/api/floor") as refused:
                assert refused.status == 401
            form = {"username": "bob", "password": PASSWORD}
            async with http.post(base + "/login", data=form, allow_redirects=False) as logged:
                assert logged.status == 303
            async with asyncio.timeout(20):
                while True:
                    async with http.get(base + "/api/floor") as answer:
                        tables = (await answer.json())["tables"]
                    if tables and tables[0]["completeness"]:
                        break
                    await asyncio.sleep(0.1)
            # the floor is subscribed: a table whose checkpoint is signed by a key not enrolled
            peer = PeerTable(table="t-8")
            async with aiomqtt.Client(
                "127.0.0.1", mosquitto.port, protocol=aiomqtt.ProtocolVersion.V5
            ) as client:
                for record in (peer.event(), peer.checkpoint(), peer.event()):
                    await peer.publish(client, record)
            async with asyncio.timeout(20):  # t-8: flagged, and each record since says so
                while True:
                    async with http.get(base + "/api/table/t-8/export") as answer:
                        lines = [json.loads(x) for x in (await answer.text()).splitlines()]
                    async with http.get(base + "/api/floor") as answer:
                        tiles = {t["table"]: t for t in (await answer.json())["tables"]}
                    shown = tiles.get("t-8", {}).get("completeness", {})
                    if len(lines) == 3 and shown.get("verified_upto") == 2:
                        break
                    await asyncio.sleep(0.1)
        said = [line.get("flagged", "") for line in lines]
        assert said[0] == "" and said[1] == said[2] and "no key is enrolled" in said[1]
        assert "no key is enrolled" in tiles["t-8"]["completeness"]["flagged"]
        assert tiles["t-9"]["status"] == "online"
        # its chain holds, but no key is enrolled for it: the tile says it is unverified
        assert tiles["t-9"]["completeness"]["verified"] is True and tiles["t-9"]["unverified"]


def _self_signed(where: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, as a site's own CA would issue one."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pit terminal test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(
            [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    cert_path, key_path = where / "web.pem", where / "web.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))  # fmt: skip
    return cert_path, key_path


def test_tls_options_are_refused_clearly(tmp_path: Path) -> None:
    users = _add_bob(tmp_path)
    cert, key = _self_signed(tmp_path)
    run = ("floor", "run", "--store", f"sqlite:///{tmp_path}/f.db", "--users", users)
    no_key = _tableside(*run, "--http", "127.0.0.1:0", "--tls-cert", str(cert))
    assert no_key.returncode == 2 and "--tls-cert needs --tls-key" in no_key.stderr
    no_http = _tableside(*run, "--tls-cert", str(cert), "--tls-key", str(key))
    assert no_http.returncode == 2 and "give --http" in no_http.stderr
    swapped = _tableside(*run, "--http", "127.0.0.1:0", "--tls-cert", str(key),
                         "--tls-key", str(cert))  # fmt: skip
    assert swapped.returncode == 2 and f"--tls-cert {key}" in swapped.stderr
    assert "Traceback" not in swapped.stderr
    missing = _tableside(*run, "--http", "127.0.0.1:0", "--tls-cert", str(tmp_path / "none.pem"),
                         "--tls-key", str(key))  # fmt: skip
    assert missing.returncode == 2 and "No such file" in missing.stderr


async def test_over_tls_the_session_cookie_is_secure_and_plain_http_gets_nothing(
    mosquitto: Mosquitto, tmp_path: Path
) -> None:
    import ssl

    cert, key = _self_signed(tmp_path)
    tls = ("--tls-cert", str(cert), "--tls-key", str(key))
    async with _web_floor(mosquitto, tmp_path, *tls) as base:
        assert base.startswith("https://127.0.0.1:")
        trusted = ssl.create_default_context(cafile=str(cert))
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            form = {"username": "bob", "password": PASSWORD}
            async with http.post(f"{base}/login", data=form, ssl=trusted,
                                 allow_redirects=False) as logged:  # fmt: skip
                assert logged.status == 303
                cookies = logged.headers.getall("Set-Cookie")
            assert cookies and all("Secure" in c and "HttpOnly" in c for c in cookies)
            async with http.get(f"{base}/api/floor", ssl=trusted) as floor_api:
                assert floor_api.status == 200
            # the same port spoken to in plain HTTP answers nothing a browser would show
            plain_base = base.replace("https://", "http://", 1)
            try:
                async with http.get(f"{plain_base}/api/floor") as plain:
                    assert plain.status == 400 and "tables" not in await plain.text()
            except aiohttp.ClientError:
                pass
