"""Dependencies point one way: drivers know nothing of the daemon; codecs, rules and the table
runtime do no I/O."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


def imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def files(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


@pytest.mark.parametrize("path", files("drivers"), ids=lambda p: p.name)
def test_drivers_know_nothing_above_them(path: Path) -> None:
    above = {"tableside.daemon", "tableside.rules", "tableside.simulators", "tableside.cli"}
    bad = {m for m in imports(path) if any(m == a or m.startswith(a + ".") for a in above)}
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


@pytest.mark.parametrize("path", files("rules"), ids=lambda p: p.name)
def test_the_rules_take_the_drivers_event_types_only(path: Path) -> None:
    """Events stay typed to the rules (rules/table.py matches the drivers' event classes), but
    the rules import no driver: only the event modules, drivers/catalog.py, the device
    commands' declarations and the values the events carry (drivers/cards.py: a card, a rank
    however it is spelt; drivers/shoe/plan.py: a stack target, a stack; drivers/named.py)."""
    allowed = (
        "tableside.drivers.catalog",
        "tableside.drivers.events",
        "tableside.drivers.commands",
        "tableside.drivers.cards",
        "tableside.drivers.named",
        "tableside.drivers.shoe.plan",
    )
    bad = {m for m in imports(path) if m.startswith("tableside.drivers")
           and m not in allowed and not m.endswith(".events")}  # fmt: skip
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


SANS_IO = [
    ROOT / "drivers" / "crc.py",
    ROOT / "drivers" / "framing.py",
    ROOT / "drivers" / "wire.py",
    ROOT / "drivers" / "cards.py",
    ROOT / "drivers" / "messages.py",
    ROOT / "drivers" / "common.py",
    ROOT / "drivers" / "layout.py",
    ROOT / "drivers" / "shoe" / "protocol.py",
    ROOT / "drivers" / "shuffler" / "protocol.py",
    ROOT / "drivers" / "card_reader" / "protocol.py",
    ROOT / "drivers" / "progressive" / "protocol.py",
    ROOT / "drivers" / "cctalk" / "book.py",
    *files("rules"),
    ROOT / "daemon" / "runtime.py",
]


@pytest.mark.parametrize("path", SANS_IO, ids=lambda p: str(p.relative_to(ROOT)))
def test_codecs_and_rules_do_no_io(path: Path) -> None:
    io_modules = {"asyncio", "socket", "serial", "serial_asyncio_fast", "aiomqtt", "os", "usb"}
    bad = {m for m in imports(path) if m.split(".")[0] in io_modules}
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


@pytest.mark.parametrize("path", files("simulators"), ids=lambda p: p.name)
def test_simulators_do_not_use_the_daemon(path: Path) -> None:
    bad = {m for m in imports(path) if m.startswith(("tableside.daemon", "tableside.rules"))}
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


@pytest.mark.parametrize(
    "path",
    [
        ROOT / "floor" / "judge.py",
        ROOT / "floor" / "verify.py",
        ROOT / "floor" / "web" / "sessions.py",
    ],
    ids=lambda p: p.name,
)
def test_the_floors_judgement_does_no_io(path: Path) -> None:
    io_modules = {"asyncio", "socket", "aiomqtt", "aiohttp", "sqlite3", "psycopg", "os"}
    bad = {m for m in imports(path) if m.split(".")[0] in io_modules}
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


@pytest.mark.parametrize(
    "path",
    [*files("daemon"), *files("drivers"), *files("rules"), *files("simulators")],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_the_table_knows_nothing_of_the_floor(path: Path) -> None:
    bad = {m for m in imports(path) if m.startswith("tableside.floor")}
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def imported_at_start(package: str, then: str = "") -> list[str]:
    """The modules of ``package`` a fresh interpreter holds once the daemon and the command
    are imported (stderr not a terminal); ``then``: code run after, in the same interpreter."""
    code = (
        "import sys, tableside.daemon.app, tableside.cli\n"
        f"print(*sorted(m for m in sys.modules if m.split('.')[0] == {package!r}))\n{then}"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, stdin=subprocess.DEVNULL)  # fmt: skip
    return done.stdout.split()


def test_the_daemon_does_not_import_rich_when_not_on_a_terminal() -> None:
    """structlog.dev would pull rich in (34 ms, a few MiB) where the demo extra installed it;
    a daemon whose stderr is not a terminal never uses it. rich stays importable afterwards."""
    then = "import importlib.util\nif importlib.util.find_spec('rich'):\n    import rich.console\n"
    assert imported_at_start("rich", then) == []


def test_a_daemon_without_metrics_does_not_import_prometheus() -> None:
    """prometheus_client (and the http.server, wsgiref and urllib it brings) is imported by a
    table that serves ``[metrics]``, when it starts serving: not by every daemon at start."""
    assert imported_at_start("prometheus_client") == []


def test_the_runtime_holds_no_live_driver() -> None:
    """The table runtime knows each device by its class and commands; the daemon holds the
    drivers that carry commands out (daemon/app.py, routing.py, restore.py)."""
    assert "tableside.drivers.base" not in imports(ROOT / "daemon" / "runtime.py")
