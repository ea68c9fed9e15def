"""``tableside monitor``: subscribe to one table and print its life, one line per message.

It checks the sequence numbers as it goes and prints a ``GAP`` line when numbers are missing.
Republished retained state and the last will are repeats by design and are not counted.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO
from urllib.parse import urlsplit

import aiomqtt

from tableside.drivers.backoff import Backoff

__all__ = ["Monitor", "format_message"]


def _clock(ts: str) -> str:
    return ts[11:23] if len(ts) >= 23 else ts


def format_message(topic: str, msg: dict[str, Any]) -> str:
    """One readable line for one tableside payload."""
    seq = f"#{msg.get('seq', '?'):>6}"
    head = f"{_clock(str(msg.get('ts', '')))} {seq}"
    flags = " (republished)" if msg.get("republished") else ""
    kind = topic.rsplit("/", 1)[-1]
    if kind == "status":
        will = " (last will)" if msg.get("will") else ""
        return f"{head} TABLE {msg.get('table')} is {msg.get('status')}{will}{flags}"
    if kind == "table":
        parts = [
            f"round {msg.get('round')}",
            f"rounds since stub count {msg.get('rounds_since_stub_count')}",
        ]
        if msg.get("deck_age_h") is not None:
            parts.append(f"deck age {msg['deck_age_h']:.2f} h")
        if msg.get("meter_cents") is not None:
            parts.append(f"meter ${msg['meter_cents'] / 100:,.2f}")
        return (f"{head} TABLE   {msg.get('phase')}: {', '.join(parts)} "
                f"(after {msg.get('cause')}){flags}")  # fmt: skip
    if kind == "ruling":
        actions = ", ".join(msg.get("actions", []))
        event = msg.get("event", {})
        return (
            f"{head} RULING  {msg.get('clause')} → {actions}"
            + (
                f" [{', '.join(msg.get('affected', []))}]"
                if msg.get("affected") not in (None, ["all"])
                else ""
            )
            + "\n"
            f"{'':>20}{msg.get('summary')} (from {event.get('device')} "
            f"{event.get('event')} #{event.get('seq')})"
        )
    if kind == "state":
        ident = msg.get("identity") or {}
        who = (
            f" {ident.get('model')} s/n {ident.get('serial')} fw {ident.get('firmware_version')}"
            if ident
            else ""
        )
        extra = " ".join(
            f"{k}={msg[k]}" for k in ("device_state", "fault") if msg.get(k) is not None
        )
        line = f"{head} {msg.get('device'):<10} state {msg.get('connection')}{who} {extra}{flags}"
        return line.rstrip()
    if kind == "event":
        data = msg.get("data", {})
        detail = " ".join(f"{k}={v}" for k, v in data.items() if v not in ("", [], None))
        return f"{head} {msg.get('device'):<10} {msg.get('event')}: {detail}"
    if kind == "command_result":
        outcome = "ok" if msg.get("ok") else f"refused: {msg.get('error')}"
        who = f"{msg.get('device') or '?':<10} {msg.get('role')}"
        return f"{head} {who} command {msg.get('command')} {outcome}"
    return f"{head} {topic} {json.dumps(msg)}"


@dataclass
class Monitor:
    url: str
    table: str
    prefix: str = "tableside"
    out: TextIO | None = None
    on_message: Callable[[str, dict[str, Any]], None] | None = None
    #: credentials and TLS (BrokerConfig.client_kwargs()), when the broker wants them
    client_kwargs: dict[str, Any] = field(default_factory=dict)
    seen: set[int] = field(default_factory=set)
    gaps: list[tuple[int, int]] = field(default_factory=list)
    _high: int | None = None

    def _check_seq(self, msg: dict[str, Any], retained: bool) -> str | None:
        seq = msg.get("seq")
        if not isinstance(seq, int) or retained or msg.get("republished") or msg.get("will"):
            return None
        self.seen.add(seq)
        note = None
        if self._high is not None and seq > self._high + 1:
            self.gaps.append((self._high + 1, seq - 1))
            note = f"GAP: seq {self._high + 1}..{seq - 1} not received"
        if self._high is None or seq > self._high:
            self._high = seq
        return note

    def _print(self, line: str) -> None:
        if self.out is not None:
            print(line, file=self.out, flush=True)

    async def run(self) -> None:
        parts = urlsplit(self.url)
        backoff = Backoff(initial=0.2, maximum=5.0)
        while True:
            try:
                async with aiomqtt.Client(
                    parts.hostname or "127.0.0.1",
                    parts.port or (8883 if parts.scheme == "mqtts" else 1883),
                    **self.client_kwargs,
                ) as c:
                    backoff.reset()
                    await c.subscribe(f"{self.prefix}/{self.table}/#", qos=1)
                    async for message in c.messages:
                        self._handle(str(message.topic), message.payload, message.retain)
            except aiomqtt.MqttError as exc:
                self._print(f"-- broker {self.url}: {exc}; reconnecting")
                await asyncio.sleep(backoff.next())

    def _handle(self, topic: str, payload: Any, retained: bool) -> None:
        if "/command/" in topic:
            return  # requests, not the table's own messages
        try:
            msg = json.loads(payload)
            if not isinstance(msg, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            self._print(f"-- {topic}: unreadable payload ({exc}): {payload!r:.80}")
            return
        note = self._check_seq(msg, retained)
        if note:
            self._print(note)
        self._print(format_message(topic, msg))
        if self.on_message is not None:
            self.on_message(topic, msg)
