"""Issue 29, point 3: an enum declared once is carried as itself through every layer and spelt
only where JSON is written or read: a ruling's state (rules/rulings.py), a wager's timing
(drivers/cctalk/events.py), another method of dealing or shuffling (rules/seen.py)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from tableside.drivers.catalog import event_schema, read_event
from tableside.drivers.cctalk.events import WagerAccepted, WagerTiming
from tableside.rules.rulings import TRANSITIONS, RulingMove, RulingState
from tableside.rules.seen import OtherMethod
from tableside.rules.vocabulary import DealingMethod, ShufflingMethod
from tableside.wire.payloads import RulingStateBody, RulingStatePayload, parse_payload

ROOT = Path(__file__).resolve().parents[1]
_PRODUCT = ("drivers", "rules", "daemon", "simulators", "floor", "shuffle", "wire", "mqtt",
            "src/tableside/cli")  # fmt: skip


def _spelt(names: set[str], *, declared_in: str) -> list[str]:
    """Where a product module other than ``declared_in`` spells one of ``names`` as a literal
    value (a JSON object's key is a field's name: the floor's tile counts ``escalated``)."""
    found = []
    for folder in _PRODUCT:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.relative_to(ROOT).as_posix() == declared_in:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            keys = {id(k) for d in ast.walk(tree) if isinstance(d, ast.Dict) for k in d.keys}
            found += [f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}"
                      for node in ast.walk(tree)
                      if isinstance(node, ast.Constant) and node.value in names
                      and id(node) not in keys]  # fmt: skip
    return found


def test_a_rulings_state_has_one_source() -> None:
    """No product module but rules/rulings.py spells a ruling's state ("open" is also a phase's
    and a lock-out's word, and left out)."""
    names = {s.value for s in RulingState} - {"open"}
    assert _spelt(names, declared_in="rules/rulings.py") == []
    moves = {m.value for m in RulingMove}
    assert {move for _, move in TRANSITIONS} == set(RulingMove)
    assert _spelt(moves, declared_in="rules/rulings.py") == []


def test_a_ruling_state_message_carries_the_state_and_writes_its_name() -> None:
    body = RulingStateBody(ruling=7, rule_id="r", clause="c", actions=[],
                           state=RulingState.ESCALATED, halts=False, open_s=1.0)  # fmt: skip
    assert json.loads(body.to_json())["state"] == "escalated"
    envelope = {"table": "t1", "ts": "2026-12-05T07:00:00.000Z", "seq": 9}
    message = json.dumps(envelope | json.loads(body.to_json())).encode()
    read = parse_payload(RulingStatePayload, message)
    assert read.state is RulingState.ESCALATED
    assert [s for s in RulingState if s.unresolved] == [
        RulingState.OPEN, RulingState.ESCALATED, RulingState.ACKNOWLEDGED
    ]  # fmt: skip


def test_a_wagers_timing_is_its_enum_and_its_schema_a_string() -> None:
    accepted = WagerAccepted(device="acceptors", seat=3, credit=1, event_counter=4,
                             timing=WagerTiming.UNKNOWN)  # fmt: skip
    data = json.loads(json.dumps(accepted.data()))
    assert data["timing"] == "unknown"
    read = read_event(WagerAccepted, "acceptors", data)
    assert read == accepted and read.timing is WagerTiming.UNKNOWN
    assert WagerAccepted(device="a", seat=1, credit=1, event_counter=1).timing is (
        WagerTiming.BEFORE_LOCKOUT
    )
    schema = event_schema("acceptors.wager_accepted", WagerAccepted)
    properties = schema["properties"]
    assert isinstance(properties, dict)
    assert properties["timing"] == {"default": "before_lockout", "title": "Timing",
                                    "type": "string"}  # fmt: skip
    names = {t.value for t in WagerTiming} - {"unknown"}
    assert _spelt(names, declared_in="drivers/cctalk/events.py") == []


def test_another_method_is_a_method_of_its_own_vocabulary() -> None:
    """A shuffle by hand and a deal by hand are each their own vocabulary's member; the one
    ``method`` field spells them as it always did."""
    shuffled = OtherMethod(method=ShufflingMethod.MANUAL, device_class="shuffler")
    dealt = OtherMethod(method=DealingMethod.MANUAL_SHOE, device_class="shoe")
    assert json.loads(json.dumps(shuffled.data()))["method"] == "manual_shuffle"
    assert json.loads(json.dumps(dealt.data()))["method"] == "manual_shoe"
