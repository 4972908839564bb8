"""Tests pass on any date and at any minute: every test runs here with the clock moved — a month ahead and
to just before midnight UTC in ``make test`` (whose own session leaves these tests to this run), to just
before the hour and a year ahead in ``make test-slow``, which runs them on the real clock too — but those
that say why they keep the real clock (tests/clock.py: time-machine in the pytest process and in every
Python program it starts)."""

from __future__ import annotations

import datetime as dt
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from tests import clock
from tests.conftest import REPO


@pytest.mark.parametrize(("real", "spec", "moved_to"), [
    ("2026-11-28T02:13:16", "month-ahead", "2026-12-29T02:13:16"),
    ("2026-11-28T02:13:16", "year-ahead", "2027-11-29T02:13:16"),
    ("2026-11-28T02:13:16", "before-hour", "2026-11-28T02:59:20"),
    ("2026-11-28T23:59:50", "before-hour", "2026-11-29T00:59:20"),  # already past: the next hour's end
    ("2026-11-28T02:13:16", "before-midnight", "2026-11-28T23:59:20"),
    ("2026-12-31T23:59:30", "month-ahead", "2027-01-31T23:59:30"),
    ("2026-11-28T02:13:16", "month-ahead,before-midnight", "2026-12-29T23:59:20"),
    ("2026-12-31T23:59:50", "month-ahead,before-midnight", "2027-02-01T23:59:20"),
    ("2026-11-28T02:13:16", "+60", "2026-11-28T02:14:16"),
])
def test_where_a_moved_run_moves_the_clock(real, spec, moved_to):
    at = dt.datetime.fromisoformat(real).replace(tzinfo=dt.UTC)
    assert (at + clock.offset(spec, at)).isoformat(timespec="seconds") == moved_to + "+00:00"


def test_an_unknown_clock_is_named():
    with pytest.raises(ValueError, match="CLUSTER_DOCTOR_TEST_CLOCK: expected one of month-ahead"):
        clock.offset("month-ahead,tomorrow", dt.datetime.now(dt.UTC))


def test_only_the_named_folders_and_marked_tests_keep_the_real_clock():
    assert clock.real_clock_reason("tests/e2e/test_backfill.py::test_x", None)
    assert clock.real_clock_reason("tests/plugins/cluster_doctor/domain/test_results.py::test_x", None) is None
    assert clock.real_clock_reason("tests/plugins/x.py::test_y", "a server of its own") == "a server of its own"


def test_what_the_moved_run_runs_is_everything_but_the_real_clocks_and_the_slow_runs_folders():
    assert clock.runs_moved_in_make_test("tests/plugins/cluster_doctor/domain/test_results.py::test_x", None)
    assert clock.runs_moved_in_make_test("tests/include/suites/test_x.py::test_y[a]", None)
    assert not clock.runs_moved_in_make_test("tests/plugins/x.py::test_y", "a server of its own")
    assert not clock.runs_moved_in_make_test("tests/e2e/test_backfill.py::test_x", None)
    assert not clock.runs_moved_in_make_test("tests/tools/test_stack.py::test_x", None)


def test_a_session_that_runs_the_moved_run_leaves_its_tests_to_it(tmp_path):
    """Each test runs once in make test: its own session keeps the real-clock and slow-run folders' tests
    and the moved run itself; alone, a test file keeps every test (and the real clock)."""
    tests = tmp_path / "tests"
    for rel, body in {"test_clock.py": "import pytest\n\n@pytest.mark.real_clock('it starts the moved run')\n"
                                       f"@pytest.mark.parametrize('spec', [{clock.IN_MAKE_TEST[0]!r}])\n"
                                       "def test_the_suite_passes_with_the_clock_moved(spec):\n    pass\n",
                      "plugins/test_library.py": "def test_library():\n    pass\n",
                      "e2e/test_dagrun.py": "def test_dagrun():\n    pass\n",
                      "tools/test_tool.py": "def test_tool():\n    pass\n"}.items():
        (tests / rel).parent.mkdir(parents=True, exist_ok=True)
        (tests / rel).write_text(body)

    def collected(*extra: str) -> set[str]:
        out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "tests.conftest",
                              "--rootdir", str(tmp_path), "-c", os.devnull, "--collect-only", "-q", *extra,
                              str(tests)], cwd=REPO, capture_output=True, text=True, timeout=240,
                             env={k: v for k, v in os.environ.items() if k not in (clock.ENV, clock.OFFSET_ENV)})
        return {line.split("::")[-1] for line in out.stdout.splitlines() if "::" in line}

    assert collected() == {f"test_the_suite_passes_with_the_clock_moved[{clock.IN_MAKE_TEST[0]}]",
                           "test_dagrun", "test_tool"}
    assert collected("-k", "not clock_moved") == {"test_library", "test_dagrun", "test_tool"}


def opt_outs() -> list[str]:
    """The test files that mark tests to keep the real clock (the folder list aside)."""
    return sorted(str(p.relative_to(REPO)) for p in (REPO / "tests").rglob("test_*.py")
                  if f"mark.{clock.MARKER}(" in p.read_text() and p.name != "test_clock.py")


def test_the_opt_out_list_stays_short():
    """Every test runs moved unless it says why it cannot: the exceptions stay few enough to read."""
    assert len(clock.REAL_CLOCK_FOLDERS) <= 3 and all(clock.REAL_CLOCK_FOLDERS.values())
    assert len(clock.MOVED_IN_SLOW_ONLY) <= 3 and all(clock.MOVED_IN_SLOW_ONLY.values())
    library = ("tests/plugins/", "tests/include/", "tests/dags/")  # where fixtures meet the code's clock
    assert not [f for f in clock.MOVED_IN_SLOW_ONLY if f.startswith(library)]
    assert len(opt_outs()) <= 5, opt_outs()


def test_make_tests_moved_run_covers_the_library_the_suites_and_the_dags():
    ignored = [a.removeprefix("--ignore=") for a in the_suite(clock.IN_MAKE_TEST[0]) if a.startswith("--ignore=")]
    for must in ("tests/plugins/cluster_doctor/domain", "tests/plugins/cluster_doctor/reports",
                 "tests/plugins/cluster_doctor/web", "tests/plugins/cluster_doctor/cli",
                 "tests/plugins/cluster_doctor/store", "tests/include/suites", "tests/dags"):
        assert (REPO / must).is_dir() and not any(must.startswith(i) for i in ignored), must
    slow = [a for a in the_suite(clock.SPECS[-1]) if a.startswith("--ignore=")]
    assert sorted(slow) == sorted(f"--ignore={f.rstrip('/')}" for f in clock.REAL_CLOCK_FOLDERS)


def moved_pytest(spec: str | None, args: list[str], out: pathlib.Path, *, workers: int = 0) -> subprocess.Popen:
    """pytest with the clock moved by ``spec`` (None: the real clock), its output in ``out/out.txt``."""
    assert clock.hook_installed(), f"{clock.HOOK} is missing from the venv: `make .venv` installs it"
    env = {**os.environ, clock.ENV: spec} if spec else {k: v for k, v in os.environ.items() if k != clock.ENV}
    for leaked in (clock.OFFSET_ENV, "PYTEST_XDIST_WORKER", "PYTEST_XDIST_TESTRUNUID", "PYTEST_CURRENT_TEST",
                   "PYTEST_ADDOPTS"):
        env.pop(leaked, None)
    parallel = ["-n", str(workers), "--dist", "loadfile"] if workers else ["-p", "no:xdist"]
    log = (out / "out.txt").open("w")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--basetemp", str(out / "basetemp"),
             *parallel, *args], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    finally:
        log.close()


def the_suite(spec: str, extra: tuple[str, ...] = ()) -> list[str]:
    """The whole suite as make test runs it, less the folders that keep the real clock (not even collected),
    and in make test's moved run less those that run moved in make test-slow only."""
    folders = [*clock.REAL_CLOCK_FOLDERS, *(clock.MOVED_IN_SLOW_ONLY if spec in clock.IN_MAKE_TEST else ())]
    ignored = [f"--ignore={folder.rstrip('/')}" for folder in folders]
    return ["-m", "not slow", "--tb=short", *ignored, *extra, "tests"]  # not -q: the header says the clock moved


# Four: the moved run holds most of make test's tests, short ones, and is its last item to end; beside the
# session's three workers (whose tests mostly wait on the servers and DagRuns they started) and other work on
# the machine, two workers left it a third of a core each (beside two busy loops: 17 of make test's 20 min).
MOVED_WORKERS = 4


@pytest.fixture(scope="module")
def moved_runs(request, tmp_path_factory):
    """The suite under each moved clock this session selected, those runs at once (most of a run's time
    is waiting for the programs its tests start: servers, the Airflow api-server, Chromium)."""
    wanted = [spec for spec in clock.SPECS if any(
        item.name == f"test_the_suite_passes_with_the_clock_moved[{spec}]" for item in request.session.items)]
    runs = {}
    for spec in wanted:
        out = tmp_path_factory.mktemp(spec.replace(",", "_"))
        runs[spec] = (moved_pytest(spec, the_suite(spec), out, workers=MOVED_WORKERS), out / "out.txt")
    yield runs
    for proc, _ in runs.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.real_clock("it is the moved run: it starts one")
@pytest.mark.timeout(3600)  # a hang guard: beside two CPU hogs and other work it ran past 24 min
@pytest.mark.parametrize("spec", [spec if spec in clock.IN_MAKE_TEST else pytest.param(spec, marks=pytest.mark.slow)
                                  for spec in clock.SPECS])
def test_the_suite_passes_with_the_clock_moved(spec, moved_runs, request):
    proc, log = moved_runs[spec]
    code = proc.wait(timeout=3500)
    out = log.read_text()
    _report(request, f"{clock.ENV}={spec}", out, log)
    assert code == 0, _failures_first(out)
    assert f"{clock.ENV}={spec}: the clock moved by" in out, out[-4000:]  # the header line
    assert " passed" in out and " skipped" not in out, out[-4000:]  # every test ran


@pytest.mark.slow
@pytest.mark.real_clock("it is the real-clock run of what make test runs moved only")
@pytest.mark.timeout(3600)
def test_what_make_test_runs_moved_passes_on_the_real_clock(tmp_path, request):
    args = the_suite(clock.IN_MAKE_TEST[0], (f"--deselect={clock.MOVED_RUN_TEST}",))
    proc = moved_pytest(None, args, tmp_path, workers=MOVED_WORKERS)
    code = proc.wait(timeout=3500)
    out = (tmp_path / "out.txt").read_text()
    _report(request, "the real clock", out, tmp_path / "out.txt")
    assert code == 0, _failures_first(out)
    assert clock.ENV not in out and " passed" in out and " skipped" not in out, out[-4000:]


def _report(request, which: str, out: str, log: pathlib.Path) -> None:
    """The run's own summary line, for make test's last lines (tests/conftest.py prints it)."""
    summary = next((line.strip("= ") for line in reversed(out.splitlines()) if line.startswith("=")
                    and (" passed" in line or " failed" in line)), "no summary line")
    request.node.user_properties.append(("clock_run", f"tests run on {which}: {summary} (log: {log})"))


def _failures_first(out: str) -> str:
    """The run's failed tests, then the end of its log: what make test prints when it fails."""
    failed = [line for line in out.splitlines() if line.startswith(("FAILED ", "ERROR "))]
    return "\n".join([*failed, "...", out[-10000:]])


# A test as the three that broke the build were written: dates typed in the day it was written, read
# against the clock by the code under test (here: Python's clock, and a program's the test starts).
PROBE = '''
import datetime as dt
import subprocess
import sys

import pytest

WRITTEN = dt.datetime.fromisoformat("{written}")
WINDOW = dt.timedelta(days=7)  # e.g. how old a pod's finish may be


def test_a_fixed_date_against_pythons_clock():
    assert dt.datetime.now(dt.UTC) - WRITTEN < WINDOW


def test_a_fixed_date_against_a_programs_clock():
    shown = subprocess.run([sys.executable, "-c", "import datetime as dt; print(dt.datetime.now(dt.UTC).isoformat())"],
                           capture_output=True, text=True).stdout
    assert dt.datetime.fromisoformat(shown.strip()) - WRITTEN < WINDOW


@pytest.mark.real_clock("kept out on purpose: the guard must leave it alone")
def test_kept_on_the_real_clock():
    assert dt.datetime.now(dt.UTC) - WRITTEN < WINDOW
'''


@pytest.mark.real_clock("it starts a moved run of its own")
@pytest.mark.timeout(300)
def test_the_guard_fails_an_unmarked_fixed_date_fixture(tmp_path):
    """An unmarked test with a date typed in today passes on the real clock and fails the moved run —
    whether it reads Python's clock or a program's — while a marked one is left out."""
    probe_dir = tmp_path / "tests_probe"
    probe_dir.mkdir()
    written = clock.now().isoformat()
    (probe_dir / "test_probe.py").write_text(textwrap.dedent(PROBE.format(written=written)))
    args = ["-p", "tests.conftest", "--rootdir", str(probe_dir), "-c", os.devnull, "-rA", str(probe_dir)]

    real = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=240,
                          env={k: v for k, v in os.environ.items() if k not in (clock.ENV, clock.OFFSET_ENV)})
    assert real.returncode == 0 and "3 passed" in real.stdout, real.stdout[-3000:]

    (tmp_path / "moved").mkdir()
    proc = moved_pytest(clock.IN_MAKE_TEST[0], [*args, "-v"], tmp_path / "moved")
    assert proc.wait(timeout=240) == 1
    out = (tmp_path / "moved" / "out.txt").read_text()
    for name in ("pythons_clock", "a_programs_clock"):
        assert f"test_probe.py::test_a_fixed_date_against_{name} FAILED" in out, out[-3000:]
    assert "2 failed, 1 deselected" in out, out[-3000:]
