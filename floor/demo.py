"""The floor beside ``tableside demo``: the demo's table stored, verified and shown in a browser.

Started by the demo (``tableside demo``, ``./dev.sh demo``) when its broker speaks MQTT v5 (the
chain on the wire needs it): a SQLite store in the demo's temporary folder, the demo table's key
enrolled (its checkpoints then count as signed), and the web view with one user, ``demo``, a
floorperson, whose password is made for this run and printed with the URL.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Literal, Protocol, TextIO

from tableside.floor.service import Floor
from tableside.floor.store import open_store
from tableside.floor.web.app import WebApp, serving
from tableside.floor.web.commander import Commander, MqttSender, RoleLogin
from tableside.floor.web.users import Users
from tableside.floor.web.view import FloorView
from tableside.rules.commands import Role
from tableside.wire import proof

__all__ = ["floor_beside"]

PREFIX = "tableside"


class DemoTable(Protocol):
    """What the floor needs to know of the demo's table (daemon/demo.py gives it): the floor
    imports nothing of the daemon."""

    @property
    def table(self) -> str: ...
    @property
    def broker_url(self) -> str: ...
    @property
    def mqtt_version(self) -> Literal["5", "3.1.1"]: ...
    @property
    def state_dir(self) -> Path: ...
    @property
    def out(self) -> TextIO: ...


@contextlib.asynccontextmanager
async def _serving_here_or_anywhere(web_app: WebApp, host: str, port: int) -> AsyncIterator[str]:
    """The web view on ``port``, or on a free one when that is taken (checked by binding it,
    not before: two demos starting at once both found 8080 free)."""
    async with contextlib.AsyncExitStack() as stack:
        try:
            base = await stack.enter_async_context(serving(web_app, host, port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            base = await stack.enter_async_context(serving(web_app, host, 0))
        yield base


def floor_beside(
    host: str = "127.0.0.1", port: int = 8080
) -> Callable[[DemoTable], AbstractAsyncContextManager[None]]:
    """The demo's ``beside``: the floor and its web view on ``host:port`` (another free port
    when that one is taken)."""

    @contextlib.asynccontextmanager
    async def run(demo: DemoTable) -> AsyncIterator[None]:
        if demo.mqtt_version != "5":
            print("-- floor: not started: the embedded broker speaks MQTT 3.1.1, and the floor "
                  "checks the chain MQTT v5 carries (install mosquitto)",
                  file=demo.out)  # fmt: skip
            yield
            return
        floor_dir = demo.state_dir / "floor"
        floor_dir.mkdir()
        password = secrets.token_urlsafe(9)
        users = Users(floor_dir / "users.json")
        users.set("demo", Role.FLOORPERSON.value, password)
        db = floor_dir / "floor.db"
        async with open_store(f"sqlite:///{db}") as store:
            key = proof.load_or_create_key(demo.state_dir / demo.table)
            await store.enrol(demo.table, proof.public_key_hex(key))
            logins = {role.value: RoleLogin(f"floor-{role.value}") for role in Role}
            send = MqttSender(demo.broker_url, PREFIX, logins)
            web_app = WebApp(FloorView(PREFIX), users, Commander(send), store=store)
            floor = Floor(
                store, demo.broker_url, prefix=PREFIX, session_expiry=0,
                client_id=f"tableside-demo-floor-{demo.table}", on_stored=web_app.live.stored,
            )  # fmt: skip
            async with _serving_here_or_anywhere(web_app, host, port) as base:
                print(f"-- floor: every message stored and verified in {db}; live at {base}/ "
                      f"(log in as demo, password {password})", file=demo.out)  # fmt: skip
                task = asyncio.create_task(floor.run(), name="demo.floor")
                try:
                    yield
                finally:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                    await send.aclose()

    return run
