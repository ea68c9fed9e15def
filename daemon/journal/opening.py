"""Opening the live journal: created when new, else checked (SQLite's check, the whole chain,
the mark) and refused with the way to recover when it fails; a journal from before the mark
file gets one (docs/journal.md, "A journal that fails its checks")."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import structlog

from tableside.daemon.journal.file import GENESIS, JournalCorrupt, connect_db, read_meta
from tableside.daemon.journal.mark import Mark, create_journal, mark_problems, read_mark
from tableside.daemon.journal.verify import verify_chain

log = structlog.get_logger("tableside.journal")


@dataclass(frozen=True, slots=True)
class Opened:
    """A journal that passed its checks: its writer's connection, and where it ends."""

    conn: sqlite3.Connection
    last_seq: int
    last_hash: bytes
    acked: int
    newest_ts: float
    #: ``tableside journal recover`` made it and nothing has been written since
    fresh_from_recovery: bool


def open_checked(path: Path, table: str, mark: Mark) -> Opened:
    """Create or check the journal at ``path``. One that fails its checks raises JournalCorrupt
    with the way to recover; it is never silently replaced."""
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists() or path.stat().st_size == 0
    if new and mark.path.exists():
        # The journal went, its mark stayed: starting empty would number from 0 again.
        raise corrupt(path, f"the journal is missing but its mark file {mark.path} says "
                            "records were committed", lost=True)  # fmt: skip
    try:
        conn = connect_db(path)
        if new:
            _initialise(conn, path, table)
        summary, problems = verify_chain(conn, table)
        if not problems:
            problems = mark_problems(path, conn, summary, read_mark(path), live=True)
        if not problems and read_meta(conn).get("mark") is None:
            _adopt(conn, mark, summary["last_seq"], bytes.fromhex(summary["last_hash"]))
    except sqlite3.DatabaseError as exc:
        raise corrupt(path, f"not a readable journal ({exc})") from exc
    if problems:
        conn.close()
        listed = "; ".join(str(p) for p in problems[:3])
        lost = any(p.what.startswith(("lost", "its mark", "it is a backup")) for p in problems)
        raise corrupt(path, f"{len(problems)} problem(s): {listed}", lost=lost)
    opened = Opened(
        conn,
        last_seq=summary["last_seq"],
        last_hash=bytes.fromhex(summary["last_hash"]),
        acked=summary["acked"],
        newest_ts=summary["newest_ts"],
        fresh_from_recovery=read_meta(conn).get("recovered_after") == str(summary["last_seq"]),
    )
    log.info("journal_opened", path=str(path), next_seq=opened.last_seq + 1,
             unsent=opened.last_seq - opened.acked, records=summary["records"])  # fmt: skip
    return opened


def _initialise(conn: sqlite3.Connection, path: Path, table: str) -> None:
    # A table that numbered its messages before the journal existed (seq.json) carries on
    # after the last number it may have used, so no subscriber sees a number twice.
    start = 0
    legacy = path.parent / "seq.json"
    with contextlib.suppress(FileNotFoundError, ValueError, KeyError, TypeError):
        state = json.loads(legacy.read_text(encoding="utf-8"))
        start = int(state["last"] if state.get("clean") else state["reserved"]) + 1
    create_journal(conn, path, table, start - 1, GENESIS)


def _adopt(conn: sqlite3.Connection, mark: Mark, last_seq: int, last_hash: bytes) -> None:
    """A journal from before the mark file: it gets one, from what it holds now."""
    mark.create(last_seq, last_hash)
    conn.execute("INSERT OR REPLACE INTO meta VALUES ('mark', '1')")
    conn.execute("PRAGMA wal_checkpoint(FULL)")
    log.info("journal_mark_created", path=str(mark.path), seq=last_seq)


def corrupt(path: Path, detail: str, *, lost: bool = False) -> JournalCorrupt:
    """The refusal, saying how to recover (``lost``: records the mark saw are gone)."""
    wal = (
        f"If the journal's -wal file ({path.name}-wal) or the journal itself still "
        "exists somewhere (a copy taken before, or left behind by a move), put it back "
        "beside the journal and start again. Otherwise: "
        if lost
        else ""
    )
    return JournalCorrupt(
        f"journal {path} fails its checks: {detail}. The daemon will not start on it, "
        "since sequence numbers and unsent messages would be lost. To recover: stop the "
        f"daemon, run `tableside journal verify {path}` to see where it breaks, keep "
        f"a copy for the auditors. {wal}`tableside journal recover {path}` sets it "
        "aside and starts a new journal that carries on after the highest seq it or its "
        "mark file holds, restating the table as it was."
    )
