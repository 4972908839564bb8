"""The daily report DAG as Airflow loads it, and one real run of it (dag.test) against the results DB."""

import datetime as dt
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO


def test_loads_without_import_errors_or_warnings(dagbag):
    assert dagbag.import_errors == {}
    assert dagbag.caught_warnings == []
    assert "daily_fleet_report" in dagbag.dags


def test_schedule_shape_and_docs(dagbag):
    dag = dagbag.dags["daily_fleet_report"]
    assert dag.schedule == "@daily" and dag.catchup is False and dag.max_active_runs == 1
    assert {"cluster-doctor", "report"} <= set(dag.tags)
    assert dag.doc_md and "daily/<YYYY-MM-DD>.md" in dag.doc_md
    # the fleet is the GPU node inventory in the results DB: no task reads the Kubernetes API
    assert set(dag.task_ids) == {"write_report"}
    assert "inventory" in dag.doc_md


def test_unpaused_at_creation_so_a_new_stacks_triggered_run_runs(dagbag):
    # make up's stack and the compose file pause new DAGs (DAGS_ARE_PAUSED_AT_CREATION): not this one,
    # which validates nothing; its doc says so, and what a run without a day reports on a new install
    dag = dagbag.dags["daily_fleet_report"]
    assert dag.is_paused_upon_creation is False
    assert "Unpaused at creation" in dag.doc_md and "today so far" in dag.doc_md


def test_params_form(dagbag):
    params = dagbag.dags["daily_fleet_report"].params
    assert set(params) == {"day"}
    for name in params:
        param = params.get_param(name)
        assert param.schema.get("title") and param.description, name
    assert params["day"] is None and params.get_param("day").schema["format"] == "date"


RUN_DAG = """
import datetime as dt, json, sys
from airflow.dag_processing.dagbag import DagBag
dag = DagBag(dag_folder="dags/daily_fleet_report.py").dags["daily_fleet_report"]
run = dag.test(run_conf={"day": "2026-11-10"})
print("STATE", run.state)
"""


# covered fast by airflow/tasks/test_daily_report.py and reports/test_daily.py; the DAG runs for real in
# tests/readme/test_quick_start.py (make demo runs it after continuous_validation)
@pytest.mark.e2e
@pytest.mark.slow
def test_a_real_run_writes_the_report(store, db_url, tmp_path):
    """dag.test() on a migrated SQLite metadata DB: the task reads the results DB through the
    validation_db connection and writes both files under reports_dir."""
    from cluster_doctor.domain.attempts import Attempt

    day = dt.datetime(2026, 11, 10, 9, tzinfo=dt.UTC)
    store.record([
        Attempt(node_name="gpu-001", test_name="gpu_health", status="pass", finished_at=day, run_id="a"),
        Attempt(node_name="gpu-002", test_name="gpu_health", status="fail", finished_at=day, run_id="b",
                reason="XID 79 on cuda:4", checks=[{"name": "xid", "status": "fail", "device": "cuda:4",
                                                   "value": 79, "unit": None, "threshold": "none", "message": ""}]),
    ])
    home, reports = tmp_path / "airflow", tmp_path / "reports"
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "false",
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW_CONN_VALIDATION_DB": db_url,
        "CLUSTER_DOCTOR_REPORTS_DIR": str(reports),
        "CLUSTER_DOCTOR_TESTS": "gpu_health",
    }
    env.pop("PYTHONPATH", None)
    home.mkdir()
    migrate = subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=300)
    assert migrate.returncode == 0, migrate.stderr[-3000:]
    out = subprocess.run([sys.executable, "-c", RUN_DAG], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and "STATE success" in out.stdout, (out.stdout + out.stderr)[-5000:]
    assert "XCom not found" not in out.stdout + out.stderr
    md = (reports / "daily" / "2026-11-10.md").read_text()
    html = (reports / "daily" / "2026-11-10.html").read_text()
    assert "Coverage: 2/2 GPU node(s)" in md and "gpu-002 · gpu_health — FAIL at 09:00 UTC (new)" in md
    assert "XID 79 on cuda:4" in html
    assert sorted(p.name for p in (reports / "daily").iterdir()) == ["2026-11-10.html", "2026-11-10.md"]
