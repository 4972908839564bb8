"""A validation task failing on its verdict, through Airflow's own task runner (dag.test on a migrated
SQLite metadata DB): its log ends on the verdict block and one "Task exited" line, no traceback, and the
retry policy fails it at once although the task has retries left."""

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.e2e

DAG_FILE = '''
import datetime as dt
from airflow.sdk import DAG, BaseOperator
from cluster_doctor.airflow.operator import VERDICT_RETRY_POLICY, VerdictFailed


class Judged(BaseOperator):
    """What NodeValidationPodOperator._finish does on a failing verdict (tested against the emulator)."""

    def execute(self, context):
        self.log.error("%s", "Verdict: FAIL on gpu-004\\n  node    gpu-004\\n  action  reset_gpu")
        raise VerdictFailed("gpu-004 · gpu_health: FAIL — xid: Xid 94")


with DAG(dag_id="verdict_probe", schedule=None, start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC)) as dag:
    Judged(task_id="validate", retries=2, retry_delay=dt.timedelta(seconds=1), retry_policy=VERDICT_RETRY_POLICY)
'''

RUN_DAG = """
from airflow.dag_processing.dagbag import DagBag
dag = DagBag(dag_folder="{dag}").dags["verdict_probe"]
run = dag.test()
(ti,) = run.get_task_instances()
print("STATE", run.state, ti.state, ti.try_number)
"""


def test_a_failed_verdict_logs_no_traceback_and_is_not_retried(tmp_path, airflow_home):
    home, dags = airflow_home, tmp_path / "dags"  # a copy of the session's migrated metadata DB
    dags.mkdir()
    (dags / "verdict_probe.py").write_text(DAG_FILE)
    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
           "AIRFLOW__CORE__LOAD_EXAMPLES": "false", "AIRFLOW__CORE__DAGS_FOLDER": str(dags)}
    env.pop("PYTHONPATH", None)
    out = subprocess.run([sys.executable, "-c", RUN_DAG.format(dag=dags / "verdict_probe.py")], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=300)
    log = out.stdout + out.stderr
    assert out.returncode == 0 and "STATE failed failed 1" in log, log[-5000:]  # one try of three
    task = log[log.index("Verdict: FAIL on gpu-004"):]
    assert "  action  reset_gpu" in task and "Task exited" in task and "exit_code='gpu-004 · gpu_health" in task
    assert "Traceback" not in log and "Task failed with exception" not in log
    assert "Retry policy decision" in task and "action=fail" in task
