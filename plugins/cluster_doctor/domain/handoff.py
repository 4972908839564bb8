"""The hand-off to a ticketing or RMA system: the JSON document posted to the configured webhook
once per new repeat offender and once per confirmed failure needing ``drain_and_service``. Pure Python: the
store keeps the documents in an outbox until the webhook takes them (``cluster_doctor.store.handoff``), the
airflow layer posts them (``cluster_doctor.airflow.tasks.handoff``).

Each document carries an idempotency key, the identity of what it reports (the node and when it was named a
repeat offender; the node and the start of each failing pair's failure): written twice it is one row, and the
receiver gets it in the ``Idempotency-Key`` header, so a post whose answer was lost and is sent again is
recognised there.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import hmac
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cluster_doctor.domain.errors import clipped
from cluster_doctor.domain.status import FAILING, FAILING_CHECKS
from cluster_doctor.domain.timestamps import iso_seconds

SCHEMA = "cluster-doctor.io/handoff/v1"
REPEAT_OFFENDER = "repeat_offender"
DRAIN_AND_SERVICE = "drain_and_service"
KINDS = (REPEAT_OFFENDER, DRAIN_AND_SERVICE)
KEY_HEADER = "Idempotency-Key"
SIGNATURE_HEADER = "X-Cluster-Doctor-Signature"  # sha256=<hex HMAC of the body with the Connection's password>
MAX_CHECKS = 20  # failed checks per suite in a document: a ticket, not the history
MAX_TEXT = 500


@dataclasses.dataclass(frozen=True)
class Evidence:
    """One suite's latest executed result on the node (validation_latest), as the document shows it."""

    test_name: str
    status: str
    finished_at: dt.datetime | None
    reason: str | None = None
    action: str | None = None
    checks: Sequence[Mapping[str, Any]] = ()
    metrics: Mapping[str, Any] | None = None
    gpu_model: str | None = None


@dataclasses.dataclass(frozen=True)
class Document:
    """What the outbox keeps and the webhook receives."""

    key: str
    node_name: str
    kind: str
    body: Mapping[str, Any]

    def payload(self) -> bytes:
        """The exact bytes posted (and signed)."""
        return json.dumps(self.body, sort_keys=True, separators=(",", ":"), default=str).encode()


def signature(payload: bytes, secret: str) -> str:
    """The value of the signature header: HMAC-SHA256 of the body with the secret (GitHub's webhook form)."""
    return "sha256=" + hmac.new(secret.encode(), payload, hashlib.sha256).hexdigest()


def _short(text: object) -> str:
    return clipped(text, MAX_TEXT)


def serials(evidence: Iterable[Evidence]) -> list[str]:
    """The serial numbers the suites reported, where their results carry them (a metric or a check field
    whose name holds "serial"); none when they do not."""
    found: set[str] = set()

    def take(value: Any) -> None:
        values = value if isinstance(value, (list, tuple)) else [value]
        found.update(str(v) for v in values if isinstance(v, (str, int)) and not isinstance(v, bool) and str(v))

    for e in evidence:
        for name, value in (e.metrics or {}).items():
            if "serial" in str(name).lower():
                take(value)
        for check in e.checks:
            if isinstance(check, Mapping):
                for name, value in check.items():
                    if "serial" in str(name).lower():
                        take(value)
    return sorted(found)


def _failed_checks(e: Evidence) -> list[dict[str, Any]]:
    keep = ("name", "code", "device", "value", "unit", "threshold", "message", "action")
    return [{k: c.get(k) for k in keep if c.get(k) is not None}
            for c in e.checks if isinstance(c, Mapping) and c.get("status") in FAILING_CHECKS][:MAX_CHECKS]


def document(kind: str, key: str, node_name: str, *, action: str, reason: str, codes: Sequence[str],
             evidence: Sequence[Evidence], history: Sequence[str], history_url: str | None,
             now: dt.datetime) -> Document:
    """The document for one hand-off (see the module doc). ``evidence``: the node's latest results, failing
    ones first in the document; ``history``: its transitions, one line each, oldest first."""
    if kind not in KINDS:
        raise ValueError(f"hand-off kind {kind!r} is not one of {', '.join(KINDS)}")
    failing = [e for e in evidence if e.status in FAILING]
    model = next((e.gpu_model for e in sorted(evidence, key=lambda e: e.finished_at or now, reverse=True)
                  if e.gpu_model), None)
    body = {
        "schema": SCHEMA, "kind": kind, "idempotency_key": key, "node": node_name, "model": model,
        "action": action, "reason": _short(reason), "codes": list(codes), "serial_numbers": serials(evidence),
        "evidence": [{"test": e.test_name, "status": e.status, "finished_at": iso_seconds(e.finished_at),
                      "reason": _short(e.reason) if e.reason else None, "action": e.action,
                      "failed_checks": _failed_checks(e)} for e in failing],
        "history": list(history), "history_url": history_url, "created_at": iso_seconds(now),
    }
    return Document(key, node_name, kind, body)


def repeat_key(node_name: str, named_at: dt.datetime) -> str:
    return f"{REPEAT_OFFENDER}/{node_name}/{iso_seconds(named_at)}"


def drain_key(node_name: str, since: Iterable[tuple[str, dt.datetime | None]]) -> str:
    """One key per confirmed failure: the node and the start of each failing pair's failure (a new failure
    after a pass starts again, so it is handed off again)."""
    parts = sorted(f"{test}@{iso_seconds(at) or '-'}" for test, at in since)
    return f"{DRAIN_AND_SERVICE}/{node_name}/{','.join(parts)}"
