"""The benchmarks run (at a small scale), measure against a baseline of the same run, print their figure
line last and check, and say, that they left nothing behind; the check itself sees a server left running."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest
from cluster_doctor.store import database
from leftovers import Leftovers, processes_mentioning

from tests.conftest import REPO

FIGURES = {  # benchmark -> small-scale arguments, the figure line (last), with its same-run baseline
    "bench_store.py": (["--rows", "20000", "--nodes", "100", "--repeats", "3", "--naive-repeats", "2"],
                       r"latest_view_ms=[\d.]+ naive_ms=[\d.]+ speedup=[\d.]+ rows=20000"),
    "bench_metrics.py": (["--nodes", "60", "--runs", "2"],
                         r"scrape_ms=\d+ bytes=\d+ gzip_bytes=\d+ series=\d+ nodes=60 baseline_ms=\d+ ratio=[\d.]+"),
    "bench_page.py": (["--nodes", "60", "--runs", "2"], r"page_ms=\d+ uncached_ms=\d+ speedup=[\d.]+ nodes=60"),
}


@pytest.mark.parametrize("bench", sorted(FIGURES))
def test_a_benchmark_compares_in_one_run_prints_its_figure_last_and_leaves_nothing(bench):
    args, figure = FIGURES[bench]
    out = subprocess.run([sys.executable, str(REPO / "bench" / bench), *args], capture_output=True, text=True,
                         timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert re.fullmatch(figure, lines[-1]), lines[-1]
    assert lines[-2].startswith("cleanup: nothing left behind"), lines[-2]
    assert "Warning" not in out.stderr, out.stderr  # e.g. platformdirs' RuntimeDirWarning


def test_the_cleanup_check_names_a_server_left_running_and_passes_once_it_is_stopped():
    leftovers = Leftovers()
    with leftovers.tempdir("cd-test-leftovers-") as tmp:
        server = database.embedded_server(tmp / "pg", cleanup_mode="delete")
        try:
            left = leftovers.check()
            assert any("uses" in item and str(tmp) in item for item in left), left
            clean, line = leftovers.verdict()
            assert not clean and line.startswith("cleanup: LEFT BEHIND")
        finally:
            server.cleanup()
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
