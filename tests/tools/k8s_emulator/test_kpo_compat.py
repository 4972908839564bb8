"""The real KubernetesPodOperator (sync mode) against the emulator over HTTP: the same calls it makes on a
cluster (create, find by labels, read, events, followed logs, patch labels, delete).

The operator runs outside a DAG run here; its context needs only what execute() reads: the task instance's
identity (for the pod labels it later searches by) and xcom_push. Everything between the operator and the
"cluster" is the real provider code and the real kubernetes client over HTTP.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("airflow.providers.cncf.kubernetes")

from airflow.providers.cncf.kubernetes.callbacks import KubernetesPodOperatorCallback
from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
from airflow.providers.cncf.kubernetes.utils.pod_manager import PodLaunchTimeoutException

LINES: list[str] = []


class Collect(KubernetesPodOperatorCallback):
    @staticmethod
    def progress_callback(*, line, **kwargs):
        LINES.append(line)


class TaskInstance:
    def __init__(self, task_id):
        self.dag_id, self.task_id, self.map_index, self.try_number = "kpo_compat", task_id, -1, 1
        self.xcom = {}

    def xcom_push(self, key, value):
        self.xcom[key] = value


class Dag:
    dag_id = "kpo_compat"


def _context(task_id):
    ti = TaskInstance(task_id)
    return {"ti": ti, "task_instance": ti, "run_id": "manual__compat", "dag": Dag()}


@pytest.fixture
def kube_conn(emu, monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_KUBERNETES_DEFAULT",
        json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": emu.kubeconfig_path}}),
    )
    emu.add_gpu_node("gpu-1")
    return emu


def _op(task_id, cmds, **kw):
    return KubernetesPodOperator(
        task_id=task_id,
        namespace="default",
        image="python:3.11-slim",
        name=task_id,
        cmds=cmds,
        on_finish_action="delete_pod",
        get_logs=True,
        startup_check_interval_seconds=1,
        kubernetes_conn_id="kubernetes_default",
        container_resources={"limits": {"nvidia.com/gpu": "8"}},
        termination_message_policy="FallbackToLogsOnError",
        **kw,
    )


def test_kpo_runs_streams_logs_and_deletes_pod(kube_conn):
    emu = kube_conn
    LINES.clear()
    code = (
        "import json, time\n"
        "for i in range(3): print('progress', i, flush=True); time.sleep(0.3)\n"
        "open('/dev/termination-log', 'w').write(json.dumps({'status': 'pass'}))"
    )
    ctx = _context("ok")
    _op("ok", ["python", "-c", code], callbacks=[Collect]).execute(ctx)
    assert [line.strip() for line in LINES] == ["progress 0", "progress 1", "progress 2"]
    [rec] = emu.pod_history()
    assert rec["deleted"] and rec["phase"] == "Succeeded" and rec["node"] == "gpu-1"
    assert rec["labels"]["kubernetes_pod_operator"] == "True" and rec["labels"]["task_id"] == "ok"
    assert ctx["ti"].xcom["pod_name"] == rec["name"]
    calls = emu.counters()["by_verb_resource"]
    assert calls["create pods"] == 1 and calls["delete pods"] == 1 and calls["get pods/log"] >= 1
    assert calls["list pods"] >= 1 and calls.get("list events", 0) >= 1  # find_pod by labels, startup events


def test_kpo_failure_carries_termination_message_and_still_deletes(kube_conn):
    emu = kube_conn
    code = "print('nccl all-reduce 120 GB/s < 460'); raise SystemExit(1)"
    with pytest.raises(Exception) as exc:
        _op("fails", ["python", "-c", code]).execute(_context("fails"))
    assert "returned a failure" in str(exc.value) and "nccl all-reduce 120 GB/s < 460" in str(exc.value)
    [rec] = emu.pod_history()
    assert rec["deleted"] and rec["phase"] == "Failed"
    assert rec["labels"].get("already_checked") == "True"  # the operator's patch went through


def test_kpo_schedule_timeout_deletes_the_pending_pod(kube_conn):
    emu = kube_conn
    emu.set_script("gpu-1", "never_schedule")
    with pytest.raises(Exception) as exc:
        _op("stuck", ["python", "-c", "print(1)"], schedule_timeout_seconds=2).execute(_context("stuck"))
    assert isinstance(exc.value.__context__, PodLaunchTimeoutException) or isinstance(
        exc.value, PodLaunchTimeoutException
    )
    [rec] = emu.pod_history()
    assert rec["deleted"] and rec["phase"] == "Pending" and rec["node"] == ""
