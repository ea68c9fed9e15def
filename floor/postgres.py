"""The PostgreSQL store (``postgresql://user@host:port/db``), psycopg 3 async: a batch is one
transaction, its records COPYed into a staging table and moved with one ``INSERT … ON CONFLICT
DO NOTHING`` (so a record already stored, by this instance or another sharing the load, is a
repeat, not an error), everything else COPYed straight in."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tableside.floor.store import (
    _COLUMNS,
    ADDED_COLUMNS,
    Message,
    Store,
    StoreError,
    _row,
    schema,
)

if TYPE_CHECKING:  # psycopg is an optional dependency: imported when the store opens
    from psycopg import AsyncConnection
    from psycopg.rows import TupleRow

__all__ = ["PostgresStore"]


#: where a batch's records wait for the one INSERT that keeps each (table, seq) once
_STAGING = (
    f"CREATE TEMP TABLE incoming ON COMMIT DELETE ROWS AS SELECT {_COLUMNS} FROM messages "
    "WITH NO DATA"
)


def _pg(sql: str) -> str:
    """The shared SQL's ``?`` placeholders as psycopg's."""
    return sql.replace("?", "%s")


class PostgresStore(Store):
    _GREATEST = "GREATEST"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self._conn: AsyncConnection[TupleRow] | None = None
        self._lock = asyncio.Lock()

    async def open(self) -> None:
        try:
            import psycopg
        except ImportError as exc:
            raise StoreError(
                f"{self.url}: the PostgreSQL store needs psycopg: pip install 'tableside[floor]'"
            ) from exc
        try:
            self._conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
            async with self._conn.transaction():
                # one floor at a time creates the schema (several may start together)
                await self._conn.execute("SELECT pg_advisory_xact_lock(7411)")
                for statement in schema(id="BIGSERIAL PRIMARY KEY", blob="BYTEA"):
                    await self._conn.execute(statement)
                for column, sql in ADDED_COLUMNS:  # a store made before the column was
                    await self._conn.execute(
                        f"ALTER TABLE messages ADD COLUMN IF NOT EXISTS {column} {sql}"
                    )
            await self._conn.execute(_STAGING)
        except psycopg.Error as exc:
            raise StoreError(f"{self.url}: {exc}") from exc

    async def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.close()

    async def _connection(self) -> AsyncConnection[TupleRow]:
        """The connection; a new one when the last broke (the server restarted)."""
        if self._conn is None:
            raise StoreError(f"{self.url}: not open")
        if self._conn.broken or self._conn.closed:
            import psycopg

            try:
                await self._conn.close()
                self._conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
                await self._conn.execute(_STAGING)
            except psycopg.Error as exc:
                raise StoreError(f"{self.url}: reconnecting: {exc}") from exc
        return self._conn

    async def _query(self, sql: str, params: Sequence[object] = ()) -> list[tuple[object, ...]]:
        import psycopg

        async with self._lock:
            conn = await self._connection()
            try:
                cursor = await conn.execute(_pg(sql), params)
                rows: list[tuple[object, ...]] = await cursor.fetchall()
            except psycopg.Error as exc:
                raise StoreError(f"postgresql: {exc}") from exc
        return rows

    async def _execute(self, statements: Sequence[tuple[str, Sequence[object]]]) -> None:
        import psycopg

        async with self._lock:
            conn = await self._connection()
            try:
                # a run of the same statement (a batch's counters, one per table) is one
                # executemany: pipelined by psycopg, not a round trip per table
                async with conn.transaction(), conn.cursor() as cursor:
                    for sql, run in itertools.groupby(statements, key=lambda st: st[0]):
                        await cursor.executemany(_pg(sql), [params for _, params in run])
            except psycopg.Error as exc:
                raise StoreError(f"postgresql: {exc}") from exc

    async def _write(
        self, records: Sequence[Message], others: Sequence[Message]
    ) -> list[tuple[Message, tuple[object, object]]]:
        import psycopg

        repeats: list[tuple[Message, tuple[object, object]]] = []
        async with self._lock:
            conn = await self._connection()
            try:
                async with conn.transaction(), conn.cursor() as cursor:
                    if records:
                        async with cursor.copy(f"COPY incoming ({_COLUMNS}) FROM STDIN") as copy:
                            for m in records:
                                await copy.write_row(_row(m, True))
                        await cursor.execute(
                            f"INSERT INTO messages ({_COLUMNS}) SELECT {_COLUMNS} FROM incoming "
                            "ON CONFLICT (table_id, record_seq) DO NOTHING "
                            "RETURNING table_id, record_seq"
                        )
                        inserted = {(t, s) for t, s in await cursor.fetchall()}
                        if len(inserted) < len(records):
                            await cursor.execute(
                                "SELECT m.table_id, m.record_seq, m.chain_hash, m.payload "
                                "FROM messages m JOIN incoming i ON m.table_id = i.table_id "
                                "AND m.record_seq = i.record_seq"
                            )
                            stored = {(t, s): (h, p) for t, s, h, p in await cursor.fetchall()}
                            repeats = [
                                (m, stored[(m.table, m.seq)])
                                for m in records
                                if (m.table, m.seq) not in inserted
                            ]
                    if others:
                        async with cursor.copy(f"COPY messages ({_COLUMNS}) FROM STDIN") as copy:
                            for m in others:
                                await copy.write_row(_row(m, False))
            except psycopg.Error as exc:
                raise StoreError(f"postgresql: {exc}") from exc
        return repeats
