"""Kubernetes times, read and written one way: RFC 3339 in UTC.

The API server writes ``2026-11-28T10:04:00Z`` (metav1.Time, whole seconds) and the kubernetes client
hands back timezone-aware datetimes; annotations we wrote carry the same form. Every reader in the
package goes through ``parse`` so a time means the same wherever it is read: aware, in UTC; a value
without an offset is read as UTC (the API's own zone); anything unreadable is None, never an exception.
"""

from __future__ import annotations

import datetime as dt
from typing import Any


def parse(value: Any) -> dt.datetime | None:
    """An API or annotation time as an aware UTC datetime; None when absent or unreadable."""
    try:
        if isinstance(value, dt.datetime):
            t = value
        elif isinstance(value, str) and value.strip():
            t = dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00").replace("z", "+00:00"))
        else:
            return None
        return (t if t.tzinfo else t.replace(tzinfo=dt.UTC)).astimezone(dt.UTC)
    except (ValueError, OverflowError):
        return None


def iso_seconds(t: dt.datetime | None) -> str | None:
    """A time in UTC to the second with its offset (``2026-11-28T10:04:00+00:00``); None stays None."""
    return t.astimezone(dt.UTC).isoformat(timespec="seconds") if t else None


def rfc3339(t: dt.datetime) -> str:
    """A time as the API server writes one (whole seconds, ``Z``)."""
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
