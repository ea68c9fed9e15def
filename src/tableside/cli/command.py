"""The ``command`` command: a person's request to a table, checked here as the table would,
then sent and answered."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from tableside.cli.common import AddParser, table_on_broker

__all__ = ["add_parsers"]


def add_parsers(add: AddParser) -> None:
    """The ``command`` command."""
    command = add("command", help="ask a table to do something, as a role, and wait for its answer")
    command.set_defaults(handler=_cmd_command)
    command.add_argument("role", help="dealer, floorperson or technician")
    command.add_argument("device", help='a device of the table, or "table"')
    command.add_argument("name", metavar="COMMAND", help="e.g. open_table, start_shuffle")
    command.add_argument("args", nargs="*", metavar="KEY=VALUE", help="arguments (TOML values)")
    command.add_argument("--config", type=Path, help="take table id, broker and prefix from here")
    command.add_argument("--table", help="table id (default: from --config)")
    command.add_argument("--broker", help="mqtt://host:port (default: from --config)")
    command.add_argument("--prefix", help="topic prefix (default tableside)")
    command.add_argument("--username", help="your broker user (the ACL gives it its role)")
    command.add_argument("--password", help="or TABLESIDE_PASSWORD in the environment")
    command.add_argument("--ca-file", type=Path, help="mqtts: the broker's CA")
    command.add_argument("--timeout", type=float, default=10.0, help="seconds to wait")


def _cmd_command(args: argparse.Namespace) -> int:
    import os
    import uuid

    from tableside.errors import Refused
    from tableside.mqtt.client import Client
    from tableside.mqtt.connection import Endpoint, MqttError
    from tableside.wire.payloads import CommandRequest
    from tableside.wire.topics import Topics

    try:
        values = _command_args(args.name, args.args)
        _check_request(args.role, args.name, values)
    except (ValueError, Refused) as exc:  # refused here at once, as the table would refuse it
        print(f"tableside command: {exc}", file=sys.stderr)
        return 2
    where = table_on_broker(args, "command")
    if where is None:
        return 2
    table, broker, prefix, config = where
    topics = Topics(prefix, table)
    request_id = f"cli-{uuid.uuid4().hex[:12]}"
    request = CommandRequest(command=args.name, device=args.device, args=values,
                             request_id=request_id)  # fmt: skip
    password = args.password or os.environ.get("TABLESIDE_PASSWORD")
    # the table's MQTT version when its config is named (a 3.1.1 broker takes no v5 CONNECT)
    v5 = config is None or config.broker.mqtt_version == "5"
    endpoint = Endpoint(broker, args.username, password, ca_file=args.ca_file, v5=v5)

    async def go() -> int:
        async with Client(endpoint) as client:
            await client.subscribe(topics.command_result)
            await client.publish(topics.command(args.role), request.model_dump_json())
            try:
                async with asyncio.timeout(args.timeout):
                    async for message in client.messages():
                        answer = json.loads(message.payload or b"{}")
                        if answer.get("request_id") == request_id:
                            print(json.dumps(answer))
                            if answer.get("status") == "internal_error":  # not the person's
                                print(f"the table failed: {answer.get('error')}", file=sys.stderr)
                                return 4
                            if not answer.get("ok"):
                                print(f"refused: {answer.get('error')}", file=sys.stderr)
                            return 0 if answer.get("ok") else 1
            except TimeoutError:
                pass
        why = "is its daemon running, and may this user publish there?"
        print(f"tableside command: no answer from table {table} in {args.timeout} s ({why})",
              file=sys.stderr)  # fmt: skip
        return 3

    try:
        return asyncio.run(go())
    except MqttError as exc:
        print(f"tableside command: broker {broker}: {exc}", file=sys.stderr)
        return 3


def _toml_or_text(text: str) -> object:
    """A TOML value, or the text itself where it is none (a bare word is a string)."""
    import tomllib

    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _field_types(prop: Mapping[str, object], defs: Mapping[str, object]) -> set[str]:
    """The JSON types a field of a JSON Schema takes (``$ref`` and ``anyOf`` followed, null
    left out); ``enum`` alone: "enum"."""
    ref = prop.get("$ref")
    if isinstance(ref, str):
        target = defs.get(ref.rsplit("/", 1)[1])
        return _field_types(target, defs) if isinstance(target, Mapping) else set()
    branches = prop.get("anyOf")
    if isinstance(branches, list):
        return set().union(*(_field_types(b, defs) for b in branches if isinstance(b, Mapping)))
    kind = prop.get("type")
    if isinstance(kind, str):
        return set() if kind == "null" else {kind}
    return {"enum"} if "enum" in prop else set()


def _command_args(name: str, items: Sequence[str]) -> dict[str, object]:
    """``KEY=VALUE`` arguments of a command, read as its arguments' types say: a string
    argument is the text as typed (``note=30`` is the note "30", ``by=Ann Lee``); a list
    argument may be written without brackets (``positions=1,3``, ``player=7,K``); anything else
    is a TOML value (``count=52``, ``misdealt=false``, ``rank=7``, ``rank=K``). The table checks
    the values (a command it does not know: every value a TOML value)."""
    from tableside.rules.commands import COMMANDS

    command = COMMANDS.get(name)
    schema = command.args.model_json_schema() if command is not None else {}
    props, defs = schema.get("properties", {}), schema.get("$defs", {})
    values: dict[str, object] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ValueError(f"argument {item!r}: expected KEY=VALUE")
        kinds = _field_types(props.get(key, {}), defs)
        value = _toml_or_text(text)
        if kinds == {"string"} and not isinstance(value, str):
            value = text
        elif "array" in kinds and not text.lstrip().startswith("["):
            value = [_toml_or_text(part.strip()) for part in text.split(",")]
        values[key] = value
    return values


def _nearest(word: str, words: Iterable[str]) -> str:
    """``: did you mean 'x'?`` for the nearest spelling, or the whole list when none is near."""
    import difflib

    known = sorted(words)
    near = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    return f": did you mean {near[0]!r}?" if near else f" (one of: {', '.join(known)})"


def _check_request(role: str, name: str, values: Mapping[str, object]) -> None:
    """What the table would refuse of a request it can judge without its state (an unknown
    role, command or argument, an argument of the wrong type, a role that may not give it),
    refused before anything is sent: ``ValueError`` with the nearest spelling."""
    from tableside.rules.commands import COMMANDS, Role, authorise

    if role not in {r.value for r in Role}:
        raise ValueError(f"unknown role {role!r}{_nearest(role, (r.value for r in Role))}")
    if name not in COMMANDS:
        raise ValueError(f"unknown command {name!r}{_nearest(name, COMMANDS)}")
    command = authorise(name, role)
    fields = command.args.model_fields
    for key in values:
        if key not in fields and not fields:
            raise ValueError(f"{name} takes no arguments ({key!r} given)")
        if key not in fields:
            raise ValueError(f"{name}: unknown argument {key!r}{_nearest(key, fields)}")
    command.parse(values)
