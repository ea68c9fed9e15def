"""Checking a journal: SQLite's integrity check, the whole hash chain, and its log (the mark)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from tableside.daemon.journal.file import (
    FORMAT,
    Problem,
    connect_db,
    read_meta,
    record_hash,
)
from tableside.daemon.journal.mark import log_problems
from tableside.daemon.journal.redo import Contents, read_log


def verify_file(path: Path, *, table: str | None = None) -> tuple[dict[str, Any], list[Problem]]:
    """Check a journal: SQLite's own integrity check, the whole hash chain, then its log.

    Returns a summary (first/last seq, records, acked; ``log_last_seq``, the log's last record,
    the mark; ``to_roll_forward``, records only its log holds, which the next start puts back)
    and the problems found, first first."""
    if not path.is_file():
        raise FileNotFoundError(f"no journal at {path}")
    found = read_log(path)  # before the journal: a live writer logs after it commits
    conn = connect_db(path, readonly=True)
    try:
        summary, problems = verify_chain(conn, table)
        if not problems:
            problems, missing = log_problems(path, conn, summary, found, live=False)
            if isinstance(found, Contents):
                summary["log_last_seq"] = found.last[0]
            if missing:  # a lost -wal: nothing is lost, the next start rolls these forward
                summary["to_roll_forward"] = f"{missing[0].seq}..{missing[-1].seq}"
        return summary, problems
    except sqlite3.DatabaseError as exc:
        return {"path": str(path)}, [Problem(-1, f"not a readable journal: {exc}")]
    finally:
        conn.close()


def verify_chain(
    conn: sqlite3.Connection, table: str | None
) -> tuple[dict[str, Any], list[Problem]]:
    problems: list[Problem] = []
    check = [row[0] for row in conn.execute("PRAGMA quick_check").fetchall()]
    if check != ["ok"]:
        problems.append(Problem(-1, "sqlite: " + "; ".join(check[:5])))
        return {}, problems
    meta = read_meta(conn)
    if meta.get("format") != FORMAT:
        problems.append(Problem(-1, f"unknown journal format {meta.get('format')!r}"))
        return meta, problems
    if table is not None and meta.get("table") != table:
        problems.append(Problem(-1, f"journal of table {meta.get('table')!r}, not {table!r}"))
    expected_seq = int(meta["anchor_seq"]) + 1
    prev = bytes.fromhex(meta["anchor_hash"])
    count = 0
    last = expected_seq - 1
    newest_ts = float(meta.get("clock_floor", "0"))
    for seq, ts, topic, retain, payload, prev_hash, digest in conn.execute(
        "SELECT seq, ts, topic, retain, payload, prev_hash, hash FROM records ORDER BY seq"
    ):
        count += 1
        if seq != expected_seq:
            what = "missing" if seq > expected_seq else "unexpected"
            problems.append(Problem(expected_seq, f"{what}: next record is seq {seq}"))
        if bytes(prev_hash) != prev:
            problems.append(Problem(seq, "chain broken: previous hash does not match"))
        computed = record_hash(bytes(prev_hash), seq, ts, topic, bool(retain), bytes(payload))
        if computed != bytes(digest):
            problems.append(Problem(seq, "edited: content does not match its hash"))
        prev, expected_seq, last = bytes(digest), seq + 1, seq
        newest_ts = max(newest_ts, ts)
        if len(problems) >= 100:
            break
    summary = {
        "table": meta.get("table"),
        "first_seq": int(meta["anchor_seq"]) + 1,
        "last_seq": last,
        "records": count,
        "acked": int(meta.get("acked", "-1")),
        "last_hash": prev.hex(),
        "newest_ts": newest_ts,
    }
    return summary, problems
