"""The durable journal: every message the table sends is written here before it is sent.

One SQLite file per table, ``<state_dir>/<table>/journal.sqlite``, in WAL mode with
``synchronous=NORMAL``, and beside it its redo log (``journal.sqlite.log``): each batch is
committed to SQLite (no fsync) and appended to the log with one ``fdatasync``, after which it
survives a crash of the daemon and a loss of power.

Appending never blocks the event loop. The loop numbers a record (its ``seq``), chains its hash
to the previous record and hands it to a dedicated writer thread, which commits whatever has
queued up in one transaction and one log frame (group commit: one sync for a burst of events,
not one each — docs/journal.md has the measured rates that decided this). A device's frame is
acknowledged, and the publisher may send its record, once that sync is done (``durable_seq``;
the ACKs first), so the broker never has a message the journal could
forget, and ``seq`` continues from the journal after any restart without a gap. Nothing else
runs in the commit's path: checkpoints are a thread of their own (SQLite's automatic one is
off) (docs/journal.md, "What the commit path holds").

Tamper evidence: each record's hash covers the previous record's hash, its seq, time, topic,
retain flag and payload. ``verify()`` recomputes the chain and finds an edited, inserted or
removed record. Retention deletes only records the broker has acknowledged; the hash of the last
deleted record is kept as the anchor the remaining chain starts from.

Derived, not chained: ``latest`` keeps the newest payload per key (each retained topic, each
device's last event of each kind) so a restarted daemon restores the table without reading the
whole journal, and ``meta.acked`` is the highest seq the broker acknowledged (written lazily:
after a crash the records since the last write are sent again, marked ``redelivered``).

Lost records are found, and put back: the log's last record is the journal's mark (a seq the
broker has seen is always in it). Records the log holds past SQLite's end (its ``-wal`` file
deleted or not copied along) are rolled forward at opening; a journal that ends before what its
log holds (an older copy put back after the log started anew), or whose log is missing, is
refused, so no seq is used twice.

Time: record times and retention come from the run's clock (daemon/clock.py), never straight
from the wall clock, so a stepped wall clock neither deletes more nor makes time go back.
"""

from tableside.daemon.journal.file import (
    FORMAT,
    JournalCorrupt,
    JournalError,
    Problem,
    Record,
    record_hash,
)
from tableside.daemon.journal.redo import RedoLog
from tableside.daemon.journal.tools import Recovered, backup, export_records, recover
from tableside.daemon.journal.verify import verify_file
from tableside.daemon.journal.writer import QUIET_S, Journal

__all__ = [
    "FORMAT",
    "QUIET_S",
    "Journal",
    "JournalCorrupt",
    "JournalError",
    "Problem",
    "Record",
    "Recovered",
    "RedoLog",
    "backup",
    "export_records",
    "record_hash",
    "recover",
    "verify_file",
]
