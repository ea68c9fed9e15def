"""The ``verify-install``, ``journal`` and ``key`` commands: the installed software, a
table's journal and its key."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tableside import __version__
from tableside.cli.common import AddParser

__all__ = ["add_parsers"]


def add_parsers(add: AddParser) -> None:
    """The ``verify-install``, ``journal`` and ``key`` commands."""
    verify = add("verify-install", help="hash the installed software (self-check)")
    verify.set_defaults(handler=_cmd_verify_install)
    verify.add_argument("--files", action="store_true", help="list every file and its hash")
    verify.add_argument("--expect", help="exit 1 unless the overall SHA-256 is this one")
    verify.add_argument(
        "--manifest",
        nargs="?",
        type=Path,
        const=_DEFAULT_MANIFEST,
        metavar="PATH",
        help="hold every installed file to the release manifest (default: the install's own, "
        f"{_DEFAULT_MANIFEST}); exit 1 naming changed, missing and added files",
    )
    verify.add_argument(
        "--write-manifest",
        type=Path,
        metavar="PATH",
        help="write the release manifest of this install (or of --from-wheels) to PATH",
    )
    verify.add_argument(
        "--from-wheels",
        type=Path,
        metavar="DIR",
        help="with --write-manifest: the manifest of the install these wheels will make",
    )

    journal = add("journal", help="check, export, back up or recover a table's journal")
    journal.set_defaults(handler=_cmd_journal)
    jsub = journal.add_subparsers(dest="journal_command", required=True, metavar="ACTION")
    for name, text in (
        ("verify", "check the hash chain: finds an edited, inserted or removed record"),
        ("export", "write records as JSON lines, for auditors"),
        ("recover", "set a journal that fails its checks aside and start a new one after it"),
        ("backup", "copy a journal, live or not, consistently (SQLite's backup API)"),
    ):
        action = jsub.add_parser(name, help=text)
        where = action.add_mutually_exclusive_group(required=True)
        where.add_argument("path", nargs="?", type=Path, help="the journal.sqlite file")
        where.add_argument("--config", type=Path, help="the table's config: its journal")
        if name == "recover":
            action.add_argument("--table", help="the table id, when the journal cannot say")
            action.add_argument(
                "--after-seq",
                type=int,
                help="the last seq the table used, when the journal cannot say (take it from a "
                "subscriber's record); the new journal starts after it",
            )
        if name == "backup":
            action.add_argument("--output", "-o", type=Path, required=True,
                                help="the copy (a new file; never overwritten)")  # fmt: skip
        if name == "export":
            action.add_argument("--from-seq", type=int, help="first seq to export")
            action.add_argument("--to-seq", type=int, help="last seq to export")
            action.add_argument("--output", "-o", type=Path, help="file (default: stdout)")

    key = add(
        "key", help="print the table's public key (what the floor enrols) and where its key is"
    )
    key.set_defaults(handler=_cmd_key)
    key.add_argument("--config", type=Path, required=True, help="the table's config")
    key.add_argument(
        "--create",
        action="store_true",
        help="make the key now if the table has none yet (else it is made at its first start); "
        "run as the daemon's user, so that the daemon can read it",
    )


#: where a packaged install keeps its manifest (daemon/integrity.py's default_manifest_path)
_DEFAULT_MANIFEST = Path(sys.prefix) / "share" / "tableside" / "manifest.json"


def _cmd_verify_install(args: argparse.Namespace) -> int:
    from tableside.daemon import integrity

    if args.from_wheels is not None and args.write_manifest is None:
        print("--from-wheels goes with --write-manifest", file=sys.stderr)
        return 2
    if args.write_manifest is not None:
        try:
            if args.from_wheels is not None:
                manifest = integrity.manifest_from_wheels(args.from_wheels)
            else:
                manifest = integrity.manifest_from_install()
        except integrity.ManifestError as exc:
            print(f"cannot make the manifest: {exc}", file=sys.stderr)
            return 1
        digest = integrity.write_manifest(manifest, args.write_manifest)
        print(f"manifest: {args.write_manifest} ({len(manifest.files)} files)")
        print(f"manifest sha256: {digest}")
        print(f"version: {manifest.version}")
        return 0
    if args.manifest is not None:
        check = integrity.check_manifest(args.manifest)
        print(f"manifest: {check.manifest}")
        print(f"manifest sha256: {check.manifest_sha256 or '-'}")
        print(f"version: {check.version or '-'}  (running: {__version__})")
        for label, names in (("changed", check.changed), ("missing", check.missing),
                             ("added", check.added)):  # fmt: skip
            for name in names:
                print(f"{label}: {name}")
        if check.problem is not None:
            print(check.problem)
        print(f"MANIFEST: all {check.files} files match" if check.ok else "MANIFEST: MISMATCH")
        return 0 if check.ok else 1

    report = integrity.verify_install()
    if args.files:
        for path, digest in sorted(report.files.items()):
            print(f"{digest}  {path}")
    print(f"tableside {__version__} at {report.root}")
    print(f"files: {len(report.files)}  sha256: {report.digest}")
    if report.checked_against_record:
        for label, paths in (("changed", report.changed), ("missing", report.missing),
                             ("not in RECORD", report.unrecorded)):  # fmt: skip
            for path in paths:
                print(f"{label}: {path}")
        print("RECORD: every file matches" if report.ok else "RECORD: MISMATCH")
    else:
        print("RECORD: none (an editable install); compare the sha256 with the release's")
    if args.expect and args.expect != report.digest:
        print(f"EXPECTED {args.expect}: MISMATCH")
        return 1
    return 0 if report.ok else 1


def _journal_path(args: argparse.Namespace) -> tuple[Path, str | None]:
    from tableside.daemon.config import load_config

    if args.config is None:
        return args.path, None
    config = load_config(args.config, use_env=False)
    return config.table.state_dir / config.table.id / "journal.sqlite", config.table.id


def _cmd_journal(args: argparse.Namespace) -> int:
    import sqlite3

    from tableside.daemon import journal
    from tableside.daemon.config import ConfigError

    try:
        path, table = _journal_path(args)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    from tableside.daemon.journal.mark import legacy_mark_path

    left = journal.RedoLog.beside(path).exists() or legacy_mark_path(path).exists()
    lost = not path.is_file() and left
    if not path.is_file() and not (args.journal_command == "recover" and lost):
        print(f"tableside journal: no journal at {path}", file=sys.stderr)
        return 2
    if args.journal_command == "backup":
        try:
            summary = journal.backup(path, args.output)
        except (journal.JournalError, sqlite3.Error) as exc:
            print(f"tableside journal: {exc}", file=sys.stderr)
            return 2
        print(json.dumps({"path": str(args.output), **summary}))
        return 0
    if args.journal_command == "verify":
        summary, problems = journal.verify_file(path, table=table)
        print(json.dumps({"path": str(path), **summary, "problems": len(problems)}))
        for problem in problems:
            print(f"PROBLEM {problem}")
        print("journal: OK" if not problems else f"journal: {len(problems)} PROBLEM(S)")
        return 0 if not problems else 1
    if args.journal_command == "export":
        out = args.output.open("w", encoding="utf-8") if args.output else sys.stdout
        try:
            for record in journal.export_records(path, args.from_seq, args.to_seq):
                out.write(json.dumps(record, separators=(",", ":")) + "\n")
        finally:
            if args.output:
                out.close()
        return 0
    summary, problems = ({}, []) if lost else journal.verify_file(path, table=table)
    if not problems and not lost:
        print(f"tableside journal: {path} passes its checks; nothing to recover", file=sys.stderr)
        return 1
    table = table or args.table or summary.get("table")
    if not table:
        print("tableside journal: the journal does not say its table: give --config or --table",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        done = journal.recover(path, table, after_seq=args.after_seq)
    except journal.JournalError as exc:
        print(f"tableside journal: {exc}", file=sys.stderr)
        return 2
    print(f"set aside: {done.aside or '(no journal: only its log file)'}")
    if done.never_numbered:
        print(f"new journal: {path} starts at seq 0 (its log says nothing was ever numbered: "
              "a first start cut short)")  # fmt: skip
    else:
        print(f"new journal: {path}, numbering carries on after seq {done.after_seq}")
    print(f"restated: {done.restated} retained topics and device events (the table as it was); "
          "the acceptors stay locked out until betting is opened")  # fmt: skip
    return 0


def _cmd_key(args: argparse.Namespace) -> int:
    from tableside.daemon.config import ConfigError, load_config
    from tableside.wire import proof

    try:
        config = load_config(args.config, use_env=False)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    directory = config.table.state_dir / config.table.id
    path = directory / proof.KEY_FILE
    if not path.exists() and not args.create:
        print(f"tableside key: table {config.table.id} has no key yet at {path}: it is made at "
              "the table's first start (or give --create)", file=sys.stderr)  # fmt: skip
        return 2
    try:
        key = proof.load_or_create_key(directory)
    except (OSError, ValueError) as exc:
        print(f"tableside key: {path}: {exc}", file=sys.stderr)
        return 2
    key_hex = proof.public_key_hex(key)
    print(key_hex)  # for scripts: `tableside floor enroll --key`
    groups = proof.fingerprint(key_hex)  # for a person comparing it with the floor's page
    print(f"table {config.table.id}: {path}\nfingerprint, group by group:", file=sys.stderr)
    for row in range(0, len(groups), 4):
        print("  " + "   ".join(f"{n + 1:>2}: {groups[n]}" for n in range(row, row + 4)),
              file=sys.stderr)  # fmt: skip
    return 0
