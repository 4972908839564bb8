"""Reads the signals between validations from the cluster, read-only, each source optional.

What discovery already listed costs nothing more: allocatable below capacity (``Discovery.short``), the
watched node conditions and the boot ids (``Discovery.facts``), and what the inventory says changed (new,
rebooted, uncordoned after our quarantine: ``store.inventory.InventoryUpdate.changes``). Three sources cost a
call each, made only when configured: the events on nodes (one list, ``involvedObject.kind=Node``, from the
watch cache), the failed pods (one list, ``status.phase=Failed``) and the DCGM exporter's metrics through
Prometheus' HTTP query API (one instant query per field). ``domain.signals`` judges what they return; a
source that cannot be read is named in ``Reading.problems`` and the others still count: a signal only ever
adds a suspect, so a missing one costs time to detect, never a verdict.

RBAC: ``list`` on events cluster-wide, beside the discovery's nodes and pods (include/k8s/rbac-cluster.yaml).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from cluster_doctor.domain import signals, timestamps
from cluster_doctor.domain.errors import one_line
from cluster_doctor.domain.signals import Evidence, SignalPolicy
from cluster_doctor.kube.api import CoreV1
from cluster_doctor.kube.discovery import VALIDATION_APP_LABEL, Discovery

log = logging.getLogger(__name__)
NODE_EVENTS = "involvedObject.kind=Node"
FAILED_PODS = "status.phase=Failed"
PROMETHEUS_TIMEOUT_S = 10.0


@dataclasses.dataclass
class Reading:
    """One read of every configured source: the evidence about GPU nodes, and the sources that failed."""

    evidence: list[Evidence] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)
    api_calls: int = 0

    def describe(self) -> str:
        nodes = sorted({e.node_name for e in self.evidence})
        text = f"signals: {len(self.evidence)} piece(s) of evidence on {len(nodes)} GPU node(s)"
        if self.problems:
            text += "; not read: " + "; ".join(self.problems)
        return text


def read(core_v1: CoreV1, settings: Any, found: Discovery, changes: Iterable[signals.NodeChange] = (), *,
         now: dt.datetime | None = None, fetch: Callable[[str], bytes] | None = None) -> Reading:
    """Every configured source, judged (``domain.signals``), about the GPU nodes ``found`` saw. ``changes``:
    what the inventory says changed since the previous discovery. ``fetch``: reads a Prometheus URL (tests)."""
    now = now or dt.datetime.now(dt.UTC)
    policy = SignalPolicy.of(settings)
    gpu_nodes = set(found.facts) | {n.name for n in found.free}
    reading = Reading()
    if policy.gpu_allocatable:
        reading.evidence += [signals.allocatable(s.name, s.allocatable, s.node_gpus, s.source) for s in found.short]
    for name, facts in found.facts.items():
        reading.evidence += signals.conditions(name, facts.conditions, policy)
    reading.evidence += signals.node_changes(changes, policy, now)
    sources: list[tuple[str, Callable[[], list[Evidence]]]] = []
    if policy.event_reasons:
        sources.append(("events", lambda: signals.events(node_events(core_v1, reading), policy, now)))
    if policy.pod_patterns:
        sources.append(("failed pods", lambda: signals.pod_failures(failed_pods(core_v1, reading), policy, now)))
    if policy.prometheus_url:
        sources.append(("prometheus", lambda: signals.dcgm(dcgm_samples(policy, now, fetch or _fetch))))
        if policy.speed:
            sources.append(("prometheus speed fields",
                            lambda: signals.speed(speed_samples(policy, now, fetch or _fetch), policy.speed_policy, now)))
    for name, source in sources:
        try:
            reading.evidence += source()
        except Exception as exc:  # noqa: BLE001 - one source down never hides the others
            reading.problems.append(f"{name} ({one_line(exc, 200)})")
            log.warning("signals: could not read %s: %s", name, one_line(exc, 300))
    reading.evidence = [e for e in reading.evidence if e.node_name in gpu_nodes]
    return reading


def _list(call: Callable[..., Any], reading: Reading, field_selector: str) -> list[Mapping[str, Any]]:
    """One list from the watch cache (resourceVersion=0), its items as plain JSON."""
    response = call(field_selector=field_selector, resource_version="0", _preload_content=False)
    reading.api_calls += 1
    return json.loads(response.data).get("items") or []


# ---------------------------------------------------------------------------- events
def node_events(core_v1: CoreV1, reading: Reading) -> list[signals.EventSeen]:
    """The events whose object is a node (node-problem-detector's, the kubelet's), each at its last
    occurrence: ``lastTimestamp``, an events.k8s.io series' ``lastObservedTime``, or its ``eventTime``."""
    seen = []
    for e in _list(core_v1.list_event_for_all_namespaces, reading, NODE_EVENTS):
        obj, meta = e.get("involvedObject") or {}, e.get("metadata") or {}
        series = e.get("series") or {}
        at = timestamps.parse(e.get("lastTimestamp")) or timestamps.parse(series.get("lastObservedTime")) or timestamps.parse(e.get("eventTime")) \
            or timestamps.parse(e.get("firstTimestamp")) or timestamps.parse(meta.get("creationTimestamp"))
        source = e.get("source") or {}
        seen.append(signals.EventSeen(
            node_name=obj.get("name") or "", uid=meta.get("uid") or meta.get("name") or "", reason=e.get("reason") or "",
            message=e.get("message") or "", at=at, count=int(e.get("count") or series.get("count") or 1),
            component=source.get("component") or e.get("reportingComponent") or ""))
    return seen


# ---------------------------------------------------------------------------- failed pods
def failed_pods(core_v1: CoreV1, reading: Reading) -> list[signals.PodFailure]:
    """User pods in phase Failed, bound to a node (validation pods left out: their verdicts are recorded),
    with their reasons and messages: the pod's (e.g. ``UnexpectedAdmissionError`` when the device plugin
    could not allocate its GPUs) and each container's termination state."""
    seen = []
    for pod in _list(core_v1.list_pod_for_all_namespaces, reading, FAILED_PODS):
        meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
        labels = meta.get("labels") or {}
        if not spec.get("nodeName") or labels.get(VALIDATION_APP_LABEL[0]) == VALIDATION_APP_LABEL[1]:
            continue
        seen.append(_failure(spec["nodeName"], meta, status))
    return seen


def _failure(node: str, meta: Mapping[str, Any], status: Mapping[str, Any]) -> signals.PodFailure:
    reasons = [status.get("reason") or ""]
    messages = [status.get("message") or ""]
    ended: list[dt.datetime] = []
    exit_code = None
    for cs in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        for state in (cs.get("state") or {}, cs.get("lastState") or {}):
            term = state.get("terminated")
            if not term or term.get("exitCode") == 0:
                continue
            reasons.append(term.get("reason") or "")
            messages.append(term.get("message") or "")
            exit_code = term.get("exitCode") if exit_code is None else exit_code
            if (at := timestamps.parse(term.get("finishedAt"))) is not None:
                ended.append(at)
    at = max(ended) if ended else timestamps.parse(status.get("startTime")) or timestamps.parse(meta.get("creationTimestamp"))
    return signals.PodFailure(
        node_name=node, pod=f"{meta.get('namespace')}/{meta.get('name')}", uid=meta.get("uid") or meta.get("name") or "",
        reason=", ".join(dict.fromkeys(r for r in reasons if r)), message=" | ".join(m for m in messages if m),
        at=at, exit_code=exit_code)


# ---------------------------------------------------------------------------- Prometheus (DCGM exporter)
def query(metric: str, window: dt.timedelta) -> str:
    """The instant query for one field: its series that changed to a non-zero value within the window (a
    counter that grew, the last Xid that changed), at their current value."""
    return f"{metric} > 0 and changes({metric}[{int(window.total_seconds())}s]) > 0"


def dcgm_samples(policy: SignalPolicy, now: dt.datetime, fetch: Callable[[str], bytes]) -> list[signals.Sample]:
    """One instant query per configured field through Prometheus' HTTP API (``/api/v1/query``); each series
    names its node by ``policy.node_label`` (dcgm-exporter's ``Hostname``), its GPU by ``gpu``."""
    samples = []
    for metric in policy.dcgm_metrics:
        url = f"{policy.prometheus_url}/api/v1/query?" + urllib.parse.urlencode(
            {"query": query(metric, policy.window), "time": f"{now.timestamp():.3f}"})
        answer = json.loads(fetch(url))
        if answer.get("status") != "success":
            raise ValueError(f"Prometheus answered {answer.get('errorType')}: {answer.get('error')}")
        for series in (answer.get("data") or {}).get("result") or []:
            labels, value = series.get("metric") or {}, series.get("value") or [None, "0"]
            node = labels.get(policy.node_label)
            if node:
                samples.append(signals.Sample(node, labels.get("__name__", metric), str(labels.get("gpu", "")),
                                              float(value[1])))
    return samples


def speed_query() -> str:
    """One instant query for every speed field at its current value: the exporter exports each under the
    name its counters file gives it, so both names of the clock event reasons are asked for."""
    return "{__name__=~\"" + "|".join(signals.SPEED_FIELDS) + "\"}"


def speed_samples(policy: SignalPolicy, now: dt.datetime, fetch: Callable[[str], bytes]) -> list[signals.Sample]:
    """The current value of every speed field's series (one query), each with its node, GPU and the
    exporter's ``modelName``; a field the exporter does not export is simply absent."""
    url = f"{policy.prometheus_url}/api/v1/query?" + urllib.parse.urlencode(
        {"query": speed_query(), "time": f"{now.timestamp():.3f}"})
    answer = json.loads(fetch(url))
    if answer.get("status") != "success":
        raise ValueError(f"Prometheus answered {answer.get('errorType')}: {answer.get('error')}")
    samples = []
    for series in (answer.get("data") or {}).get("result") or []:
        labels, value = series.get("metric") or {}, series.get("value") or [None, "nan"]
        node, metric = labels.get(policy.node_label), labels.get("__name__")
        try:
            number = float(value[1])
        except (TypeError, ValueError):
            continue
        if node and metric and number == number:  # NaN: a blank field
            samples.append(signals.Sample(node, metric, str(labels.get("gpu", "")), number,
                                          str(labels.get("modelName", ""))))
    return samples


def _fetch(url: str) -> bytes:
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=PROMETHEUS_TIMEOUT_S) as response:  # noqa: S310 - configured
            return response.read()
    except urllib.error.HTTPError as exc:  # a bad query answers 400 with a JSON body naming the problem
        body = exc.read()
        if body.lstrip().startswith(b"{"):
            return body
        raise


def evidence_nodes(evidence: Sequence[Evidence]) -> list[str]:
    """The nodes some evidence names, in order of first appearance."""
    return list(dict.fromkeys(e.node_name for e in evidence))
