"""Every tunable default of Cluster Doctor, in one place: one pydantic-settings model.

Precedence, lowest to highest: the defaults below < environment variables ``CLUSTER_DOCTOR_<NAME>``
< the Airflow Variable ``cluster_doctor_settings`` (a JSON object, editable in the UI without a
redeploy) < the params of one DAG run (the trigger form / backfill conf override a few per run).

Settings that decide what runs on the GPU nodes, and with which privileges (*deployment only*:
image, pod template, suite code, service account, capabilities, env, extra resources, priority
class), come from the deployment environment only: anyone who can edit a Variable in the UI must not
be able to run other code as root on every GPU node. The Variable may choose the image only among
the ones the environment allows (``allowed_images``).

The policy settings (``reservation``, ``quarantine``, ``acceptance``, ``node_conditions``,
``fleet_verdicts``) are written as JSON objects and held parsed, as their ``domain.policy.Policy``
models: their readers use ``settings.reservation`` and parse nothing.

Pure Python: the Airflow side (``cluster_doctor.airflow.runtime``) reads the Variable and passes its
JSON here, where ``VariableSource`` turns it into settings.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal, get_origin

from pydantic import AfterValidator, BeforeValidator, Field, ValidationError, field_serializer, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

from cluster_doctor.domain import signals
from cluster_doctor.domain.acceptance import KEY as ACCEPTANCE_KEY
from cluster_doctor.domain.acceptance import VALUE as ACCEPTANCE_VALUE
from cluster_doctor.domain.acceptance import AcceptancePolicy
from cluster_doctor.domain.conditions import ConditionPolicy
from cluster_doctor.domain.errors import one_line
from cluster_doctor.domain.fleet_verdicts import BaselinePolicy
from cluster_doctor.domain.peers import PEER_SUITE, PEER_TOPOLOGY_LABELS
from cluster_doctor.domain.policy import Policy
from cluster_doctor.domain.quarantine import QuarantinePolicy
from cluster_doctor.domain.reservation import TAINT as RESERVATION_TAINT
from cluster_doctor.domain.reservation import TOLERATION as RESERVATION_TOLERATION
from cluster_doctor.domain.reservation import ReservationPolicy
from cluster_doctor.domain.taints import tolerates
from cluster_doctor_suites.baselines import parse_expect  # the pods' own grammar of CLUSTER_DOCTOR_EXPECT

ENV_PREFIX = "CLUSTER_DOCTOR_"
VARIABLE_NAME = "cluster_doctor_settings"
# The Variable may set these only to a value the environment allows (see allowed_images).
IMAGE_SETTINGS = ("image", "suite_images")


class InvalidSettings(ValueError):
    def __init__(self, message: str, validation: ValidationError | None = None):
        super().__init__(message)
        self.validation = validation  # pydantic's report, for load() to name where each value came from


# ---------------------------------------------------------------------------- value types
def _not_bool(value: Any) -> Any:
    # JSON true is not a number of days: pydantic would take it as 1
    if isinstance(value, bool):
        raise ValueError("must be a number, not true/false")  # noqa: TRY004 - pydantic reports ValueErrors
    return value


def _dns_label(value: str) -> str:
    if not (len(value) <= 63 and _DNS_LABEL.fullmatch(value)):
        raise ValueError(f"{value!r} is not a Kubernetes namespace name (lowercase letters, digits and '-', at most 63)")
    return value


def _dns_subdomain(value: str) -> str:
    if not (len(value) <= 253 and _DNS_SUBDOMAIN.fullmatch(value)):
        raise ValueError(f"{value!r} is not a PersistentVolumeClaim name (lowercase letters, digits, '-' and '.', "
                         "at most 253)")
    return value


def _capability(value: str) -> str:
    if not re.fullmatch(r"[A-Z][A-Z_]{1,30}", value) or value.startswith("CAP_") or value == "ALL":
        raise ValueError(f"{value!r} is not a capability name like IPC_LOCK (no CAP_ prefix, not ALL)")
    return value


def _label_selector(selector: str) -> str:
    for term in re.split(r",(?![^()]*\))", selector) if selector else ():
        if not re.fullmatch(_SELECTOR_TERM, term.strip()):
            raise ValueError(f"invalid label selector term {term.strip()!r}")
    return selector


def _node_suites(value: list[str]) -> list[str]:
    if PEER_SUITE in value:
        raise ValueError(f"{PEER_SUITE} runs between two nodes, scheduled by peer_tests / peer_cadence_days, "
                         "not as one of a node's suites")
    return value


_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


def _expectations(value: dict[str, str]) -> dict[str, str]:
    """node_pool_expectations: GPU model label value -> 'KEY=N,...', checked by the suites' own parser
    (cluster_doctor_suites.baselines, what the pod runs), so a typo is a settings error at load, not a
    pod that errors (or a bar silently not raised)."""
    for model, text in value.items():
        if not _LABEL_VALUE.fullmatch(model):
            raise ValueError(f"{model!r} is not a GPU model label value (e.g. NVIDIA-H100-80GB-HBM3)")
        try:
            counts = parse_expect(text)
        except ValueError as exc:
            raise ValueError(f"{model}: {exc}") from None
        if not counts:
            raise ValueError(f"{model}: no expectation given (e.g. 'hcas=8,nvlinks_per_gpu=18')")
    return value


def _http_url(value: str) -> str:
    """prometheus_url: empty, or an http(s) URL."""
    if value and not re.fullmatch(r"https?://[^\s/?#]+(/[^\s?#]*)?", value):
        raise ValueError(f"{value!r} is not an http(s) URL like http://prometheus.monitoring:9090")
    return value.rstrip("/")


CRON_PRESETS = ("@hourly", "@daily", "@weekly", "@monthly", "@quarterly", "@yearly")


def _schedule(value: str) -> str:
    """schedule: a preset or a five-field cron expression (Airflow's own check runs when the DAG is parsed)."""
    value = value.strip()
    if value not in CRON_PRESETS and not re.fullmatch(r"[0-9*/,?LW#A-Za-z-]+( [0-9*/,?LW#A-Za-z-]+){4}", value):
        raise ValueError(f"{value!r} is not a cron expression like '0 * * * *' or one of {', '.join(CRON_PRESETS)}")
    return value


# What a pod template may not do unless the deployment allows it (pod_allowed_host_fields).
HOST_FIELDS = ("hostPID", "hostNetwork", "hostIPC", "privileged", "hostPath")
HostField = Literal["hostPID", "hostNetwork", "hostIPC", "privileged", "hostPath"]
_URL_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def _location(value: str) -> str:
    """A path or a URL with a scheme; nothing that would be read as a relative path by surprise."""
    if value and not (value.startswith(("/", "~")) or _URL_SCHEME.match(value)):
        raise ValueError(f"{value!r} is neither an absolute path nor a URL like s3://bucket/prefix")
    if any(ch in value for ch in "\x00\n\r"):
        raise ValueError("contains a NUL or line break")
    return value


_SELECTOR_TERM = (
    r"!?[A-Za-z0-9]([A-Za-z0-9._/-]*[A-Za-z0-9])?"
    r"(\s*(=|==|!=)\s*[A-Za-z0-9._-]*|\s+(in|notin)\s+\([A-Za-z0-9._,\s-]*\))?"
)
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

PositiveNumber = Annotated[float, BeforeValidator(_not_bool), Field(gt=0)]
PositiveInt = Annotated[int, BeforeValidator(_not_bool), Field(gt=0)]
Name = Annotated[str, Field(min_length=1)]
Capability = Annotated[str, AfterValidator(_capability)]
JsonObject = dict[str, Any]

DEFAULT_TOLERATIONS = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def _setting(default: Any, doc: str, *, deployment_only: bool = False, parse_time: bool = False) -> Any:
    """A field with its documentation (the README's table is generated from it) and where it may be set."""
    extra = {"deployment_only": deployment_only, "parse_time": parse_time}
    if isinstance(default, (list, dict)):
        # validate_default: a policy's default {} becomes the policy itself
        return Field(default_factory=lambda: copy.deepcopy(default), description=doc, json_schema_extra=extra,
                     validate_default=True)
    return Field(default, description=doc, json_schema_extra=extra)


class Settings(BaseSettings):
    """The settings of one deployment (and, with the Variable and params, of one run). Immutable.

    ``Settings(**values)`` takes the values as given, over the defaults, and reads nothing else;
    ``Settings.load()`` reads the environment, the Variable and the run's overrides, in that order.
    """

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_ignore_empty=True, frozen=True, extra="forbid")

    # --- what is due (seeds 000/001) ---
    staleness_days: PositiveNumber = _setting(7.0, "A pair whose last executed result is older than this is due again.")
    failed_retest_hours: Annotated[float, BeforeValidator(_not_bool), Field(ge=0)] = _setting(
        6.0, "A pair whose last executed result failed is retested after this long (0 disables).")
    max_pairs_per_run: PositiveInt = _setting(
        16, "At most this many node-test pairs are planned per run (a chosen node runs all its due suites, "
            "one after another: its bundle).")
    bundle_ahead_hours: Annotated[float, BeforeValidator(_not_bool), Field(ge=0)] = _setting(
        48.0, "A chosen node's suites that would be due within this long run with its due ones, so its "
              "suites fall due together and one free window serves them all (0: only the due ones).")
    sweep_interval_hours: Annotated[float, BeforeValidator(_not_bool), Field(ge=0)] = _setting(
        1.0, "Health sweep: in every run, free nodes with no due suite run the short health suites (`gpu_health`; "
             "`ib_health` where it is enabled and the node pool has HCAs) when their last passing check is older "
             "than this, the oldest first, after every due bundle (within `max_pairs_per_run`, at a lower pool "
             "priority; a user pod claiming the node stops them). Runs are hourly: a check less than 30 minutes "
             "younger is due too, so 1 sweeps a free node in every run. 0 turns the sweep off.")
    tests: Annotated[list[str], Field(min_length=1), AfterValidator(_node_suites)] = _setting(
        ["gpu_health", "dl_unit", "nccl_loopback", "storage_fio"],
        "Enabled suites, in tie-break order (cheapest first).")
    # --- peer tests: two nodes at a time (cluster_doctor.domain.peers) ---
    peer_tests: bool = _setting(
        False, "Peer tests (suite `fabric_peer`): free nodes of one GPU model are paired and run a two-node NCCL "
               "all-reduce forced onto the network and an ib_write_bw per rail; a failed pair is blamed on a node "
               "only once a third node was tried with each side (until then both are `suspect`). Off by default: "
               "each test holds two free nodes and two pool slots at once and needs an RDMA fabric between nodes "
               "(include/k8s, `pod_resources`); on a cluster without one every pair would be suspect.")
    peer_cadence_days: PositiveNumber = _setting(
        7.0, "A node's peer test is due again after this long (a suspect one at once, with a node it was not "
             "tested with).")
    peer_max_per_run: PositiveInt = _setting(4, "At most this many peer tests (node pairs) are planned per run.")
    peer_topology_labels: list[Name] = _setting(
        list(PEER_TOPOLOGY_LABELS),
        "Node labels naming a node's leaf switch, narrowest first: a node is paired with one under another leaf "
        "(the first label both carry differs) so the test crosses the spine. Defaults: NVIDIA Topograph's "
        "leaf (and its former block name) and EKS's bottom network layer.")
    # --- signals between validations (cluster_doctor.domain.signals, kube.signals) ---
    signal_gpu_allocatable: bool = _setting(
        True, "Signal: a GPU node whose `gpu_resource` allocatable is below its capacity (or GPU Feature Discovery's "
              "count label) is suspect: the device plugin withdrew a GPU it found unhealthy. A signal never fails a "
              "node: a suspect node's whole bundle runs first, in the next run (and the fast path's).")
    signal_node_conditions: Annotated[dict[str, Literal["True", "False", "Unknown"]],
                                      AfterValidator(signals.check_conditions)] = _setting(
        {"SysLogsXIDError": "True", "GpuMemWatch": "True", "GpuNvlinkWatch": "True", "KernelDeadlock": "True",
         "ReadonlyFilesystem": "True"},
        "Signal: node conditions other tools set (NVSentinel's GPU conditions, node-problem-detector's), by type, "
        "with the status that means unhealthy; a node showing one is suspect. Never `ClusterDoctorHealthy` (ours). "
        "{}: none.")
    signal_event_reasons: list[Name] = _setting(
        ["XidHardwareFailure", "KernelOops"],
        "Signal: Kubernetes events on a GPU node with one of these reasons (node-problem-detector's, e.g. an Xid "
        "rule of its kernel monitor) within `signal_window_minutes` make it suspect. []: events are not read.")
    signal_pod_failure_patterns: Annotated[list[Name], AfterValidator(signals.check_patterns)] = _setting(
        # no "|" in a default: the README's settings table shows them in a markdown table
        [r"\bXid\b", "uncorrectable ECC", "fallen off the bus", "CUDA_ERROR_ECC_UNCORRECTABLE", "cudaErrorECCUncorrectable",
         "NVML: Unknown Error", "GPU is lost", "UnexpectedAdmissionError"],
        "Signal: a user pod that failed on a GPU node (phase Failed) whose reason or termination message matches one "
        "of these regular expressions (case-insensitive) failed with a GPU error; `signal_pod_failures` of them "
        "within `signal_window_minutes` make the node suspect. []: pods are not read.")
    signal_pod_failures: PositiveInt = _setting(
        1, "Signal: how many user pods must fail with a GPU error on one node within `signal_window_minutes`.")
    signal_window_minutes: PositiveNumber = _setting(
        15.0, "Signals: events, pod failures and DCGM metrics count within this window before each read (the fast "
              "path reads every `fast_path_minutes`; without it, raise it to the hour).")
    signal_node_changes: list[Literal["new", "reboot", "uncordoned"]] = _setting(
        ["new", "reboot", "uncordoned"],
        "Signal: a GPU node never seen before (once the inventory has nodes), one that rebooted "
        "(`status.nodeInfo.bootID` changed) and one uncordoned while it carries, or carried, our quarantine label.")
    prometheus_url: Annotated[str, AfterValidator(_http_url)] = _setting(
        "", "Signal: the Prometheus that scrapes the DCGM exporter (e.g. http://prometheus.monitoring:9090); "
            "empty: not read.")
    prometheus_node_label: Name = _setting(
        "Hostname", "The label naming the node on the DCGM exporter's series (`Hostname` as it exports them; "
                    "`node` or `kubernetes_node` where relabelling sets one).")
    signal_dcgm_metrics: list[Name] = _setting(
        list(signals.DCGM_NAMES),
        "Signal: DCGM exporter fields whose series changed to a non-zero value within `signal_window_minutes` make "
        "their node suspect (Xid, row-remap failure and uncorrectable remapped rows are in its default counters; "
        "double-bit ECC and NVLink CRC counters must be enabled in its counters file).")
    signal_speed: bool = _setting(
        True, "Signal: read the DCGM exporter's speed fields through `prometheus_url` too: clock event reasons "
              "(hardware slowdown, thermal, power brake; under both of the field's names), the SM clock under load "
              "against the SKU's maximum and the node's other GPUs, the PCIe link generation/width under load "
              "against its maximum. Each makes the node suspect of being slow, never failing by itself.")
    signal_speed_load_util: Annotated[float, BeforeValidator(_not_bool), Field(gt=0, le=100)] = _setting(
        80.0, "Speed signals: a GPU counts as under load at this `DCGM_FI_DEV_GPU_UTIL` (%) or more; only then "
              "are its SM clock and PCIe link judged (an idle GPU lowers both on purpose).")
    slow_probe_seconds: Annotated[float, BeforeValidator(_not_bool), Field(ge=0)] = _setting(
        3.0, "Speed probe: seconds of GEMM and of HBM copy per GPU in gpu_health, on the sweeps that probe the node "
             "(at most 0.2 s in CPU mode). 0: never probed.")
    slow_probe_min_interval_hours: Annotated[float, BeforeValidator(_not_bool), Field(ge=0)] = _setting(
        6.0, "Speed probe (gpu_health's GEMM and HBM bandwidth, judged against the fleet): a node that ran user "
             "jobs since its last probe is probed again after this long.")
    slow_probe_max_age_hours: PositiveNumber = _setting(
        72.0, "Speed probe: an idle node is probed at least this often (a suspect node once "
              "slow_confirm_spacing_hours have passed since its last probe).")
    slow_confirm_spacing_hours: Annotated[float, BeforeValidator(_not_bool), Field(ge=0)] = _setting(
        3.0, "Fail-slow: a suspect node's confirming probe runs at least this long after its last probe, and two "
             "flagged probes (or a flagged probe and a dl_unit/nccl_loopback verdict) fail it only this far apart: "
             "transient slowness (congestion, a noisy neighbour) mostly lasts minutes to an hour or so and lowers "
             "every measurement inside it, so two sightings hours apart mean a lasting slowness. 0: the confirming "
             "probe at the next sweep, any two sightings.")
    slow_signal_window_hours: PositiveNumber = _setting(
        24.0, "Fail-slow: a speed signal seen within this long, or a straggler/drift verdict on a dl_unit or "
              "nccl_loopback attempt within it (that suite's last), and a flagged probe together make a node "
              "failing with code SLOW (as do two flagged probes in a row, slow_confirm_spacing_hours apart).")
    fast_path_minutes: Annotated[float, BeforeValidator(_not_bool), Field(ge=0)] = _setting(
        5.0, "The fast path (DAG `suspect_signals`): every this many minutes it reads the signals and triggers a "
             "`continuous_validation` run for new free suspects (when no run is queued or running and the hourly "
             "one is not due within `fast_path_quiet_minutes`). 0: off.", parse_time=True)
    fast_path_quiet_minutes: Annotated[float, BeforeValidator(_not_bool), Field(ge=0)] = _setting(
        10.0, "The fast path leaves new suspects to the scheduled run when it is due within this long (it plans "
              "suspects first), so a run it starts never holds the hourly one back for long.")
    # --- how pods are run ---
    pool: Name = _setting("gpu_validation", "Airflow pool limiting concurrent validation pods (2 slots by default).",
                          parse_time=True)
    pool_slots: PositiveInt = _setting(2, "Slots the pool is created with by `make demo` / the compose init.")
    pending_timeout_s: PositiveInt = _setting(1200, "A pod still Pending after this long is deleted: status timeout.")
    availability_check_s: PositiveInt = _setting(
        300, "While our pod is Pending, re-check this often that no user pod claimed the node.")
    max_queue_s: PositiveInt = _setting(
        1800, "A planned pair whose task starts later than this after the decision is skipped, no pod.")
    dagrun_timeout_s: PositiveInt = _setting(3300, "A run is stopped after this long, shorter than the hourly schedule.",
                                             parse_time=True)
    schedule: Annotated[str, AfterValidator(_schedule)] = _setting(
        "@hourly", "When `continuous_validation` runs: a cron expression or preset (keep `dagrun_timeout_s` shorter "
                   "than its interval; the fast path's quiet window counts against it).", parse_time=True)
    suite_timeouts_s: dict[str, PositiveInt] = _setting(
        {"gpu_health": 120, "dl_unit": 900, "nccl_loopback": 600, "storage_fio": 900, "nvbandwidth": 900,
         "ib_health": 120, "fabric_peer": 900},
        "Run-time budget of each suite once its pod is Running (pod activeDeadlineSeconds adds the "
        "pending timeout; the task's execution_timeout adds both plus `task_margin_s`), read at run time.")
    task_margin_s: PositiveInt = _setting(
        600, "Added to pending timeout + suite budget for the validate task's execution_timeout: time for "
             "the pre-checks, draining the log and recording.")
    # --- the cluster ---
    kubernetes_conn_id: Name = _setting("kubernetes_default", "Airflow connection to the Kubernetes API.")
    gpu_resource: Name = _setting("nvidia.com/gpu", "Extended resource that marks and counts GPUs.")
    node_selector: Annotated[str, AfterValidator(_label_selector)] = _setting(
        "", "Label selector narrowing which nodes are GPU nodes (empty: all).")
    gpu_product_label: Name = _setting("nvidia.com/gpu.product", "Node label holding the GPU model.")
    tolerations: list[JsonObject] = _setting(
        DEFAULT_TOLERATIONS, "Tolerations of validation pods; nodes with other NoSchedule/NoExecute "
        "taints are not eligible.")
    namespace: Annotated[str, AfterValidator(_dns_label)] = _setting(
        "cluster-doctor", "Namespace of validation pods and the suite ConfigMap.")
    image: Name = _setting("ghcr.io/cluster-doctor/validation:0.1.0", "Validation image (include/suites/Dockerfile). "
                           "The Variable may choose it only among the images the environment allows.")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = _setting(
        "IfNotPresent", "imagePullPolicy of validation pods.")
    pvc: Annotated[str, AfterValidator(_dns_subdomain)] = _setting(
        "cluster-doctor-results", "Shared PVC mounted at results_dir in every validation pod.")
    results_dir: Name = _setting("/data/continuous_validation", "Mount path of the PVC; logs go to <test>/<node>/.")
    priority_class: Name = _setting(
        "cluster-doctor-preemptible", "PriorityClass of validation pods: lowest priority, never preempts.",
        deployment_only=True)
    scheduler_name: Name = _setting("default-scheduler", "schedulerName of validation pods (e.g. volcano).")
    service_account: Name = _setting(
        "cluster-doctor-validation", "ServiceAccount of validation pods (include/k8s; no API token is mounted).",
        deployment_only=True)
    suite_device: Literal["cuda", "cpu"] = _setting(
        "cuda", "Device the suites run on: cuda on GPU nodes, cpu in the demo and tests.")
    suites_configmap_prefix: Name = _setting(
        "cluster-doctor-suites", "Suite code is shipped as an immutable ConfigMap <prefix>-<content hash>.")
    suite_images: dict[str, Name] = _setting(
        {}, "Per-suite image overrides, e.g. {\"nccl_loopback\": \"...:nccl-2.27\"}. The Variable may choose them "
            "only among the images the environment allows.")
    pod_resources: dict[str, int | str] = _setting(
        {}, "Extra container resources requested and limited per pod, e.g. {\"rdma/rdma_shared_device_a\": 1} "
            "so the NCCL loop-back reaches the HCAs.", deployment_only=True)
    pod_capabilities: list[Capability] = _setting(
        ["IPC_LOCK", "SYSLOG"],
        "Linux capabilities validation pods may be given; each suite gets only those it needs (gpu_health: "
        "SYSLOG, nccl_loopback: IPC_LOCK) and runs as root only then. Empty: every pod meets the Pod "
        "Security 'baseline' level.", deployment_only=True)
    allowed_images: list[Name] = _setting(
        [], "Further images the Airflow Variable may choose for `image` / `suite_images` (the environment's "
            "own image and suite_images are always allowed).", deployment_only=True)
    pod_allowed_host_fields: list[HostField] = _setting(
        [], "Host access a custom pod template may keep (hostPID, hostNetwork, hostIPC, privileged, hostPath); "
            "a template using any other is refused, naming the field. Empty: none (the shipped template needs "
            "none).", deployment_only=True)
    pod_template_file: str = _setting(
        "", "Base pod manifest (empty: the pod_templates/validation-pod.yaml shipped in the cluster_doctor "
            "package).", deployment_only=True)
    suites_dir: str = _setting(
        "", "Suite code shipped to pods (empty: the installed cluster_doctor_suites package).", deployment_only=True)
    pod_labels: dict[str, str] = _setting({}, "Extra labels on validation pods.")
    pod_env: dict[str, str] = _setting({}, "Extra environment of validation pods (e.g. NCCL_IB_HCA).",
                                       deployment_only=True)
    node_pool_expectations: Annotated[dict[str, str], AfterValidator(_expectations)] = _setting(
        {}, "What each node pool's nodes must show, by GPU model (the `gpu_product_label` value), e.g. "
            "{\"NVIDIA-H100-80GB-HBM3\": \"hcas=8,nvlinks_per_gpu=18\"} (the suites' `--expect` keys: "
            "gpus, hcas, nvlinks_per_gpu, pcie_gen, pcie_width, …): the validation pod's CLUSTER_DOCTOR_EXPECT, overriding the model's `expect` "
            "in the suites' baselines.yaml (and a CLUSTER_DOCTOR_EXPECT in pod_env). Other models: none.",
        deployment_only=True)
    # --- results ---
    validation_db_conn_id: Name = _setting("validation_db", "Airflow connection to the Postgres results DB.")
    gone_node_grace_hours: Annotated[float, BeforeValidator(_not_bool), Field(ge=0)] = _setting(
        24.0, "A GPU node that left the cluster (no longer discovered) shows as gone and still counts in "
              "coverage for this long, then stops counting (0: at once).")
    history_retention_days: Annotated[float, BeforeValidator(_not_bool), Field(ge=0)] = _setting(
        400.0, "Attempts older than this are deleted from validation_history once a day (the daily_fleet_report "
               "run), but for those each node · test pair's latest state rests on; never fewer days than the longest "
               "window a page, report or verdict reads (90 days of the node page's plots by default). 0: keep every "
               "attempt.")
    fleet_verdicts: BaselinePolicy = _setting(
        {}, "Straggler/drift verdicts vs the fleet and the node's own past "
            "([docs/fleet-verdicts.md](docs/fleet-verdicts.md)), e.g. {\"rel_margin\": 0.1, \"k_mad\": 3, "
            "\"window_days\": 14}; {\"enabled\": false} turns them off.")
    quarantine: QuarantinePolicy = _setting(
        {}, "Opt-in node quarantine with a circuit breaker ([docs/fleet-verdicts.md](docs/fleet-verdicts.md)), "
            "e.g. {\"enabled\": true, \"dry_run\": true, \"taint\": false, \"max_share\": 0.05, \"max_nodes\": 10}; "
            "\"actions\": the recommended actions of a confirmed failure it acts on (default [\"reset_gpu\", "
            "\"reboot\", \"drain_and_service\", \"unknown\"]). Off by default.")
    node_conditions: ConditionPolicy = _setting(
        {}, "Opt-in node condition `ClusterDoctorHealthy` on every GPU node (True / False with the most severe "
            "failing code / Unknown when the evidence is older than staleness_days), written through nodes/status "
            "with the quarantine's circuit breaker ([docs/node-conditions.md](docs/node-conditions.md)), e.g. "
            "{\"enabled\": true, \"dry_run\": false, \"max_share\": 0.05, \"max_nodes\": 10, \"window_hours\": 24}. "
            "Needs include/k8s/conditions. Off by default.")
    # --- the repair loop, repeat offenders and the hand-off ---
    repeat_offender_days: Annotated[float, BeforeValidator(_not_bool), Field(ge=0)] = _setting(
        30.0, "A node quarantined again within this many days of a release, or for the `repeat_offender_failures`-th "
              "time within them, is a repeat offender: action `replace`, kept in quarantine until a person releases "
              "it (removes the label `cluster-doctor.io/health`). 0: no node is named one.")
    repeat_offender_failures: Annotated[int, BeforeValidator(_not_bool), Field(ge=2)] = _setting(
        3, "Quarantined this many times within `repeat_offender_days` (this time included) makes a repeat offender.")
    handoff_conn_id: str = _setting(
        "", "Airflow connection of the ticketing/RMA webhook (HTTP: the URL in its host, `https://…` or host, "
            "schema and port; its password signs each post, `X-Cluster-Doctor-Signature: sha256=<HMAC>`; extra "
            "`{\"auth\": \"bearer\"}` sends it as a bearer token instead): a JSON document per new repeat offender "
            "and per confirmed failure needing `drain_and_service`, kept in the results DB until the webhook takes "
            "it. Empty: no hand-off.")
    handoff_timeout_s: Annotated[float, BeforeValidator(_not_bool), Field(gt=0, le=300)] = _setting(
        10.0, "The hand-off's timeout for one post to the webhook, in seconds.")
    handoff_retry_minutes: Annotated[float, BeforeValidator(_not_bool), Field(gt=0)] = _setting(
        5.0, "A document the webhook did not take (down, timeout, an HTTP error) is tried again after this long, "
             "doubling with each try up to 6 hours; it is kept until it is taken.")
    acceptance: AcceptancePolicy = _setting(
        {}, "Opt-in acceptance gate: a node first seen, rebooted, or uncordoned after our quarantine gets "
            "a NoSchedule taint until every enabled suite passed on it (the validation pods tolerate it); a failure "
            "keeps it out, no answer within max_hold_hours lets it go and reports it, e.g. {\"enabled\": true, "
            "\"taint_key\": \"cluster-doctor.io/acceptance\", \"changes\": "
            "[\"new\", \"reboot\", \"uncordoned\"], \"max_nodes\": 50, \"max_hold_hours\": 12, "
            "\"breaker_nodes\": 20, \"dry_run\": false}; taint_key may name the startup taint the provisioning puts on "
            "new nodes. Needs the include/k8s/acceptance overlay. Off by default.")
    reservation: ReservationPolicy = _setting(
        {}, "Opt-in reservation of overdue busy nodes and of suspect ones, busy or free: a NoSchedule taint "
            "`cluster-doctor.io/reserved` so no new user pod lands when their job ends (on a free suspect: from "
            "the signals' read), removed when their validation is done "
            "([docs/reservation.md](docs/reservation.md)), e.g. {\"enabled\": true, \"target_days\": 7, "
            "\"lead_hours\": 30, \"max_nodes\": 200, \"max_share\": 0.2, \"max_hold_hours\": 36, "
            "\"breaker_share\": 0.3, \"dry_run\": false}. Enabled, the validation pods tolerate the taint. Off by "
            "default.")
    reports_dir: Annotated[str, AfterValidator(_location)] = _setting(
        "", "Where run reports (CTRF JSON, daily summaries) are written: a path, or an Airflow ObjectStoragePath "
            "URL (`file:///shared/reports`, `s3://aws_default@bucket/reports`, `gs://…`) that the web server and "
            "every worker reach (empty: $AIRFLOW_HOME/cluster_doctor_reports, per host).")
    spool_dir: Annotated[str, AfterValidator(_location)] = _setting(
        "", "Where attempts wait while the results database cannot take them: a path on a volume every worker "
            "mounts, or an Airflow ObjectStoragePath URL (`s3://aws_default@bucket/spool`, `gs://…`). Empty: "
            "$AIRFLOW_HOME/cluster_doctor/spool, right only for LocalExecutor (discover warns otherwise).",
        deployment_only=True)

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise InvalidSettings(describe_errors(exc), exc) from None

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   **_others: PydanticBaseSettingsSource) -> tuple[PydanticBaseSettingsSource, ...]:
        # The constructor reads nothing but its arguments (tests, payloads read back from XCom);
        # load() layers the sources itself, see there.
        return (init_settings,)

    @model_validator(mode="before")
    @classmethod
    def _gate_tolerations(cls, values: Any) -> Any:
        # Reserved nodes are reserved for our pods: enabled, the pods tolerate the taint (and discovery
        # counts a reserved node that freed as free), whatever tolerations the deployment lists; the
        # same for the acceptance gate's taint: its pods validate the node.
        if not isinstance(values, Mapping):
            return values
        wanted = []  # (taint, its toleration)
        if _enabled(values.get("reservation")):
            wanted.append((RESERVATION_TAINT, dict(RESERVATION_TOLERATION)))
        gate = values.get("acceptance")
        if _enabled(gate):
            key = gate.taint_key if isinstance(gate, AcceptancePolicy) else gate.get("taint_key", ACCEPTANCE_KEY)
            if isinstance(key, str):  # otherwise the acceptance policy says what is wrong
                wanted.append(({"key": key, "value": ACCEPTANCE_VALUE, "effect": "NoSchedule"},
                               {"key": key, "operator": "Exists", "effect": "NoSchedule"}))
        for taint, toleration in wanted:
            tolerations = values.get("tolerations", DEFAULT_TOLERATIONS)
            if isinstance(tolerations, list) and not any(
                    isinstance(t, Mapping) and tolerates(t, taint) for t in tolerations):
                values = {**values, "tolerations": [*tolerations, toleration]}
        return values

    @model_validator(mode="after")
    def _quarantine_tolerated(self) -> Settings:
        try:
            self.quarantine.check_tolerations(self.tolerations)
        except ValueError as exc:
            raise ValueError(f"setting {exc}") from None
        return self

    @field_serializer("fleet_verdicts", "reservation", "acceptance", "quarantine", "node_conditions")
    def _as_given(self, policy: Policy) -> dict[str, Any]:
        # the keys as the setting was written (not every default): payloads and the Variable stay short
        return policy.given()

    # ------------------------------------------------------------------ construction
    @classmethod
    def field_names(cls) -> list[str]:
        return list(cls.model_fields)

    @classmethod
    def docs(cls) -> list[tuple[str, Any, str]]:
        """(name, default, description) for the README's configuration table."""
        return [(name, f.get_default(call_default_factory=True), f.description or "")
                for name, f in cls.model_fields.items()]

    @classmethod
    def load(
        cls,
        *,
        env: Mapping[str, str] | None = None,
        variable: str | Mapping[str, Any] | None = None,
        overrides: Mapping[str, Any] | None = None,
    ) -> Settings:
        """Defaults < environment ``env`` (the process's if None) < the Variable's JSON < ``overrides``.

        The layers replace each other's values whole, a dict setting included (pydantic-settings
        would deep-merge them): the images a Variable's ``suite_images`` names are the run's whole
        set, each checked against what the environment allows."""
        try:
            deployed = EnvironmentSource(cls, env)()
        except SettingsError as exc:  # pydantic-settings wraps what decode_complex_value raised
            cause = exc.__cause__
            raise (cause if isinstance(cause, InvalidSettings) else InvalidSettings(one_line(exc))) from None
        values = dict(deployed)
        origin = {name: f"environment variable {ENV_PREFIX}{name.upper()}" for name in deployed}
        for source in (VariableSource(cls, variable, deployed) if variable else None,
                       VariableSource(cls, overrides, deployed, source="overrides") if overrides else None):
            if source is not None:
                layer = source()
                values.update(layer)
                origin.update(dict.fromkeys(layer, source.source))
        try:
            return cls(**values)
        except InvalidSettings as exc:
            if exc.validation is None:
                raise
            raise InvalidSettings(describe_errors(exc.validation, origin), exc.validation) from None

    def replace(self, **changes: Any) -> Settings:
        return type(self)(**{**self.to_dict(), **changes})

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

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


def _enabled(policy: Any) -> bool:
    """A policy value (raw JSON or parsed) that turns it on."""
    if isinstance(policy, Policy):
        return bool(getattr(policy, "enabled", False))
    return isinstance(policy, Mapping) and policy.get("enabled") is True


def _flagged(flag: str) -> tuple[str, ...]:
    return tuple(name for name, f in Settings.model_fields.items() if (f.json_schema_extra or {}).get(flag))


# Set only through CLUSTER_DOCTOR_* environment variables (or the constructor, in code and tests).
DEPLOYMENT_ONLY = frozenset(_flagged("deployment_only"))
# Fixed when the DAG file is parsed (pool, dagrun_timeout): a Variable cannot change them per run.
PARSE_TIME = _flagged("parse_time")


# ---------------------------------------------------------------------------- sources
class EnvironmentSource(EnvSettingsSource):
    """``CLUSTER_DOCTOR_<NAME>`` variables of a given mapping, or of the process environment (None, in
    production: read by pydantic-settings, as every BaseSettings reads it; the domain itself does no I/O);
    lists also comma-separated (``dl_unit,gpu_health``), objects as JSON."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str] | None):
        self._environ = environ
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        if self._environ is None:  # empty values ignored (env_ignore_empty), names lower-cased
            return super()._load_env_vars()
        # the names are matched case-insensitively (lower-cased), as pydantic-settings does for os.environ
        return {k.lower(): v for k, v in self._environ.items() if v != ""}

    def decode_complex_value(self, field_name: str, field: FieldInfo, value: Any) -> Any:
        if get_origin(field.annotation) is list and not value.lstrip().startswith("["):
            return [item.strip() for item in value.split(",") if item.strip()]
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise InvalidSettings(f"environment variable {ENV_PREFIX}{field_name.upper()}: setting {field_name}: "
                                  f"not valid JSON ({exc})") from None


class VariableSource(PydanticBaseSettingsSource):
    """Settings from the UI: the Airflow Variable's JSON (or a run's params, ``source="overrides"``).

    Never the deployment-only settings, and images only among those the environment (``deployed``,
    the environment layer's values) allows."""

    def __init__(self, settings_cls: type[BaseSettings], value: str | Mapping[str, Any],
                 deployed: Mapping[str, Any], *, source: str = f"Airflow Variable {VARIABLE_NAME}"):
        super().__init__(settings_cls)
        self.value, self.deployed, self.source = value, deployed, source

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self().get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        values = self.value
        if isinstance(values, str):
            try:
                values = json.loads(values)
            except json.JSONDecodeError as exc:
                raise InvalidSettings(f"{self.source} is not valid JSON: {exc}") from None
        if not isinstance(values, Mapping):
            raise InvalidSettings(f"{self.source} must be a JSON object")
        unknown = sorted(set(values) - set(self.settings_cls.model_fields))
        if unknown:
            raise InvalidSettings(f"{self.source}: unknown setting(s) {', '.join(unknown)}")
        refused = sorted(set(values) & DEPLOYMENT_ONLY)
        if refused:
            raise InvalidSettings(
                f"{self.source}: {', '.join(refused)} can only be set in the deployment environment "
                f"({', '.join(ENV_PREFIX + name.upper() for name in refused)}), not from the UI")
        self._check_images(values)
        return dict(values)

    def _check_images(self, values: Mapping[str, Any]) -> None:
        fields = self.settings_cls.model_fields
        image = self.deployed.get("image", fields["image"].default)
        suite_images = self.deployed.get("suite_images") or {}
        allowed = {image, *(suite_images.values() if isinstance(suite_images, Mapping) else ()),
                   *(self.deployed.get("allowed_images") or [])}
        chosen = []
        if "image" in values:
            chosen.append(("image", values["image"]))
        if "suite_images" in values and isinstance(values["suite_images"], Mapping):
            chosen += [(f"suite_images.{k}", v) for k, v in values["suite_images"].items()]
        for name, image_ref in chosen:
            if image_ref not in allowed:
                raise InvalidSettings(
                    f"{self.source}: {name} {image_ref!r} is not an allowed image; allowed: "
                    f"{', '.join(sorted(map(str, allowed)))} (add it to {ENV_PREFIX}ALLOWED_IMAGES in the "
                    "deployment environment)")


# ---------------------------------------------------------------------------- one-line errors
def describe_errors(exc: ValidationError, origin: Mapping[str, str] | None = None, *, noun: str = "setting") -> str:
    """pydantic's multi-line report as one line, each problem naming its ``noun`` (a setting, a
    payload's field) and, from ``load``, where the value came from (environment variable, Variable,
    overrides)."""
    parts = []
    for error in exc.errors(include_url=False):
        loc = error.get("loc") or ()
        message = error["msg"].removeprefix("Value error, ")
        if not loc:  # a check across settings: its message names them
            parts.append(message)
            continue
        name = str(loc[0])
        path = name + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc[1:])
        if error["type"] == "extra_forbidden":
            text = f"unknown {noun} {path}"
        elif message.startswith((f"{name}:", f"{name}.")):  # a policy's check across its keys names them
            text = f"{noun} {message}"
        else:
            text = f"{noun} {path}: {message}"
        if error["type"] not in ("value_error", "extra_forbidden", "missing"):  # our checks quote the value
            text += f", got {one_line(repr(error.get('input')), 120)}"
        if origin and name in origin:
            text = f"{origin[name]}: {text}"
        parts.append(text)
    return one_line("; ".join(parts), 1000)
