"""Taints and tolerations, as the Kubernetes scheduler matches them (pure, on API dicts)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Kubernetes' ToleratesTaint."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if not key:
        return operator == "Exists"
    if key != taint.get("key"):
        return False
    if operator == "Exists":
        return True
    return (toleration.get("value") or "") == (taint.get("value") or "")


def untolerated_taints(node: Mapping[str, Any], tolerations: Sequence[Mapping[str, Any]]) -> list[str]:
    out = []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue  # PreferNoSchedule does not keep a pod off
        if not any(tolerates(t, taint) for t in tolerations):
            value = f"={taint['value']}" if taint.get("value") else ""
            out.append(f"{taint.get('key')}{value}:{taint.get('effect')}")
    return out
