"""discover: validate the run's params and settings, find the free GPU nodes, write the inventory, read the signals and the acceptance gate (step 1)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from cluster_doctor.airflow import storage
from cluster_doctor.airflow.tasks import signals
from cluster_doctor.airflow.tasks._common import _now, log
from cluster_doctor.domain.planning import steps
from cluster_doctor.domain.planning.params import InvalidParams, parse_params
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.errors import one_line
from cluster_doctor.domain.nodes import compress
from cluster_doctor.domain.payloads import Discovered
from cluster_doctor.kube import discovery, volumes
from cluster_doctor.kube.api import CoreV1
from cluster_doctor.store.history import ResultStore


def discover(params: Mapping[str, Any], settings: Settings, core_v1: CoreV1, now: dt.datetime | None = None,
             parsed: Settings | None = None, executors: list[str] | None = None, *,
             store: ResultStore | None = None, run_id: str = "", waited: str | None = None) -> Discovered:
    """Validate the run's params and settings (against ``parsed``, those the DAG was parsed with),
    then find the free GPU nodes (and why the others are not). ``executors``: Airflow's configured
    ones (read from its configuration when None), to warn when the spool cannot follow them. With
    ``store``, what discovery saw goes into the GPU node inventory (``store.inventory``): the XCom
    carries node ranges, the per-node detail stays in the database; then the signals and the acceptance
    gate (``run_id``: the run its taints name). ``waited``: what the run waited for before it started, logged
    first."""
    if waited:
        log.info("%s", waited)
    now = now or _now()
    if parsed is not None:
        settings.check_parse_time(parsed)
    run = parse_params(params, settings, now=now)
    if parsed is not None:
        _check_steps(run.tests, steps.bundle_order(parsed.tests))
    warnings = [w for w in (storage.executor_warning(settings, executors),) if w]
    for warning in warnings:
        log.warning("%s", warning)
    found = discovery.discover(core_v1, settings, run.node_range)
    log.info("%d GPU node(s) in range %s: %d free, %d not eligible (%d API calls, %d pods read)",
             len(found.free) + len(found.ineligible), run.node_range, len(found.free), len(found.ineligible),
             found.api_calls, found.pods_seen)
    if found.free:
        log.info("free: %s", compress(n.name for n in found.free))
    by_reason: dict[str, list[str]] = {}
    for node in found.ineligible:
        by_reason.setdefault(node.reason, []).append(node.name)
    for reason, names in sorted(by_reason.items()):
        log.info("not eligible (%s): %s", reason, compress(names))
    if found.short:  # validated all the same: their suites expect the node's count, and fail short of it
        warnings.append(f"{len(found.short)} GPU node(s) offer fewer GPUs than they have (the device plugin "
                        f"marked some unhealthy): " + "; ".join(n.line() for n in found.short[:20]))
        log.warning("%s", warnings[-1])
    update = _record_inventory(store, found, now, complete=run.node_range.is_all) if store else None
    inventory_at = now if update is not None else None
    if store:  # the signals between validations: suspects, planned first by prioritize
        signals.read_signals(core_v1, settings, found, update, store, now)
        signals.accept(core_v1, settings, update, store, run_id=run_id, now=now, dry_run=run.dry_run)
    # Once per run, not per pod: a claim the pods cannot mount would keep every one of them Pending
    # until its timeout, hour after hour. Tests that need a broken claim are not planned (prioritize).
    mounts = volumes.check(core_v1, settings, run.tests)
    if mounts.blocked_tests:
        log.error("%s: no validation pod of %s will be created", mounts.problem, ", ".join(mounts.blocked_tests))
    valid = [n for n in found.ineligible if n.reason != discovery.INVALID_NAME]  # never a real node name
    return Discovered.of(
        settings=settings, params=run.to_params(), started_at=now, inventory_at=inventory_at,
        free=[(n.name, n.gpu_count, n.gpu_model, n.node_gpus) for n in found.free],
        ineligible=[(n.name, n.reason) for n in valid],
        api_calls=found.api_calls, nodes_seen=found.nodes_seen, pods_seen=found.pods_seen,
        decode_seconds=round(found.decode_seconds, 3), read_mode=found.read_mode, volumes=mounts.to_dict(),
        warnings=warnings)


def _record_inventory(store: ResultStore, found: discovery.Discovery, now: dt.datetime, *,
                      complete: bool) -> Any:
    """Every GPU node discovery saw, into the inventory (with its boot id and quarantine label, which the
    signals compare); what changed, or None when the results DB refused (the run still plans from what it
    found; the views keep the last inventory)."""
    from cluster_doctor.store import inventory

    try:
        update = inventory.record_discovery(store.connect, signals.seen_nodes(found), seen_at=now,
                                            complete=complete)
    except Exception as exc:  # the run can plan without it; the next run writes it again
        log.warning("GPU node inventory not updated (%s): the fleet views keep the previous one", one_line(exc, 300))
        return None
    log.info("%s%s%s", update.describe(), f"; left the cluster: {compress(update.gone)}" if update.gone else "",
             f"; new: {compress(update.new)}" if update.new else "")
    return update


def _check_steps(tests: Sequence[str], steps: Sequence[str]) -> None:
    """The validate group has a step for each suite enabled when the DAG was parsed (CLUSTER_DOCTOR_TESTS):
    a suite without one could never run, so a run (params or the Variable) asking for it is refused."""
    missing = [t for t in tests if t not in steps]
    if missing:
        raise InvalidParams(
            f"tests: {', '.join(missing)} not enabled in this deployment (the DAG runs {', '.join(steps)}); "
            "enable it with CLUSTER_DOCTOR_TESTS in the deployment environment")
