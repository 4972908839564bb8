"""Tests pass on any date and at any minute: the date-sensitive tests (marker ``clock``: they compare
stored times with the clock) run again here with the clock moved a month ahead, to just before the
hour turns and to just before midnight UTC (tests/clock.py: time-machine in the pytest process,
libfaketime for the programs it starts)."""

from __future__ import annotations

import datetime as dt
import os
import pathlib
import subprocess
import sys

import pytest

from tests import clock
from tests.conftest import REPO


@pytest.mark.parametrize(("real", "spec", "moved_to"), [
    ("2026-11-28T02:13:16", "month-ahead", "2026-12-29T02:13:16"),
    ("2026-11-28T02:13:16", "before-hour", "2026-11-28T02:59:20"),
    ("2026-11-28T23:59:50", "before-hour", "2026-11-29T00:59:20"),  # already past: the next hour's end
    ("2026-11-28T02:13:16", "before-midnight", "2026-11-28T23:59:20"),
    ("2026-12-31T23:59:30", "month-ahead", "2027-01-31T23:59:30"),
    ("2026-11-28T02:13:16", "+60", "2026-11-28T02:14:16"),
])
def test_where_a_moved_run_moves_the_clock(real, spec, moved_to):
    at = dt.datetime.fromisoformat(real).replace(tzinfo=dt.UTC)
    assert (at + clock.offset(spec, at)).isoformat(timespec="seconds") == moved_to + "+00:00"


def test_an_unknown_clock_is_named():
    with pytest.raises(ValueError, match="CLUSTER_DOCTOR_TEST_CLOCK: expected one of month-ahead"):
        clock.offset("tomorrow", dt.datetime.now(dt.UTC))


def marked_files() -> list[str]:
    """The test files with date-sensitive tests (collecting only them, not the whole tree, saves a minute)."""
    here = pathlib.Path(__file__).resolve()
    return sorted(str(p.relative_to(REPO)) for p in (REPO / "tests").rglob("test_*.py")
                  if p != here and "mark.clock" in p.read_text())


def test_the_date_sensitive_tests_are_marked():
    assert "tests/plugins/cluster_doctor/cli/test_metrics_exporter.py" in marked_files()


# In `make test` the month ahead (what a seed at a fixed date fails first); the hour's and the day's
# last minute in `make test-slow` (each run costs about a minute of both CPUs on a 2-core machine).
IN_MAKE_TEST = ("month-ahead",)


@pytest.fixture(scope="module")
def moved_runs(request, tmp_path_factory):
    """The marked tests under each moved clock this session selected, those runs at once (most of their
    time is waiting for the programs they start: the exporter, the Airflow api-server, Chromium)."""
    wanted = [spec for spec in clock.SPECS if any(
        item.name == f"test_the_date_sensitive_tests_pass_with_the_clock_moved[{spec}]" for item in request.session.items)]
    runs = {}
    for spec in wanted:
        env = {**os.environ, clock.ENV: spec}
        for leaked in ("FAKETIME", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_TESTRUNUID", "PYTEST_CURRENT_TEST"):
            env.pop(leaked, None)
        out = tmp_path_factory.mktemp(spec)
        log = (out / "out.txt").open("w+")
        runs[spec] = (subprocess.Popen(
            [sys.executable, "-m", "pytest", "-m", "clock", "-p", "no:xdist", "-p", "no:cacheprovider",
             "--basetemp", str(out / "basetemp"), *marked_files()],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, text=True), log)
    yield runs
    for proc, log in runs.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


@pytest.mark.requires_tool("faketime")
@pytest.mark.timeout(900)
@pytest.mark.parametrize("spec", [spec if spec in IN_MAKE_TEST else pytest.param(spec, marks=pytest.mark.slow)
                                  for spec in clock.SPECS])
def test_the_date_sensitive_tests_pass_with_the_clock_moved(spec, moved_runs):
    proc, log = moved_runs[spec]
    code = proc.wait(timeout=850)
    log.seek(0)
    out = log.read()[-8000:]
    assert code == 0, out
    assert f"{clock.ENV}={spec}: the clock moved by" in out, out  # the header line
    assert " passed" in out and " skipped" not in out, out  # every marked test ran
