"""make demo stops what it starts: the embedded PostgreSQL does not outlive the demo; its results stay
where the CLI's embedded default finds them (CLUSTER_DOCTOR_HOME=.demo). Its one failure is a real one."""

import datetime as dt
import os
import pathlib
import re
import shutil
import tempfile

import demo
import psycopg
import pytest
from cluster_doctor.cli import connection
from cluster_doctor.store import database
from cluster_doctor.store.history import ResultStore
from k8s_emulator import EmulatorProcess
from leftovers import processes_mentioning

from tests.support.suite_pods import run_suite_pod


@pytest.fixture
def demo_dir():
    """Outside pytest's basetemp: as root, pgserver opens up the parents of its data directory, which a
    pytest starting meanwhile closes again."""
    path = pathlib.Path(tempfile.mkdtemp(prefix="cd-demo-test-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_the_demo_database_is_stopped_when_the_demo_ends_and_the_cli_finds_it(demo_dir):
    pgdata = demo_dir / "pgdata"
    server, url = demo.results_db(pgdata)
    ResultStore(url).upgrade()
    demo.seed_history(url)
    demo.stop_results_db(server)
    assert not (pgdata / "postmaster.pid").exists()
    assert processes_mentioning(str(pgdata)) == []
    # the CLI's embedded fallback, with CLUSTER_DOCTOR_HOME at the demo's directory, opens the same data
    connect, source = connection.resolve(None, env={"CLUSTER_DOCTOR_HOME": str(demo_dir)})
    try:
        assert source == f"embedded PostgreSQL in {pgdata}"
        with connect() as conn:
            assert conn.execute("SELECT count(*) FROM validation_history").fetchone()[0] > 20
    finally:
        database.stop_embedded(database.embedded_server(pgdata))
    assert processes_mentioning(str(pgdata)) == []


def test_a_second_demo_starts_from_a_fresh_schema(demo_dir):
    pgdata = demo_dir / "pgdata"
    for _ in range(2):
        server, url = demo.results_db(pgdata)
        try:
            with psycopg.connect(**database.libpq_params(url)) as conn:
                assert conn.execute("SELECT to_regclass('validation_history')").fetchone() == (None,)
            ResultStore(url).upgrade()
            demo.seed_history(url)
        finally:
            demo.stop_results_db(server)


def test_seeded_history_carries_cpu_mode_figures_before_each_pairs_latest():
    now = dt.datetime(2026, 11, 25, 12, tzinfo=dt.UTC)
    figures = demo.cpu_mode_metrics("dl_unit", "gpu-001", now)
    assert set(figures) == {"gemm_fp32_tflops_min", "mem_bw_gbps_min"}
    assert figures == demo.cpu_mode_metrics("dl_unit", "gpu-001", now)  # deterministic
    assert demo.cpu_mode_metrics("gpu_health", "gpu-001", now) == {}


def test_the_daily_section_is_the_reports_headline_and_failures():
    markdown = ("# Cluster Doctor daily summary\n\nAs of ...\n\n## Headline\n\n- Coverage: 1/4\n\n"
                "## Failures of the day\n\ngpu-004 gpu_health\n\n## Coverage trend (last 14 days)\n\n| day |\n")
    section = demo.daily_report_section(markdown)
    assert section.startswith("## Headline") and "gpu-004" in section and "Coverage trend" not in section


def test_a_node_failing_a_check_is_not_a_broken_run_but_a_failed_summary_is():
    def run(*failed):
        return {"task_instances": [{"task_id": t, "state": "failed"} for t in failed]
                + [{"task_id": "discover", "state": "success"}]}

    assert demo.run_broke(run("validate", "verdict")) == []
    assert demo.run_broke(run("validate.gpu_health", "verdict")) == []  # validations in a task group
    assert demo.run_broke(run("validate.gpu_health", "summarize")) == ["summarize"]
    assert demo.run_broke({"task_instances": [{"task_id": "load_latest", "state": "upstream_failed"}]}) == \
        ["load_latest"]


def test_the_demos_failure_is_the_suites_own_with_its_code_and_action(tmp_path, monkeypatch):
    """The demo's one failure is what the real gpu_health suite reports for the fault of gpu-004 (an
    uncorrectable ECC error in its kernel log): its code and recommended action, never `unknown`."""
    monkeypatch.setattr(demo, "DEMO", tmp_path)
    with EmulatorProcess(state_dir=str(tmp_path / "emu")) as emu:
        demo.cluster(emu)
        summary = run_suite_pod(emu, demo.FAULTY, "gpu_health", tmp_path / "out")
        assert summary["status"] == "fail" and summary["node"] == demo.FAULTY
        assert (summary["code"], summary["action"]) == ("XID_MEMORY_ERROR", "reset_gpu"), summary
        assert run_suite_pod(emu, "gpu-001", "gpu_health", tmp_path / "out")["status"] == "pass"


def test_the_last_line_says_how_long_the_command_took_where_the_time_went_and_on_what(monkeypatch):
    """make demo and make up end with one line the README quotes: the seconds from the process start,
    each phase's seconds in order, and the machine's CPUs and load."""
    import time

    import timing

    phases = timing.Phases()
    phases.mark("database")
    time.sleep(0.2)
    phases.mark("DAG runs")
    line = phases.line("make demo finished")
    m = re.fullmatch(r"make demo finished in (\d+) s \(start (\d+) s, database (\d+) s, DAG runs (\d+) s; "
                     r"(\d+) CPUs, load [\d.]+ \(1 min\) / [\d.]+ \(5 min\)\)", line)
    assert m, line
    assert int(m[1]) >= int(m[2]) and int(m[5]) == os.cpu_count()
    assert abs(sum(map(int, m.groups()[1:4])) - int(m[1])) <= 3  # the phases add up to the total

