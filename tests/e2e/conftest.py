"""End-to-end harness: the real DAG through Airflow's dag.test() (SQLite metadata DB), the real
KubernetesPodOperator and kubernetes client over HTTP to the Kubernetes API emulator, and a real
PostgreSQL results database."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess

import dag_runner
import pytest
from k8s_emulator import EmulatorProcess
from kubernetes import client as k8s

NAMESPACE = "cluster-doctor"
PVC = "cluster-doctor-results"


@pytest.fixture(scope="session")
def airflow_template(tmp_path_factory):
    """A migrated Airflow metadata DB with the gpu_validation pool, copied for each test."""
    home = tmp_path_factory.mktemp("airflow_template")
    dag_runner.prepare(dag_runner.airflow_env(home))
    return home


@pytest.fixture
def airflow_home(airflow_template, tmp_path):
    home = tmp_path / "airflow"
    home.mkdir()
    shutil.copy(airflow_template / "airflow.db", home / "airflow.db")
    return home


@pytest.fixture(scope="session")
def _emulator(tmp_path_factory):
    pvc = tmp_path_factory.mktemp("pvc")
    emu = EmulatorProcess(pvc_dirs={PVC: str(pvc)}, settings={"scheduler_interval": 0.05, "startup_delay": 0.05})
    emu.start()
    yield emu
    emu.cleanup()


@pytest.fixture
def cluster(_emulator):
    """A fresh simulated cluster with the namespace and PriorityClass of include/k8s."""
    _emulator.reset()
    _emulator.core_v1().create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    k8s.SchedulingV1Api(_emulator.api_client()).create_priority_class({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": "cluster-doctor-preemptible"}, "value": -100, "preemptionPolicy": "Never"})
    yield _emulator
    leaked = [p["name"] for p in _emulator.live_pods("app.kubernetes.io/name=cluster-doctor")]
    assert leaked == [], f"validation pods left behind: {leaked}"


class Runner:
    def __init__(self, home, emulator, db_url):
        self.home, self.emulator, self.db_url = home, emulator, db_url
        self.env_overrides: dict[str, str] = {}
        self.last_log = ""

    def env(self) -> dict:
        extra = {
            "AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps(
                {"conn_type": "kubernetes", "extra": {"kube_config_path": self.emulator.kubeconfig_path}}),
            "AIRFLOW_CONN_VALIDATION_DB": self.db_url,
            "CLUSTER_DOCTOR_SUITE_DEVICE": "cpu",
            "CLUSTER_DOCTOR_AVAILABILITY_CHECK_S": "1",
            "CLUSTER_DOCTOR_PENDING_TIMEOUT_S": "30",
            "CLUSTER_DOCTOR_TESTS": "gpu_health",
            **self.env_overrides,
        }
        return dag_runner.airflow_env(self.home, extra=extra)

    def run(self, conf: dict | None = None, logical_date: dt.datetime | None = None, timeout: int = 850) -> dict:  # a hang guard: a loaded box took over 300 s
        out_file = self.home / f"result-{len(list(self.home.glob('result-*')))}.json"
        cmd = dag_runner.command("--conf", json.dumps(conf or {}), "--out", str(out_file))
        if logical_date:
            cmd += ["--logical-date", logical_date.isoformat()]
        proc = subprocess.run(cmd, env=self.env(), capture_output=True, text=True, timeout=timeout)
        self.last_log = proc.stdout + proc.stderr
        if proc.returncode != 0 or not out_file.exists():
            raise AssertionError(f"dag_runner failed ({proc.returncode}):\n{self.last_log[-6000:]}")
        result = json.loads(out_file.read_text())
        result["states"] = {(t["task_id"], t["label"] or t["map_index"]): t["state"] for t in result["task_instances"]}
        return result


@pytest.fixture
def runner(airflow_home, cluster, runtime_db_url):
    """The DAG connects as the least-privilege run-time role (SELECT/INSERT/UPDATE/DELETE and sequence
    usage, granted after the owner migrated): what the deployment docs set up."""
    return Runner(airflow_home, cluster, runtime_db_url)
