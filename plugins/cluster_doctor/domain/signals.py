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
SOURCES = (ALLOCATABLE, CONDITION, EVENT, DCGM, POD_FAILURE, NEW_NODE, REBOOT, UNCORDONED)
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

    @classmethod
    def of(cls, settings: Any) -> SignalPolicy:
        """From a ``Settings`` (duck-typed: the domain's config imports this module)."""
        return cls(gpu_allocatable=settings.signal_gpu_allocatable,
                   conditions={t: s for t, s in settings.signal_node_conditions.items() if t != CONDITION_TYPE},
                   event_reasons=frozenset(settings.signal_event_reasons), prometheus_url=settings.prometheus_url,
                   dcgm_metrics=tuple(settings.signal_dcgm_metrics), node_label=settings.prometheus_node_label,
                   window=dt.timedelta(minutes=settings.signal_window_minutes),
                   pod_patterns=tuple(re.compile(p, re.IGNORECASE) for p in settings.signal_pod_failure_patterns),
                   pod_failures=settings.signal_pod_failures, node_changes=frozenset(settings.signal_node_changes))


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
