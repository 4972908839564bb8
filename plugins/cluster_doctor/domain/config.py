"""Every tunable default of Cluster Doctor, in one place.

Precedence, lowest to highest: the defaults below < environment variables ``CLUSTER_DOCTOR_<NAME>``
< the Airflow Variable ``cluster_doctor_settings`` (a JSON object, editable in the UI without a
redeploy) < the params of one DAG run (the trigger form / backfill conf override a few per run).

Settings that decide what runs on the GPU nodes, and with which privileges (``DEPLOYMENT_ONLY``:
image, pod template, suite code, service account, capabilities, env, extra resources, priority
class), come from the deployment environment only: anyone who can edit a Variable in the UI must not
be able to run other code as root on every GPU node. The Variable may choose the image only among
the ones the environment allows (``allowed_images``).

Pure Python: the Airflow side reads the Variable and passes its JSON here.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Mapping
from typing import Any

from cluster_doctor.domain.fleet_verdicts import BaselinePolicy
from cluster_doctor.domain.quarantine import QuarantinePolicy

ENV_PREFIX = "CLUSTER_DOCTOR_"
VARIABLE_NAME = "cluster_doctor_settings"
# Set only through CLUSTER_DOCTOR_* environment variables (or the constructor, in code and tests).
DEPLOYMENT_ONLY = frozenset({
    "pod_template_file", "suites_dir", "service_account", "pod_capabilities", "pod_env", "pod_resources",
    "priority_class", "allowed_images",
})
# Fixed when the DAG file is parsed (pool, dagrun_timeout): a Variable cannot change them per run.
PARSE_TIME = ("pool", "dagrun_timeout_s")
# The Variable may set these only to a value the environment allows (see allowed_images).
IMAGE_SETTINGS = ("image", "suite_images")


class InvalidSettings(ValueError):
    pass


def _field(default: Any, doc: str, **kwargs: Any) -> Any:
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: json.loads(json.dumps(default)), metadata={"doc": doc})
    return dataclasses.field(default=default, metadata={"doc": doc}, **kwargs)


DEFAULT_TOLERATIONS = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


@dataclasses.dataclass(frozen=True)
class Settings:
    # --- what is due (seeds 000/001) ---
    staleness_days: float = _field(7.0, "A pair whose last executed result is older than this is due again.")
    failed_retest_hours: float = _field(
        6.0, "A pair whose last executed result failed is retested after this long (0 disables).")
    max_pairs_per_run: int = _field(16, "At most this many node-test pairs are planned per run.")
    tests: list = _field(
        ["gpu_health", "dl_unit", "nccl_loopback", "storage_fio"],
        "Enabled suites, in tie-break order (cheapest first).")
    # --- how pods are run ---
    pool: str = _field("gpu_validation", "Airflow pool limiting concurrent validation pods (2 slots by default). "
                                         "Read when the DAG is parsed: set it in the environment.")
    pool_slots: int = _field(2, "Slots the pool is created with by `make demo` / the compose init.")
    pending_timeout_s: int = _field(1200, "A pod still Pending after this long is deleted: status timeout.")
    availability_check_s: int = _field(
        300, "While our pod is Pending, re-check this often that no user pod claimed the node.")
    max_queue_s: int = _field(
        1800, "A planned pair whose task starts later than this after the decision is skipped, no pod.")
    dagrun_timeout_s: int = _field(3300, "A run is stopped after this long, shorter than the hourly schedule. "
                                         "Read when the DAG is parsed: set it in the environment.")
    suite_timeouts_s: dict = _field(
        {"gpu_health": 120, "dl_unit": 900, "nccl_loopback": 600, "storage_fio": 900},
        "Run-time budget of each suite once its pod is Running (pod activeDeadlineSeconds adds the "
        "pending timeout; the task's execution_timeout adds both plus task_margin_s), read at run time.")
    task_margin_s: int = _field(
        600, "Added to pending timeout + suite budget for the validate task's execution_timeout: time for "
             "the pre-checks, draining the log and recording.")
    # --- the cluster ---
    kubernetes_conn_id: str = _field("kubernetes_default", "Airflow connection to the Kubernetes API.")
    gpu_resource: str = _field("nvidia.com/gpu", "Extended resource that marks and counts GPUs.")
    node_selector: str = _field("", "Label selector narrowing which nodes are GPU nodes (empty: all).")
    gpu_product_label: str = _field("nvidia.com/gpu.product", "Node label holding the GPU model.")
    tolerations: list = _field(
        DEFAULT_TOLERATIONS, "Tolerations of validation pods; nodes with other NoSchedule/NoExecute "
        "taints are not eligible.")
    namespace: str = _field("cluster-doctor", "Namespace of validation pods and the suite ConfigMap.")
    image: str = _field("ghcr.io/cluster-doctor/validation:0.1.0", "Validation image (include/suites/Dockerfile).")
    image_pull_policy: str = _field("IfNotPresent", "imagePullPolicy of validation pods.")
    pvc: str = _field("cluster-doctor-results", "Shared PVC mounted at results_dir in every validation pod.")
    results_dir: str = _field("/data/continuous_validation", "Mount path of the PVC; logs go to <test>/<node>/.")
    priority_class: str = _field(
        "cluster-doctor-preemptible", "PriorityClass of validation pods: lowest priority, never preempts.")
    scheduler_name: str = _field("default-scheduler", "schedulerName of validation pods (e.g. volcano).")
    service_account: str = _field(
        "cluster-doctor-validation", "ServiceAccount of validation pods (include/k8s; no API token is mounted).")
    suite_device: str = _field("cuda", "Device the suites run on: cuda on GPU nodes, cpu in the demo and tests.")
    suites_configmap_prefix: str = _field(
        "cluster-doctor-suites", "Suite code is shipped as an immutable ConfigMap <prefix>-<content hash>.")
    suite_images: dict = _field({}, "Per-suite image overrides, e.g. {\"nccl_loopback\": \"...:nccl-2.27\"}.")
    pod_resources: dict = _field(
        {}, "Extra container resources requested and limited per pod, e.g. {\"rdma/rdma_shared_device_a\": 1} "
            "so the NCCL loop-back reaches the HCAs.")
    pod_capabilities: list = _field(
        ["IPC_LOCK", "SYSLOG"],
        "Deployment only. Linux capabilities validation pods may be given; each suite gets only those it "
        "needs (gpu_health: SYSLOG, nccl_loopback: IPC_LOCK) and runs as root only then. Empty: every pod "
        "meets the Pod Security 'baseline' level.")
    allowed_images: list = _field(
        [], "Deployment only. Further images the Airflow Variable may choose for image / suite_images "
            "(the environment's own image and suite_images are always allowed).")
    pod_template_file: str = _field(
        "", "Base pod manifest (empty: the pod_templates/validation-pod.yaml shipped in the cluster_doctor package).")
    suites_dir: str = _field("", "Suite code shipped to pods (empty: the installed cluster_doctor_suites package).")
    pod_labels: dict = _field({}, "Extra labels on validation pods.")
    pod_env: dict = _field({}, "Extra environment of validation pods (e.g. NCCL_IB_HCA).")
    # --- results ---
    validation_db_conn_id: str = _field("validation_db", "Airflow connection to the Postgres results DB.")
    fleet_verdicts: dict = _field(
        {}, "Straggler/drift verdicts vs the fleet and the node's own past (docs/fleet-verdicts.md), e.g. "
            "{\"rel_margin\": 0.1, \"k_mad\": 3, \"window_days\": 14}; {\"enabled\": false} turns them off.")
    quarantine: dict = _field(
        {}, "Opt-in node quarantine with a circuit breaker (docs/fleet-verdicts.md), e.g. {\"enabled\": true, "
            "\"dry_run\": true, \"taint\": false, \"max_share\": 0.05, \"max_nodes\": 10}. Off by default.")
    reports_dir: str = _field("", "Where run reports (CTRF JSON, daily summaries) are written (empty: "
                                  "$AIRFLOW_HOME/cluster_doctor_reports).")

    def __post_init__(self) -> None:
        positive = ("staleness_days", "max_pairs_per_run", "pool_slots", "pending_timeout_s",
                    "availability_check_s", "max_queue_s", "dagrun_timeout_s", "task_margin_s")
        for name in positive:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise InvalidSettings(f"setting {name}: must be a number > 0, got {value!r}")
        if isinstance(self.failed_retest_hours, bool) or not isinstance(self.failed_retest_hours, (int, float)) \
                or self.failed_retest_hours < 0:
            raise InvalidSettings(f"setting failed_retest_hours: must be a number >= 0, got {self.failed_retest_hours!r}")
        if not self.tests or not all(isinstance(t, str) for t in self.tests):
            raise InvalidSettings(f"setting tests: must be a non-empty list of suite names, got {self.tests!r}")
        if self.suite_device not in ("cuda", "cpu"):
            raise InvalidSettings(f"setting suite_device: must be 'cuda' or 'cpu', got {self.suite_device!r}")
        if not isinstance(self.tolerations, list) or not all(isinstance(t, dict) for t in self.tolerations):
            raise InvalidSettings("setting tolerations: must be a list of Kubernetes toleration objects")
        for name in ("suite_timeouts_s", "pod_labels", "pod_env", "suite_images", "pod_resources",
                     "fleet_verdicts", "quarantine"):
            if not isinstance(getattr(self, name), dict):
                raise InvalidSettings(f"setting {name}: must be a JSON object")
        for name in ("pod_capabilities", "allowed_images"):
            value = getattr(self, name)
            if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
                raise InvalidSettings(f"setting {name}: must be a list of names, got {value!r}")
        for cap in self.pod_capabilities:
            if not re.fullmatch(r"[A-Z][A-Z_]{1,30}", cap) or cap.startswith("CAP_") or cap == "ALL":
                raise InvalidSettings(f"setting pod_capabilities: {cap!r} is not a capability name "
                                      "like IPC_LOCK (no CAP_ prefix, not ALL)")
        try:
            BaselinePolicy.from_mapping(self.fleet_verdicts)
            QuarantinePolicy.from_mapping(self.quarantine).check_tolerations(self.tolerations)
        except ValueError as exc:
            raise InvalidSettings(f"setting {exc}") from None
        if self.node_selector:
            _validate_label_selector(self.node_selector)
        # both end up in API paths (the once-per-run claim read, pods, ConfigMaps): refuse them here, clearly
        if not (isinstance(self.namespace, str) and len(self.namespace) <= 63
                and _DNS_LABEL.fullmatch(self.namespace)):
            raise InvalidSettings(f"setting namespace: {self.namespace!r} is not a Kubernetes namespace name "
                                  "(lowercase letters, digits and '-', at most 63)")
        if not (isinstance(self.pvc, str) and len(self.pvc) <= 253 and _DNS_SUBDOMAIN.fullmatch(self.pvc)):
            raise InvalidSettings(f"setting pvc: {self.pvc!r} is not a PersistentVolumeClaim name "
                                  "(lowercase letters, digits, '-' and '.', at most 253)")

    # ------------------------------------------------------------------ construction
    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def docs(cls) -> list[tuple[str, Any, str]]:
        """(name, default, description) for the README's configuration table."""
        out = []
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            out.append((f.name, default, f.metadata["doc"]))
        return out

    @classmethod
    def load(
        cls,
        *,
        env: Mapping[str, str] | None = None,
        variable: str | Mapping[str, Any] | None = None,
        overrides: Mapping[str, Any] | None = None,
    ) -> Settings:
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        types = {f.name: f.type for f in dataclasses.fields(cls)}
        for name in types:
            raw = env.get(ENV_PREFIX + name.upper())
            if raw is not None and raw != "":
                values[name] = _coerce(name, raw, cls.__dataclass_fields__[name])
        if variable:
            if isinstance(variable, str):
                try:
                    variable = json.loads(variable)
                except json.JSONDecodeError as exc:
                    raise InvalidSettings(f"Airflow Variable {VARIABLE_NAME} is not valid JSON: {exc}") from None
            if not isinstance(variable, Mapping):
                raise InvalidSettings(f"Airflow Variable {VARIABLE_NAME} must be a JSON object")
            values.update(_from_ui(variable, values, f"Airflow Variable {VARIABLE_NAME}"))
        if overrides:
            values.update(_from_ui(overrides, values, "overrides"))
        return cls(**values)

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def suite_timeout(self, test: str) -> int:
        return int(self.suite_timeouts_s.get(test, 900))

    def pod_deadline_s(self, test: str) -> int:
        """The pod's activeDeadlineSeconds: the pending window plus the suite's run-time budget."""
        return self.pending_timeout_s + self.suite_timeout(test)

    def task_timeout_s(self, test: str) -> int:
        """The validate task's execution_timeout, from the same settings as the pod's deadline, so a
        budget raised in the Variable is never cut short by the task."""
        return self.pod_deadline_s(test) + self.task_margin_s

    def check_parse_time(self, parsed: Settings) -> None:
        """Refuse run-time settings that the DAG, fixed when it was parsed, cannot honour."""
        for name in PARSE_TIME:
            if getattr(self, name) != getattr(parsed, name):
                raise InvalidSettings(
                    f"setting {name}: {getattr(self, name)!r} from the Airflow Variable cannot take effect, the "
                    f"DAG was parsed with {getattr(parsed, name)!r}; set {ENV_PREFIX}{name.upper()} in the "
                    "deployment environment instead")
        for test in self.tests:
            if self.task_timeout_s(test) > self.dagrun_timeout_s:
                raise InvalidSettings(
                    f"setting suite_timeouts_s: {test} needs up to {self.task_timeout_s(test)} s (pending "
                    f"{self.pending_timeout_s} + budget {self.suite_timeout(test)} + margin {self.task_margin_s}), "
                    f"longer than the DagRun timeout of {self.dagrun_timeout_s} s")


def _known(values: Mapping[str, Any], source: str) -> dict[str, Any]:
    names = set(Settings.field_names())
    unknown = sorted(set(values) - names)
    if unknown:
        raise InvalidSettings(f"{source}: unknown setting(s) {', '.join(unknown)}")
    return dict(values)


def _from_ui(values: Mapping[str, Any], deployed: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Settings from the Variable or run params: never the deployment-only ones, and images only
    among those the environment allows."""
    values = _known(values, source)
    refused = sorted(set(values) & DEPLOYMENT_ONLY)
    if refused:
        raise InvalidSettings(
            f"{source}: {', '.join(refused)} can only be set in the deployment environment "
            f"({', '.join(ENV_PREFIX + name.upper() for name in refused)}), not from the UI")
    defaults = Settings.__dataclass_fields__
    image = deployed.get("image", defaults["image"].default)
    suite_images = deployed.get("suite_images", {})
    allowed = {image, *suite_images.values(), *deployed.get("allowed_images", [])}
    chosen = []
    if "image" in values:
        chosen.append(("image", values["image"]))
    if "suite_images" in values and isinstance(values["suite_images"], Mapping):
        chosen += [(f"suite_images.{k}", v) for k, v in values["suite_images"].items()]
    for name, image_ref in chosen:
        if image_ref not in allowed:
            raise InvalidSettings(
                f"{source}: {name} {image_ref!r} is not an allowed image; allowed: {', '.join(sorted(map(str, allowed)))} "
                f"(add it to {ENV_PREFIX}ALLOWED_IMAGES in the deployment environment)")
    return values


def _coerce(name: str, raw: str, field: dataclasses.Field) -> Any:
    default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
    where = f"environment variable {ENV_PREFIX}{name.upper()}"
    try:
        if isinstance(default, bool):
            return raw.strip().lower() in ("1", "true", "yes", "on")
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
        if isinstance(default, (list, dict)):
            if isinstance(default, list) and not raw.lstrip().startswith("["):
                return [item.strip() for item in raw.split(",") if item.strip()]
            value = json.loads(raw)
            if not isinstance(value, type(default)):
                raise ValueError(f"expected a JSON {type(default).__name__}")
            return value
    except ValueError as exc:
        raise InvalidSettings(f"{where}: {exc}") from None
    return raw


_SELECTOR_TERM = (
    r"!?[A-Za-z0-9]([A-Za-z0-9._/-]*[A-Za-z0-9])?"
    r"(\s*(=|==|!=)\s*[A-Za-z0-9._-]*|\s+(in|notin)\s+\([A-Za-z0-9._,\s-]*\))?"
)


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _validate_label_selector(selector: str) -> None:
    terms = re.split(r",(?![^()]*\))", selector)
    for term in terms:
        if not re.fullmatch(_SELECTOR_TERM, term.strip()):
            raise InvalidSettings(f"setting node_selector: invalid label selector term {term.strip()!r}")
