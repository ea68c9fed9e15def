"""The journal's file: its schema, a record and its hash, the errors, and opening and creating
it (the parts below share these; docs/journal.md)."""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from tableside.errors import TablesideError

# the chain hash is the wire contract's (a receiver recomputes it), declared there once
from tableside.wire.proof import record_hash as record_hash

FORMAT = "1"


GENESIS = b"\x00" * 32


SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    seq INTEGER PRIMARY KEY,
    ts REAL NOT NULL,
    topic TEXT NOT NULL,
    retain INTEGER NOT NULL,
    payload BLOB NOT NULL,
    prev_hash BLOB NOT NULL,
    hash BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS latest (
    key TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    payload BLOB NOT NULL
) WITHOUT ROWID;
"""
#: ``latest`` in one B-tree, keyed by its key: a row replaced rewrites one page of the WAL, not
#: two (a rowid table with a text key keeps the key in an index of its own as well)
LATEST_WITHOUT_ROWID = """
CREATE TABLE latest_by_key (
    key TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    payload BLOB NOT NULL
) WITHOUT ROWID;
INSERT INTO latest_by_key SELECT key, seq, payload FROM latest;
DROP TABLE latest;
ALTER TABLE latest_by_key RENAME TO latest;
"""


class JournalError(TablesideError, RuntimeError):
    """The journal cannot be written (disk full, I/O error): nothing more can be sent."""


class JournalCorrupt(JournalError):
    """The journal on disk fails its checks; the daemon will not start on it."""


@dataclass(frozen=True, slots=True)
class Record:
    seq: int
    ts: float
    topic: str
    retain: bool
    payload: bytes
    prev_hash: bytes
    hash: bytes
    #: where ``latest`` keeps it (not part of the hash: ``latest`` is derived)
    key: str | None = None


@dataclass(frozen=True, slots=True)
class Problem:
    seq: int
    what: str

    def __str__(self) -> str:
        return f"seq {self.seq}: {self.what}"


def sync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def seq_range(conn: sqlite3.Connection) -> tuple[int | None, int | None]:
    """The lowest and highest seq: two lookups (min and max in one query scan the table)."""
    lo = conn.execute("SELECT min(seq) FROM records").fetchone()[0]
    hi = conn.execute("SELECT max(seq) FROM records").fetchone()[0]
    return lo, hi


def connect_db(path: Path, *, readonly: bool = False) -> sqlite3.Connection:
    if readonly:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    else:
        conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        # no fsync per commit: the redo log's one sync per batch makes a commit durable
        # (daemon/journal/redo.py); SQLite still syncs the WAL before a checkpoint and the main
        # file after a completed one, which is what lets the log start anew
        conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA busy_timeout=5000")
    return conn


def read_meta(conn: sqlite3.Connection) -> dict[str, str]:
    return dict(conn.execute("SELECT key, value FROM meta").fetchall())
