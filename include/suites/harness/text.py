"""Text helpers for one-line messages: every check message and reason goes through them."""

from __future__ import annotations

import datetime as _dt
from typing import Any


def utcnow() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def iso(ts: _dt.datetime) -> str:
    return ts.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def one_line(text: Any, limit: int = 300) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def fmt(x: Any) -> str:
    """Numbers for messages: 4 significant digits, no exponent for ordinary magnitudes."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if isinstance(x, int):
        return str(x)
    if x != x:  # NaN
        return "nan"
    if abs(x) >= 1e4:
        return f"{x:.0f}"
    if 0 < abs(x) < 1e-3:
        return f"{x:.3g}"
    return f"{x:.4g}"




def read_line(path: str) -> str | None:
    """A one-value file's content (sysfs, /proc), stripped; None when it is empty or cannot be read."""
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip() or None
    except OSError:
        return None
