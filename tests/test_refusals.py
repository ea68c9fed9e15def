"""A refusal is its own type, apart from a failure of the table (tableside/errors.py): a person's
request the table does not take is answered "refused" with the reason; a failure while the table
carries a request out is answered "internal_error", logged with its traceback, and leaves the
table as it was, with nothing of the command journaled (daemon/runtime.py ``person``): a command
is journaled or not applied. The journal that fails here is a real one, closed under the table
in the middle of a command; a restart on it finds the table as the journal holds it."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import pkgutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

import tableside
from tableside.daemon.app import TableDaemon
from tableside.daemon.config import load_config
from tableside.daemon.journal import JournalError
from tableside.errors import Refused, TablesideError
from tableside.rules.commands import StubCount
from tests.conftest import shipped_config

ROOT = Path(__file__).parents[1]


def _daemon(tmp_path: Path) -> TableDaemon:
    """A table daemon on its journal, with no broker and no device: its runtime and router."""
    config = tmp_path / "cs.toml"
    if not config.exists():
        config.write_text(shipped_config(tmp_path), encoding="utf-8")
    daemon = TableDaemon(load_config(config, use_env=False))
    daemon.journal.start()
    return daemon


async def _results(daemon: TableDaemon, first: int) -> list[dict[str, Any]]:
    """Every command_result journaled from ``first`` on, as published."""
    newest = daemon.journal.head[0]
    if newest < first:
        return []
    await daemon.journal.wait_durable(newest)
    records = await daemon.journal.read_from(first, newest - first + 1)
    topic = daemon.publisher.topics.command_result
    return [json.loads(r.payload) for r in records if r.topic == topic]


def _ask(daemon: TableDaemon, role: str, command: str, **args: object) -> None:
    topic = f"{daemon.publisher.topics.base}/command/{role}"
    body = {"command": command, "device": "table", "args": args, "request_id": command}
    daemon.router.route(topic, json.dumps(body).encode())


async def test_a_refusal_is_answered_refused_with_its_reason(tmp_path: Path) -> None:
    daemon = _daemon(tmp_path)
    try:
        first, before = daemon.journal.next_seq, daemon.runtime.state
        _ask(daemon, "floorperson", "acknowledge_ruling", ruling=99, by="ann")
        (answer,) = await _results(daemon, first)
        assert answer["ok"] is False and answer["status"] == "refused"
        assert answer["error"].startswith("acknowledge_ruling: no ruling 99 at this table")
        _ask(daemon, "floorperson", "open_table")
        assert (await _results(daemon, first))[-1]["status"] == "done"
        assert daemon.runtime.state != before
    finally:
        daemon.journal.close()


async def test_a_failure_of_the_table_is_an_internal_error_and_moves_nothing(
    tmp_path: Path,
) -> None:
    """A fault inside the table while it carries a command out (here the hook it calls when
    the rulings move, in the middle of the command, after its table state and its ruling were
    made) is never answered "refused": the answer is an internal error, logged with its
    traceback, and the table and its journal are as they were before the command."""
    daemon = _daemon(tmp_path)
    try:
        _ask(daemon, "floorperson", "open_table")
        first, before = daemon.journal.next_seq, daemon.runtime.state
        rulings, by_clause = daemon.runtime.rulings, dict(daemon.runtime.rulings_by_clause)

        def broken() -> None:
            raise RuntimeError("the escalation timer is gone")

        daemon.runtime.on_rulings_moved = broken
        with structlog.testing.capture_logs() as logs:
            _ask(daemon, "dealer", "stub_count", count=51)  # a wrong count: a ruling
        (answer,) = await _results(daemon, first)
        assert answer["ok"] is False and answer["status"] == "internal_error", answer
        assert answer["error"] == "internal error: RuntimeError('the escalation timer is gone')"
        failed = [e for e in logs if e["event"] == "command_failed"]
        assert failed and isinstance(failed[0]["exc_info"], RuntimeError), logs
        assert not [e for e in logs if e["event"] == "command_refused"]
        assert daemon.runtime.state == before
        assert (daemon.runtime.rulings, dict(daemon.runtime.rulings_by_clause)) == (
            rulings, by_clause)  # fmt: skip
        # the command's records were taken back: the answer is the next record after it
        assert answer["seq"] == first and daemon.journal.next_seq == first + 1
        assert daemon.router.commands_by_result["stub_count", "internal_error"] == 1
    finally:
        daemon.journal.close()


async def test_a_journal_that_fails_mid_command_leaves_the_table_as_journaled(
    tmp_path: Path,
) -> None:
    """The journal closes under the table in the middle of a command (after the command's
    table state and ruling were made, before its ruling joined the table): the command fails
    with the journal's error, the table has not moved, nothing of it was journaled, and a
    restart on the journal finds the table as it was before the command."""
    daemon = _daemon(tmp_path)
    try:
        _ask(daemon, "floorperson", "open_table")
        await daemon.journal.wait_durable(daemon.journal.head[0])
        first, before = daemon.journal.next_seq, daemon.runtime.state
        daemon.runtime.on_rulings_moved = daemon.journal.close
        with pytest.raises(JournalError, match="journal not started"):
            daemon.runtime.person("stub_count", StubCount(count=51))
        assert daemon.runtime.state == before, "not moved: the journal did not take it"
        assert daemon.runtime.rulings == 0
    finally:
        daemon.journal.close()
    again = _daemon(tmp_path)
    try:
        assert again.journal.next_seq == first, "nothing of the command was journaled"
        assert again.runtime.state.to_dict() == before.to_dict()
        assert again.runtime.state.phase is before.phase
    finally:
        again.journal.close()


# -- guards -------------------------------------------------------------------------------------


def _validators(tree: ast.Module) -> set[str]:
    """Functions pydantic calls while it parses (what they raise becomes a ValidationError,
    which ``Command.parse`` turns into ``Refused``): decorated validators, those named in an
    ``AfterValidator``/``BeforeValidator``, and what they call."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for d in node.decorator_list:
                call = d.func if isinstance(d, ast.Call) else d
                if isinstance(call, ast.Name) and call.id.endswith("_validator"):
                    names.add(node.name)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id.endswith("Validator")):  # fmt: skip
            names.update(a.id for a in node.args if isinstance(a, ast.Name))
    # and the helpers they call (``_hidden``, for a note's and a name's characters)
    bodies = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name in names]
    return names | {c.func.id for b in bodies for c in ast.walk(b)
                    if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}  # fmt: skip


def _raises_value_error(tree: ast.Module, allowed: set[str]) -> Iterator[str]:
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef) or node.name in allowed:
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.Raise) and inner.exc is not None:
                exc = inner.exc.func if isinstance(inner.exc, ast.Call) else inner.exc
                if isinstance(exc, ast.Name) and exc.id == "ValueError":
                    yield f"{node.name}:{inner.lineno}"


@pytest.mark.parametrize("name", ["commands.py", "rulings.py"])
def test_no_command_handler_raises_a_bare_value_error(name: str) -> None:
    """A table command's handler (rules/commands.py) and the rulings' lifecycle it calls
    (rules/rulings.py) refuse with ``Refused``; a ValueError is only a pydantic validator's,
    which ``Command.parse`` answers as a refusal of the arguments."""
    tree = ast.parse((ROOT / "rules" / name).read_text(encoding="utf-8"))
    assert list(_raises_value_error(tree, _validators(tree))) == []


def _product_modules() -> Iterator[str]:
    for info in pkgutil.walk_packages(tableside.__path__, "tableside."):
        if ".simulators.scenarios" not in info.name and info.name != "tableside.__main__":
            yield info.name


def test_every_exception_of_ours_is_under_one_root() -> None:
    """tableside/errors.py: one root, ``TablesideError``, for every exception class the product
    declares (each in its family: refusal, wire, journal, config, store)."""
    outside = []
    for name in _product_modules():
        try:
            module = importlib.import_module(name)
        except ImportError as exc:  # an optional extra (the floor's psycopg) not installed
            pytest.skip(f"{name}: {exc}") if "tableside" in str(exc) else None
            continue
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if (cls.__module__ == name and issubclass(cls, BaseException)
                    and not issubclass(cls, TablesideError)):  # fmt: skip
                outside.append(f"{name}.{cls.__name__}")
    assert outside == []


def test_a_refusal_is_no_value_error() -> None:
    """``except ValueError`` (a parser's, a library's) never swallows a refusal, nor a refusal's
    handler a bug's ValueError."""
    assert not issubclass(Refused, ValueError)
    assert not issubclass(ValueError, Refused)
