"""The monitor's lines and its gap check."""

from __future__ import annotations

import io
import json

from tableside.daemon.monitor import Monitor, format_message


def msg(seq: int, **extra: object) -> bytes:
    return json.dumps(
        {"table": "t", "ts": "2026-11-29T14:43:13.123Z", "seq": seq, **extra}
    ).encode()


def test_gap_is_reported_and_repeats_are_not_gaps() -> None:
    out = io.StringIO()
    monitor = Monitor("mqtt://127.0.0.1:1", "t", out=out)
    status = "tableside/t/status"
    monitor._handle(status, msg(5, status="online", version="0"), retained=True)  # old, retained
    monitor._handle(status, msg(10, status="online", version="0"), retained=False)
    monitor._handle(status, msg(11, status="online", version="0", republished=True), retained=False)
    monitor._handle(status, msg(9, status="offline", version="0", will=True), retained=False)
    monitor._handle(status, msg(14, status="online", version="0"), retained=False)
    monitor._handle(status, b"\xff not json", retained=False)
    assert monitor.gaps == [(11, 13)]
    text = out.getvalue()
    assert "GAP: seq 11..13 not received" in text
    assert "(last will)" in text
    assert "unreadable payload" in text


def test_ruling_line_names_clause_actions_and_source() -> None:
    line = format_message(
        "tableside/t/ruling",
        {
            "ts": "2026-11-29T14:43:13.123Z",
            "seq": 7,
            "clause": "58 Pa. Code § 555.5(b)",
            "actions": ["remove_deck"],
            "summary": "Remove the deck.",
            "event": {"device": "shuffler", "event": "shuffle_complete", "seq": 6},
        },
    )
    assert "14:43:13.123 #     7 RULING  58 Pa. Code § 555.5(b) → remove_deck" in line
    assert "(from shuffler shuffle_complete #6)" in line
