"""``tableside floor …``: run the floor service, and read what it keeps (docs/floor.md)."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import re
import ssl
import sys
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from tableside.wire import proof

if TYPE_CHECKING:  # the store loads with a floor command, not with every command's parser
    from tableside.floor.service import Floor
    from tableside.floor.store import Store, TableState
    from tableside.floor.web.commander import RoleLogin

#: the CLI's signal-aware runner of a command's coroutine (tableside.cli.common.run_async)
RunAsync = Callable[[Coroutine[object, object, int]], int]

__all__ = ["DEFAULT_STORE", "DEFAULT_USERS", "add_parser", "command"]

DEFAULT_STORE = "sqlite:///var/lib/tableside-floor/floor.db"
DEFAULT_USERS = Path("/etc/tableside/floor-users.json")


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host or "127.0.0.1", int(port)


def add_parser(add: Callable[..., argparse.ArgumentParser]) -> None:
    """``add``: the subparsers' ``add_parser``."""
    floor = add("floor", help="the floor: every table's stream stored and verified")
    fsub = floor.add_subparsers(dest="floor_command", required=True, metavar="ACTION")

    def action(name: str, text: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = fsub.add_parser(name, help=text)
        parser.add_argument(
            "--store", default=DEFAULT_STORE,
            help=f"sqlite:///PATH or postgresql://… (default {DEFAULT_STORE})",
        )  # fmt: skip
        return parser

    run = action("run", "subscribe to every table, store, verify, repair gaps")
    run.add_argument("--broker", default="mqtt://127.0.0.1:1883", help="mqtt://host:port")
    run.add_argument("--prefix", default="tableside", help="topic prefix (default tableside)")
    run.add_argument("--share", metavar="GROUP",
                     help="share the load with other floors: $share/GROUP/… (MQTT v5)")  # fmt: skip
    run.add_argument("--client-id", help="the broker session's id (default tableside-floor-HOST;"
                     " each floor of a host needs its own)")  # fmt: skip
    run.add_argument("--session-expiry", type=int, metavar="S",
                     help="seconds the broker keeps the floor's session while it is away "
                     "(default a day; 60 with --share)")  # fmt: skip
    run.add_argument("--username", help="the floor's broker user (its ACL: read all, auditor)")
    run.add_argument("--password", help="or TABLESIDE_PASSWORD in the environment")
    run.add_argument("--metrics", type=_address, metavar="HOST:PORT",
                     help="serve Prometheus metrics at http://HOST:PORT/metrics")  # fmt: skip
    run.add_argument("--repair-interval", type=float, default=2.0, metavar="S",
                     help="seconds between looks for gaps (default 2)")  # fmt: skip
    run.add_argument("--retry", type=float, default=10.0, metavar="S",
                     help="seconds before a range still missing is asked for again (default 10,"
                     " doubling up to 60)")  # fmt: skip
    run.add_argument("--replay-rate", type=float, default=5.0, metavar="N",
                     help="replay requests per second at most (default 5)")  # fmt: skip

    run.add_argument("--http", type=_address, metavar="HOST:PORT",
                     help="serve the web view (the floor map, the rulings queue, each table) "
                     "at http://HOST:PORT/")  # fmt: skip
    run.add_argument("--users", type=Path, default=DEFAULT_USERS, metavar="FILE",
                     help=f"who may log in to the web view (default {DEFAULT_USERS}; "
                     "tableside floor user)")  # fmt: skip
    run.add_argument("--role-login", action="append", default=[], metavar="ROLE=USER[:PWFILE]",
                     help="the broker login the web view uses to send a role's requests "
                     "(repeatable; default: the user floor-ROLE, no password)")  # fmt: skip
    run.add_argument("--tls-cert", type=Path, metavar="PEM", help="serve the web view over TLS")
    run.add_argument("--tls-key", type=Path, metavar="PEM", help="the certificate's key")

    user = fsub.add_parser("user", help="who may log in to the web view, and as what role")
    user.add_argument("--users", type=Path, default=DEFAULT_USERS, metavar="FILE")
    user.add_argument("user_action", choices=("add", "remove", "list"))
    user.add_argument("name", nargs="?")
    user.add_argument(
        "--role", help="dealer, floorperson, technician, auditor, surveillance or supervisor"
    )
    user.add_argument("--password-stdin", action="store_true",
                      help="read the password from stdin (default: ask twice)")  # fmt: skip

    gaps = action("gaps", "per table: highest seq, gaps, duplicates, last heard, verification")
    gaps.add_argument("--table", help="one table (default: every table)")
    gaps.add_argument("--json", action="store_true", help="one JSON object per table")

    enroll = action("enroll", "trust a table's public key (`tableside key` prints it)")
    enroll.add_argument("--table", required=True)
    enroll.add_argument("--key", required=True, metavar="HEX|PEMFILE",
                        help="64 hex digits, or a file holding a PEM PUBLIC KEY")  # fmt: skip

    approve = action("approve-software",
                     "approve a release manifest: tables running it are not flagged")  # fmt: skip
    approve.add_argument("--manifest", required=True, type=_sha256, metavar="SHA256",
                         help="the manifest's SHA-256 (`tableside verify-install --manifest` "
                         "prints it)")  # fmt: skip
    approve.add_argument("--note", help="why, e.g. the release and the lab's report")
    revoke = action("revoke-software", "take a release manifest off the approved list")
    revoke.add_argument("--manifest", required=True, type=_sha256, metavar="SHA256")
    enroll.add_argument("--reason", default="", help="why (kept on the record)")
    revoke = action("revoke", "trust a table's enrolled key no more (on the record, with why)")
    revoke.add_argument("--table", required=True)
    revoke.add_argument(
        "--key",
        required=True,
        metavar="HEX",
        help="the key enrolled now (64 hex digits), as `floor gaps` shows it",
    )
    revoke.add_argument("--reason", required=True, help="why (kept on the record)")

    verify = action("verify", "check a table's stored chain and signatures (and its journal)")
    verify.add_argument("--table", required=True)
    verify.add_argument(
        "--journal-export", type=Path, metavar="FILE",
        help="the table's `tableside journal export` JSON lines, to compare",
    )  # fmt: skip

    export = action("export", "a table's records as JSON lines, in the journal export's format")
    export.add_argument("--table", required=True)
    export.add_argument("--from", dest="first", type=int, default=0, metavar="SEQ")
    export.add_argument("--to", dest="last", type=int, default=2**62, metavar="SEQ")
    export.add_argument("--output", "-o", type=Path, help="file (default: stdout)")


def _sha256(text: str) -> str:
    if not re.fullmatch(r"[0-9a-fA-F]{64}", text):
        raise argparse.ArgumentTypeError(f"expected 64 hex digits, got {text!r}")
    return text.lower()


def _user(args: argparse.Namespace) -> int:
    import getpass

    from tableside.floor.web.users import Users

    try:
        users = Users(args.users)
        if args.user_action == "list":
            for each in users:
                print(f"{each.name}\t{each.role}")
            return 0
        if not args.name:
            print(f"tableside floor user {args.user_action}: name a user", file=sys.stderr)
            return 2
        if args.user_action == "remove":
            users.remove(args.name)
            return 0
        if not args.role:
            print("tableside floor user add: --role is required", file=sys.stderr)
            return 2
        if args.password_stdin:
            password = sys.stdin.readline().rstrip("\n")
        else:
            password = getpass.getpass(f"password for {args.name}: ")
            if getpass.getpass("again: ") != password:
                print("tableside floor user add: the passwords differ", file=sys.stderr)
                return 2
        users.set(args.name, args.role, password)
    except (ValueError, OSError) as exc:
        print(f"tableside floor user: {exc}", file=sys.stderr)
        return 2
    print(f"{args.name}: {args.role} ({args.users})")
    return 0


def _role_logins(texts: list[str]) -> dict[str, RoleLogin]:
    """``ROLE=USER[:PWFILE]`` for each role; every role not named logs in as floor-ROLE."""
    from tableside.floor.web.commander import RoleLogin
    from tableside.rules.commands import Role

    logins: dict[str, RoleLogin] = {role.value: RoleLogin(f"floor-{role.value}") for role in Role}
    for text in texts:
        role, sep, rest = text.partition("=")
        if not sep or role not in logins or not rest:
            raise ValueError(f"--role-login {text!r}: expected ROLE=USER[:PWFILE], ROLE one of "
                             f"{', '.join(logins)}")  # fmt: skip
        username, _, pwfile = rest.partition(":")
        password = Path(pwfile).read_text(encoding="utf-8").strip() if pwfile else None
        logins[role] = RoleLogin(username, password)
    return logins


def _tls(cert: Path | None, key: Path | None) -> ssl.SSLContext | None:
    """The web view's TLS context from ``--tls-cert`` and ``--tls-key`` (both or neither)."""
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        given, missing = ("--tls-cert", "--tls-key") if key is None else ("--tls-key", "--tls-cert")
        raise ValueError(f"{given} needs {missing} too")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key)
    except OSError as exc:  # missing, unreadable, or not a certificate with its key
        why = exc.strerror or getattr(exc, "reason", None) or str(exc)
        raise ValueError(f"--tls-cert {cert} --tls-key {key}: cannot serve TLS with these "
                         f"({why})") from exc  # fmt: skip
    return context


#: the modules the ``floor`` extra brings (pyproject.toml); tests/test_cli_requests.py ties them
FLOOR_EXTRA = frozenset({"aiohttp", "psycopg"})


def command(args: argparse.Namespace, run_async: RunAsync) -> int:
    """Run ``tableside floor ACTION``; ``run_async`` is the CLI's signal-aware runner. A module
    of the ``floor`` extra that is not installed is one line naming the extra, wherever the
    action imports it (the web view, the PostgreSQL store)."""
    try:
        return _command(args, run_async)
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] not in FLOOR_EXTRA:
            raise
        print(f"tableside floor {args.floor_command}: needs {exc.name}, which the floor extra "
              "brings: pip install 'tableside[floor]'", file=sys.stderr)  # fmt: skip
        return 2


def _command(args: argparse.Namespace, run_async: RunAsync) -> int:
    if args.floor_command == "user":
        return _user(args)
    if args.floor_command == "run" and (args.tls_cert or args.tls_key) and not args.http:
        print("tableside floor run: --tls-cert and --tls-key serve the web view: give --http too",
              file=sys.stderr)  # fmt: skip
        return 2
    if args.floor_command == "run" and args.http:
        # the web view's module first: without the floor extra (aiohttp) that is what to say,
        # before its users or logins are looked at
        importlib.import_module("tableside.floor.web.app")
        try:
            args.web_logins = _role_logins(args.role_login)
            from tableside.floor.web.users import Users

            args.web_users = Users(args.users)
            args.web_tls = _tls(args.tls_cert, args.tls_key)
        except (ValueError, OSError) as exc:
            print(f"tableside floor run: {exc}", file=sys.stderr)
            return 2
        if not any(True for _ in args.web_users):
            print(f"tableside floor run: --http needs users: {args.users} has none "
                  "(tableside floor user add NAME --role ROLE)", file=sys.stderr)  # fmt: skip
            return 2
    from tableside.floor.store import StoreError, open_store

    try:
        store = open_store(args.store)
    except ValueError as exc:
        print(f"tableside floor: --store {exc}", file=sys.stderr)
        return 2
    if args.floor_command == "enroll":  # the key's file is read here, not on the loop
        path = Path(args.key)
        if not proof._HEX64.fullmatch(args.key.lower()) and path.is_file():
            args.key = path.read_text(encoding="utf-8")
    if args.floor_command == "verify" and args.journal_export is not None:
        try:
            args.journal_lines = list(_export_lines(args.journal_export))
        except (OSError, ValueError) as exc:
            print(f"tableside floor verify: {exc}", file=sys.stderr)
            return 2
    action = {"run": _run, "gaps": _gaps, "enroll": _enroll, "revoke": _revoke,
              "verify": _verify, "export": _export, "approve-software": _approve_software,
              "revoke-software": _revoke_software}[args.floor_command]  # fmt: skip

    async def go() -> int:
        try:
            async with store:
                status: int = await action(store, args)
                return status
        except StoreError as exc:
            print(f"tableside floor: {exc}", file=sys.stderr)
            return 1

    coro: Coroutine[object, object, int] = go()
    if args.floor_command == "run":
        return run_async(coro)
    return asyncio.run(coro)


async def _run(store: Store, args: argparse.Namespace) -> int:
    from tableside.floor.metrics import FloorMetrics
    from tableside.floor.service import Floor, RepairPolicy, default_client_id

    metrics = FloorMetrics()
    floor = Floor(
        store, args.broker, prefix=args.prefix, share=args.share,
        client_id=args.client_id or default_client_id(), username=args.username,
        password=args.password or os.environ.get("TABLESIDE_PASSWORD"),
        repair=RepairPolicy(interval_s=args.repair_interval, retry_s=args.retry,
                            rate_per_s=args.replay_rate),
        metrics=metrics, session_expiry=args.session_expiry,
    )  # fmt: skip
    if args.metrics:
        try:
            metrics.serve(*args.metrics)
        except OSError as exc:
            print(f"tableside floor: --metrics {args.metrics[0]}:{args.metrics[1]}: {exc}",
                  file=sys.stderr)  # fmt: skip
            return 2
    print(f"floor: {args.broker} {floor.topic} -> {args.store}", file=sys.stderr, flush=True)
    try:
        if args.http:
            return await _run_with_web(floor, store, args)
        await floor.run()
    finally:
        metrics.close()
    return 0


async def _run_with_web(floor: Floor, store: Store, args: argparse.Namespace) -> int:
    import contextlib

    from tableside.floor.web.app import WebApp, serving
    from tableside.floor.web.commander import Commander, MqttSender
    from tableside.floor.web.view import FloorView

    tls: ssl.SSLContext | None = args.web_tls
    send = MqttSender(args.broker, args.prefix, args.web_logins)
    web_app = WebApp(FloorView(args.prefix), args.web_users, Commander(send), store=store,
                     secure_cookies=tls is not None, metrics=floor.metrics)  # fmt: skip
    floor.on_stored = web_app.live.stored
    web_app.keys_changed = floor.keys_changed
    host, port = args.http
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(send.aclose)
        try:
            base = await stack.enter_async_context(serving(web_app, host, port, tls))
        except OSError as exc:
            print(f"tableside floor run: --http {host}:{port}: {exc}", file=sys.stderr)
            return 2
        print(f"floor: web view at {base}/", file=sys.stderr, flush=True)
        await floor.run()
    return 0


def _when(ts: float | None) -> str:
    if ts is None:
        return "never"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _ranges(gaps: list[tuple[int, int]]) -> str:
    return ", ".join(f"{a}" if a == b else f"{a}..{b}" for a, b in gaps) or "none"


def _runs(seqs: list[int]) -> list[tuple[int, int]]:
    """Sorted seqs as ranges of consecutive ones."""
    runs: list[tuple[int, int]] = []
    for seq in sorted(seqs):
        if runs and runs[-1][1] + 1 == seq:
            runs[-1] = (runs[-1][0], seq)
        else:
            runs.append((seq, seq))
    return runs


def describe(state: TableState) -> str:
    """``floor gaps``'s lines for one table."""
    p = state.progress
    lines = [
        f"{state.table}: highest seq {state.highest_seq}, {state.records} records, "
        f"last heard {_when(state.last_heard)}",
        f"  gaps: {_ranges(state.gaps)}" + (f" ({state.missing} missing)" if state.gaps else ""),
        f"  duplicates {state.duplicates}, conflicts {state.conflicts}, problems {state.problems}",
        f"  chain verified up to {p.verified_upto}" + (" (broken after it)" if p.broken else "")
        + f", signed up to {p.signed_upto}"
        + (f", key {state.key[:16]}…" if state.key else ", no key enrolled"),
    ]  # fmt: skip
    if state.withheld:
        lines.append(f"  withheld: seq {_ranges(_runs(state.withheld))} (larger than the broker's "
                     "limit: linked by the chain, the content in the table's journal)")  # fmt: skip
    if state.pruned_before is not None:
        lines.append(f"  the table's journal starts at seq {state.pruned_before}")
    if state.flagged:
        lines.append(f"  FLAGGED: {state.flagged}")
    return "\n".join(lines)


def _as_json(state: TableState) -> dict[str, object]:
    p = state.progress
    return {
        "table": state.table, "highest_seq": state.highest_seq, "records": state.records,
        "gaps": state.gaps, "missing": state.missing, "duplicates": state.duplicates,
        "conflicts": state.conflicts, "problems": state.problems,
        "last_heard": state.last_heard, "verified_upto": p.verified_upto,
        "signed_upto": p.signed_upto, "broken": p.broken,
        "pruned_before": state.pruned_before, "key": state.key, "flagged": state.flagged,
        "withheld": state.withheld,
    }  # fmt: skip


async def _gaps(store: Store, args: argparse.Namespace) -> int:
    tables = [args.table] if args.table else await store.tables()
    if args.table and args.table not in await store.tables():
        print(f"tableside floor gaps: no table {args.table!r} in {args.store}", file=sys.stderr)
        return 1
    if not tables:
        print(f"no tables in {args.store} yet", file=sys.stderr)
    for table in tables:
        state = await store.state(table)
        if state is not None:
            print(json.dumps(_as_json(state)) if args.json else describe(state))
    return 0


async def _enroll(store: Store, args: argparse.Namespace) -> int:
    try:
        key = proof.trusted_key(args.key)
    except ValueError as exc:
        print(f"tableside floor enroll: --key: {exc}", file=sys.stderr)
        return 2
    hex_key = proof.public_key_hex(key)
    done = await store.enrol(args.table, hex_key, by=_os_login(), via="cli", reason=args.reason)
    print(f"{args.table}: key {hex_key} enrolled (by {done.by or 'an unnamed login'})")
    return 0


async def _approve_software(store: Store, args: argparse.Namespace) -> int:
    await store.approve_software(args.manifest, args.note)
    print(f"manifest {args.manifest} approved")
    return 0


async def _revoke_software(store: Store, args: argparse.Namespace) -> int:
    if not await store.revoke_software(args.manifest):
        print(f"tableside floor revoke-software: {args.manifest} is not approved", file=sys.stderr)
        return 1
    print(f"manifest {args.manifest} revoked")
    return 0


async def _revoke(store: Store, args: argparse.Namespace) -> int:
    try:
        done = await store.revoke(args.table, args.key.lower(), by=_os_login(), via="cli",
                                  reason=args.reason)  # fmt: skip
    except ValueError as exc:
        print(f"tableside floor revoke: {exc}", file=sys.stderr)
        return 2
    print(f"{args.table}: key {done.key_hex} revoked (by {done.by or 'an unnamed login'}): "
          "its checkpoints stored from now on are not vouched for")  # fmt: skip
    return 0


def _os_login() -> str:
    """Who ran the command, as the system says (the daemon's config record asks the same)."""
    return os.environ.get("SUDO_USER") or os.environ.get("LOGNAME") or os.environ.get("USER") or ""


def _export_lines(path: Path) -> Iterator[tuple[int, dict[str, object]]]:
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise ValueError(f"{path}:{number}: not JSON: {exc}") from exc
            if not isinstance(record, dict):
                raise ValueError(f"{path}:{number}: not a JSON object")
            yield number, record


async def _verify(store: Store, args: argparse.Namespace) -> int:
    from tableside.floor.store import FAILED, Progress, stands_in
    from tableside.floor.verify import KeyHistory, against_export, recheck, walk
    from tableside.wire.topics import split_topic

    state = await store.state(args.table)
    if state is None:
        print(f"tableside floor verify: no table {args.table!r} in {args.store}", file=sys.stderr)
        return 1
    keys = {t: proof.trusted_key(k) for t, k in (await store.keys()).items()}
    history = KeyHistory({args.table: await store.enrolments(args.table)}, keys)
    stored = await store.records(args.table, limit=2**62)
    split = split_topic(args.table, stored[0].topic) if stored else None
    prefix = split[0] if split is not None else "tableside"
    checked = list(recheck(prefix, stored, keys, history))
    findings = [f"seq {m.seq}: {m.reason or m.verdict}" for m in checked if m.verdict in FAILED]
    progress, walked = walk(Progress(), checked, state.pruned_before or 0, across_gaps=True)
    findings.extend(str(f) for f in walked)
    if state.gaps and not any("missing" in f for f in findings):
        findings.append(f"missing: {_ranges(state.gaps)}")
    conflicts = await store.messages(args.table, kind="conflict", limit=1000)
    findings.extend(f"seq {m.seq}: {m.reason}" for m in conflicts)
    flagged = [m for m in stored if m.flagged is not None]
    if flagged:  # a checkpoint's signature failed: nothing stored after it is the table's, sure
        findings.append(
            f"{len(flagged)} record(s) stored while the table was flagged, seq "
            f"{_ranges(_runs([m.seq or 0 for m in flagged]))}: {flagged[0].flagged}"
        )
    if args.journal_export is not None:
        by_seq = {m.seq: m for m in stored if m.seq is not None}
        findings.extend(against_export(by_seq, args.journal_lines))
    out: TextIO = sys.stdout
    for finding in dict.fromkeys(findings):
        print(finding, file=out)
    withheld = [m.seq or 0 for m in stored if stands_in(m)]
    print(
        f"{args.table}: {len(stored)} records"
        + (
            f" ({len(withheld)} withheld, seq {_ranges(_runs(withheld))}: larger than the "
            "broker's limit, the content only in the table's journal)"
            if withheld
            else ""
        )
        + f", chain verified up to {progress.verified_upto}, "
        f"signed up to {progress.signed_upto}: "
        + ("ok" if not findings else f"{len(dict.fromkeys(findings))} problem(s)"),
        file=out,
    )
    return 1 if findings else 0


async def _export(store: Store, args: argparse.Namespace) -> int:
    from tableside.floor.verify import export_line

    out: TextIO = args.output.open("w", encoding="utf-8") if args.output else sys.stdout
    try:
        first = args.first
        while True:
            page = await store.records(args.table, first, args.last, limit=5_000)
            for record in page:
                out.write(json.dumps(export_line(record)) + "\n")
            if len(page) < 5_000:
                break
            first = (page[-1].seq or 0) + 1
    finally:
        if args.output:
            out.close()
    return 0
