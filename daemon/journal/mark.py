"""The journal's mark: the last record of its redo log (daemon/journal/redo.py), the last seq a
device may have been acknowledged for or a broker may have seen. Does a journal reach it, with
the same hash there, and what the log holds that SQLite lost (rolled forward at opening);
a new journal made with its log; and the mark file of journals from before the log, read once
to bring them over (docs/journal.md, "Lost records are found, never renumbered")."""

from __future__ import annotations

import sqlite3
import struct
import time
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tableside.daemon.journal.file import FORMAT, SCHEMA, Problem, Record, read_meta
from tableside.daemon.journal.redo import Contents, Header, RedoLog

#: what ``read_log`` found: the log, or why it cannot be read
Found = Contents | OSError | ValueError

ELSEWHERE = ("not the journal its log file saw: this record has another hash (a journal from "
             "elsewhere put in its place?)")  # fmt: skip


def log_problems(
    path: Path,
    conn: sqlite3.Connection,
    summary: dict[str, Any],
    found: Found,
    *,
    live: bool,
) -> tuple[list[Problem], list[Record]]:
    """Does the journal reach its log's last record (``found``, read before the journal), with
    the same hashes? Returns the problems, and the records the log holds past the journal's end
    (a lost ``-wal``: rolled forward at opening). A missing log is a problem for a journal that
    keeps one, and for a backup copy about to be used as the live journal (``live``)."""
    meta = read_meta(conn)
    kept = meta.get("log") or meta.get("mark")
    if meta.get("log") is None and kept is not None and isinstance(found, FileNotFoundError):
        # from before the log, and none yet: its mark file is its mark (an old backup put back
        # beside a log, or a first start cut short, is checked against the log)
        return legacy_mark_problems(conn, summary, read_legacy_mark(path), live=live), []
    log = RedoLog.beside(path)
    if isinstance(found, FileNotFoundError):
        if kept == "1":
            return [Problem(-1, f"its log file {log} is missing: whether committed records "
                                "were lost cannot be told")], []  # fmt: skip
        if kept == "copy" and live:
            copy = (
                "it is a backup copy (`tableside journal backup`) with no log file: the "
                "table may have numbered records after it"
            )
            return [Problem(-1, copy)], []
        return [], []  # a journal from before the mark file: it gets a log at its first start
    if isinstance(found, (OSError, ValueError)):
        return [Problem(-1, f"its log file is unreadable: {found}")], []
    if found.header.table != meta.get("table"):
        return [Problem(-1, f"its log file {log} is table {found.header.table!r}'s")], []
    last, last_hash = summary["last_seq"], bytes.fromhex(summary["last_hash"])
    log_seq, log_hash = found.last
    base = found.header.base_seq
    problems = []
    if found.broken:
        problems.append(Problem(log_seq + 1, f"its log file is broken: {found.broken}"))
    if last < log_seq:
        if last < base:
            held = f"holds only {base + 1}..{log_seq}" if log_seq > base else "holds none"
            return [*problems, Problem(last + 1,
                    f"lost: records {last + 1}..{log_seq} were committed (its log file says "
                    f"so; it started anew after seq {base} and {held}) but the journal ends at "
                    f"{last}: its -wal file was deleted or not copied along, or an older copy "
                    "was put back")], []  # fmt: skip
        if found.hash_at(last) != last_hash:
            return [*problems, Problem(last, ELSEWHERE)], []
        return problems, found.records[last - base :]
    anchor_seq = int(meta["anchor_seq"])
    there: bytes | None
    if log_seq == anchor_seq:
        there = bytes.fromhex(meta["anchor_hash"])
    elif log_seq > anchor_seq:
        row = conn.execute("SELECT hash FROM records WHERE seq = ?", (log_seq,)).fetchone()
        there = bytes(row[0]) if row is not None else None
    else:
        return problems, []  # retention has deleted past it: nothing to compare
    if there != log_hash:
        problems.append(Problem(log_seq, ELSEWHERE))
    return problems, []


def create_journal(
    conn: sqlite3.Connection,
    path: Path,
    table: str,
    anchor_seq: int,
    anchor_hash: bytes,
    latest: Sequence[tuple[str, int, bytes]] = (),
    **extra: str,
) -> None:
    """A new journal whose numbering starts after ``anchor_seq``, with its log."""
    meta = {
        "format": FORMAT,
        "table": table,
        "anchor_seq": str(anchor_seq),
        "anchor_hash": anchor_hash.hex(),
        "acked": str(anchor_seq),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "log": "1",
        **extra,
    }
    # the header alone: the journal's opening starts it anew, written ahead
    RedoLog(RedoLog.beside(path), reserve=0).create(Header(table, 0, anchor_seq, anchor_hash))
    conn.executescript(SCHEMA)
    conn.execute("BEGIN")
    conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", meta.items())
    conn.executemany("INSERT OR REPLACE INTO latest VALUES (?, ?, ?)", latest)
    conn.execute("COMMIT")
    # in the main file at once: a journal whose -wal is lost still says it keeps a log
    conn.execute("PRAGMA wal_checkpoint(FULL)")


# -- journals from before the log: their mark file, read to bring them over ---------------


def legacy_mark_path(journal: Path) -> Path:
    """``<journal>.mark``: the last committed seq and its hash, in two 64-byte slots (magic,
    seq, hash, CRC-32), written in turn. The log replaced it; a journal that has one gets a log
    at its first start, checked against it, and the mark file goes."""
    return journal.with_name(journal.name + ".mark")


_SLOT = struct.Struct(">4sq32sI")


def read_legacy_mark(journal: Path) -> tuple[int, bytes] | OSError | ValueError:
    """The newest good slot of an old mark file (seq, hash), or why it cannot be read."""
    try:
        raw = legacy_mark_path(journal).read_bytes()
    except OSError as exc:
        return exc
    found = []
    for slot in (0, 1):
        chunk = raw[slot * 64 : slot * 64 + _SLOT.size]
        if len(chunk) == _SLOT.size:
            magic, seq, digest, crc = _SLOT.unpack(chunk)
            if magic == b"TSJM" and zlib.crc32(chunk[:-4]) == crc:
                found.append((seq, digest))
    if not found:
        return ValueError(f"{legacy_mark_path(journal)}: no readable mark ({len(raw)} bytes)")
    return max(found)


def legacy_mark_pack(seq: int, digest: bytes) -> bytes:
    """One slot as old journals wrote it (tests make old journals with it)."""
    body = _SLOT.pack(b"TSJM", seq, digest, 0)[:-4]
    return (body + struct.pack(">I", zlib.crc32(body))).ljust(64, b"\x00")


def legacy_mark_problems(
    conn: sqlite3.Connection,
    summary: dict[str, Any],
    found: tuple[int, bytes] | OSError | ValueError,
    *,
    live: bool,
) -> list[Problem]:
    """A journal from before the log, that keeps a mark file: does it reach its mark?"""
    meta = read_meta(conn)
    if isinstance(found, FileNotFoundError):
        if meta.get("mark") == "1":
            return [Problem(-1, "its mark file is missing: whether committed records were "
                                "lost cannot be told")]  # fmt: skip
        if meta.get("mark") == "copy" and live:
            return [Problem(-1, "it is a backup copy (`tableside journal backup`) with no mark "
                                "file: the table may have numbered records after it")]  # fmt: skip
        return []
    if isinstance(found, (OSError, ValueError)):
        return [Problem(-1, f"its mark file is unreadable: {found}")]
    seq, digest = found
    last, anchor_seq = summary["last_seq"], int(meta["anchor_seq"])
    if seq > last:
        return [Problem(last + 1, f"lost: records {last + 1}..{seq} were committed (its mark "
                        f"file says so) but the journal ends at {last}: its -wal file was "
                        "deleted or not copied along, or an older copy was put back")]  # fmt: skip
    if seq == anchor_seq:
        there: bytes | None = bytes.fromhex(meta["anchor_hash"])
    elif seq > anchor_seq:
        row = conn.execute("SELECT hash FROM records WHERE seq = ?", (seq,)).fetchone()
        there = bytes(row[0]) if row is not None else None
    else:
        return []
    if there != digest:
        return [Problem(seq, "not the journal its mark file saw: this record has another hash "
                        "(a journal from elsewhere put in its place?)")]  # fmt: skip
    return []


def never_numbered(path: Path, found: Contents | OSError | ValueError) -> bool:
    """Whether the journal's log proves the table never numbered a record: it is whole (read,
    every frame chained), it started after seq -1 and holds no record, and no older way of
    numbering (a ``seq.json`` beside it, a mark file) says otherwise. What a power cut during a
    table's very first start leaves when the journal's own file did not reach the disk: its
    log, made and synced when that start checked the empty journal, is the proof."""
    return (
        isinstance(found, Contents)
        and found.broken is None
        and not found.records
        and found.header.base_seq == -1
        and not legacy_mark_path(path).exists()
        and not (path.parent / "seq.json").exists()
    )
