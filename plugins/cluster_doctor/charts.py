"""Server-side SVG charts for the pages: hand-written, no script, no external resource.

Every text that reaches the SVG is escaped (markupsafe), numbers are formatted here; the result is
Markup the templates embed as is.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from markupsafe import Markup, escape

WIDTH, HEIGHT = 640, 150
LEFT, RIGHT, TOP, BOTTOM = 44, 12, 10, 24


def _x(i: int, n: int) -> float:
    span = WIDTH - LEFT - RIGHT
    return LEFT + (span * i / (n - 1) if n > 1 else span / 2)


def _y(ratio: float) -> float:
    return TOP + (HEIGHT - TOP - BOTTOM) * (1 - max(0.0, min(1.0, ratio)))


def _day(value: Any) -> str:
    return value.strftime("%m-%d") if isinstance(value, dt.datetime) else str(value)[5:10]


def coverage_svg(samples: Sequence[Mapping[str, Any]], *, target: float | None = None) -> Markup:
    """Coverage over time: pair coverage (the SLO, solid) and node coverage (dashed), 0-100 %."""
    points = [s for s in samples if s.get("pair_coverage") is not None]
    if len(points) < 2:
        return Markup('<p class="small muted" id="coverage-chart">Not enough history for a coverage chart yet.</p>')
    n = len(points)
    parts = [f'<svg id="coverage-chart" role="img" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
             'xmlns="http://www.w3.org/2000/svg" font-size="10" font-family="system-ui, sans-serif">',
             f"<title>{escape('Coverage over the last %d days' % n)}</title>"]
    for ratio in (0.0, 0.5, 1.0):
        y = _y(ratio)
        parts.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="currentColor" '
                     'stroke-opacity="0.15"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{y + 3:.1f}" text-anchor="end" fill="currentColor">{ratio:.0%}</text>')
    if target is not None:
        y = _y(target)
        parts.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="#e07b00" '
                     'stroke-dasharray="2 3"/>')
    for key, style in (("coverage", 'stroke-dasharray="5 3" stroke="#8a8f98"'), ("pair_coverage", 'stroke="#1f8a3b"')):
        coords = " ".join(f"{_x(i, n):.1f},{_y(s[key] or 0.0):.1f}" for i, s in enumerate(points))
        parts.append(f'<polyline class="series-{key}" fill="none" stroke-width="2" {style} points="{coords}"/>')
    for i, s in enumerate(points):
        tip = escape(f"{_day(s['as_of'])}: {s['pair_coverage']:.1%} of pairs fresh, "
                     f"{(s['coverage'] or 0):.1%} of nodes covered")
        parts.append(f'<circle cx="{_x(i, n):.1f}" cy="{_y(s["pair_coverage"]):.1f}" r="2.5" fill="#1f8a3b">'
                     f"<title>{tip}</title></circle>")
    for i in (0, n // 2, n - 1):
        parts.append(f'<text x="{_x(i, n):.1f}" y="{HEIGHT - 6}" text-anchor="middle" fill="currentColor">'
                     f"{escape(_day(points[i]['as_of']))}</text>")
    parts.append("</svg>")
    return Markup("".join(parts))
