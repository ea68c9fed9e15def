"""The SQLite store (``sqlite:///path``): one file in WAL mode, written on its own thread so the
event loop never waits on the disk; a batch is one transaction (one fsync). Several floor
processes may share the file (SQLite's locking; each waits up to ``BUSY_TIMEOUT_S`` for the
other's transaction)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from tableside.floor.store import (
    _COLUMNS,
    ADDED_COLUMNS,
    N_COLUMNS,
    Message,
    Store,
    StoreError,
    _row,
    schema,
)

__all__ = ["SqliteStore"]

T = TypeVar("T")

BUSY_TIMEOUT_S = 30.0

_INSERT = f"INSERT INTO messages ({_COLUMNS}) VALUES ({', '.join('?' * N_COLUMNS)})"


class SqliteStore(Store):
    def __init__(self, url: str, path: str | Path) -> None:
        super().__init__(url)
        self.path = Path(path)
        self._conn: sqlite3.Connection | None = None
        self._thread: ThreadPoolExecutor | None = None

    async def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._conn is None or self._thread is None:
            raise StoreError(f"{self.url}: not open")
        conn = self._conn
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, conn)

    async def open(self) -> None:
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="floor-sqlite")

        def connect() -> sqlite3.Connection:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("BEGIN IMMEDIATE")
            for statement in schema(id="INTEGER PRIMARY KEY", blob="BLOB"):
                conn.execute(statement)
            columns = {row[1] for row in conn.execute("PRAGMA table_info(messages)")}
            for column, sql in ADDED_COLUMNS:  # a store made before the column was
                if column not in columns:
                    conn.execute(f"ALTER TABLE messages ADD COLUMN {column} {sql}")
            conn.execute("COMMIT")
            return conn

        try:
            self._conn = await asyncio.get_running_loop().run_in_executor(self._thread, connect)
        except (sqlite3.Error, OSError) as exc:
            self._thread.shutdown()
            self._thread = None
            raise StoreError(f"{self.url}: cannot open {self.path}: {exc}") from exc

    async def close(self) -> None:
        if self._conn is not None and self._thread is not None:
            conn, self._conn = self._conn, None
            await asyncio.get_running_loop().run_in_executor(self._thread, conn.close)
            self._thread.shutdown()
            self._thread = None

    async def _query(self, sql: str, params: Sequence[object] = ()) -> list[tuple[object, ...]]:
        return await self._call(lambda conn: conn.execute(sql, params).fetchall())

    async def _execute(self, statements: Sequence[tuple[str, Sequence[object]]]) -> None:
        def run(conn: sqlite3.Connection) -> None:
            with _transaction(conn):
                for sql, params in statements:
                    conn.execute(sql, params)

        await self._call(run)

    async def _write(
        self, records: Sequence[Message], others: Sequence[Message]
    ) -> list[tuple[Message, tuple[object, object]]]:
        def run(conn: sqlite3.Connection) -> list[tuple[Message, tuple[object, object]]]:
            repeats = []
            with _transaction(conn):
                for m in records:
                    cursor = conn.execute(
                        f"{_INSERT} ON CONFLICT (table_id, record_seq) DO NOTHING", _row(m, True)
                    )
                    if cursor.rowcount == 0:
                        stored = conn.execute(
                            "SELECT chain_hash, payload FROM messages "
                            "WHERE table_id = ? AND record_seq = ?",
                            (m.table, m.seq),
                        ).fetchone()
                        repeats.append((m, (stored[0], stored[1])))
                if others:
                    conn.executemany(_INSERT, [_row(m, False) for m in others])
            return repeats

        return await self._call(run)


class _transaction:
    """BEGIN IMMEDIATE … COMMIT, or ROLLBACK on an error (translated to StoreError)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, _: object
    ) -> None:
        if kind is None:
            self.conn.execute("COMMIT")
            return
        self.conn.execute("ROLLBACK")
        if isinstance(exc, sqlite3.Error):
            raise StoreError(f"sqlite: {exc}") from exc
