"""The benchmarks run (at a small scale), measure against a baseline of the same run, print their figure
line last and check, and say, that they left nothing behind; the check itself sees a server left running."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import psutil
import pytest
from leftovers import Leftovers, processes_mentioning

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "bench"))  # figures: the recorded figures, bench/figures.toml

FIGURES = {  # benchmark -> small-scale arguments, the figure line (last), with its same-run baseline
    "bench_store.py": (["--rows", "20000,40000", "--nodes", "100,200", "--repeats", "3", "--naive-repeats", "2"],
                       r"latest_view_ms=[\d.]+,[\d.]+ naive_ms=[\d.]+ speedup=[\d.]+ rows=20000,40000 "
                       r"prune_s=[\d.]+ pruned=[1-9]\d* nodes=100,200 view_by_nodes_ms=[\d.]+,[\d.]+ host_ms=[\d.]+"),
    "bench_metrics.py": (["--nodes", "60,120", "--runs", "2"],
                         r"scrape_ms=\d+,\d+ growth=[\d.]+ cold_ms=\d+,\d+ bytes=\d+ gzip_bytes=\d+ series=\d+ "
                         r"nodes=60,120 baseline_ms=\d+,\d+ ratio=[\d.]+,[\d.]+ host_ms=[\d.]+,[\d.]+"),
    "bench_page.py": (["--nodes", "60,120", "--runs", "2"],
                      r"uncached_ms=\d+,\d+ growth=[\d.]+ page_ms=\d+,\d+ node_ms=\d+,\d+ nodes=60,120 "
                      r"naive_ms=\d+,\d+ speedup=[\d.]+,[\d.]+ node_speedup=[\d.]+,[\d.]+ host_ms=[\d.]+,[\d.]+"),
    "bench_discovery.py": (["--nodes", "40,80", "--pods", "400,800", "--runs", "2"],
                           r"discovery_s=[\d.]+,[\d.]+ raw_list_s=[\d.]+,[\d.]+ ratio=[\d.]+,[\d.]+ "
                           r"peak_mib=\d+,\d+ xcom_kb=[\d.]+,[\d.]+ api_calls=2,2 nodes=40,80 pods=400,800 "
                           r"host_ms=[\d.]+,[\d.]+"),
    "bench_guards.py": (["--nodes", "40", "--pods", "400", "--validations", "3"],
                        r"guards_s=[\d.]+ baseline_s=[\d.]+ objects=\d+ baseline_objects=\d+ calls=\d+ nodes=40 pods=400"),
}


# benchmark -> (a ratio to its same-run baseline it is judged by, the column its small run measures, a
# value there it cannot meet): each run below is given a figures file that records that value
REGRESSES = {"bench_store.py": ("store.speedup", "20,000 rows", 1e9),
             "bench_metrics.py": ("metrics.speedup", "60 nodes", 1e9),
             "bench_page.py": ("page.speedup", "60 nodes", 1e9),
             "bench_discovery.py": ("discovery.ratio", "40 nodes", 0.001)}


@pytest.mark.parametrize("bench", sorted(FIGURES))
def test_a_benchmark_compares_in_one_run_prints_its_figure_last_and_leaves_nothing(bench, tmp_path):
    """... and, against a recorded figure more than 20 % better than what it measures, says REGRESSION
    and exits 1 (a benchmark that regresses fails loudly in its own output)."""
    args, figure = FIGURES[bench]
    env = dict(os.environ)
    if bench in REGRESSES:
        key, column, value = REGRESSES[bench]
        (tmp_path / "figures.toml").write_text(f'[figures."{key}"]\nlabel = "unreachable"\n"{column}" = {value}\n')
        env["CLUSTER_DOCTOR_BENCH_FIGURES"] = str(tmp_path / "figures.toml")
    out = subprocess.run([sys.executable, str(REPO / "bench" / bench), *args], capture_output=True, text=True,
                         timeout=300, cwd=REPO, env=env)
    lines = out.stdout.strip().splitlines()
    # the figure line and the cleanup line as in any run: the exit status is the regression's alone
    assert re.fullmatch(figure, lines[-1]), out.stdout[-2000:] + out.stderr[-2000:]
    assert lines[-2].startswith("cleanup: nothing left behind"), lines[-2]
    if bench in REGRESSES:
        assert out.returncode == 1, out.stdout[-2000:] + out.stderr[-2000:]
        assert any(line.startswith(f"REGRESSION: {key} at {column}: ") for line in lines), lines[-6:]
    else:
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "Warning" not in out.stderr, out.stderr  # e.g. platformdirs' RuntimeDirWarning


def test_the_cleanup_check_names_a_server_left_in_its_directory_and_passes_once_it_is_gone():
    """A server daemonized out of the run (as pg_ctl's PostgreSQL is: no longer our child) is found by
    its directory on its command line."""
    leftovers = Leftovers()
    with leftovers.tempdir("cd-test-leftovers-") as tmp:
        # the double fork of a daemon: the intermediate process exits, the server is reparented
        launcher = subprocess.run(
            [sys.executable, "-c", "import subprocess, sys; print(subprocess.Popen([sys.executable, '-c', "
             "'import time; time.sleep(60)', sys.argv[1]], start_new_session=True, stdout=subprocess.DEVNULL, "
             "stderr=subprocess.DEVNULL).pid)", str(tmp / "pgdata")],
            capture_output=True, text=True, check=True)
        server = psutil.Process(int(launcher.stdout))
        try:
            left = leftovers.check()
            assert any(f"process {server.pid}:" in item and str(tmp) in item for item in left), left
            assert not any(item.startswith("child process") for item in left), left  # not ours any more
            clean, line = leftovers.verdict()
            assert not clean and line.startswith("cleanup: LEFT BEHIND")
        finally:
            server.kill()
            server.wait(10)
    assert processes_mentioning(str(tmp)) == []
    clean, line = leftovers.verdict()
    assert clean and line.startswith("cleanup: nothing left behind"), line
    assert not pathlib.Path(tmp).exists()


def test_the_cleanup_check_names_a_child_process_and_a_kept_directory(tmp_path):
    leftovers = Leftovers()
    leftovers.dirs.append(tmp_path)  # a directory the run should have removed
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        left = leftovers.check()
        assert f"directory {tmp_path}" in left and any(f"child process {child.pid}:" in item for item in left)
        assert leftovers.finish("figure=1") == 1
    finally:
        child.kill()
        child.wait()


FIGURES_FILE = """
[figures."metrics.scrape_ms"]
label = "Prometheus scrape, uncached, p50 ms"
"5,000 nodes" = 50
"10,000 nodes" = 100

[figures."discovery.ratio"]
label = "Discovery ÷ one raw list"
"5,000 nodes" = 1.10
"""


def test_a_figure_more_than_20_percent_worse_than_the_recorded_one_is_a_regression():
    import figures

    assert figures.recorded("metrics.scrape_ms", "10,000 nodes", FIGURES_FILE) == 100
    assert figures.recorded("discovery.ratio", "10,000 nodes", FIGURES_FILE) is None  # no figure there yet
    assert figures.recorded("discovery.ratio", "5,000 nodes", FIGURES_FILE) == 1.10
    assert figures.regressions({("metrics.scrape_ms", "5,000 nodes"): 59.9}, text=FIGURES_FILE) == []
    [line] = figures.regressions({("metrics.scrape_ms", "5,000 nodes"): 61, ("metrics.scrape_ms", "60 nodes"): 999,
                                  ("discovery.ratio", "10,000 nodes"): 9.0}, text=FIGURES_FILE)
    assert line.startswith("REGRESSION: metrics.scrape_ms at 5,000 nodes: 61 against 50 in bench/figures.toml (+22%")
    assert figures.size_label(30_000_000, "rows") == "30 M rows" and figures.size_label(150_000, "pods") == "150,000 pods"


def test_a_ratio_to_the_same_runs_baseline_more_than_20_percent_worse_is_a_regression():
    import figures

    table = ('[figures."metrics.speedup"]\nlabel = "library ÷ scrape"\n"5,000 nodes" = 15.6\n'
             '[figures."discovery.ratio"]\nlabel = "discovery ÷ raw list"\n"5,000 nodes" = 1.15\n"10,000 nodes" = 1.12\n')
    assert figures.reference_ratio("metrics.speedup", "5,000 nodes", table) == 15.6
    assert figures.reference_ratio("metrics.speedup", "10,000 nodes", table) is None  # not recorded: not judged
    # a higher speedup and a lower discovery ratio are better; 20 % worse is still within
    assert figures.ratio_regressions({("metrics.speedup", "5,000 nodes"): 12.5, ("metrics.speedup", "10,000 nodes"): 1.0,
                                      ("discovery.ratio", "5,000 nodes"): 1.37}, text=table) == []
    lines = figures.ratio_regressions({("metrics.speedup", "5,000 nodes"): 12.4,
                                       ("discovery.ratio", "10,000 nodes"): 1.35}, text=table)
    assert [line.split(":")[1] for line in lines] == [" metrics.speedup at 5,000 nodes", " discovery.ratio at 10,000 nodes"]
    assert "prometheus_client's own app in the same run" in lines[0] and "one raw pod list" in lines[1], lines


def test_a_benchmark_that_regresses_says_so_in_its_output_and_exits_1(tmp_path):
    recorded = tmp_path / "figures.toml"
    recorded.write_text('[figures."metrics.speedup"]\nlabel = "library ÷ scrape"\n"60 nodes" = 100000\n')
    out = subprocess.run([sys.executable, str(REPO / "bench" / "bench_metrics.py"), "--nodes", "60", "--runs", "1"],
                         capture_output=True, text=True, timeout=300, cwd=REPO,
                         env={**os.environ, "CLUSTER_DOCTOR_BENCH_FIGURES": str(recorded)})
    assert out.returncode == 1, out.stdout[-2000:] + out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert any(line.startswith("REGRESSION: metrics.speedup at 60 nodes: ") for line in lines), lines[-5:]
    assert lines[-2].startswith("cleanup: nothing left behind") and lines[-1].startswith("scrape_ms=")


def test_the_benchmarks_page_quotes_every_recorded_figure_as_recorded():
    """docs/benchmarks.md's tables name each figure's key; what they say is what bench/figures.toml holds,
    so editing the page's prose cannot move a benchmark's bar, and a new recorded figure is shown."""
    import figures

    recorded = {(key, column): float(value) for key, figure in figures.load()["figures"].items()
                for column, value in figure.items() if isinstance(value, (int, float))}
    quoted = figures.quoted((REPO / "docs" / "benchmarks.md").read_text())
    assert quoted == recorded


def test_a_quoted_figure_is_read_from_its_table_row_and_column():
    import figures

    page = ("| Figure | 5,000 nodes | 10,000 nodes | growth | load |\n|---|---|---|---|---|\n"
            "| First scrape, p50 ms (`metrics.cold_ms`) | 485 | 1,123 | 2.3× | 0.9 |\n"
            "| Discovery p50 s (no key) | 0.20 (0.17) | 0.40 | 2.0× | 0.6 |\n")
    assert figures.quoted(page) == {("metrics.cold_ms", "5,000 nodes"): 485.0,
                                    ("metrics.cold_ms", "10,000 nodes"): 1123.0}


def _figures(line: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in line.split())


@pytest.mark.slow  # two benchmark runs, one beside busy loops: minutes by nature
@pytest.mark.timeout(600)
def test_a_slower_host_is_not_a_regression(tmp_path):
    """bench-metrics judged against figures recorded on a host four times faster (its own run's absolute
    figures a moment before, divided by four) and that run's ratio to the same-run baseline, now with a
    busy loop per CPU beside it (a host made slower still: the loops take every core's share from it).
    Judged as they are, its absolute figures would read as a REGRESSION whatever the host (the recorded
    ones are a quarter of what this host measured when idle); the ratio to the baseline of the same run
    does not, and the host's speed is printed beside the figures."""
    args = [sys.executable, str(REPO / "bench" / "bench_metrics.py"), "--nodes", "200", "--runs", "7"]
    before = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert before.returncode == 0, before.stdout[-2000:] + before.stderr[-2000:]
    recorded = _figures(before.stdout.strip().splitlines()[-1])
    faster = {key: float(recorded[key]) / 4 for key in ("scrape_ms", "cold_ms")}
    figures_file = tmp_path / "figures.toml"
    figures_file.write_text(
        f'[figures."metrics.scrape_ms"]\nlabel = "scrape"\n"200 nodes" = {faster["scrape_ms"]}\n'
        f'[figures."metrics.cold_ms"]\nlabel = "first scrape"\n"200 nodes" = {faster["cold_ms"]}\n'
        f'[figures."metrics.speedup"]\nlabel = "library ÷ scrape"\n"200 nodes" = {recorded["ratio"]}\n')
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in os.sched_getaffinity(0)]
    try:
        slower = subprocess.run(args, capture_output=True, text=True, timeout=450, cwd=REPO,
                                env={**os.environ, "CLUSTER_DOCTOR_BENCH_FIGURES": str(figures_file)})
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    lines = slower.stdout.strip().splitlines()
    assert slower.returncode == 0 and not [line for line in lines if "REGRESSION" in line], \
        slower.stdout[-3000:] + slower.stderr[-2000:]
    measured = _figures(lines[-1])
    assert float(measured["host_ms"]) > 0 and any(line.startswith("host: host_ms=") for line in lines), lines
