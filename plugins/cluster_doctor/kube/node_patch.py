"""Node patches that never overwrite a concurrent writer's change: the patch carries the node's
resourceVersion, and on a conflict (409) the node is read again and the patch rebuilt from it. Shared by
quarantine and reservation, which both rewrite the node's taint list (a merge patch replaces lists
whole, so a patch built from a stale read would drop a taint someone else just added)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Mapping
from typing import Any

from cluster_doctor.domain import quarantine as q
from cluster_doctor.domain import timestamps
from cluster_doctor.kube.api import CoreV1


def taints(node: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The node's taints (a merge patch replaces the list whole: a patch sends the others back with ours)."""
    return list((node.get("spec") or {}).get("taints") or [])


def is_quarantined(node: Mapping[str, Any]) -> bool:
    """Our quarantine label or our quarantine taint: either alone (a half-finished patch, a hand edit)
    still keeps the node from users' and from the reservation's and the acceptance gate's hands."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    return labels.get(q.LABEL) == q.LABEL_VALUE or any(t.get("key") == q.LABEL for t in taints(node))


def annotation_time(node: Mapping[str, Any], key: str) -> dt.datetime | None:
    """A timezone-aware time we wrote into an annotation (reserved-at, gated-at); None when absent or garbled."""
    return timestamps.parse(((node.get("metadata") or {}).get("annotations") or {}).get(key))


def read_node(core_v1: CoreV1, name: str) -> dict[str, Any]:
    """The node as the API serves it, as plain JSON (no client model conversion)."""
    return json.loads(core_v1.read_node(name, _preload_content=False).data)


def patch_node(core_v1: CoreV1, node: Mapping[str, Any], build: Callable[[Mapping[str, Any]], dict[str, Any]],
               attempts: int = 3) -> None:
    """Patch with ``build(node)`` and the node's resourceVersion; on a conflict, re-read and try again."""
    from kubernetes.client.exceptions import ApiException

    name = node["metadata"]["name"]
    for attempt in range(attempts):
        body = build(node)
        body.setdefault("metadata", {})["resourceVersion"] = node["metadata"].get("resourceVersion")
        try:
            core_v1.patch_node(name, body)
            return
        except ApiException as exc:
            if exc.status != 409 or attempt == attempts - 1:
                raise
            node = read_node(core_v1, name)
