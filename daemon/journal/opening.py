"""Opening the live journal: created when new, else checked (SQLite's check, the whole chain,
its log) and refused with the way to recover when it fails; what its log holds past SQLite's end
(a lost ``-wal``) rolled forward; then everything put into SQLite's main file and the log
started anew. A journal from before the log (with a mark file, or before that) gets one
(docs/journal.md, "A journal that fails its checks", "Lost records are found")."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from tableside.daemon.journal.file import (
    GENESIS,
    LATEST_WITHOUT_ROWID,
    JournalCorrupt,
    JournalError,
    Record,
    connect_db,
    read_meta,
    record_hash,
)
from tableside.daemon.journal.mark import (
    Found,
    create_journal,
    legacy_mark_path,
    log_problems,
    never_numbered,
)
from tableside.daemon.journal.redo import Contents, Header, RedoLog, read_log
from tableside.daemon.journal.verify import verify_chain

logger = structlog.get_logger("tableside.journal")


@dataclass(frozen=True, slots=True)
class Opened:
    """A journal that passed its checks: its writer's connection, and where it ends."""

    conn: sqlite3.Connection
    last_seq: int
    last_hash: bytes
    acked: int
    #: the last run's sent mark, kept by its clean close (None: it did not close cleanly)
    sent: int | None
    newest_ts: float
    #: ``tableside journal recover`` made it and nothing has been written since
    fresh_from_recovery: bool


def open_checked(path: Path, table: str, log: RedoLog) -> Opened:
    """Create or check the journal at ``path``, roll forward what its log holds past SQLite's
    end, and start the log anew (``log`` is then open for the writer). One that fails its
    checks raises JournalCorrupt with the way to recover; it is never silently replaced."""
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists() or path.stat().st_size == 0
    left = [p for p in (log.path, legacy_mark_path(path)) if p.exists()]
    if new and left:
        if never_numbered(path, read_log(path)):
            raise cut_short(path, "missing or empty")
        # The journal went, its log stayed: starting empty would number from 0 again.
        raise corrupt(path, f"the journal is missing but its log file {left[0]} says "
                            "records were committed", lost=True)  # fmt: skip
    try:
        conn = connect_db(path)
        if new:
            _initialise(conn, path, table)
        found = read_log(path)
        summary, problems = verify_chain(conn, table)
        missing: list[Record] = []
        if not problems:
            problems, missing = log_problems(path, conn, summary, found, live=True)
        if not problems and missing:
            summary = _roll_forward(conn, path, missing, summary)
        sent = read_meta(conn).get("sent")
        if not problems:
            # read once: a crash of this run must not find the last run's mark
            conn.execute("DELETE FROM meta WHERE key = 'sent'")
            _latest_in_one_tree(conn, path)
            _start_log(conn, path, log, table, summary, found)
    except sqlite3.DatabaseError as exc:
        if "no such table" in str(exc) and never_numbered(path, read_log(path)):
            raise cut_short(path, "without its tables") from exc
        raise corrupt(path, f"not a readable journal ({exc})") from exc
    if problems:
        conn.close()
        listed = "; ".join(str(p) for p in problems[:3])
        lost = any(p.what.startswith(("lost", "its log", "its mark", "it is a backup"))
                   for p in problems)  # fmt: skip
        raise corrupt(path, f"{len(problems)} problem(s): {listed}", lost=lost)
    opened = Opened(
        conn,
        last_seq=summary["last_seq"],
        last_hash=bytes.fromhex(summary["last_hash"]),
        acked=summary["acked"],
        sent=None if sent is None else int(sent),
        newest_ts=summary["newest_ts"],
        fresh_from_recovery=read_meta(conn).get("recovered_after") == str(summary["last_seq"]),
    )
    logger.info("journal_opened", path=str(path), next_seq=opened.last_seq + 1,
             unsent=opened.last_seq - opened.acked, records=summary["records"])  # fmt: skip
    return opened


def _roll_forward(
    conn: sqlite3.Connection, path: Path, missing: list[Record], summary: dict[str, Any]
) -> dict[str, Any]:
    """What the log holds past SQLite's end, into SQLite: each record's hash checked and its
    link onto the one before (the first onto SQLite's last), with its ``latest`` row."""
    prev = bytes.fromhex(summary["last_hash"])
    for r in missing:
        if r.prev_hash != prev or record_hash(r.prev_hash, r.seq, r.ts, r.topic, r.retain,
                                              r.payload) != r.hash:  # fmt: skip
            raise corrupt(path, f"seq {r.seq} of its log does not chain onto the journal")
        prev = r.hash
    latest = {r.key: r for r in missing if r.key is not None}
    conn.execute("BEGIN")
    conn.executemany(
        "INSERT INTO records VALUES (?, ?, ?, ?, ?, ?, ?)",
        [(r.seq, r.ts, r.topic, r.retain, r.payload, r.prev_hash, r.hash) for r in missing],
    )
    conn.executemany("INSERT OR REPLACE INTO latest VALUES (?, ?, ?)",
                     [(k, r.seq, r.payload) for k, r in latest.items()])  # fmt: skip
    conn.execute("COMMIT")
    logger.warning("journal_rolled_forward", path=str(path), first_seq=missing[0].seq,
                   last_seq=missing[-1].seq, records=len(missing))  # fmt: skip
    return {**summary, "last_seq": missing[-1].seq, "last_hash": prev.hex(),
            "records": summary["records"] + len(missing),
            "newest_ts": max(summary["newest_ts"], missing[-1].ts)}  # fmt: skip


def _latest_in_one_tree(conn: sqlite3.Connection, path: Path) -> None:
    """A journal made before ``latest`` was a WITHOUT ROWID table gets it so, in one
    transaction (a few rows: one per device, event kind and retained topic)."""
    (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'latest'").fetchone()
    if "WITHOUT ROWID" in sql.upper():
        return
    conn.executescript(f"BEGIN; {LATEST_WITHOUT_ROWID} COMMIT;")
    logger.info("journal_latest_rebuilt", path=str(path))


def _start_log(
    conn: sqlite3.Connection,
    path: Path,
    log: RedoLog,
    table: str,
    summary: dict[str, Any],
    found: Found,
) -> None:
    """Everything into SQLite's main file, synced; then the log starts anew after the last
    record (it need hold nothing older). A journal from before the log gets one here: checked
    against its mark file, which then goes."""
    busy, _, _ = conn.execute("PRAGMA wal_checkpoint(FULL)").fetchone()
    if busy:  # a reader of an old snapshot for five seconds: another process has it open
        raise JournalError(f"journal {path}: another process keeps it open (its checkpoint "
                           "could not complete); stop it and start again")  # fmt: skip
    generation = found.header.generation + 1 if isinstance(found, Contents) else 0
    last = Header(table, generation, summary["last_seq"], bytes.fromhex(summary["last_hash"]))
    log.create(last)
    meta = read_meta(conn)
    if meta.get("log") != "1" or "mark" in meta:
        conn.execute("BEGIN")
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('log', '1')")
        conn.execute("DELETE FROM meta WHERE key = 'mark'")
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(FULL)")
        logger.info("journal_log_created", path=str(log.path), seq=last.base_seq)
    # one truth: a mark file left from before the log goes once the journal says it keeps one
    with contextlib.suppress(FileNotFoundError):
        legacy_mark_path(path).unlink()


def _initialise(conn: sqlite3.Connection, path: Path, table: str) -> None:
    # A table that numbered its messages before the journal existed (seq.json) carries on
    # after the last number it may have used, so no subscriber sees a number twice.
    start = 0
    legacy = path.parent / "seq.json"
    with contextlib.suppress(FileNotFoundError, ValueError, KeyError, TypeError):
        state = json.loads(legacy.read_text(encoding="utf-8"))
        start = int(state["last"] if state.get("clean") else state["reserved"]) + 1
    create_journal(conn, path, table, start - 1, GENESIS)


def cut_short(path: Path, how: str) -> JournalCorrupt:
    """The refusal of a table's very first start cut short: nothing to lose, but the daemon
    does not decide that on its own (docs/journal.md)."""
    return JournalCorrupt(
        f"journal {path} is {how}, and its log file says nothing was ever numbered (it started "
        "after seq -1 and holds no record): a table's first start cut short, by a power cut "
        "before the journal reached the disk. Nothing is lost. The daemon will not start on "
        f"it by itself: `tableside journal recover {path}` starts a new journal at seq 0."
    )


def corrupt(path: Path, detail: str, *, lost: bool = False) -> JournalCorrupt:
    """The refusal, saying how to recover (``lost``: records its log saw are gone)."""
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
        "log file holds, restating the table as it was."
    )
