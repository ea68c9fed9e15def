"""The mark file beside a journal (``journal.sqlite.mark``, outside SQLite): the last committed
seq and its hash, so that records lost from the journal (its ``-wal`` deleted, an older copy
put back) are found (docs/journal.md); and a new journal made with its mark."""

from __future__ import annotations

import os
import sqlite3
import struct
import time
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tableside.daemon.journal.file import FORMAT, SCHEMA, Problem, read_meta, sync_dir


class Mark:
    """The last committed seq and its hash, kept outside the SQLite file so that records lost
    from it can be told (``<journal>.mark``).

    Two 64-byte slots, written in turn and each with its CRC-32: a write torn by a power cut
    spoils at most the slot being written, and the other still holds the previous mark. At most
    one ``fdatasync`` per group commit, on the journal's mark thread."""

    _SLOT = struct.Struct(">4sq32sI")  # magic, seq, hash, CRC-32 of what precedes it
    _MAGIC = b"TSJM"
    _SIZE = 64

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._slot = 0

    @staticmethod
    def beside(journal: Path) -> Path:
        return journal.with_name(journal.name + ".mark")

    @classmethod
    def _pack(cls, seq: int, digest: bytes) -> bytes:
        body = cls._SLOT.pack(cls._MAGIC, seq, digest, 0)[:-4]
        return (body + struct.pack(">I", zlib.crc32(body))).ljust(cls._SIZE, b"\x00")

    def read(self) -> tuple[int, bytes]:
        """The newest good slot: (seq, hash). FileNotFoundError when there is no mark file,
        ValueError when neither slot is readable."""
        raw = self.path.read_bytes()
        found: list[tuple[int, bytes, int]] = []
        for slot in (0, 1):
            chunk = raw[slot * self._SIZE : slot * self._SIZE + self._SLOT.size]
            if len(chunk) < self._SLOT.size:
                continue
            magic, seq, digest, crc = self._SLOT.unpack(chunk)
            if magic == self._MAGIC and zlib.crc32(chunk[:-4]) == crc:
                found.append((seq, digest, slot))
        if not found:
            raise ValueError(f"{self.path}: no readable mark ({len(raw)} bytes)")
        seq, digest, slot = max(found)
        self._slot = 1 - slot  # the next write goes over the older slot
        return seq, digest

    def create(self, seq: int, digest: bytes) -> None:
        """A new mark file, in full or not at all (written aside, synced, renamed)."""
        self.close()
        aside = self.path.with_name(self.path.name + ".new")
        fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o640)
        try:
            os.write(fd, self._pack(seq, digest) * 2)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(aside, self.path)
        sync_dir(self.path.parent)
        self._slot = 0

    def write(self, seq: int, digest: bytes) -> None:
        """Record ``seq`` as committed; durable when this returns."""
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR)
        os.pwrite(self._fd, self._pack(seq, digest), self._slot * self._SIZE)
        os.fdatasync(self._fd)
        self._slot = 1 - self._slot

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def read_mark(path: Path) -> tuple[int, bytes] | OSError | ValueError:
    """The mark beside a journal, or why it cannot be read. Read *before* the journal is: a
    live journal's writer may have committed more since, never less."""
    try:
        return Mark(Mark.beside(path)).read()
    except (OSError, ValueError) as exc:
        return exc


def mark_problems(
    path: Path,
    conn: sqlite3.Connection,
    summary: dict[str, Any],
    found: tuple[int, bytes] | OSError | ValueError,
    *,
    live: bool,
) -> list[Problem]:
    """Does the journal reach its mark (``found``), with the same hash there? A mark file beside
    it is always checked; a missing one is a problem for a journal that keeps a mark, and for a
    backup copy about to be used as the live journal (``live``). A journal from before the mark
    existed has none and is adopted by ``Journal.open``."""
    meta = read_meta(conn)
    mark = Mark(Mark.beside(path))
    if isinstance(found, FileNotFoundError):
        kept = meta.get("mark")
        if kept == "1":
            return [Problem(-1, f"its mark file {mark.path} is missing: whether committed "
                                "records were lost cannot be told")]  # fmt: skip
        if kept == "copy" and live:
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
        return []  # retention has deleted past the mark: nothing to compare
    if there != digest:
        return [Problem(seq, "not the journal its mark file saw: this record has another hash "
                        "(a journal from elsewhere put in its place?)")]  # fmt: skip
    return []


def create_journal(
    conn: sqlite3.Connection,
    path: Path,
    table: str,
    anchor_seq: int,
    anchor_hash: bytes,
    latest: Sequence[tuple[str, int, bytes]] = (),
    **extra: str,
) -> None:
    """A new journal whose numbering starts after ``anchor_seq``, with its mark file."""
    meta = {
        "format": FORMAT,
        "table": table,
        "anchor_seq": str(anchor_seq),
        "anchor_hash": anchor_hash.hex(),
        "acked": str(anchor_seq),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "mark": "1",
        **extra,
    }
    Mark(Mark.beside(path)).create(anchor_seq, anchor_hash)
    conn.executescript(SCHEMA)
    conn.execute("BEGIN")
    conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", meta.items())
    conn.executemany("INSERT OR REPLACE INTO latest VALUES (?, ?, ?)", latest)
    conn.execute("COMMIT")
    # in the main file at once: a journal whose -wal is lost still says it keeps a mark
    conn.execute("PRAGMA wal_checkpoint(FULL)")
