"""Signals between validations: what the cluster already says about a node, judged into the
evidence that makes it suspect (pure Python).

A source (``cluster_doctor.kube.signals`` reads them) reports what it saw; the functions here decide which of
it is evidence: the device plugin offering fewer GPUs than the node has, a node condition another tool set
to its unhealthy status, an event with a chosen reason, a DCGM exporter counter that moved, user pods that
failed with a GPU error, a node never seen before, rebooted, or uncordoned after our quarantine. A signal
never fails a node: it makes the node **suspect**, so its whole bundle runs first (``domain.planning.plan``) and
the suites judge it.

Every piece of evidence has a ``key``, the identity of what was seen (a condition's transition, an event's
uid and time, a counter's value, a boot id): the store keeps one row per (node, source, key), so the same
evidence read again every few minutes is one suspicion, and evidence a passing bundle already answered is
not raised again (``cluster_doctor.store.suspects``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cluster_doctor.domain.conditions import CONDITION_TYPE
from cluster_doctor.domain.errors import clipped
from cluster_doctor.domain.timestamps import iso_seconds

# The sources, as stored and shown.
ALLOCATABLE = "gpu allocatable"
CONDITION = "node condition"
EVENT = "event"
DCGM = "dcgm"
POD_FAILURE = "pod failure"
NEW_NODE = "new node"
REBOOT = "reboot"
UNCORDONED = "uncordoned"
SPEED = "speed"  # a passive speed signal: the node may be slow (domain.fail_slow), never failing by itself
# A flagged speed probe (domain.fail_slow.probe_suspect): its own source, never SPEED, since slow_state counts
# a speed signal as a sighting besides the probe and the probe's flag must not count twice.
PROBE = "speed probe"
SOURCES = (ALLOCATABLE, CONDITION, EVENT, DCGM, POD_FAILURE, NEW_NODE, REBOOT, UNCORDONED, SPEED, PROBE)
NODE_CHANGES = ("new", "reboot", "uncordoned")  # setting signal_node_changes

MAX_TEXT = 500  # one line for people: a condition's message, an event's, a pod's termination message

# DCGM exporter fields (its default counters file, etc/default-counters.csv, names the first three; the ECC
# and NVLink CRC counters are commented out there and must be enabled in the exporter to be read).
DCGM_NAMES = {
    "DCGM_FI_DEV_XID_ERRORS": "Xid {value:g}",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": "row remapping failed",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": "{value:g} row(s) remapped for uncorrectable errors",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": "{value:g} double-bit ECC error(s)",
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": "{value:g} NVLink flow-control CRC error(s)",
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": "{value:g} NVLink data CRC error(s)",
}


@dataclasses.dataclass(frozen=True)
class Evidence:
    """One signal on one node: its source, the identity of what was seen (``key``), a line for people and,
    where the source says, when it happened."""

    node_name: str
    source: str
    key: str
    text: str
    at: dt.datetime | None = None

    def line(self) -> str:
        return f"{self.source}: {self.text}"


@dataclasses.dataclass(frozen=True)
class SignalPolicy:
    """Which sources are read and what counts, from the settings (``signal_*``, ``prometheus_*``)."""

    gpu_allocatable: bool = True
    conditions: Mapping[str, str] = dataclasses.field(default_factory=dict)  # type -> unhealthy status
    event_reasons: frozenset[str] = frozenset()
    prometheus_url: str = ""
    dcgm_metrics: tuple[str, ...] = ()
    node_label: str = "Hostname"
    window: dt.timedelta = dt.timedelta(minutes=15)
    pod_patterns: tuple[re.Pattern[str], ...] = ()
    pod_failures: int = 1
    node_changes: frozenset[str] = frozenset(NODE_CHANGES)
    speed: bool = True  # read the speed fields (SPEED_FIELDS) through the same Prometheus
    speed_policy: SpeedPolicy = dataclasses.field(default_factory=lambda: SpeedPolicy())

    @classmethod
    def of(cls, settings: Any) -> SignalPolicy:
        """From a ``Settings`` (duck-typed: the domain's config imports this module)."""
        return cls(gpu_allocatable=settings.signal_gpu_allocatable,
                   conditions={t: s for t, s in settings.signal_node_conditions.items() if t != CONDITION_TYPE},
                   event_reasons=frozenset(settings.signal_event_reasons), prometheus_url=settings.prometheus_url,
                   dcgm_metrics=tuple(settings.signal_dcgm_metrics), node_label=settings.prometheus_node_label,
                   window=dt.timedelta(minutes=settings.signal_window_minutes),
                   pod_patterns=tuple(re.compile(p, re.IGNORECASE) for p in settings.signal_pod_failure_patterns),
                   pod_failures=settings.signal_pod_failures, node_changes=frozenset(settings.signal_node_changes),
                   speed=getattr(settings, "signal_speed", True),
                   speed_policy=SpeedPolicy(load_util=getattr(settings, "signal_speed_load_util", 80.0)))


def check_conditions(value: Mapping[str, str]) -> Mapping[str, str]:
    """Setting signal_node_conditions: our own condition never feeds back as a signal."""
    if CONDITION_TYPE in value:
        raise ValueError(f"{CONDITION_TYPE} is the condition Cluster Doctor writes (setting node_conditions): "
                         "it cannot also be a signal")
    return value


def check_patterns(value: Sequence[str]) -> Sequence[str]:
    """Setting signal_pod_failure_patterns: each a regular expression (matched case-insensitively)."""
    for pattern in value:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"{pattern!r} is not a regular expression ({exc})") from None
    return value


def _short(text: object) -> str:
    return clipped(text, MAX_TEXT)


def _stamp(at: dt.datetime | None) -> str:
    return iso_seconds(at) or "-"


# ---------------------------------------------------------------------------- the sources, judged
def allocatable(node: str, offered: int, has: int, source: str) -> Evidence:
    """The device plugin offers fewer GPUs than the node has (it withdraws the ones it finds unhealthy)."""
    return Evidence(node, ALLOCATABLE, f"{offered}/{has}", f"{offered} of its {has} GPUs allocatable ({source})")


@dataclasses.dataclass(frozen=True)
class ConditionSeen:
    type: str
    status: str
    reason: str = ""
    message: str = ""
    since: dt.datetime | None = None  # lastTransitionTime


def conditions(node: str, seen: Iterable[ConditionSeen], policy: SignalPolicy) -> list[Evidence]:
    """The node's conditions of a configured type at its unhealthy status (never ``ClusterDoctorHealthy``)."""
    found = []
    for c in seen:
        if c.type == CONDITION_TYPE or policy.conditions.get(c.type) != c.status:
            continue
        text = f"{c.type}={c.status}" + (f" ({c.reason})" if c.reason else "") + (f": {c.message}" if c.message else "")
        found.append(Evidence(node, CONDITION, f"{c.type}={c.status}@{_stamp(c.since)}", _short(text), c.since))
    return found


@dataclasses.dataclass(frozen=True)
class EventSeen:
    node_name: str
    uid: str
    reason: str
    message: str
    at: dt.datetime | None  # its last occurrence
    count: int = 1
    component: str = ""


def events(seen: Iterable[EventSeen], policy: SignalPolicy, now: dt.datetime) -> list[Evidence]:
    """Events on nodes with a configured reason whose last occurrence is within the window."""
    found = []
    for e in seen:
        if e.reason not in policy.event_reasons or e.at is None or now - e.at > policy.window:
            continue
        text = f"{e.reason}" + (f" from {e.component}" if e.component else "") + (f": {e.message}" if e.message else "")
        text += f" (×{e.count})" if e.count > 1 else ""
        found.append(Evidence(e.node_name, EVENT, f"{e.uid}@{_stamp(e.at)}", _short(text), e.at))
    return found


@dataclasses.dataclass(frozen=True)
class PodFailure:
    """A user pod (or one of its containers) that ended in failure on a node."""

    node_name: str
    pod: str  # namespace/name
    uid: str
    reason: str
    message: str
    at: dt.datetime | None  # when it ended
    exit_code: int | None = None


def gpu_error(failure: PodFailure, policy: SignalPolicy) -> bool:
    """Whether the failure's reason or message matches a configured pattern."""
    return any(p.search(failure.reason or "") or p.search(failure.message or "") for p in policy.pod_patterns)


def pod_failures(seen: Iterable[PodFailure], policy: SignalPolicy, now: dt.datetime) -> list[Evidence]:
    """Per node, the user pods that failed with a GPU error within the window, when there are at least
    ``pod_failures`` of them (the newest names the evidence)."""
    by_node: dict[str, list[PodFailure]] = {}
    for f in seen:
        if f.at is not None and now - f.at <= policy.window and gpu_error(f, policy):
            by_node.setdefault(f.node_name, []).append(f)
    found = []
    for node, failures in sorted(by_node.items()):
        if len(failures) < policy.pod_failures:
            continue
        newest = max(failures, key=lambda f: (f.at, f.uid))
        minutes = policy.window.total_seconds() / 60
        text = (f"{len(failures)} user pod(s) failed with a GPU error in {minutes:g} min, last {newest.pod}: "
                f"{newest.reason or 'failed'}" + (f" (exit {newest.exit_code})" if newest.exit_code is not None else "")
                + (f": {newest.message}" if newest.message else ""))
        found.append(Evidence(node, POD_FAILURE, newest.uid, _short(text), newest.at))
    return found


@dataclasses.dataclass(frozen=True)
class Sample:
    """One series of a DCGM exporter metric that changed within the window, at its current value."""

    node_name: str
    metric: str
    gpu: str
    value: float
    model: str = ""  # the exporter's modelName label, where it has one


def dcgm(seen: Iterable[Sample]) -> list[Evidence]:
    """A DCGM exporter field that changed to a non-zero value within the window; its current value is the
    key, so the same counter is raised again only when it moves."""
    found = []
    for s in seen:
        what = DCGM_NAMES.get(s.metric, s.metric + " = {value:g}").format(value=s.value)
        found.append(Evidence(s.node_name, DCGM, f"{s.metric}/gpu{s.gpu}={s.value:g}",
                              f"{what} on GPU {s.gpu or '?'} ({s.metric})"))
    return found


@dataclasses.dataclass(frozen=True)
class NodeChange:
    """What the inventory's previous row says changed: a node never seen before, a new boot id, or a node
    uncordoned that carries (or carried) our quarantine label."""

    node_name: str
    kind: str  # one of NODE_CHANGES
    before: str = ""
    after: str = ""


def node_changes(seen: Iterable[NodeChange], policy: SignalPolicy, now: dt.datetime) -> list[Evidence]:
    found = []
    for c in seen:
        if c.kind not in policy.node_changes:
            continue
        if c.kind == "new":
            found.append(Evidence(c.node_name, NEW_NODE, "new", "a GPU node never seen before", now))
        elif c.kind == "reboot":
            found.append(Evidence(c.node_name, REBOOT, c.after, f"rebooted (bootID {c.before[:8]}… → {c.after[:8]}…)", now))
        else:
            found.append(Evidence(c.node_name, UNCORDONED, _stamp(now), "uncordoned after Cluster Doctor's quarantine",
                                  now))
    return found


# ---------------------------------------------------------------------------- suspects
@dataclasses.dataclass(frozen=True)
class Suspect:
    """A node suspect now: since when (its earliest open evidence) and every piece of it."""

    node_name: str
    since: dt.datetime
    evidence: tuple[str, ...]  # Evidence.line() of each, oldest first

    def describe(self) -> str:
        """'suspect since 2026-11-28 10:04 UTC: event: XidHardwareFailure ...; reboot: ...'"""
        return f"suspect since {self.since.astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC: {'; '.join(self.evidence)}"


@dataclasses.dataclass(frozen=True)
class FailingSince:
    """Since when a failing node fails: its first failing evidence after its last pass (an attempt that
    failed, or a signal its failing bundle confirmed), and that last pass."""

    node_name: str
    since: dt.datetime
    first: str  # what: "gpu_health fail" or a signal's line
    last_pass: dt.datetime | None

    def describe(self) -> str:
        text = f"failing since {self.since.astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC ({self.first})"
        if self.last_pass is not None:
            return text + f"; last pass {self.last_pass.astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC"
        return text + "; no pass before"


# ---------------------------------------------------------------------------- speed (fail-slow)
# DCGM fields that say "slow" while user jobs run (dcgmlib/dcgm_fields.h; dcgm-exporter exports a field
# under the name its counters file gives it). The clock event reasons field is 112 under both names:
# DCGM_FI_DEV_CLOCK_THROTTLE_REASONS is the deprecated alias older counters files still use.
CLOCK_EVENT_FIELDS = ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")
SM_CLOCK = "DCGM_FI_DEV_SM_CLOCK"  # MHz, in the exporter's default counters
MAX_SM_CLOCK = "DCGM_FI_DEV_MAX_SM_CLOCK"  # MHz, the SKU's maximum (field 113)
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # %, in the default counters: what "under load" means here
PCIE_GEN, PCIE_MAX_GEN = "DCGM_FI_DEV_PCIE_LINK_GEN", "DCGM_FI_DEV_PCIE_MAX_LINK_GEN"  # fields 237, 235
PCIE_WIDTH, PCIE_MAX_WIDTH = "DCGM_FI_DEV_PCIE_LINK_WIDTH", "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH"  # 238, 236
SPEED_FIELDS = (*CLOCK_EVENT_FIELDS, SM_CLOCK, MAX_SM_CLOCK, GPU_UTIL, PCIE_GEN, PCIE_MAX_GEN, PCIE_WIDTH,
                PCIE_MAX_WIDTH)
# The bits of the clock event reasons that slow a GPU for a fault of its own (DCGM_CLOCKS_EVENT_REASON_*,
# 1:1 with NVML's nvmlClocksEventReason*). Idle, application clocks, the software power cap, sync boost and
# display clocks are the workload's or the operator's doing, never evidence against the node.
HW_SLOWDOWN = 0x08
SLOW_CLOCK_EVENTS = {
    0x08: "hardware slowdown",  # HW_SLOWDOWN: clocks cut by 2x or more (temperature, power brake, fast trigger)
    0x20: "software thermal slowdown",  # SW_THERMAL
    0x40: "hardware thermal slowdown",  # HW_THERMAL
    0x80: "hardware power brake",  # HW_POWER_BRAKE
}


@dataclasses.dataclass(frozen=True)
class SpeedPolicy:
    """What a speed signal is: a GPU is under load at ``load_util`` % or more; its SM clock under load is
    low below ``sku_clock_share`` of its SKU's maximum or ``peer_clock_margin`` below the median of the same
    node's other loaded GPUs; its PCIe link is judged only under load (the driver lowers an idle link's
    generation and width to save power, nvidia-smi's ``pcie.link.gen.current`` says so)."""

    load_util: float = 80.0
    sku_clock_share: float = 0.80
    peer_clock_margin: float = 0.10
    sku_sm_clock_mhz: Mapping[str, float] = dataclasses.field(default_factory=dict)  # modelName -> MHz


def speed(seen: Iterable[Sample], policy: SpeedPolicy, now: dt.datetime) -> list[Evidence]:
    """The speed evidence of DCGM exporter samples (current values of ``SPEED_FIELDS``): per GPU a slowing
    clock event reason, a low SM clock under load, a PCIe link trained below its maximum under load. Each
    makes its node suspect, never failing (``domain.fail_slow``); the key holds the hour, so a slowdown that
    lasts is raised again each hour, not once forever."""
    per_gpu: dict[tuple[str, str], dict[str, float]] = {}
    models: dict[tuple[str, str], str] = {}
    for s in seen:
        key = (s.node_name, s.gpu)
        per_gpu.setdefault(key, {})[s.metric] = s.value
        if s.model:
            models[key] = s.model
    hour = f"{now.astimezone(dt.UTC):%Y-%m-%dT%H}"
    found: list[Evidence] = []

    def add(node: str, gpu: str, what: str, text: str) -> None:
        found.append(Evidence(node, SPEED, f"{what}/gpu{gpu}@{hour}", _short(f"GPU {gpu or '?'}: {text}"), now))

    loaded_clocks: dict[str, dict[str, float]] = {}
    for (node, gpu), v in sorted(per_gpu.items()):
        loaded = v.get(GPU_UTIL, 0.0) >= policy.load_util
        for field in CLOCK_EVENT_FIELDS:
            if field in v:
                bits = int(v[field])
                for bit, name in SLOW_CLOCK_EVENTS.items():
                    # HW slowdown "may be also reported during PState or clock change" (dcgm_fields.h):
                    # evidence only under load; the thermal and power-brake reasons are always the GPU's
                    if bits & bit and (loaded or bit != HW_SLOWDOWN):
                        add(node, gpu, f"clock_event_{bit:#x}", f"{name} (clock event reasons {bits:#x}, {field})")
                break  # one name per exporter: never the same bits twice
        if not loaded:
            continue
        clock = v.get(SM_CLOCK)
        if clock is not None and clock > 0:
            loaded_clocks.setdefault(node, {})[gpu] = clock
            sku = v.get(MAX_SM_CLOCK) or policy.sku_sm_clock_mhz.get(models.get((node, gpu), ""))
            if sku and clock < policy.sku_clock_share * sku:
                add(node, gpu, "sm_clock_sku", f"SM clock {clock:g} MHz under load ({v.get(GPU_UTIL, 0):g} % busy), "
                                               f"below {policy.sku_clock_share:.0%} of the SKU's {sku:g} MHz")
        for cur, top, what, unit in ((PCIE_GEN, PCIE_MAX_GEN, "generation", "Gen"), (PCIE_WIDTH, PCIE_MAX_WIDTH,
                                                                                    "width", "x")):
            if cur in v and v.get(top) and v[cur] < v[top]:
                add(node, gpu, f"pcie_{what}",
                    f"PCIe link {what} {unit}{v[cur]:g} under load, below its maximum {unit}{v[top]:g}")
    for node, clocks in sorted(loaded_clocks.items()):
        for gpu, clock in sorted(clocks.items()):
            others = [c for g, c in clocks.items() if g != gpu]
            if len(others) < 2:
                continue  # one other GPU is no majority to be slow against
            median = statistics.median(others)
            if clock < median * (1 - policy.peer_clock_margin):
                add(node, gpu, "sm_clock_peers", f"SM clock {clock:g} MHz under load, {100 * (1 - clock / median):.0f} % "
                                                 f"below the median {median:g} MHz of this node's other loaded GPUs")
    return found


def probe(node: str, attempt: str, flags: Sequence[str], at: dt.datetime | None) -> Evidence:
    """A health sweep's speed probe flagged (its straggler/drift verdict lines, ``flags``) on the attempt
    ``attempt`` (its id: the key, so a retried record is the same suspicion): the node is suspect as for a
    signal, its bundle first and reservation may hold it (``fail_slow.probe_suspect``)."""
    return Evidence(node, PROBE, attempt, _short("flagged " + "; ".join(flags)), at)


def speed_flagged(evidence: Iterable[Evidence]) -> set[str]:
    """The nodes some speed evidence names (``fail_slow.slow_state``'s ``signal_flagged``)."""
    return {e.node_name for e in evidence if e.source == SPEED}
