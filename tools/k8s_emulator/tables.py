"""Server-side printing (meta.k8s.io/v1 Table) for `kubectl get`: the columns the real apiserver returns for
the kinds we serve, so kubectl output looks like a cluster's (STATUS, READY, RESTARTS, ...)."""

from __future__ import annotations

import json
import time

from .util import parse_time


def human_age(ts: str | None) -> str:
    if not ts:
        return "<unknown>"
    s = max(int(time.time() - parse_time(ts)), 0)
    m, h, d = s // 60, s // 3600, s // 86400
    if s < 120:
        return f"{s}s"
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if h < 3:
        return f"{m}m"
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    if d < 8:
        return f"{d}d{h % 24}h" if h % 24 else f"{d}d"
    if d < 365 * 2:
        return f"{d}d"
    return f"{d // 365}y{d % 365}d"


def _col(name, type_="string", priority=0, fmt=""):
    return {"name": name, "type": type_, "format": fmt, "description": "", "priority": priority}


def pod_status_text(pod: dict) -> tuple[str, int, str]:
    """(ready 'n/m', restarts, status) the way kubectl's printPod computes them."""
    st, spec = pod.get("status") or {}, pod.get("spec") or {}
    reason = st.get("reason") or st.get("phase") or "Pending"
    restarts = 0
    for i, cs in enumerate(st.get("initContainerStatuses") or []):
        restarts += cs.get("restartCount", 0)
        state = cs.get("state") or {}
        if "terminated" in state and state["terminated"].get("exitCode") == 0:
            continue
        if "terminated" in state:
            t = state["terminated"]
            reason = "Init:" + (t.get("reason") or f"ExitCode:{t.get('exitCode')}")
        elif "waiting" in state and state["waiting"].get("reason") not in (None, "", "PodInitializing"):
            reason = "Init:" + state["waiting"]["reason"]
        else:
            reason = f"Init:{i}/{len(spec.get('initContainers') or [])}"
        break
    else:
        ready = 0
        for cs in reversed(st.get("containerStatuses") or []):
            restarts += cs.get("restartCount", 0)
            state = cs.get("state") or {}
            if "waiting" in state and state["waiting"].get("reason"):
                reason = state["waiting"]["reason"]
            elif "terminated" in state:
                t = state["terminated"]
                reason = t.get("reason") or (
                    f"Signal:{t['signal']}" if t.get("signal") else f"ExitCode:{t.get('exitCode')}"
                )
            elif cs.get("ready") and "running" in state:
                ready += 1
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            reason = "Terminating"
        total = len(spec.get("containers") or [])
        return f"{ready}/{total}", restarts, reason
    return f"0/{len(spec.get('containers') or [])}", restarts, reason


def _pod_row(p):
    ready, restarts, status = pod_status_text(p)
    st = p.get("status") or {}
    return [
        p["metadata"]["name"],
        ready,
        status,
        restarts,
        human_age(p["metadata"].get("creationTimestamp")),
        st.get("podIP") or "<none>",
        (p.get("spec") or {}).get("nodeName") or "<none>",
        st.get("nominatedNodeName") or "<none>",
        "<none>",
    ]


def _node_row(n):
    conds = {c["type"]: c.get("status") for c in (n.get("status") or {}).get("conditions") or []}
    status = "Unknown" if "Ready" not in conds else ("Ready" if conds["Ready"] == "True" else "NotReady")
    if (n.get("spec") or {}).get("unschedulable"):
        status += ",SchedulingDisabled"
    labels = (n.get("metadata") or {}).get("labels") or {}
    roles = (
        ",".join(sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/")))
        or "<none>"
    )
    info = (n.get("status") or {}).get("nodeInfo") or {}
    addr = {a["type"]: a["address"] for a in (n.get("status") or {}).get("addresses") or []}
    return [
        n["metadata"]["name"],
        status,
        roles,
        human_age(n["metadata"].get("creationTimestamp")),
        info.get("kubeletVersion", ""),
        addr.get("InternalIP", "<none>"),
        addr.get("ExternalIP", "<none>"),
        info.get("osImage", ""),
        info.get("kernelVersion", ""),
        info.get("containerRuntimeVersion", ""),
    ]


def _event_row(e):
    io = e.get("involvedObject") or {}
    last = e.get("lastTimestamp") or e.get("eventTime") or (e.get("series") or {}).get("lastObservedTime")
    return [
        human_age(last),
        e.get("type", ""),
        e.get("reason", ""),
        f"{io.get('kind', '').lower()}/{io.get('name', '')}",
        e.get("message", ""),
    ]


TABLES = {
    "pods": (
        [
            _col("Name", fmt="name"),
            _col("Ready"),
            _col("Status"),
            _col("Restarts", "string"),
            _col("Age"),
            _col("IP", priority=1),
            _col("Node", priority=1),
            _col("Nominated Node", priority=1),
            _col("Readiness Gates", priority=1),
        ],
        _pod_row,
    ),
    "nodes": (
        [
            _col("Name", fmt="name"),
            _col("Status"),
            _col("Roles"),
            _col("Age"),
            _col("Version"),
            _col("Internal-IP", priority=1),
            _col("External-IP", priority=1),
            _col("OS-Image", priority=1),
            _col("Kernel-Version", priority=1),
            _col("Container-Runtime", priority=1),
        ],
        _node_row,
    ),
    "events": (
        [_col("Last Seen"), _col("Type"), _col("Reason"), _col("Object"), _col("Message")],
        _event_row,
    ),
    "namespaces": (
        [_col("Name", fmt="name"), _col("Status"), _col("Age")],
        lambda o: [
            o["metadata"]["name"],
            (o.get("status") or {}).get("phase", ""),
            human_age(o["metadata"].get("creationTimestamp")),
        ],
    ),
    "configmaps": (
        [_col("Name", fmt="name"), _col("Data", "integer"), _col("Age")],
        lambda o: [
            o["metadata"]["name"],
            len(o.get("data") or {}) + len(o.get("binaryData") or {}),
            human_age(o["metadata"].get("creationTimestamp")),
        ],
    ),
    "priorityclasses": (
        [
            _col("Name", fmt="name"),
            _col("Value", "integer"),
            _col("Global-Default", "boolean"),
            _col("Age"),
            _col("Preemption-Policy", priority=1),
        ],
        lambda o: [
            o["metadata"]["name"],
            o.get("value", 0),
            bool(o.get("globalDefault")),
            human_age(o["metadata"].get("creationTimestamp")),
            o.get("preemptionPolicy", "PreemptLowerPriority"),
        ],
    ),
}


def table(plural: str, raw_items: list[bytes], meta: dict) -> dict:
    cols, row_fn = TABLES.get(
        plural,
        (
            [_col("Name", fmt="name"), _col("Age")],
            lambda o: [o["metadata"]["name"], human_age(o["metadata"].get("creationTimestamp"))],
        ),
    )
    rows = []
    for raw in raw_items:
        obj = json.loads(raw)
        m = obj.get("metadata") or {}
        partial = {
            k: m[k]
            for k in (
                "name",
                "namespace",
                "uid",
                "resourceVersion",
                "creationTimestamp",
                "labels",
                "deletionTimestamp",
            )
            if k in m
        }
        rows.append(
            {
                "cells": row_fn(obj),
                "object": {
                    "kind": "PartialObjectMetadata",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": partial,
                },
            }
        )
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": cols,
        "rows": rows,
    }
