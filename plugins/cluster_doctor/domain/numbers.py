"""Stored numbers and times, read leniently: a value Python cannot use is left out and counted.

A report, a page or a scrape never fails as a whole because of one stored value (a huge integer in a
metrics JSON, a timestamp past year 9999): the value is left out and counted here, per kind, for
the self-metric cluster_doctor_skipped_values_total. Process-wide, like any Prometheus counter.
"""

from __future__ import annotations

import collections
import datetime as dt
import math
from typing import Any

SKIPPED_VALUES: collections.Counter[str] = collections.Counter()
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def skip(kind: str) -> None:
    SKIPPED_VALUES[kind] += 1


def finite(value: Any, kind: str = "metric") -> float | None:
    """A stored number as a finite float, or None (counted) when it is not one (huge, NaN, inf).
    Booleans read as 0/1; text that is not a number is not a measurement: None, not counted."""
    if value is None:
        return None
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
    elif isinstance(value, (int, float)):
        try:
            number = float(value)
        except OverflowError:  # an int beyond float range
            skip(kind)
            return None
    else:
        return None
    if not math.isfinite(number):
        skip(kind)
        return None
    return number


def epoch_time(seconds: float | None, kind: str = "timestamp") -> dt.datetime | None:
    """A Unix time as an aware datetime, or None (counted) when Python cannot represent it."""
    if seconds is None:
        return None
    try:
        return dt.datetime.fromtimestamp(seconds, dt.UTC)
    except (OverflowError, ValueError, OSError):
        skip(kind)
        return None
