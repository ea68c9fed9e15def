"""``tableside floor user`` and ``tableside floor run --http`` as processes: users are added
with a hashed password, a web view without users is refused, and one with users serves the
floor, behind a login, from the store the floor fills."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path

import aiohttp
import aiomqtt

from tableside.daemon.broker import free_port

from .conftest import Mosquitto
from .floorpeer import PeerTable

PASSWORD = "correct horse battery"


def _tableside(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tableside", *args], input=stdin,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


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
    users = str(tmp_path / "users.json")
    _tableside("floor", "user", "--users", users, "add", "bob", "--role", "floorperson",
               "--password-stdin", stdin=PASSWORD + "\n")  # fmt: skip
    port = free_port()
    floor = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tableside", "floor", "run", "--broker", mosquitto.url,
        "--store", f"sqlite:///{tmp_path}/floor.db", "--http", f"127.0.0.1:{port}",
        "--users", users, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert floor.stderr is not None
    try:
        async with asyncio.timeout(30):
            while not re.search(r"web view at http://", (await floor.stderr.readline()).decode()):
                pass
        status = {
            "table": "t-9",
            "ts": "2026-12-01T08:00:00.000Z",
            "seq": 0,
            "republished": False,
            "redelivered": False,
            "status": "online",
            "version": "x",
        }
        # what the floor logs from here on is read, so a full pipe never stops it
        drain = asyncio.create_task(floor.stderr.read(), name="drain")
        # retained, as a table's status is: the floor gets it whenever it subscribes
        async with aiomqtt.Client("127.0.0.1", mosquitto.port) as client:
            await client.publish("tableside/t-9/status", json.dumps(status), qos=1, retain=True)
        base = f"http://127.0.0.1:{port}"
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
        # stored, but it carried no chain entry: the tile says it is not verified
        assert tiles["t-9"]["completeness"]["verified"] is False
    finally:
        floor.terminate()
        await floor.wait()
    await drain
