"""Capture files: what device links carried, both ways, with timestamps (docs/replay.md).

A capture is text a person can read and diff, in the spirit of gpsd's regression logs::

    # tableside capture 1
    # tableside: 0.1.0
    # recorded: 2026-12-01T04:40:00Z
    # link shuffler: device=socket://127.0.0.1:7001 framing=tableside baudrate=9600
    # comment: shuffler simulator, count=51@2 jam@3
         0.000 shuffler open
         1.210 shuffler host a5 00 00 42 a4 1a
         1.902 shuffler dev  a5 3b 00 20 …
      1503.117 shuffler close dev

Each record is ``T_MS LINK WHAT [DATA]``: milliseconds since the recorder started (one clock for
every link), the link's name, and ``open`` (the host opened the line), ``host`` (bytes the host
sent the device), ``dev`` (bytes the device sent the host) or ``close host|dev`` (who ended the
session). ``#`` lines after the header are comments: a lab annotates a capture freely.
Sans-IO: this module reads and writes text, nothing else.
"""

from __future__ import annotations

import datetime
import enum
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from tableside.errors import ConfigurationError

__all__ = [
    "FORMAT_LINE",
    "Capture",
    "CaptureError",
    "Framing",
    "LinkInfo",
    "Record",
    "Session",
    "What",
    "format_record",
    "link_and_value",
    "parse_capture",
    "read_capture",
    "write_header",
]

FORMAT_LINE = "# tableside capture 1"

_NAME = r"[A-Za-z_][A-Za-z0-9_.-]*"
_NAME_RE = re.compile(rf"^{_NAME}$")
_LINK_RE = re.compile(rf"^# link (?P<name>{_NAME}): (?P<rest>.*)$")
_KEY_RE = re.compile(r"^# (?P<key>[a-z][a-z-]*): ?(?P<value>.*)$")


class CaptureError(ConfigurationError, ValueError):
    """A capture file that cannot be read; the message says which file, which line, and why."""


class Framing(enum.StrEnum):
    """How the host's bytes on a link are split into units when replay compares them."""

    #: tableside frames (docs/protocols/shuffler.md); the device speaks unasked
    TABLESIDE = "tableside"
    #: ccTalk messages on a polled bus; each host request gets the recorded reply
    CCTALK = "cctalk"
    #: no framing known: the host's bytes are compared as one stream, in order
    RAW = "raw"


class What(enum.StrEnum):
    OPEN = "open"
    HOST = "host"  # host → device
    DEV = "dev"  # device → host
    CLOSE = "close"


@dataclass(frozen=True, slots=True)
class Record:
    t_ms: float
    link: str
    what: What
    data: bytes = b""
    #: for CLOSE: who ended the session, "host" or "dev"
    by: str = ""


@dataclass(frozen=True, slots=True)
class LinkInfo:
    name: str
    device: str = ""
    framing: Framing = Framing.TABLESIDE
    baudrate: int = 9600
    #: anything else the header line said (e.g. class=shuffler), kept for people
    extra: tuple[tuple[str, str], ...] = ()

    def header_line(self) -> str:
        fields = [f"device={self.device}", f"framing={self.framing}", f"baudrate={self.baudrate}"]
        fields += [f"{k}={v}" for k, v in self.extra]
        return f"# link {self.name}: {' '.join(fields)}"


@dataclass(slots=True)
class Session:
    """One opening of a link by the host, to its close (or to the end of the capture)."""

    link: str
    opened_ms: float
    records: list[Record] = field(default_factory=list)
    closed_by: str = ""


@dataclass
class Capture:
    links: dict[str, LinkInfo]
    records: list[Record]
    #: header keys other than the links (tableside, recorded, comment…), in order
    header: list[tuple[str, str]] = field(default_factory=list)
    path: Path | None = None

    def sessions(self, link: str) -> list[Session]:
        out: list[Session] = []
        for record in self.records:
            if record.link != link:
                continue
            if record.what is What.OPEN:
                out.append(Session(link, record.t_ms))
            elif out and not out[-1].closed_by:
                if record.what is What.CLOSE:
                    out[-1].closed_by = record.by
                else:
                    out[-1].records.append(record)
        return out

    def comment(self) -> str:
        return "\n".join(v for k, v in self.header if k == "comment")


def write_header(
    out: TextIO, links: Iterable[LinkInfo], comment: str = "", *, version: str
) -> None:
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    out.write(f"{FORMAT_LINE}\n# tableside: {version}\n")
    out.write(f"# recorded: {now.isoformat().replace('+00:00', 'Z')}\n")
    for link in links:
        out.write(link.header_line() + "\n")
    for line in comment.splitlines() or [""]:
        if line:
            out.write(f"# comment: {line}\n")
    out.write("#        t_ms link what bytes\n")


def format_record(record: Record) -> str:
    head = f"{record.t_ms:12.3f} {record.link} "
    if record.what is What.CLOSE:
        return f"{head}close {record.by}"
    if record.what is What.OPEN:
        return f"{head}open"
    return f"{head}{record.what.value:<4} {record.data.hex(' ')}"


def link_and_value(text: str, default: str = "device") -> tuple[str, str]:
    """``NAME=VALUE`` → (NAME, VALUE); a bare VALUE (a URL may hold "=") is ``default``'s."""
    name, sep, value = text.partition("=")
    if sep and _NAME_RE.match(name) and value:
        return name, value
    return default, text


def read_capture(path: Path) -> Capture:
    """Read a capture; raise CaptureError naming the file, the line and what is wrong."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CaptureError(f"{path}: cannot read: {exc}") from exc
    capture = parse_capture(text, str(path))
    capture.path = path
    return capture


def parse_capture(text: str, source: str = "<capture>") -> Capture:
    lines = text.splitlines()
    if not lines or lines[0].strip() != FORMAT_LINE:
        raise CaptureError(f"{source}:1: not a tableside capture (expected {FORMAT_LINE!r})")
    links: dict[str, LinkInfo] = {}
    header: list[tuple[str, str]] = []
    records: list[Record] = []
    open_links: set[str] = set()
    in_header = True
    for number, line in _numbered(lines[1:], start=2):
        where = f"{source}:{number}"
        if line.startswith("#"):
            if in_header and (m := _LINK_RE.match(line)):
                links[m["name"]] = _link_info(m["name"], m["rest"], where)
            elif in_header and (m := _KEY_RE.match(line)):
                header.append((m["key"], m["value"]))
            continue  # a comment
        in_header = False
        record = _record(line, where)
        if record.link not in links:
            raise CaptureError(f"{where}: link {record.link!r} is not declared in the header")
        if records and record.t_ms < records[-1].t_ms:
            raise CaptureError(f"{where}: time goes backwards ({record.t_ms} ms)")
        if record.what is What.OPEN:
            open_links.add(record.link)
        elif record.link not in open_links:
            raise CaptureError(
                f"{where}: {record.what} on {record.link} outside a session (no 'open' before "
                "it; cut a capture only before an 'open')"
            )
        elif record.what is What.CLOSE:
            open_links.discard(record.link)
        records.append(record)
    if not links:
        raise CaptureError(f"{source}: no '# link NAME: …' line in the header")
    return Capture(links, records, header)


def _numbered(lines: list[str], start: int) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(lines, start):
        if line.strip():
            yield number, line.strip()


def _link_info(name: str, rest: str, where: str) -> LinkInfo:
    fields: dict[str, str] = {}
    for item in rest.split():
        key, sep, value = item.partition("=")
        if not sep:
            raise CaptureError(f"{where}: link {name}: expected KEY=VALUE, got {item!r}")
        fields[key] = value
    try:
        framing = Framing(fields.pop("framing", Framing.TABLESIDE))
    except ValueError:
        known = ", ".join(f.value for f in Framing)
        raise CaptureError(f"{where}: link {name}: framing must be one of {known}") from None
    try:
        baudrate = int(fields.pop("baudrate", "9600"))
    except ValueError:
        raise CaptureError(f"{where}: link {name}: baudrate must be a number") from None
    device = fields.pop("device", "")
    return LinkInfo(name, device, framing, baudrate, tuple(fields.items()))


def _record(line: str, where: str) -> Record:
    parts = line.split(maxsplit=3)
    if len(parts) < 3:
        raise CaptureError(f"{where}: expected 'T_MS LINK WHAT [BYTES]', got {line!r}")
    t_text, link, what_text = parts[:3]
    rest = parts[3] if len(parts) > 3 else ""
    try:
        t_ms = float(t_text)
    except ValueError:
        raise CaptureError(f"{where}: time {t_text!r} is not a number of milliseconds") from None
    if not _NAME_RE.match(link):
        raise CaptureError(f"{where}: {link!r} is no link name")
    try:
        what = What(what_text)
    except ValueError:
        raise CaptureError(f"{where}: {what_text!r}: expected open, host, dev or close") from None
    if what is What.CLOSE:
        if rest not in ("host", "dev"):
            raise CaptureError(f"{where}: close must say who closed: 'close host' or 'close dev'")
        return Record(t_ms, link, what, by=rest)
    if what is What.OPEN:
        return Record(t_ms, link, what)
    try:
        data = bytes.fromhex(rest)
    except ValueError:
        raise CaptureError(f"{where}: bytes must be hex pairs, e.g. 'a5 00 00 42'") from None
    if not data:
        raise CaptureError(f"{where}: a {what} record carries at least one byte")
    return Record(t_ms, link, what, data)
