"""finish_node: the validate and sweep groups' last task, per node (step 5)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cluster_doctor.airflow.tasks._common import log
from cluster_doctor.domain.planning import steps
from cluster_doctor.domain.attempts import Attempt, InvalidAttempt
from cluster_doctor.domain.errors import one_line
from cluster_doctor.domain.payloads import Bundle
from cluster_doctor.kube.api import CoreV1
from cluster_doctor.store import claims
from cluster_doctor.store.history import ResultStore


def finish_node(bundle: Bundle, reported: Sequence[Mapping[str, Any] | None], store: ResultStore,
                core_v1: CoreV1 | None, *, dag_id: str, run_id: str) -> str:
    """The validate group's last task, whatever its steps did: the run is done with the node, so its
    claim goes (another run may take it), and a reserved node loses our taint when its validation is
    done (every suite executed, health failed, or a user took the node; kept, within its maximum hold,
    when a step only ran out of time). Best effort: the claim expires, the reservation task releases."""
    attempts = [_attempt_or_none(item) for item in reported]
    done = steps.done_with_node(bundle.tests, attempts)
    try:
        claims.release(store.connect, dag_id=dag_id, run_id=run_id, nodes=[bundle.node_name])
    except Exception as exc:
        log.warning("could not release this run's claim of %s (%s); it expires on its own", bundle.node_name,
                    one_line(exc, 300))
    ran = ", ".join(f"{a.test_name} {a.status}" for a in attempts if a is not None) or "no step reported"
    if not bundle.reserved:
        return f"{bundle.node_name}: {ran}"
    from cluster_doctor.kube import reservation

    if not done:
        log.warning("%s stays reserved for the next run: its validation did not finish (%s)", bundle.node_name, ran)
        return f"{bundle.node_name}: {ran}; still reserved"
    policy = bundle.run_config.settings.reservation
    released = reservation.release_after_validation(core_v1, store.connect, bundle.node_name, policy=policy,
                                                    run_id=run_id)
    return f"{bundle.node_name}: {ran}; reservation {'released' if released else 'already gone'}"


def _attempt_or_none(item: Mapping[str, Any] | None) -> Attempt | None:
    if not item:
        return None
    try:
        return Attempt.from_dict(item)
    except InvalidAttempt as exc:
        log.error("ignoring a malformed attempt from XCom: %s", exc)
        return None
