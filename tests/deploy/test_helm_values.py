"""deploy/helm/values-kubernetes-executor.yaml: the official chart's keys, Kubernetes-valid objects, and
Cluster Doctor wired for the KubernetesExecutor (shared spool and reports, run-time DB role, pool)."""

from __future__ import annotations

import json
import pathlib
import re

import jsonschema
import kubernetes_validate
import pytest
import yaml
from cluster_doctor.airflow import storage
from cluster_doctor.domain.config import Settings

REPO = pathlib.Path(__file__).resolve().parents[2]
VALUES = REPO / "deploy" / "helm" / "values-kubernetes-executor.yaml"
SCHEMA = json.loads((REPO / "tests" / "deploy" / "fixtures" / "airflow-chart-values.subset.schema.json").read_text())


@pytest.fixture(scope="module")
def values() -> dict:
    return yaml.safe_load(VALUES.read_text())


def env_of(values: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in values["env"]}


def test_the_values_use_only_keys_of_the_charts_values_schema(values):
    jsonschema.Draft7Validator(SCHEMA).validate(values)
    with pytest.raises(jsonschema.ValidationError):  # the subset is strict enough to catch a typo
        jsonschema.Draft7Validator(SCHEMA).validate({**values, "workers": {**values["workers"], "resource": {}}})
    with pytest.raises(jsonschema.ValidationError):  # env items hold plain values only in this chart
        jsonschema.Draft7Validator(SCHEMA).validate({**values, "env": [{"name": "X", "valueFrom": {}}]})


def test_kubernetes_objects_in_the_values_are_valid(values):
    spec = {"containers": values["scheduler"]["extraInitContainers"], "volumes": values["volumes"]}
    spec["containers"] = [{**c, "volumeMounts": values["volumeMounts"]} for c in spec["containers"]]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "check"}, "spec": spec}
    kubernetes_validate.validate(pod, "1.31", strict=True)
    limits = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "task"},
              "spec": {"containers": [{"name": "base", "image": "x", "resources": values["workers"]["resources"]}]}}
    kubernetes_validate.validate(limits, "1.31", strict=True)


def test_the_kubernetes_executor_with_a_spool_every_task_pod_shares(values):
    assert values["executor"] == "KubernetesExecutor" and values["allowPodLaunching"] is True
    env = env_of(values)
    settings = Settings.load(env=env)  # the settings model itself accepts what the chart hands it
    mounts = {m["mountPath"]: m["name"] for m in values["volumeMounts"]}
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in values["volumes"]
              if "persistentVolumeClaim" in v}
    for path in (settings.spool_dir, settings.reports_dir):
        mounted = [m for m in mounts if path == m or path.startswith(m.rstrip("/") + "/")]
        assert mounted and mounts[mounted[0]] in claims, f"{path} is not on the shared claim"
    # ... so discover does not warn, as it would with the per-pod default
    assert storage.executor_warning(settings, [values["executor"]]) is None
    assert storage.executor_warning(Settings(), [values["executor"]]) is not None


def test_tasks_reach_the_results_db_as_the_run_time_role_and_the_owner_only_migrates(values):
    assert values["secret"] == [{"envName": "AIRFLOW_CONN_VALIDATION_DB", "secretName": "cluster-doctor-connections",
                                 "secretKey": "AIRFLOW_CONN_VALIDATION_DB"}]
    text = VALUES.read_text()
    runtime = re.search(r"AIRFLOW_CONN_VALIDATION_DB='postgresql://(\w+):", text).group(1)
    owner = re.search(r"CLUSTER_DOCTOR_OWNER_DB_URL='postgresql://(\w+):", text).group(1)
    assert (runtime, owner) == ("cluster_doctor_app", "cluster_doctor")
    (init,) = values["scheduler"]["extraInitContainers"]
    script = init["args"][-1]
    steps = ['AIRFLOW_CONN_VALIDATION_DB="$CLUSTER_DOCTOR_OWNER_DB_URL" cluster-doctor db upgrade',
             f'AIRFLOW_CONN_VALIDATION_DB="$CLUSTER_DOCTOR_OWNER_DB_URL" cluster-doctor db grant-runtime {runtime}',
             "airflow pools set gpu_validation"]
    positions = [script.find(s) for s in steps]
    assert -1 not in positions and positions == sorted(positions), "migrate, grant, then the pool"
    assert "--include-deferred" in script and "command" not in init
    assert {e["name"] for e in init["env"]} == {"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "CLUSTER_DOCTOR_OWNER_DB_URL",
                                                "CLUSTER_DOCTOR_POOL_SLOTS"}
    image = values["images"]["airflow"]
    assert init["image"] == f"{image['repository']}:{image['tag']}", "the same image as Airflow itself"
    # the owner's URL reaches the init container only, never a task pod
    assert "CLUSTER_DOCTOR_OWNER_DB_URL" not in env_of(values)
    assert all(s["secretKey"] != "CLUSTER_DOCTOR_OWNER_DB_URL" for s in values["secret"])


def test_the_connections_and_settings_tasks_need_are_there(values):
    env = env_of(values)
    kube = json.loads(env["AIRFLOW_CONN_KUBERNETES_DEFAULT"])
    assert kube == {"conn_type": "kubernetes", "extra": {"in_cluster": True}}
    assert env["CLUSTER_DOCTOR_SERVICE_ACCOUNT"] == "cluster-doctor-validation"
    assert values["workers"]["serviceAccount"]["name"], "the task pods' identity, to bind in include/k8s"
    assert int(env["CLUSTER_DOCTOR_POOL_SLOTS"]) >= 1
