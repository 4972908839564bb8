"""Plain-text rendering shared by the CLI, the pages and the task logs: percentages, ages, tables,
CSV/JSON output."""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import io
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from cluster_doctor.domain.spans import duration  # noqa: F401  (the one span wording, re-exported here)


def percent(ratio: float | None, missing: str = "–") -> str:
    """A share as every view prints it: one decimal, halves rounded up (4/24 → '16.7 %', 33/96 →
    '34.4 %'); ``missing`` when there is none. Exact decimal rounding, so a float's binary error
    never flips a half."""
    if ratio is None:
        return missing
    shown = (decimal.Decimal(ratio) * 100).quantize(decimal.Decimal("0.1"), rounding=decimal.ROUND_HALF_UP)
    return f"{shown} %"


def slo_period(days_with_data: int, days: int) -> str:
    """What the coverage SLO's period figure covers: 'over the last 30 days', or only the days since
    the fleet was first seen when that is inside the period (the days before have no data, not 0 %)."""
    if days_with_data >= days:
        return f"over the last {days} days"
    if not days_with_data:
        return f"over the last {days} days: no data"
    return (f"over the {days_with_data} day{'s' if days_with_data != 1 else ''} since the fleet was first seen "
            f"(no data for the {days - days_with_data} before)")


def age(then: dt.datetime | None, now: dt.datetime) -> str:
    """How long ago ``then`` was, as ``duration`` says it ('3 d 4 h', '25 min'); '-' when unknown."""
    if then is None:
        return "-"
    return duration((now - then).total_seconds())


def ago(then: dt.datetime | None, now: dt.datetime, missing: str = "") -> str:
    """'1 min ago', '3 d 4 h ago'; ``missing`` when unknown."""
    return missing if then is None else f"{age(then, now)} ago"


def table(rows: Sequence[Sequence[Any]], headers: Sequence[str], max_width: int = 80) -> str:
    cells = [[_cell(v, max_width) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join(lines)


def _cell(value: Any, max_width: int) -> str:
    text = "" if value is None else " ".join(str(value).split())
    return text if len(text) <= max_width else text[: max_width - 1] + "…"


def _jsonable(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def to_json(rows: Sequence[Mapping[str, Any]]) -> str:
    return json.dumps([_jsonable(dict(r)) for r in rows], indent=2, sort_keys=False)


def to_csv(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        values = []
        for column in columns:
            value = _jsonable(row.get(column))
            if isinstance(value, (dict, list)):
                value = json.dumps(value, sort_keys=True)
            values.append("" if value is None else value)
        writer.writerow(values)
    return out.getvalue()


# ---------------------------------------------------------------------------------------- markdown
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_MD_SPECIAL = re.compile(r"([\\`*\[\]|~])")


def plain(value: Any) -> str:
    """One line of text without control characters (terminal escapes, bidi overrides, NUL)."""
    text = "" if value is None else str(value)
    return " ".join(_CONTROL.sub(" ", text).split())


def md_escape(value: Any) -> str:
    """Inline markdown text: one line, no control characters, no raw HTML, no table break, no link,
    image or emphasis syntax (``[text](javascript:...)`` renders as the literal text). Every piece of
    data that reaches a markdown document goes through here."""
    text = plain(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = _MD_SPECIAL.sub(r"\\\1", text)
    # a bare URL scheme is still auto-linked by GFM renderers: break the scheme's colon with a backslash
    # escape, which CommonMark renders as a literal colon (an entity such as &#58; prints as itself
    # wherever the markdown is shown as text: a chat message, a ticket, a terminal)
    return re.sub(r"(?i)\b(javascript|data|vbscript|file):", r"\1\\:", text)
