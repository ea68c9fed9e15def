"""The docs name every value the code can send or take: each ruling action (docs/mqtt.md) and
each game (docs/configuration.md)."""

from __future__ import annotations

import re
from pathlib import Path

from tableside.rules.model import Action, Game

DOCS = Path(__file__).parents[1] / "docs"


def _section(page: str, heading: str) -> str:
    text = (DOCS / page).read_text(encoding="utf-8")
    start = text.index(heading)
    end = text.find("\n#", start + len(heading))
    return text[start : end if end != -1 else None]


def test_every_ruling_action_is_in_the_vocabulary() -> None:
    table = _section("mqtt.md", "### Actions: the fixed vocabulary")
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", table, re.MULTILINE))
    assert documented == {a.value for a in Action}


def test_every_game_is_in_the_configuration_page() -> None:
    (row,) = [r for r in (DOCS / "configuration.md").read_text().splitlines()
              if r.startswith("| `game` |")]  # fmt: skip
    assert set(re.findall(r"`([a-z_0-9]+)`", row)) - {"game"} == {g.value for g in Game}
