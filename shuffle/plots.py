"""The lab tool's figures as SVG text, written by hand: three plots need no plotting library,
and the files open in any browser. Pure: returns strings, writes nothing."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from html import escape

from tableside.shuffle.laws import Law

__all__ = ["heat_map", "histogram"]

_W, _H, _PAD = 640, 360, 48


def _frame(title: str, body: list[str], width: int = _W, height: int = _H) -> str:
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="18" text-anchor="middle" font-size="14">{escape(title)}</text>',
        *body,
        "</svg>\n",
    ])  # fmt: skip


def histogram(title: str, label: str, values: Sequence[int], law: Law) -> str:
    """Bars: how many decks had each value; dots and line: what a fair shuffler's exact law
    expects of as many decks."""
    counts, n = Counter(values), len(values)
    support = [k for k, p in enumerate(law.probs) if p * n >= 0.05] + list(counts)
    lo, hi = min(support), max(support)
    top = max([*counts.values(), *(p * n for p in law.probs)], default=1) or 1
    step = (_W - 2 * _PAD) / (hi - lo + 1)

    def x(k: float) -> float:
        return _PAD + (k - lo) * step

    def y(c: float) -> float:
        return _H - _PAD - c / top * (_H - 2 * _PAD)

    body = [
        f'<rect x="{x(k) + 1:.1f}" y="{y(c):.1f}" width="{step - 2:.1f}" '
        f'height="{_H - _PAD - y(c):.1f}" fill="#9bb7d4"><title>{k}: {c}</title></rect>'
        for k, c in sorted(counts.items())
    ]
    line = " ".join(f"{x(k + 0.5):.1f},{y(law.probs[k] * n):.1f}"
                    for k in range(lo, hi + 1) if k < len(law.probs))  # fmt: skip
    body.append(f'<polyline points="{line}" fill="none" stroke="#c0392b" stroke-width="1.5"/>')
    every = max(1, math.ceil((hi - lo + 1) / 16))
    body += [
        f'<text x="{x(k + 0.5):.1f}" y="{_H - _PAD + 14}" text-anchor="middle">{k}</text>'
        for k in range(lo, hi + 1, every)
    ]
    body += [
        f'<text x="{_W / 2}" y="{_H - 10}" text-anchor="middle">{escape(label)}</text>',
        f'<text x="{_W - _PAD}" y="36" text-anchor="end" fill="#c0392b">— exact law, fair '
        f"shuffler (mean {law.mean:.3f})</text>",
        f'<text x="{_W - _PAD}" y="50" text-anchor="end" fill="#3f6d9e">■ {n} decks (mean '
        f"{sum(values) / max(1, n):.3f})</text>",
        f'<line x1="{_PAD}" y1="{_H - _PAD}" x2="{_W - _PAD}" y2="{_H - _PAD}" stroke="black"/>',
    ]
    return _frame(title, body)


def heat_map(title: str, matrix: Sequence[Sequence[int]]) -> str:
    """Input position (rows) by output position (columns), coloured by (O - E)/√E: blue below
    what a fair shuffler expects, red above, white as expected."""
    n = len(matrix)
    shuffles = sum(matrix[0]) if n else 0
    e = shuffles / n if n else 1.0
    cell, left, topm = 9, 60, 36
    size = left + n * cell + 20
    body = []
    for i, row in enumerate(matrix):
        for j, o in enumerate(row):
            z = (o - e) / math.sqrt(e) if e else 0.0
            t = min(1.0, abs(z) / 4)
            r, g, b = (255, round(255 * (1 - t)), round(255 * (1 - t))) if z > 0 else (
                round(255 * (1 - t)), round(255 * (1 - t)), 255)  # fmt: skip
            body.append(
                f'<rect x="{left + j * cell}" y="{topm + i * cell}" width="{cell}" '
                f'height="{cell}" fill="rgb({r},{g},{b})"><title>in {i + 1} → out {j + 1}: '
                f"{o} (expected {e:.1f})</title></rect>"
            )
    body += [
        f'<text x="{left + n * cell / 2}" y="{topm + n * cell + 16}" text-anchor="middle">'
        f"output position (1 = top); colour: (observed − expected)/√expected, ±4 saturates"
        "</text>",
        f'<text x="14" y="{topm + n * cell / 2}" transform="rotate(-90 14 {topm + n * cell / 2})"'
        ' text-anchor="middle">input position</text>',
    ]
    return _frame(title, body, size, topm + n * cell + 30)
