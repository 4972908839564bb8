"""make demo stops what it starts: the embedded PostgreSQL does not outlive the demo; its results stay
where the CLI's embedded default finds them (CLUSTER_DOCTOR_HOME=.demo)."""

import datetime as dt
import pathlib
import shutil
import tempfile

import demo
import psycopg
import pytest
from cluster_doctor.cli import connection
from cluster_doctor.store import database
from cluster_doctor.store.history import ResultStore
from leftovers import processes_mentioning


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
