"""The redo log beside a journal (``journal.sqlite.log``, outside SQLite): each batch the writer
commits, appended and made durable with one ``fdatasync``. It is the journal's one sync per batch
and its mark: its last record is the last seq a device may have been acknowledged for or a
broker may have seen, and what SQLite lost of it (a ``-wal`` deleted) is rolled forward from it
at opening (docs/journal.md, "One sync per batch: the redo log").

The layout (big-endian), a header then frames::

    header  "TSJL" | version u16 | generation u64 | salt u64 | base seq i64 | base hash 32 |
            len(table) u16 | table | CRC-32 of all before it u32
    frame   len(body) u32 | CRC-32 of body, seeded with the header's CRC-32 u32 | body
    body    count u32, then per record:
            seq i64 | ts f64 | retain u8 | prev_hash 32 | hash 32 |
            len(topic) u32 | len(key) u32 (0xFFFFFFFF: no key) | len(payload) u32 |
            topic | key | payload

The header's base is the record the log starts after (the journal's last record when the log
was started anew); the frames hold base+1 onward, in order, chained. A frame is appended whole
and synced before the next is written, so only the last can be torn (a power cut during its
write: it was never synced, never acknowledged, never sent); reading stops at the first frame
whose length or CRC does not check. ``encode_*``/``decode_*`` are the codec, with no I/O.

The file is written ahead (zeros, synced) and recycled when the log starts anew, so that an
append overwrites blocks already on disk and its ``fdatasync`` has no size to sync with it:
on ext4 that halves the sync (0.14-0.17 against 0.22-0.32 ms p50 here, docs/benchmarks.md).
A recycled file still holds the frames of an older log after the new header: seeding each
frame's CRC with its header's CRC makes them fail, so reading stops there (as SQLite's WAL
does with its salts).

The zeros go in one page per write call, and the file is read with readahead off: the page
cache keeps a file in folios as large as the write (or the readahead) that brought them in
(up to 2 MiB on ext4 since Linux 6.16), and an append that dirties a byte dirties its whole
folio: one 5 MiB write of zeros made every append of a few hundred bytes dirty 2 MiB, which the
kernel charged to the daemon (``/proc/PID/io`` ``write_bytes``) and counted towards its dirty
page limits (the device got only the changed block on ext4). docs/benchmarks.md, "Bytes
written".
"""

from __future__ import annotations

import os
import secrets
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tableside.daemon.journal.file import Record, record_hash, sync_dir

MAGIC = b"TSJL"
VERSION = 1
#: a frame longer than this is garbage (the writer's batch is at most 2,000 records)
MAX_FRAME = 256 << 20

_HEAD = struct.Struct(">4sHQQq32sH")
_FRAME = struct.Struct(">II")
_RECORD = struct.Struct(">qd?32s32sIII")
_COUNT = struct.Struct(">I")
_NO_KEY = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class Header:
    """Which journal (its table), which log of it (``generation``, one more each time it is
    started anew; ``salt``, random, so that no two logs seed their frames' CRCs alike), and the
    record it starts after."""

    table: str
    generation: int
    base_seq: int
    base_hash: bytes
    salt: int = field(default_factory=lambda: secrets.randbits(64))

    def to_bytes(self) -> bytes:
        table = self.table.encode()
        body = _HEAD.pack(MAGIC, VERSION, self.generation, self.salt, self.base_seq,
                          self.base_hash, len(table)) + table  # fmt: skip
        return body + struct.pack(">I", zlib.crc32(body))

    @property
    def seed(self) -> int:
        """What each frame's CRC is seeded with: this header's own CRC-32 (an older log's
        frames, left in a recycled file, do not check under it)."""
        return zlib.crc32(self.to_bytes())

    @classmethod
    def from_bytes(cls, raw: bytes) -> tuple[Header, int]:
        """The header and its length; ValueError when it is not one."""
        if len(raw) < _HEAD.size + 4:
            raise ValueError(f"no log header ({len(raw)} bytes)")
        magic, version, generation, salt, base_seq, base_hash, n = _HEAD.unpack_from(raw)
        end = _HEAD.size + n
        if magic != MAGIC or len(raw) < end + 4:
            raise ValueError("not a journal log (no header)")
        (crc,) = struct.unpack_from(">I", raw, end)
        if zlib.crc32(raw[:end]) != crc:
            raise ValueError("its header fails its CRC")
        if version != VERSION:
            raise ValueError(f"unknown log version {version}")
        table = raw[_HEAD.size : end].decode()
        return cls(table, generation, base_seq, base_hash, salt), end + 4


def encode_frame(batch: Sequence[Record], seed: int) -> bytes:
    """One batch as one frame of the log whose header's ``seed`` it is."""
    parts = [_COUNT.pack(len(batch))]
    for r in batch:
        topic = r.topic.encode()
        key = r.key.encode() if r.key is not None else b""
        n_key = _NO_KEY if r.key is None else len(key)
        parts.append(_RECORD.pack(r.seq, r.ts, r.retain, r.prev_hash, r.hash, len(topic), n_key,
                                  len(r.payload)))  # fmt: skip
        parts += (topic, key, r.payload)
    body = b"".join(parts)
    return _FRAME.pack(len(body), zlib.crc32(body, seed)) + body


def decode_frames(raw: bytes, offset: int, seed: int) -> tuple[list[Record], int]:
    """The records of every whole frame from ``offset`` on, and where the last whole frame ends
    (a torn or bad frame, an older log's, zeros written ahead, and all after it, left out)."""
    records: list[Record] = []
    while offset + _FRAME.size <= len(raw):
        length, crc = _FRAME.unpack_from(raw, offset)
        start, end = offset + _FRAME.size, offset + _FRAME.size + length
        if not _COUNT.size <= length <= MAX_FRAME or end > len(raw):
            break
        body = raw[start:end]
        if zlib.crc32(body, seed) != crc:
            break
        try:
            records += _decode_body(body)
        except (struct.error, UnicodeDecodeError, ValueError):
            break  # its CRC checked, its contents do not: as torn (the length said nonsense)
        offset = end
    return records, offset


def _decode_body(body: bytes) -> list[Record]:
    (count,) = _COUNT.unpack_from(body)
    at = _COUNT.size
    out = []
    for _ in range(count):
        seq, ts, retain, prev, digest, n_topic, n_key, n_payload = _RECORD.unpack_from(body, at)
        at += _RECORD.size
        topic = body[at : at + n_topic].decode()
        at += n_topic
        key: str | None = None
        if n_key != _NO_KEY:
            key = body[at : at + n_key].decode()
            at += n_key
        payload = body[at : at + n_payload]
        at += n_payload
        if at > len(body):
            raise ValueError("a record runs past its frame")
        out.append(Record(seq, ts, topic, retain, payload, prev, digest, key))
    if at != len(body) or not out:
        raise ValueError("a frame's records do not fill it")
    return out


@dataclass(frozen=True, slots=True)
class Contents:
    """A log as read: its header, its whole frames' records, where they end (``size``: where the
    next frame goes), and the first record that does not chain on (None: all do)."""

    header: Header
    records: list[Record]
    size: int
    broken: str | None = None

    @property
    def last(self) -> tuple[int, bytes]:
        """The newest record it holds (its base when it holds none): the journal's mark."""
        if self.records:
            return self.records[-1].seq, self.records[-1].hash
        return self.header.base_seq, self.header.base_hash

    def hash_at(self, seq: int) -> bytes | None:
        """The hash it holds for ``seq`` (its base's, or a record's), None when outside it."""
        if seq == self.header.base_seq:
            return self.header.base_hash
        index = seq - self.header.base_seq - 1
        return self.records[index].hash if 0 <= index < len(self.records) else None


def decode_log(raw: bytes) -> Contents:
    """A whole log file's bytes; ValueError when it has no readable header."""
    header, offset = Header.from_bytes(raw)
    records, end = decode_frames(raw, offset, header.seed)
    broken = None
    seq, prev = header.base_seq, header.base_hash
    for i, r in enumerate(records):
        if r.seq != seq + 1 or r.prev_hash != prev:
            broken = f"record {i} of its log is seq {r.seq}, not {seq + 1} chained to {seq}"
        elif record_hash(r.prev_hash, r.seq, r.ts, r.topic, r.retain, r.payload) != r.hash:
            broken = f"its log's record seq {r.seq} does not match its hash"
        if broken:
            records = records[:i]
            break
        seq, prev = r.seq, r.hash
    return Contents(header, records, end, broken)


class RedoLog:
    """The log file: read at opening, started anew (``create``) when the journal is new, at each
    opening and when a full checkpoint has put everything it holds into SQLite's main file;
    appended to by the writer thread only (``append``: one ``fdatasync``). ``reserve``: how much
    a new file is written ahead; past it, it is written ahead a megabyte at a time."""

    def __init__(self, path: Path, *, reserve: int = 5 << 20) -> None:
        self.path = path
        self.reserve = reserve
        self.header: Header | None = None
        #: how far whole frames reach: where the next one goes
        self.size = 0
        self._written_ahead = 0
        self._seed = 0
        self._fd: int | None = None

    @staticmethod
    def beside(journal: Path) -> Path:
        return journal.with_name(journal.name + ".log")

    def read(self) -> Contents:
        """What it holds. FileNotFoundError when there is none, ValueError when its header is
        unreadable."""
        try:
            return decode_log(_read_small_pages(self.path))
        except ValueError as exc:
            raise ValueError(f"{self.path}: {exc}") from exc

    def create(self, header: Header) -> None:
        """Start it anew, holding nothing after ``header``'s base, in full or not at all: the
        spare file (the log before last, or a new one written ahead with zeros) gets the header
        and is synced, then renamed over the log and the folder synced (an append to the new
        file is never lost to a rename a power cut undid); the old log becomes the spare."""
        self.close()
        spare = self.path.with_name(self.path.name + ".spare")
        old = self.path.with_name(self.path.name + ".old")
        raw = header.to_bytes()
        fd = os.open(spare, os.O_RDWR | os.O_CREAT, 0o640)
        try:
            size = os.fstat(fd).st_size
            if size < self.reserve:
                _write_zeros(fd, size, self.reserve)
                size = self.reserve
            _write_all(fd, raw)
            os.fsync(fd)
        finally:
            os.close(fd)
        old.unlink(missing_ok=True)
        if self.path.exists():
            os.link(self.path, old)  # kept to be the next spare; the log is never missing
        os.replace(spare, self.path)
        sync_dir(self.path.parent)
        if old.exists():
            os.replace(old, spare)
        self.header, self.size, self._written_ahead = header, len(raw), size
        self._seed = header.seed

    def append(self, batch: Sequence[Record]) -> None:
        """One batch, one frame, one ``fdatasync``: durable when this returns."""
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY)
        frame = encode_frame(batch, self._seed)
        end = self.size + len(frame)
        if end > self._written_ahead:  # past what was written ahead: a megabyte more
            ahead = max(end, self._written_ahead + (1 << 20))
            _write_zeros(self._fd, self._written_ahead, ahead)
            self._written_ahead = ahead
        _write_all(self._fd, frame, self.size)
        os.fdatasync(self._fd)
        self.size = end

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _write_all(fd: int, data: bytes, offset: int = 0) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


#: what the zeros written ahead go in, one write call each: a page of the page cache
PAGE = os.sysconf("SC_PAGE_SIZE")
_ZEROS = bytes(PAGE)


def _write_zeros(fd: int, start: int, end: int) -> None:
    """Zeros from ``start`` to ``end``, a page per write call, so that the page cache holds
    them in single pages (a 5 MiB write is cached in 2 MiB folios: see the module's doc)."""
    while start < end:
        n = min(PAGE - start % PAGE, end - start)
        _write_all(fd, _ZEROS[:n], start)
        start += n


def _read_small_pages(path: Path) -> bytes:
    """The whole file, read with readahead off (``POSIX_FADV_RANDOM``): a page not cached comes
    in as a single page, not in a large folio the next append would dirty whole."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_log(journal: Path) -> Contents | OSError | ValueError:
    """The log beside a journal, or why it cannot be read. Read *before* the journal is: a live
    journal's writer commits to SQLite before it logs, so SQLite has at least what it holds."""
    try:
        return RedoLog(RedoLog.beside(journal)).read()
    except (OSError, ValueError) as exc:
        return exc
