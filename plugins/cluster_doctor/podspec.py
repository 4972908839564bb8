"""Hydrate the base pod manifest (include/pod_templates/) into the pod of one node-test pair.

Pure data in, dict out: no Airflow, no Kubernetes client. Values are set field by field on the parsed
manifest (never by text substitution), and the node name is validated first, so nothing from a node
name or a setting can inject YAML or reach the spec unchecked.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import pathlib
import re
from collections.abc import Mapping
from typing import Any

import yaml

from cluster_doctor import suites
from cluster_doctor.config import Settings
from cluster_doctor.nodes import validate_node_name

LABEL_PREFIX = "cluster-doctor.io"
HOSTNAME_LABEL = "kubernetes.io/hostname"
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@functools.lru_cache(maxsize=8)
def _load_template(path: str, mtime: float) -> dict[str, Any]:
    with open(path) as fh:
        template = yaml.safe_load(fh)
    if not isinstance(template, dict) or template.get("kind") != "Pod":
        raise ValueError(f"{path}: not a Pod manifest")
    containers = (template.get("spec") or {}).get("containers") or []
    if not any(c.get("name") == "base" for c in containers):
        raise ValueError(f"{path}: the validation container must be named 'base'")
    return template


def load_template(path: pathlib.Path) -> dict[str, Any]:
    return copy.deepcopy(_load_template(str(path), path.stat().st_mtime))


def label_value(text: str) -> str:
    """A valid label value (<= 63 chars); long or odd values keep a recognizable prefix and a hash."""
    if len(text) <= 63 and _LABEL_VALUE.match(text):
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    head = re.sub(r"[^A-Za-z0-9_.-]", "-", text)[:50].strip("-_.")
    return f"{head}-{digest}" if head else digest


def pod_name_prefix(node_name: str, test_name: str) -> str:
    # The provider appends a random suffix; keep the prefix readable in `kubectl get pods`.
    return f"cv-{test_name.replace('_', '-')}-{node_name}"[:50].rstrip("-.")


def build_pod(
    settings: Settings,
    *,
    node_name: str,
    test_name: str,
    gpu_count: int,
    gpu_model: str | None,
    run_id: str,
    configmap: str,
    suite_version: str,
    suite_files: list[str] | None = None,
    template: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    validate_node_name(node_name)
    suite = suites.get(test_name)
    if isinstance(gpu_count, bool) or not isinstance(gpu_count, int) or gpu_count < 0:
        raise ValueError(f"gpu_count must be an integer >= 0, got {gpu_count!r}")
    pod = copy.deepcopy(dict(template)) if template is not None else load_template(suites.pod_template_file(settings))
    meta = pod.setdefault("metadata", {})
    meta["name"] = pod_name_prefix(node_name, test_name)
    meta["namespace"] = settings.namespace
    labels = meta.setdefault("labels", {})
    labels.update({
        "app.kubernetes.io/name": "cluster-doctor",
        "app.kubernetes.io/component": "validation",
        f"{LABEL_PREFIX}/node": label_value(node_name),
        f"{LABEL_PREFIX}/test": test_name,
        f"{LABEL_PREFIX}/run": label_value(run_id),
    })
    labels.update({k: label_value(str(v)) for k, v in settings.pod_labels.items()})
    meta.setdefault("annotations", {}).update({
        f"{LABEL_PREFIX}/node": node_name,
        f"{LABEL_PREFIX}/run-id": run_id,
        f"{LABEL_PREFIX}/suite-version": suite_version,
    })

    spec = pod.setdefault("spec", {})
    # Required node affinity keeps the scheduler in the loop (taints, resources, preemption) while
    # pinning the pod to its node; spec.nodeName would bypass all of that.
    spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": HOSTNAME_LABEL, "operator": "In", "values": [node_name]}]}]}}}
    spec["tolerations"] = copy.deepcopy(settings.tolerations)
    spec["priorityClassName"] = settings.priority_class
    spec["schedulerName"] = settings.scheduler_name
    spec["restartPolicy"] = "Never"
    # Kubernetes kills a pod that outlives its pending window plus run budget, even if Airflow is gone.
    spec["activeDeadlineSeconds"] = settings.pending_timeout_s + settings.suite_timeout(test_name)
    if settings.service_account:
        spec["serviceAccountName"] = settings.service_account

    for volume in spec.get("volumes") or []:
        if "persistentVolumeClaim" in volume:
            volume["persistentVolumeClaim"]["claimName"] = settings.pvc
        if "configMap" in volume and volume.get("name") == "suites":
            volume["configMap"]["name"] = configmap
            if suite_files:
                # ConfigMaps are flat; project them into a package directory
                volume["configMap"]["items"] = [{"key": f, "path": f"suites/{f}"} for f in sorted(suite_files)]

    container = next(c for c in spec["containers"] if c.get("name") == "base")
    container["image"] = suite.image(settings)
    container["imagePullPolicy"] = settings.image_pull_policy
    container["command"] = suite.command(settings)
    container.pop("args", None)
    container["terminationMessagePolicy"] = "FallbackToLogsOnError"
    for mount in container.get("volumeMounts") or []:
        if mount.get("name") == "results":
            mount["mountPath"] = settings.results_dir
    resources = container.setdefault("resources", {})
    requests, limits = resources.setdefault("requests", {}), resources.setdefault("limits", {})
    requests.setdefault("cpu", suite.cpu)
    requests["memory"] = suite.memory
    # All of the node's GPUs: nobody else can land there while we run, and every GPU gets tested.
    extended = {settings.gpu_resource: gpu_count, **settings.pod_resources}
    for name, amount in extended.items():
        requests[name] = str(amount)
        limits[name] = str(amount)

    env = {e["name"]: e for e in container.get("env") or []}
    values = {
        "CLUSTER_DOCTOR_TEST": test_name,
        "CLUSTER_DOCTOR_DEVICE": settings.suite_device,
        # CPU mode (demo, tests) exercises the plumbing: the suites see no GPU and must not expect one.
        "CLUSTER_DOCTOR_EXPECTED_GPUS": str(gpu_count if settings.suite_device == "cuda" else 0),
        "CLUSTER_DOCTOR_SUITE_VERSION": suite_version,
        "CLUSTER_DOCTOR_OUTPUT_DIR": settings.results_dir,
        "CLUSTER_DOCTOR_RUN_ID": run_id,
        "CLUSTER_DOCTOR_TERMINATION_LOG": container.get("terminationMessagePath", "/dev/termination-log"),
        **({"CLUSTER_DOCTOR_GPU_MODEL": gpu_model} if gpu_model else {}),
        **{str(k): str(v) for k, v in settings.pod_env.items()},
    }
    for name, value in values.items():
        env[name] = {"name": name, "value": value}
    container["env"] = list(env.values())
    return pod
