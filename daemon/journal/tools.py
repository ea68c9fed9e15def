"""What an operator does to a journal that is not running: export it as JSON lines, recover one
that fails its checks, back one up consistently (``tableside journal …``)."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tableside.daemon.journal.file import (
    GENESIS,
    JournalError,
    connect_db,
    read_meta,
    record_hash,
)
from tableside.daemon.journal.mark import (
    create_journal,
    legacy_mark_path,
    never_numbered,
    read_legacy_mark,
)
from tableside.daemon.journal.redo import RedoLog, read_log
from tableside.daemon.journal.verify import verify_chain


def export_records(
    path: Path, first: int | None = None, last: int | None = None
) -> Iterator[dict[str, Any]]:
    """Every record as a JSON-able dict (payload decoded when it is JSON), in seq order."""
    conn = connect_db(path, readonly=True)
    try:
        rows = conn.execute(
            "SELECT seq, ts, topic, retain, payload, prev_hash, hash FROM records "
            "WHERE seq >= ? AND seq <= ? ORDER BY seq",
            (first if first is not None else -1, last if last is not None else 2**62),
        )
        for seq, ts, topic, retain, payload, prev_hash, digest in rows:
            raw = bytes(payload)
            try:
                body: object = json.loads(raw)
            except ValueError:
                body = {"raw_hex": raw.hex()}
            yield {
                "seq": seq,
                "journal_ts": ts,
                "topic": topic,
                "retain": bool(retain),
                "payload": body,
                "prev_hash": bytes(prev_hash).hex(),
                "hash": bytes(digest).hex(),
            }
    finally:
        conn.close()


@dataclass(frozen=True, slots=True)
class Recovered:
    """What ``recover`` did."""

    #: where the old journal went (None: there was none, only its log)
    aside: Path | None
    #: the new journal's numbering carries on after this seq
    after_seq: int
    #: the table's state carried over (retained topics, device events): how many
    restated: int
    #: its log proved the table never numbered a record (a first start cut short)
    never_numbered: bool = False


#: what to pass when nothing on the disk says how far a table's numbering went
_GIVE_SEQ = (
    "give the last seq the table used (--after-seq N, from a subscriber's record) so no number "
    "is used twice, or --after-seq -1 if no subscriber ever saw a message of this table"
)


def recover(path: Path, table: str, *, after_seq: int | None = None) -> Recovered:
    """Set a journal that fails its checks aside (nothing is deleted) and start a new one whose
    numbering carries on after the highest seq the old one holds, acknowledged or its log file
    holds (or, for a journal from before the log, its mark file says was committed), anchored
    to the newest record whose hash still checks (the log's last, when it is the newest). The
    new journal
    keeps the old one's ``latest`` (the table, each device, each retained topic), so the daemon
    restates the table as it was, not a new table."""
    highest, anchor, newest_ts = -1, GENESIS, 0.0
    latest: list[tuple[str, int, bytes]] = []
    keeps_log = False
    if path.exists():
        with contextlib.suppress(sqlite3.Error):
            conn = connect_db(path, readonly=True)
            try:
                row = conn.execute("SELECT max(seq), max(ts) FROM records").fetchone()
                highest = row[0] if row and row[0] is not None else -1
                newest_ts = row[1] if row and row[1] is not None else 0.0
                with contextlib.suppress(sqlite3.Error, KeyError, ValueError):
                    meta = read_meta(conn)
                    keeps_log = "1" in (meta.get("log"), meta.get("mark"))
                    highest = max(highest, int(meta["acked"]), int(meta["anchor_seq"]))
                for seq, ts, topic, retain, payload, prev, digest in conn.execute(
                    "SELECT seq, ts, topic, retain, payload, prev_hash, hash FROM records "
                    "ORDER BY seq DESC LIMIT 100"
                ):
                    if record_hash(bytes(prev), seq, ts, topic, bool(retain), bytes(payload)) == (
                        bytes(digest)
                    ):
                        anchor = bytes(digest)
                        break
                with contextlib.suppress(sqlite3.Error):
                    latest = [(k, s, bytes(p)) for k, s, p in
                              conn.execute("SELECT key, seq, payload FROM latest")]  # fmt: skip
            finally:
                conn.close()
    found, legacy = read_log(path), read_legacy_mark(path)
    if not isinstance(found, Exception):
        seq, digest = found.last
        if seq >= highest:
            highest, anchor = seq, digest
    elif not isinstance(legacy, Exception):
        highest = max(highest, legacy[0])
    elif after_seq is None and (keeps_log or not path.exists() or highest < 0):
        raise JournalError(
            f"{path}: its log file cannot be read ({found}), so how far its numbering went "
            f"cannot be told; {_GIVE_SEQ}"
        )
    if after_seq is not None:
        highest = max(highest, after_seq)
    elif highest < 0 and not never_numbered(path, found):
        raise JournalError(f"{path}: cannot read how far its numbering went; {_GIVE_SEQ}")
    proven_new = after_seq is None and highest < 0
    aside: Path | None = None
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    if path.exists():
        aside = path.with_name(f"{path.name}.corrupt-{stamp}")
        for suffix in ("", "-wal", "-shm"):
            part = Path(str(path) + suffix)
            if part.exists():
                os.replace(part, Path(str(aside) + suffix))
    for kept in (RedoLog.beside(path), legacy_mark_path(path)):  # for the auditors, as it was
        if kept.exists():
            os.replace(kept, kept.with_name(f"{path.name}.corrupt-{stamp}{kept.suffix}"))
    conn = connect_db(path)
    try:
        create_journal(conn, path, table, highest, anchor, latest, previous=str(aside or "(none)"),
                recovered_after=str(highest), clock_floor=repr(float(newest_ts)))  # fmt: skip
    finally:
        conn.close()
    return Recovered(aside, highest, len(latest), never_numbered=proven_new)


def backup(path: Path, dest: Path) -> dict[str, Any]:
    """A consistent copy of a journal, live or not, by SQLite's backup API (a plain file copy
    of a live journal can miss its -wal file). The copy is checked; returns its summary. The
    log file is not copied: it belongs to the live journal (docs/journal.md)."""
    if dest.exists():
        raise JournalError(f"{dest} exists: a backup never overwrites a file")
    source = connect_db(path, readonly=True)
    try:
        target = sqlite3.connect(dest)
        try:
            source.backup(target)
            # a copy: put back as the live journal without its log, it is refused (it may be
            # older than what the table numbered since)
            target.execute("UPDATE meta SET value = 'copy' WHERE key IN ('log', 'mark')")
            target.commit()
        finally:
            target.close()
    finally:
        source.close()
    conn = connect_db(dest, readonly=True)
    try:
        summary, problems = verify_chain(conn, None)
    finally:
        conn.close()
    if problems:
        raise JournalError(f"the copy {dest} fails its checks: {problems[0]}")
    return summary
