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


def ago_h(hours: float) -> str:
    """How long before the check something happened, in words a person reads: '1 min ago', '2 h 5 min
    ago', '3 d 4 h ago' (never '0.01668 h ago'). The library's ``reports.text.duration`` says a span the
    same way; a test keeps the two equal (the suites never import the library)."""
    seconds = max(0, round(hours * 3600))  # to the second: uptime arithmetic leaves 3599.9999
    days, rem = divmod(seconds, 86400)
    h, rem = divmod(rem, 3600)
    minutes, secs = divmod(rem, 60)
    if days:
        span = f"{days} d {h} h" if h else f"{days} d"
    elif h:
        span = f"{h} h {minutes} min" if minutes else f"{h} h"
    else:
        span = f"{minutes} min" if minutes else f"{secs} s"
    return f"{span} ago"




def read_line(path: str) -> str | None:
    """A one-value file's content (sysfs, /proc), stripped; None when it is empty or cannot be read."""
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip() or None
    except OSError:
        return None
