"""The tests' one clock: where a test that compares times with the clock gets its ``now``.

A test seeds relative to ``now()`` (or passes it to the code under test), never at a fixed date the real
clock will pass. Nobody has to remember that: ``make test`` runs every test with the clock moved
(``CLUSTER_DOCTOR_TEST_CLOCK``) a month ahead and to just before midnight UTC — ``tests/test_clock.py``
starts that run, and ``make test``'s own session leaves those tests to it (``runs_moved_in_make_test``) —
unless the test carries ``@pytest.mark.real_clock("why")``, or lives in one of the few folders of
``REAL_CLOCK_FOLDERS`` (the folders of ``MOVED_IN_SLOW_ONLY`` run moved in ``make test-slow`` only).
``make test-slow`` runs them again on the real clock, to just before the hour turns and a year ahead.
A test run on its own (``pytest tests/.../test_x.py``) keeps the real clock: a fixture its author dated
today passes there and fails ``make test`` at once, not a month later.

A moved run moves the clock of every Python process, by one offset: time-machine moves it in the pytest
process and in every Python program it starts (``clock_site/sitecustomize.py``, which a hook ``make .venv``
installs puts on their path: the CLI, the exporter, the emulator, Airflow, the suites). libfaketime is not used: its 0.9.10 (Debian 12)
hangs a timed wait on a lock or an event, fails ``time.sleep`` when told to leave the monotonic clock
alone, and keeps a PostgreSQL lock_timeout from firing. PostgreSQL keeps the real clock: the product writes
and compares the times of attempts, verdicts and signals with its own clock (the worker's, passed to the
SQL), so no test compares the server's now() with Python's, but for the claims' leases, which are the
database's clock on purpose (one clock for every worker that holds a lease); their tests compare leases
with each other, never with Python's time. Chromium keeps the real clock: the pages it shows carry their
times from the server.
"""

from __future__ import annotations

import datetime as dt
import os
import pathlib
import re

ENV = "CLUSTER_DOCTOR_TEST_CLOCK"
# The run's offset, for the programs it starts; not CLUSTER_DOCTOR_*: tests that isolate a program from
# the product's settings drop those from its environment.
OFFSET_ENV = "TESTS_CLOCK_OFFSET_S"
# Where the programs' sitecustomize is: `make .venv` installs a hook (HOOK in the venv's site-packages)
# that puts it on a program's path when OFFSET_ENV is set, PYTHONPATH or not.
SITE = pathlib.Path(__file__).resolve().parent / "clock_site"
HOOK = "cluster_doctor_tests_clock.pth"
# How far before a boundary a moved run starts: the boundary passes while its first tests run.
BEFORE_BOUNDARY = dt.timedelta(seconds=40)
MOVES = ("month-ahead", "year-ahead", "before-hour", "before-midnight")
# What make test runs (a fixture dated the day it was written fails a month on; the day's last minute
# catches "today" read twice), and what make test-slow adds.
IN_MAKE_TEST = ("month-ahead,before-midnight",)
SPECS = (*IN_MAKE_TEST, "before-hour", "year-ahead")
MARKER = "real_clock"
# Folders whose every test keeps the real clock, and why: a moved run repeats what runs there, at a cost
# make test cannot pay twice (each starts real Airflow DagRuns, make up's stack or a browser for minutes),
# and their dates come from the programs they start, not from fixtures. Everything else runs moved.
REAL_CLOCK_FOLDERS = {
    "tests/e2e/": "whole DagRuns on the emulator, minutes each; the task bodies they run are tested moved",
    "tests/stack/": "make up's stack under a real scheduler: one module of many minutes",
    "tests/readme/": "the README's commands as written (make demo, simulate): minutes each",
}
# Folders that run moved in make test-slow's moved runs only: whole programs started as a user starts them
# (the benchmarks and tools, the emulator's own tests, the compose files and init script, Chromium on the
# pages), a fifth of make test's moved run for tests whose times come from the programs they start. The
# library's, the DAG's and the suites' tests, where a fixture's date meets the code's clock, run moved in
# make test.
MOVED_IN_SLOW_ONLY = {
    "tests/tools/": "benchmarks, the demo and stack tools, the emulator's own tests: whole programs",
    "tests/deploy/": "the compose files and the init script, run as a deployer runs them",
    "tests/ui/": "Chromium on the pages; the pages carry the server's times, tested moved in web/",
}


def now() -> dt.datetime:
    """The current time, UTC, whole seconds (moved with the rest of the process in a moved run)."""
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


def _one_offset(move: str, at: dt.datetime) -> dt.timedelta:
    if move == "month-ahead":
        return dt.timedelta(days=31)
    if move == "year-ahead":
        return dt.timedelta(days=366)
    if move in ("before-hour", "before-midnight"):
        unit = dt.timedelta(hours=1) if move == "before-hour" else dt.timedelta(days=1)
        start = at.replace(minute=0, second=0, microsecond=0)
        if move == "before-midnight":
            start = start.replace(hour=0)
        target = start + unit - BEFORE_BOUNDARY
        return (target if target > at else target + unit) - at
    if re.fullmatch(r"[+-]\d+", move):
        return dt.timedelta(seconds=int(move))
    raise ValueError(f"{ENV}: expected one of {', '.join(MOVES)} or +<seconds>, comma-separated, got {move!r}")


def offset(spec: str, real_now: dt.datetime) -> dt.timedelta:
    """How far a moved run moves the clock: each comma-separated move applied after the one before it —
    ``month-ahead`` (31 days), ``year-ahead`` (366 days), ``before-hour`` / ``before-midnight`` (to
    BEFORE_BOUNDARY before the next hour / the next 00:00 UTC), or ``+<seconds>``."""
    total = dt.timedelta(0)
    for move in spec.split(","):
        total += _one_offset(move.strip(), real_now + total)
    return total


def move_from_env() -> str | None:
    """Move the clock when ``CLUSTER_DOCTOR_TEST_CLOCK`` asks; the line saying so, or None."""
    spec = os.environ.get(ENV)
    if not spec:
        return None
    moved = move(spec)
    return f"{ENV}={spec}: the clock moved by {moved} to {now().isoformat()}"


def moved() -> bool:
    """True in a moved run (the process itself, or a program it started)."""
    return bool(os.environ.get(ENV) or os.environ.get(OFFSET_ENV))


def move(spec: str) -> dt.timedelta:
    """Move this process's clock (time-machine, ticking) and that of the Python programs it will start
    by ``offset(spec)``; returns the offset."""
    import time_machine

    if os.environ.get(OFFSET_ENV):  # started by a moved process (an xdist worker): sitecustomize moved us
        return dt.timedelta(seconds=float(os.environ[OFFSET_ENV]))
    moved_by = offset(spec, dt.datetime.now(dt.UTC))
    time_machine.travel(dt.datetime.now(dt.UTC) + moved_by, tick=True).start()
    os.environ[OFFSET_ENV] = repr(moved_by.total_seconds())  # to the microsecond: every process agrees
    return moved_by


def hook_installed() -> bool:
    """Whether this venv moves the clock of the Python programs a moved run starts."""
    import sysconfig

    return (pathlib.Path(sysconfig.get_paths()["purelib"]) / HOOK).exists()


# make test's moved run; a session that runs it leaves the tests it covers to it (each test runs once).
MOVED_RUN_TEST = "tests/test_clock.py::test_the_suite_passes_with_the_clock_moved"


def runs_moved_in_make_test(nodeid: str, marker_reason: str | None) -> bool:
    """Whether make test's moved run (``IN_MAKE_TEST``) runs this test."""
    path = nodeid.split("::", 1)[0]
    return (real_clock_reason(nodeid, marker_reason) is None
            and not any(path.startswith(folder) for folder in MOVED_IN_SLOW_ONLY))


def real_clock_reason(nodeid: str, marker_reason: str | None) -> str | None:
    """Why a test keeps the real clock in a moved run (its marker's reason, else its folder's), or None."""
    if marker_reason is not None:
        return marker_reason
    path = nodeid.split("::", 1)[0]
    return next((why for folder, why in REAL_CLOCK_FOLDERS.items() if path.startswith(folder)), None)
