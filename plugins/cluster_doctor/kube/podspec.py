"""Hydrate the base pod manifest (include/pod_templates/) into the pod of one node-test pair.

Pure data in, dict out: no Airflow, no Kubernetes client. Values are set field by field on the parsed
manifest (never by text substitution), and the node name is validated first, so nothing from a node
name or a setting can inject YAML or reach the spec unchecked.

Hardening of every container (the suite's, and any init, sidecar or ephemeral container a custom
template adds), whatever the template says: seccomp RuntimeDefault, no privilege escalation, every
capability dropped and only the suite's own added back to its container (``SUITE_CAPABILITIES``, and
only those the deployment allows in ``pod_capabilities``), a non-root user for suites that need no
capability and for every other container, a read-only root filesystem (``/tmp`` is an emptyDir),
and the shared results volume mounted only at the pod's own ``<test>/<node>/`` directory (subPath),
so no pod can touch another node's logs. A template that shares a host namespace (hostPID,
hostNetwork, hostIPC), mounts a hostPath or runs a privileged container is refused, naming the field,
unless the deployment setting ``pod_allowed_host_fields`` allows that field.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import pathlib
import re
from collections.abc import Iterable, Mapping
from importlib import resources
from typing import Any

import yaml

from cluster_doctor.domain import suites
from cluster_doctor.domain.config import ENV_PREFIX, Settings
from cluster_doctor.domain.nodes import validate_node_name
from cluster_doctor.kube import suite_code

# What each suite needs beyond an unprivileged container. A capability added in the securityContext
# reaches a process only when it runs as UID 0 (Kubernetes sets no ambient capabilities), so a suite
# that gets one runs as root, with every other capability still dropped.
SUITE_CAPABILITIES: dict[str, tuple[str, ...]] = {
    # dmesg: Xid events in the kernel log, unreadable without CAP_SYSLOG where kernel.dmesg_restrict=1
    "gpu_health": ("SYSLOG",),
    # NCCL over InfiniBand registers (pins) its buffers with the HCA: needs CAP_IPC_LOCK (RLIMIT_MEMLOCK)
    "nccl_loopback": ("IPC_LOCK",),
    "dl_unit": (),
    "storage_fio": (),
    # both read what any container may: nvbandwidth the GPUs allocated to it, ib_health sysfs (and
    # `ethtool -S`, which needs no capability to read statistics)
    "nvbandwidth": (),
    "ib_health": (),
    # the two-node NCCL all-reduce and ib_write_bw register (pin) their buffers with the HCAs, as nccl_loopback
    "fabric_peer": ("IPC_LOCK",),
}
# The conventional "nonroot" UID/GID of distroless images; the GPU device nodes are world-usable and
# fsGroup makes the results volume group-writable for it.
NONROOT_ID = 65532

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

# Package data: include/pod_templates/ ships as cluster_doctor.pod_templates.
DEFAULT_POD_TEMPLATE = pathlib.Path(str(resources.files("cluster_doctor.pod_templates") / "validation-pod.yaml"))


def pod_template_file(settings: Settings) -> pathlib.Path:
    return pathlib.Path(settings.pod_template_file) if settings.pod_template_file else DEFAULT_POD_TEMPLATE



def load_template(path: pathlib.Path) -> dict[str, Any]:
    return copy.deepcopy(_load_template(str(path), path.stat().st_mtime))


def label_value(text: str) -> str:
    """A valid label value (<= 63 chars); long or odd values keep a recognizable prefix and a hash."""
    if len(text) <= 63 and _LABEL_VALUE.match(text):
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    head = re.sub(r"[^A-Za-z0-9_.-]", "-", text)[:50].strip("-_.")
    return f"{head}-{digest}" if head else digest


def capabilities_for(test_name: str, settings: Settings) -> list[str]:
    """The capabilities the suite's pod gets: what it needs, as far as the deployment allows."""
    allowed = set(settings.pod_capabilities)
    return [cap for cap in SUITE_CAPABILITIES.get(test_name, ()) if cap in allowed]


def results_subpath(node_name: str, test_name: str) -> str:
    return f"{test_name}/{node_name}"


def _quantity(text: Any) -> float | None:
    """A Kubernetes memory quantity in bytes (enough of the grammar to compare request and limit)."""
    match = re.fullmatch(r"([0-9.]+)([KMGTPE]i?)?", str(text).strip())
    if not match:
        return None
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
             "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
    return float(match.group(1)) * units.get(match.group(2) or "", 1)


class PodTemplateRefused(ValueError):
    """A pod template asks for host access the deployment did not allow; the message names the field."""


CONTAINER_KINDS = ("initContainers", "containers", "ephemeralContainers")  # sidecars are init containers


def refuse_host_access(spec: Mapping[str, Any], allowed: Iterable[str], source: str) -> None:
    """Refuse a template that shares a host namespace, mounts a host path or runs a privileged
    container, unless ``allowed`` (the setting pod_allowed_host_fields) names that field: any of them
    gives the pod the node. One line naming the first such field."""
    allowed = set(allowed)

    def refuse(field: str, name: str) -> None:
        raise PodTemplateRefused(
            f"pod template {source}: {field} gives validation pods access to the host; refused (a deployment "
            f"that needs it sets {ENV_PREFIX}POD_ALLOWED_HOST_FIELDS={name})")

    for key in ("hostPID", "hostNetwork", "hostIPC"):
        if spec.get(key) and key not in allowed:
            refuse(f"spec.{key}", key)
    for i, volume in enumerate(spec.get("volumes") or []):
        if isinstance(volume, Mapping) and "hostPath" in volume and "hostPath" not in allowed:
            refuse(f"spec.volumes[{i}].hostPath ({volume.get('name')})", "hostPath")
    for kind in CONTAINER_KINDS:
        for i, container in enumerate(spec.get(kind) or []):
            sc = container.get("securityContext") if isinstance(container, Mapping) else None
            if isinstance(sc, Mapping) and sc.get("privileged") and "privileged" not in allowed:
                refuse(f"spec.{kind}[{i}].securityContext.privileged ({container.get('name')})", "privileged")


def _harden_container(container: dict[str, Any], caps: list[str], allowed: set[str], *, suite: bool) -> None:
    """Every container of the pod: no privilege escalation, every capability dropped, a read-only
    root filesystem. The suite's own container gets its capabilities and the pod's user; any other
    (init, sidecar, ephemeral) gets no capability and runs as the non-root user."""
    sc = container.setdefault("securityContext", {})
    privileged = bool(sc.get("privileged")) and "privileged" in allowed  # refused earlier otherwise
    sc.update({
        "privileged": privileged,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"], **({"add": list(caps)} if caps and suite else {})},
    })
    if privileged:
        sc.pop("allowPrivilegeEscalation", None)  # the API refuses privileged with escalation false
    else:
        sc["allowPrivilegeEscalation"] = False
    for key in ("runAsUser", "runAsGroup", "runAsNonRoot", "seccompProfile", "procMount", "seLinuxOptions",
                "windowsOptions"):
        sc.pop(key, None)  # the pod-level values are the only ones
    if not suite:
        sc.update({"runAsNonRoot": True, "runAsUser": NONROOT_ID, "runAsGroup": NONROOT_ID})


def _harden(spec: dict[str, Any], container: dict[str, Any], caps: list[str], allowed: Iterable[str] = ()) -> None:
    root = bool(caps)
    pod_sc = spec.setdefault("securityContext", {})
    pod_sc.update({
        "seccompProfile": {"type": "RuntimeDefault"},
        "runAsNonRoot": not root,
        "runAsUser": 0 if root else NONROOT_ID,
        "runAsGroup": 0 if root else NONROOT_ID,
        # The shared volume's new directories get this group (setgid), so non-root suites can write.
        "fsGroup": NONROOT_ID,
        "fsGroupChangePolicy": "OnRootMismatch",
    })
    for key in ("sysctls", "seLinuxOptions", "windowsOptions"):
        pod_sc.pop(key, None)  # none is needed; each can weaken the pod (Pod Security baseline)
    allowed = set(allowed)
    for kind in CONTAINER_KINDS:
        for other in spec.get(kind) or []:
            _harden_container(other, caps, allowed, suite=other is container)


def pool_expectations(settings: Settings, gpu_model: str | None) -> str | None:
    """What nodes of this GPU model must show ('hcas=8,nvlinks_per_gpu=18'), from the setting
    node_pool_expectations keyed by the model label value discovery read; None when not set."""
    return settings.node_pool_expectations.get(gpu_model) if gpu_model else None


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
    node_gpus: int | None = None,
    probe_seconds: float | None = None,
) -> dict[str, Any]:
    """The pod of one node-test pair: the template (``template``, else the setting's file) hydrated
    field by field. Each step below sets its own part of the manifest; the order of the steps is the
    order of the keys in the result."""
    validate_node_name(node_name)
    suite = suites.get(test_name)
    if isinstance(gpu_count, bool) or not isinstance(gpu_count, int) or gpu_count < 0:
        raise ValueError(f"gpu_count must be an integer >= 0, got {gpu_count!r}")
    pod = copy.deepcopy(dict(template)) if template is not None else load_template(pod_template_file(settings))
    refuse_host_access(pod.get("spec") or {}, settings.pod_allowed_host_fields,
                       "(given)" if template is not None else str(pod_template_file(settings)))
    _set_metadata(pod.setdefault("metadata", {}), settings, node_name=node_name, test_name=test_name,
                  run_id=run_id, suite_version=suite_version)
    spec = pod.setdefault("spec", {})
    _pin_to_node(spec, settings, node_name=node_name, test_name=test_name)
    _point_volumes(spec, settings, configmap=configmap, suite_files=suite_files)
    container = next(c for c in spec["containers"] if c.get("name") == "base")
    own_dir = f"{settings.results_dir.rstrip('/')}/{results_subpath(node_name, test_name)}"
    _set_suite_container(container, suite, settings, node_name=node_name, test_name=test_name, own_dir=own_dir)
    _harden(spec, container, capabilities_for(test_name, settings), settings.pod_allowed_host_fields)
    _set_resources(container, suite, settings, gpu_count=gpu_count)
    _set_env(container, settings, test_name=test_name, gpu_count=gpu_count, gpu_model=gpu_model, run_id=run_id,
             suite_version=suite_version, own_dir=own_dir, node_gpus=node_gpus, probe_seconds=probe_seconds)
    return pod


def _set_metadata(meta: dict[str, Any], settings: Settings, *, node_name: str, test_name: str, run_id: str,
                  suite_version: str) -> None:
    """Name, namespace, our labels (what the orphan reaper and the listings select on) and annotations."""
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


def _pin_to_node(spec: dict[str, Any], settings: Settings, *, node_name: str, test_name: str) -> None:
    """Where and how the pod is scheduled: its node, tolerations, priority, scheduler and deadline."""
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
    spec["activeDeadlineSeconds"] = settings.pod_deadline_s(test_name)
    if settings.service_account:
        spec["serviceAccountName"] = settings.service_account


def _point_volumes(spec: dict[str, Any], settings: Settings, *, configmap: str, suite_files: list[str] | None) -> None:
    """The results volume's claim and the suite code's ConfigMap (its files projected as a package)."""
    for volume in spec.get("volumes") or []:
        if "persistentVolumeClaim" in volume:
            volume["persistentVolumeClaim"]["claimName"] = settings.pvc
        if "configMap" in volume and volume.get("name") == "suites":
            volume["configMap"]["name"] = configmap
            if suite_files:
                # ConfigMaps are flat: project each key back to its path in the package directory
                volume["configMap"]["items"] = [{"key": suite_code.configmap_key(f), "path": f"cluster_doctor_suites/{f}"}
                                                for f in sorted(suite_files)]


def _set_suite_container(container: dict[str, Any], suite: suites.Suite, settings: Settings, *, node_name: str,
                         test_name: str, own_dir: str) -> None:
    """The suite's image and command, and the results mount narrowed to the pod's own directory."""
    container["image"] = suite.image(settings)
    container["imagePullPolicy"] = settings.image_pull_policy
    container["command"] = suite.command(settings)
    container.pop("args", None)
    container["terminationMessagePolicy"] = "FallbackToLogsOnError"
    for mount in container.get("volumeMounts") or []:
        if mount.get("name") == "results":
            # Only this pod's <test>/<node>/ directory of the shared volume is visible, at the same
            # path as on the volume, so the suites' paths (and the recorded log_path) are unchanged.
            mount["mountPath"] = own_dir
            mount["subPath"] = results_subpath(node_name, test_name)
            mount.pop("subPathExpr", None)
            mount["readOnly"] = False


def _set_resources(container: dict[str, Any], suite: suites.Suite, settings: Settings, *, gpu_count: int) -> None:
    """The suite's CPU and memory, and every GPU of the node (plus the deployment's extra resources)."""
    resources = container.setdefault("resources", {})
    requests, limits = resources.setdefault("requests", {}), resources.setdefault("limits", {})
    # The suite's own figures win over the template's generic ones.
    requests["cpu"] = suite.cpu
    requests["memory"] = suite.memory
    limit = _quantity(limits.get("memory")) if "memory" in limits else None
    if limit is not None and limit < (_quantity(suite.memory) or 0):
        limits["memory"] = suite.memory  # a limit below the request is refused by the API server
    # All of the node's GPUs: nobody else can land there while we run, and every GPU gets tested.
    extended = {settings.gpu_resource: gpu_count, **settings.pod_resources}
    for name, amount in extended.items():
        requests[name] = str(amount)
        limits[name] = str(amount)


def _set_env(container: dict[str, Any], settings: Settings, *, test_name: str, gpu_count: int,
             gpu_model: str | None, run_id: str, suite_version: str, own_dir: str,
             node_gpus: int | None = None, probe_seconds: float | None = None) -> None:
    """The suite's environment (its contract), over the template's: the same name is set once."""
    env = {e["name"]: e for e in container.get("env") or []}
    values = {
        "CLUSTER_DOCTOR_TEST": test_name,
        "CLUSTER_DOCTOR_DEVICE": settings.suite_device,
        # CPU mode (demo, tests) exercises the plumbing: the suites see no GPU and must not expect one.
        "CLUSTER_DOCTOR_EXPECTED_GPUS": str(gpu_count if settings.suite_device == "cuda" else 0),
        # the GPUs the node has (capacity / GFD label): the suites' bar, never what is left allocatable
        **({"CLUSTER_DOCTOR_NODE_GPUS": str(node_gpus)} if node_gpus and settings.suite_device == "cuda"
           else {}),
        "CLUSTER_DOCTOR_SUITE_VERSION": suite_version,
        "CLUSTER_DOCTOR_OUTPUT_DIR": settings.results_dir,
        "CLUSTER_DOCTOR_RUN_ID": run_id,
        "CLUSTER_DOCTOR_TERMINATION_LOG": container.get("terminationMessagePath", "/dev/termination-log"),
        **({"CLUSTER_DOCTOR_GPU_MODEL": gpu_model} if gpu_model else {}),
        # fio's scratch files go under the pod's own directory: the only writable place on the volume
        **({"CLUSTER_DOCTOR_FIO_DIR": own_dir} if test_name == "storage_fio" else {}),
        # gpu_health's speed probe, on the runs that probe the node (domain.fail_slow.probe_due)
        **({"CLUSTER_DOCTOR_PROBE_SECONDS": f"{probe_seconds:g}"} if probe_seconds else {}),
        **{str(k): str(v) for k, v in settings.pod_env.items()},
        # the node pool's own counts (setting node_pool_expectations, by GPU model): after pod_env, the
        # more specific wins
        **({"CLUSTER_DOCTOR_EXPECT": expect} if (expect := pool_expectations(settings, gpu_model)) else {}),
    }
    for name, value in values.items():
        env[name] = {"name": name, "value": value}
    container["env"] = list(env.values())
