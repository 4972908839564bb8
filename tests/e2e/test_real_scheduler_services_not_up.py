"""A fast-path tick on a real Airflow scheduler while the cluster it reads is not up: suspect_signals is
unpaused by its definition, so on a stack still starting its first run can come before what it reads. Its
read_signals waits within its budget (one fast-path interval, and each Kubernetes call its own retries);
when the Kubernetes API still does not answer, the task fails on one line that names it and says the next tick tries again (before, its log ended
in urllib3's traceback and said nothing else). Once the cluster answers, the next tick succeeds.

A real Airflow 3.3 (tests/support/real_airflow.py) against the Kubernetes API emulator behind a TCP forwarder
that is down at first (connection refused, as before the emulator listens) and a real PostgreSQL.
"""

from __future__ import annotations

import json

import pytest
from k8s_emulator.process import write_kubeconfig

from tests.support.real_airflow import airflow, runs, wait
from tests.support.tcp_proxy import TcpProxy

# make test-slow (about 3 minutes: a real Airflow's three components start, then two ticks run); the wait
# and the one line run in make test at task level (tests/plugins/cluster_doctor/airflow/tasks/test_signals.py,
# test_runtime.py).
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]

DAG = "suspect_signals"
LINE = "fast path not run: the Kubernetes API did not answer within "


def _task_log(home, run_id: str) -> str:
    logs = list((home / "logs").glob(f"dag_id={DAG}/run_id={run_id}/task_id=read_signals/attempt=*.log"))
    return "\n".join(p.read_text() for p in sorted(logs))


def test_a_tick_before_the_cluster_answers_fails_on_one_line_and_the_next_one_succeeds(runner, cluster, tmp_path):
    cluster.add_gpu_node("gpu-001")
    host, port = cluster.url.removeprefix("http://").split(":")
    proxy = TcpProxy(host, int(port))
    proxy.down()
    kubeconfig = tmp_path / "kubeconfig"
    write_kubeconfig(str(kubeconfig), f"http://127.0.0.1:{proxy.port}")
    runner.env_overrides.update({
        "AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps({"conn_type": "kubernetes",
                                                       "extra": {"kube_config_path": str(kubeconfig)}}),
        "CLUSTER_DOCTOR_FAST_PATH_MINUTES": "0.5", "CLUSTER_DOCTOR_FAST_PATH_QUIET_MINUTES": "0",
        "CLUSTER_DOCTOR_SWEEP_INTERVAL_HOURS": "0"})
    logs = tmp_path / "logs"
    logs.mkdir()
    try:
        with airflow(runner.env(), logs):
            failed = wait("a tick ended while the cluster does not answer",
                          lambda: next((r for r, s in runs(runner.home, DAG) if s == "failed"), None), 600, logs, 2)
            text = _task_log(runner.home, failed)
            assert LINE in text and "; the next tick tries again" in text, text[-4000:]
            proxy.up()
            wait("a tick succeeded once the cluster answers",
                 lambda: any(s == "success" for _, s in runs(runner.home, DAG)), 300, logs, 2)
    finally:
        proxy.close()
