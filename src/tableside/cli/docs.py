"""The ``rules``, ``commands`` and ``schemas`` commands: the documents generated from the code."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tableside.cli.common import AddParser

__all__ = ["add_parsers"]


def add_parsers(add: AddParser) -> None:
    """The ``rules``, ``commands`` and ``schemas`` commands (the generated docs)."""
    rules = add("rules", help="write docs/rules.md from the rule rows")
    rules.set_defaults(handler=_cmd_rules)
    rules.add_argument("output", type=Path, help="the markdown file to write")
    rules.add_argument("--tests", type=Path, default=Path("tests"), help="where the tests are")

    commands = add(
        "commands", help="rewrite the command table in docs/commands.md from rules/commands.py"
    )
    commands.set_defaults(handler=_cmd_commands)
    commands.add_argument("page", type=Path, help="the markdown page holding the table")

    schemas = add("schemas", help="write the MQTT payload JSON Schemas")
    schemas.set_defaults(handler=_cmd_schemas)
    schemas.add_argument("directory", type=Path)


def _cmd_rules(args: argparse.Namespace) -> int:
    from tableside.rules.report import render, tests_naming

    args.output.write_text(render(tests=tests_naming(args.tests)), encoding="utf-8")
    print(args.output)
    return 0


def _cmd_commands(args: argparse.Namespace) -> int:
    from tableside.rules.commands import BEGIN, END, render_table

    text = args.page.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        print(f"tableside commands: {args.page} has no generated table ({BEGIN} … {END})",
              file=sys.stderr)  # fmt: skip
        return 2
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    args.page.write_text(head + render_table() + tail, encoding="utf-8")
    print(args.page)
    return 0


def _cmd_schemas(args: argparse.Namespace) -> int:
    from tableside.wire.payloads import PAYLOAD_MODELS

    args.directory.mkdir(parents=True, exist_ok=True)
    from tableside.rules.commands import request_schema

    schemas = {name: model.model_json_schema() for name, model in PAYLOAD_MODELS.items()}
    # one branch per declared command, with its args, in the request's envelope
    schemas["command"] = request_schema(schemas["command"])
    # each device event's data, from its type: <device class>.<kind>, any_device.<kind>
    from tableside.daemon.runtime import TableActionFailed
    from tableside.drivers.catalog import ANY_DEVICE, EVENTS, event_schema
    from tableside.drivers.events import DeviceEvent
    from tableside.wire.events import FirmwareChanged, ShuffleAlert, ShuffleStatistics

    events = {f"{device_class}.{cls.kind}": cls
              for device_class, own in EVENTS.items() for cls in own}  # fmt: skip
    anywhere: tuple[type[DeviceEvent], ...] = (*ANY_DEVICE, FirmwareChanged, TableActionFailed)
    for cls in anywhere:
        events[f"any_device.{cls.kind}"] = cls
    for cls in (ShuffleStatistics, ShuffleAlert):  # the table's, on a shuffler's topic
        events[f"shuffler.{cls.kind}"] = cls
    (args.directory / "events").mkdir(exist_ok=True)
    for name, cls in sorted(events.items()):
        schemas[f"events/{name}"] = event_schema(name, cls)
    for name, schema in schemas.items():
        path = args.directory / f"{name}.schema.json"
        path.write_text(json.dumps(schema, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(path)
    return 0
