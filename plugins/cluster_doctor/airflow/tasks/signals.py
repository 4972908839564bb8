"""The signals between validations in Airflow: what every run's discover does with them, and
the fast path, the DAG ``suspect_signals`` that does not wait for the hour.

Every ``continuous_validation`` run reads the signals after its discovery (``read_signals``) and plans the
suspect nodes first (``current_suspects``, read by prioritize and reserve). The fast path runs every
``fast_path_minutes``: a discovery of the whole cluster (the two lists from the watch cache) and the
signals, recorded the same way; a suspect, busy or free, is reserved at once (with reservation on: no new
user job lands on it before its validation, even while no run can be triggered); and for the free suspects
no fast-path run took yet it decides whether to trigger a ``continuous_validation`` run limited to them by
the domain's rule (``domain.fast_path.decide``, which the simulator calls too): only when no run of that DAG
is queued or running and the scheduled run is not due within ``fast_path_quiet_minutes``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any

from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.errors import one_line
from cluster_doctor.domain.fast_path import TARGET_DAG, Decision, decide
from cluster_doctor.domain.nodes import compress
from cluster_doctor.domain.signals import Suspect
from cluster_doctor.kube import discovery
from cluster_doctor.kube import signals as kube_signals
from cluster_doctor.kube.api import CoreV1
from cluster_doctor.store import inventory, suspects
from cluster_doctor.store.history import ResultStore

log = logging.getLogger(__name__)


def read_signals(core_v1: CoreV1, settings: Settings, found: discovery.Discovery,
                 update: inventory.InventoryUpdate | None, store: ResultStore,
                 now: dt.datetime) -> suspects.Recorded | None:
    """Read every configured signal about the GPU nodes ``found`` saw (``update``: what the inventory says
    changed) and record the evidence. Best effort: None when it could not (the run plans without it)."""
    try:
        reading = kube_signals.read(core_v1, settings, found, update.changes if update else (), now=now)
        log.info("%s", reading.describe())
        recorded = suspects.record(store.connect, reading.evidence, seen_at=now)
    except Exception as exc:  # noqa: BLE001 - a signal only adds a suspect: a run never fails for want of one
        log.warning("signals not recorded (%s): suspects wait for the next read", one_line(exc, 300))
        return None
    for evidence in recorded.new:
        log.warning("SUSPECT %s: %s", evidence.node_name, evidence.line())
    if recorded.new or recorded.again:
        log.info("suspects: %s", recorded.describe())
    return recorded


def accept(core_v1: CoreV1, settings: Settings, update: inventory.InventoryUpdate | None, store: ResultStore, *,
           run_id: str, now: dt.datetime, dry_run: bool = False) -> Any:
    """The acceptance gate (setting ``acceptance``, off by default; ``cluster_doctor.kube.acceptance``): gate the
    nodes this discovery found new, rebooted or back from quarantine, accept those whose bundle passed. Best
    effort: the next read tries again; None when disabled or when it could not."""
    policy = settings.acceptance
    if not policy.enabled:
        return None
    from cluster_doctor.kube import acceptance

    if dry_run:  # a run that only plans taints nothing either
        policy = policy.model_copy(update={"dry_run": True})
    try:
        return acceptance.gate_new_nodes(core_v1, store, policy, changes=update.changes if update else (),
                                    tests=settings.tests, run_id=run_id, node_selector=settings.node_selector, now=now)
    except Exception as exc:  # noqa: BLE001 - the gate is retried at the next read; validations go on
        log.warning("acceptance gate not reconciled (%s): the next read tries again", one_line(exc, 300))
        return None


def accept_after_run(found: Any, store: ResultStore, core_v1: CoreV1, *, run_id: str,
                     now: dt.datetime | None = None) -> Any:
    """After a ``continuous_validation`` run recorded its results (``found``: its ``Discovered``): a gated node
    whose whole bundle passed loses the taint now, not a fast-path tick (or an hour) later; a failed one
    keeps it. Gates nothing new (no inventory change is read here). None when disabled or when it could not."""
    return accept(core_v1, found.settings, None, store, run_id=run_id, now=now or dt.datetime.now(dt.UTC),
                  dry_run=found.params.dry_run)


def current_suspects(store: ResultStore, tests: Sequence[str], nodes: Iterable[str],
                     now: dt.datetime) -> dict[str, Suspect]:
    """The suspect nodes among ``nodes``, after writing down the suspicions their bundles answered. Best
    effort: none when the results DB could not say."""
    try:
        resolved = suspects.resolve(store.connect, tests, now=now)
        with store.connection() as conn, conn.cursor() as cur:
            found = suspects.current(cur, tests, nodes)
    except Exception as exc:  # noqa: BLE001 - the plan goes on by staleness alone
        log.warning("suspect nodes not read (%s): planned by staleness alone", one_line(exc, 300))
        return {}
    for node, resolution in sorted(resolved.items()):
        log.info("%s is no longer suspect: %s", node, "its bundle passed" if resolution == suspects.CLEARED
                 else "a suite failed (the failure is its verdict now)")
    for suspect in found.values():
        log.warning("%s %s", suspect.node_name, suspect.describe())
    return found


# ---------------------------------------------------------------------------- the fast path
def tick(settings: Settings, core_v1: CoreV1, store: ResultStore, *, paused: bool, active_runs: int,
         next_run: dt.datetime | None, now: dt.datetime | None = None) -> Decision:
    """One run of the fast path: discover, record the inventory and the signals, reserve the suspects, busy
    or free (setting reservation), and decide on a run for the free ones (``decide``)."""
    now = now or dt.datetime.now(dt.UTC)
    if paused:  # one switch: pausing continuous_validation stops the fast path's taints and runs too
        return Decision([], why_not=f"{TARGET_DAG} is paused: signals not read")
    found = discovery.discover(core_v1, settings)
    update = None
    try:
        update = inventory.record_discovery(store.connect, seen_nodes(found), seen_at=now, complete=True)
    except Exception as exc:  # noqa: BLE001 - the signals from the node list still count
        log.warning("GPU node inventory not updated (%s)", one_line(exc, 300))
    read_signals(core_v1, settings, found, update, store, now)
    accept(core_v1, settings, update, store, run_id="suspect_signals", now=now)
    free = [n.name for n in found.free]
    busy = [n.name for n in found.ineligible if n.reason == discovery.BUSY]
    found_suspects = current_suspects(store, settings.tests, free + busy, now)
    reserved = _reserve(core_v1, store, settings, [n for n in free + busy if n in found_suspects],
                        gpu_nodes=len(found.free) + len(found.ineligible), now=now)
    with store.connection() as conn, conn.cursor() as cur:
        fresh = suspects.untriggered(cur, settings.tests)
    decision = decide(fresh, free, paused=paused, active_runs=active_runs, next_run=next_run, now=now,
                      quiet=dt.timedelta(minutes=settings.fast_path_quiet_minutes))
    decision = dataclasses.replace(decision, reserved=reserved)
    if decision.nodes:
        log.warning("fast path: triggering %s run %s for %d free suspect(s): %s", TARGET_DAG, decision.run_id,
                    len(decision.nodes), compress(decision.nodes))
    else:
        log.info("fast path: no run triggered (%s)", decision.why_not)
    return decision


def reach_budget_s(settings: Settings) -> float:
    """How long a fast-path tick waits for a service it reads that is not up yet (a stack starting, an
    api-server restarting): one interval, since the next tick tries again anyway; at most five minutes."""
    every = settings.fast_path_minutes * 60
    return min(every, 300.0) if every > 0 else 300.0


def fast_path_tick(ti: Any, settings: Settings, *, clock=time.monotonic, sleep=time.sleep) -> Decision:
    """The DAG's read_signals: ``tick`` with what it needs from Airflow (the target DAG's pause and next run,
    its active runs, the connections), every service it reads waited for within ``reach_budget_s``
    (``runtime.reach``). When one never answered: one ERROR line naming it, and the task fails on that line."""
    from cluster_doctor.airflow import runtime

    deadline = clock() + reach_budget_s(settings)

    def reach(call):
        return runtime.reach(call, deadline=deadline, clock=clock, sleep=sleep)

    try:
        target = reach(lambda: _target_dag(ti))
        if target is None:  # a stack still starting: the dag-processor has not parsed it yet
            log.info("fast path: %s is not parsed yet: signals not read", TARGET_DAG)
            return Decision([], why_not=f"{TARGET_DAG} is not parsed yet: signals not read")
        active = reach(lambda: ti.get_dr_count(dag_id=TARGET_DAG, states=["queued", "running"]))
        core_v1 = reach(lambda: runtime.core_v1(settings.kubernetes_conn_id))
        store = reach(lambda: runtime.results_store(settings.validation_db_conn_id))
        return reach(lambda: tick(settings, core_v1, store, paused=bool(target.is_paused), active_runs=active,
                                  next_run=target.next_dagrun))
    except runtime.Unreachable as exc:
        line = f"fast path not run: {exc}; the next tick tries again"
        log.error("%s", line)
        from airflow.sdk.exceptions import AirflowFailException

        raise AirflowFailException(line) from None


def _target_dag(ti: Any) -> Any:
    """The target DAG as the API server knows it (pause, next run), None while it does not know it."""
    from airflow.sdk.exceptions import AirflowRuntimeError

    try:
        return ti.get_dag(TARGET_DAG)
    except AirflowRuntimeError as exc:
        if (exc.error.detail or {}).get("status_code") == 404:
            return None
        raise


def seen_nodes(found: discovery.Discovery) -> list[inventory.SeenNode]:
    """Every GPU node discovery saw, as the inventory records it (with its boot id and quarantine label)."""
    def facts(name: str) -> dict[str, Any]:
        f = found.facts.get(name)
        return {"boot_id": f.boot_id, "quarantined": f.quarantined} if f else {}

    seen = [inventory.SeenNode(n.name, n.gpu_count, n.gpu_model, inventory.FREE, **facts(n.name)) for n in found.free]
    seen += [inventory.SeenNode(n.name, n.gpu_count, n.gpu_model, n.reason, n.detail, **facts(n.name))
             for n in found.ineligible if n.reason != discovery.INVALID_NAME]
    return seen


def _reserve(core_v1: CoreV1, store: ResultStore, settings: Settings, found_suspects: list[str], *, gpu_nodes: int,
             now: dt.datetime) -> list[str]:
    """Taint the suspects, busy or free, now (setting reservation); the nodes tainted."""
    policy = settings.reservation
    if not policy.enabled or not found_suspects:
        return []
    from cluster_doctor.kube import reservation

    try:
        report = reservation.reserve_suspects(core_v1, store.connect, policy, suspects=found_suspects,
                                              gpu_nodes=gpu_nodes, run_id="suspect_signals",
                                              node_selector=settings.node_selector, now=now)
    except Exception as exc:  # noqa: BLE001 - the next tick, or the run's reserve task, tries again
        log.warning("suspects not reserved (%s)", one_line(exc, 300))
        return []
    return report.applied


def triggered(store: ResultStore, decision: dict[str, Any]) -> str:
    """After the trigger: the suspects' open evidence is taken by that run (not triggered again)."""
    marked = suspects.mark_triggered(store.connect, decision["nodes"], decision["run_id"])
    return f"run {decision['run_id']} of {TARGET_DAG} for {compress(decision['nodes'])} ({marked} piece(s) of evidence)"
