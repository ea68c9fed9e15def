"""Every link between the docs lands: each relative link names a file that exists, and each
``#anchor`` a heading of that file (GitHub's anchors: the heading lower-cased, punctuation
dropped, spaces made hyphens)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE = re.compile(r"```.*?```", re.S)


def anchor(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    for line in CODE.sub("", page.read_text(encoding="utf-8")).splitlines():
        if line.startswith("#"):
            base = anchor(line.lstrip("#"))
            name, n = base, 1
            while name in found:  # a repeated heading gets -1, -2, …
                name, n = f"{base}-{n}", n + 1
            found.add(name)
    return found


def test_every_link_between_the_docs_lands() -> None:
    broken = []
    for page in PAGES:
        for target in LINK.findall(CODE.sub("", page.read_text(encoding="utf-8"))):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            path, _, fragment = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif fragment and file.suffix == ".md" and fragment not in anchors(file):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == []
