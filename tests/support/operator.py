"""The pod operator run as Airflow runs a task, without Airflow: its task instance (the fields the provider
and the operator read, and XCom), one validate step's operator, and running it to its outcome."""

from __future__ import annotations

import datetime as dt
import types

from airflow.sdk.exceptions import AirflowSkipException
from cluster_doctor.airflow.operator import NodeValidationPodOperator, VerdictFailed
from cluster_doctor.domain.config import Settings


class FakeTI:
    """The task instance fields the provider and the operator read, and XCom."""

    def __init__(self):
        self.dag_id, self.task_id, self.run_id = "continuous_validation", "validate", "manual__2026-11-22T10:00:00+00:00"
        self.map_index, self.try_number = 3, 1
        self.xcom: dict[str, object] = {}

    def xcom_push(self, key, value):
        self.xcom[key] = value


def run(op: NodeValidationPodOperator):
    ti = FakeTI()
    context = {"ti": ti, "run_id": ti.run_id, "dag": types.SimpleNamespace(dag_id=ti.dag_id)}
    written = []
    op._write = written.append  # the results DB path is tested in test_tasks / e2e
    try:
        returned, raised = op.execute(context), None
    except (VerdictFailed, AirflowSkipException) as exc:
        returned, raised = None, exc
    return ti, written, returned, raised


def operator(**settings) -> NodeValidationPodOperator:
    settings = {"availability_check_s": 1, "pending_timeout_s": 30, "suite_device": "cpu", **settings}
    run_config = {"settings": Settings(**settings).to_dict(), "configmap": "cluster-doctor-suites-0",
                  "suite_version": "sha256:0000000000000000", "suite_files": ["__init__.py"]}
    return NodeValidationPodOperator(task_id="validate", node_name="gpu-001", test_name="gpu_health", gpu_count=8,
                                     planned_at=dt.datetime.now(dt.UTC).isoformat(), run_config=run_config)
