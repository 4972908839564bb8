"""The tests' one clock: where a test that compares stored times with the clock gets its ``now``.

A test seeds relative to ``now()`` (or injects it), never at a fixed date the real clock will pass.
To prove that, ``tests/test_clock.py`` runs the date-sensitive tests (marker ``clock``) again with the
clock moved (``CLUSTER_DOCTOR_TEST_CLOCK``): a month ahead, just before the next hour turns and just
before midnight UTC. In that process time-machine moves Python's clock, and libfaketime (``FAKETIME``
in the environment of every subprocess it starts) moves the clock of the programs the tests start,
by the same offset. PostgreSQL keeps the real clock: a moved run compares no server time with Python's.
"""

from __future__ import annotations

import datetime as dt
import os
import re

ENV = "CLUSTER_DOCTOR_TEST_CLOCK"
LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
# How far before a boundary a moved run starts: the boundary passes while its first tests run.
BEFORE_BOUNDARY = dt.timedelta(seconds=40)
SPECS = ("month-ahead", "before-hour", "before-midnight")


def now() -> dt.datetime:
    """The current time, UTC, whole seconds (moved with the rest of the process in a moved run)."""
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


def offset(spec: str, real_now: dt.datetime) -> dt.timedelta:
    """How far a moved run moves the clock: ``month-ahead`` (31 days), ``before-hour`` / ``before-midnight``
    (to BEFORE_BOUNDARY before the next hour / the next 00:00 UTC), or ``+<seconds>``."""
    if spec == "month-ahead":
        return dt.timedelta(days=31)
    if spec in ("before-hour", "before-midnight"):
        unit = dt.timedelta(hours=1) if spec == "before-hour" else dt.timedelta(days=1)
        start = real_now.replace(minute=0, second=0, microsecond=0)
        if spec == "before-midnight":
            start = start.replace(hour=0)
        target = start + unit - BEFORE_BOUNDARY
        return (target if target > real_now else target + unit) - real_now
    if re.fullmatch(r"[+-]\d+", spec):
        return dt.timedelta(seconds=int(spec))
    raise ValueError(f"{ENV}: expected one of {', '.join(SPECS)} or +<seconds>, got {spec!r}")


def move_from_env() -> str | None:
    """Move the clock when ``CLUSTER_DOCTOR_TEST_CLOCK`` asks; the line saying so, or None."""
    spec = os.environ.get(ENV)
    if not spec:
        return None
    moved = move(spec)
    return f"{ENV}={spec}: the clock moved by {moved} to {now().isoformat()}"


def move(spec: str) -> dt.timedelta:
    """Move this process's clock (time-machine, ticking) and its future subprocesses' (libfaketime) by
    ``offset(spec)``; returns the offset."""
    import time_machine

    if "FAKETIME" in os.environ:  # started by a moved process (an xdist worker): libfaketime moved us already
        return dt.timedelta(seconds=int(os.environ["FAKETIME"]))
    moved = offset(spec, dt.datetime.now(dt.UTC))
    time_machine.travel(dt.datetime.now(dt.UTC) + moved, tick=True).start()
    if os.path.exists(LIBFAKETIME):
        # The monotonic clock moves too (libfaketime's default): with it left alone, Python's sleep fails
        # with EINVAL under libfaketime. Nothing compares monotonic readings across processes.
        preload = os.environ.get("LD_PRELOAD", "")
        os.environ.update(FAKETIME=f"{int(moved.total_seconds()):+d}", LD_PRELOAD=f"{LIBFAKETIME} {preload}".strip())
    return moved
