"""What each task of the continuous_validation DAG does. The DAG file only wires these together.

Every function takes and returns the typed payloads of ``cluster_doctor.domain.payloads``; the DAG
file turns them into XComs and back (``to_xcom`` / ``from_xcom``) and does nothing else with them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from cluster_doctor.airflow import signals_task, storage
from cluster_doctor.domain import fleet_verdicts
from cluster_doctor.domain.planning import due, steps
from cluster_doctor.domain.planning import plan as planner
from cluster_doctor.domain.planning.params import InvalidParams, RunParams, parse_params
from cluster_doctor.domain.attempts import UNREPORTED, Attempt, InvalidAttempt
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.errors import one_line
from cluster_doctor.domain.nodes import compress
from cluster_doctor.domain.payloads import (
    Bundle,
    BundleStep,
    Discovered,
    HeldPair,
    Latest,
    Plan,
    PlannedPair,
    Recorded,
    RunConfig,
    RunSummary,
    SpoolState,
)
from cluster_doctor.domain.quarantine import QuarantineReport
from cluster_doctor.domain.reservation import ReservationPolicy
from cluster_doctor.domain.status import Status
from cluster_doctor.kube import discovery, suite_code, volumes
from cluster_doctor.reports.text import age, table
from cluster_doctor.store import claims, plan_inputs, spool, verdicts
from cluster_doctor.store import fail_slow as stored_fail_slow
from cluster_doctor.store import peers as stored_peers

log = logging.getLogger(__name__)
WAIT_NOTE_S = 120  # a run that started this long after it was due says what it waited for


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


# ---------------------------------------------------------------------------- 1. discover
def discover(params: Mapping[str, Any], settings: Settings, core_v1: Any, now: dt.datetime | None = None,
             parsed: Settings | None = None, executors: list[str] | None = None, *,
             store: Any = None, run_id: str = "") -> Discovered:
    """Validate the run's params and settings (against ``parsed``, those the DAG was parsed with),
    then find the free GPU nodes (and why the others are not). ``executors``: Airflow's configured
    ones (read from its configuration when None), to warn when the spool cannot follow them. With
    ``store``, what discovery saw goes into the GPU node inventory (``store.inventory``): the XCom
    carries node ranges, the per-node detail stays in the database; then the signals and the acceptance
    gate (``run_id``: the run its taints name)."""
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
        signals_task.read_signals(core_v1, settings, found, update, store, now)
        signals_task.accept(core_v1, settings, update, store, run_id=run_id, now=now, dry_run=run.dry_run)
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


def _record_inventory(store: Any, found: discovery.Discovery, now: dt.datetime, *,
                      complete: bool) -> Any:
    """Every GPU node discovery saw, into the inventory (with its boot id and quarantine label, which the
    signals compare); what changed, or None when the results DB refused (the run still plans from what it
    found; the views keep the last inventory)."""
    from cluster_doctor.store import inventory

    try:
        update = inventory.record_discovery(store.connect, signals_task.seen_nodes(found), seen_at=now,
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


# ---------------------------------------------------------------------------- 2. load latest
def load_latest(discovered: Discovered, store: Any) -> Latest:
    """The latest state of every (free node, enabled test) pair, suspects marked (``store.plan_inputs``)."""
    return plan_inputs.latest(store, [n.name for n in discovered.free], discovered.params.tests)


# ---------------------------------------------------------------------------- 2b. reserve (opt-in)
def reserve(discovered: Discovered, store: Any, core_v1: Any, *, run_id: str,
            now: dt.datetime | None = None) -> Any:
    """Reservation of overdue busy nodes (setting ``reservation``, off by default): release what is done or
    held too long, taint the suspects not tainted yet (busy or free) and the overdue busy nodes within the
    limit; the reserved nodes that are free are planned first. A run limited to a node range leaves the
    taints outside it alone. An open breaker reserves nothing new and fails the run at its verdict, never
    its validations."""
    from cluster_doctor.kube import reservation

    settings = discovered.settings
    policy = ReservationPolicy.from_mapping(settings.reservation)
    if not policy.enabled:
        return reservation.ReservationReport(enabled=False)
    run = RunParams.of(discovered.params)
    if run.dry_run:  # a run that only plans taints nothing either
        policy = dataclasses.replace(policy, dry_run=True)
    busy = [n.name for n in discovered.ineligible if n.reason == discovery.BUSY]
    free = [n.name for n in discovered.free]
    report = reservation.reserve_and_release(
        core_v1, store.connect, policy, busy=busy, free=free, gpu_nodes=len(discovered.gpu_nodes), tests=run.tests,
        latest=store.pair_states(busy + free, run.tests), due_policy=due.policy(settings, run), run_id=run_id,
        node_selector=settings.node_selector, now=now,
        suspects=signals_task.current_suspects(store, settings.tests, busy + free, now or _now()),
        node_range=run.node_range)
    log.info("%s", report.describe())
    return report


# ---------------------------------------------------------------------------- 3. prioritize
def prioritize(discovered: Discovered, latest: Latest, now: dt.datetime | None = None,
               *, store: Any = None, dag_id: str | None = None, run_id: str | None = None,
               run_ended: Callable[[str, str], bool] | None = None, reserved: Collection[str] = (),
               suspects: Mapping[str, str] | None = None) -> Plan:
    """Plan this run's bundles with the one planner (``domain.planning.plan``): every free node with a due
    pair, most urgent first (``suspects``, node → evidence, with every suite, then ``reserved`` nodes,
    tainted for validation, before all), each with all its due suites; then the health sweep of the free
    nodes with no due pair (why ``health sweep``). With ``store`` (the DAG), the plan's nodes are claimed
    for the run ``dag_id``/``run_id`` (cluster_doctor.store.claims; ``run_ended`` tells a dead holder from
    a live one); without it (planning only), nothing is claimed. A plan with nothing in it says why
    (``Plan.why_empty``)."""
    now = now or _now()
    if suspects is None and store is not None:  # what the signals say, their bundles first
        # judged against every enabled suite: a run of fewer (params) never clears a suspicion alone
        suspects = {node: s.describe() for node, s in signals_task.current_suspects(
            store, discovered.settings.tests, [n.name for n in discovered.free], now).items()}
    given = planner.PlanInput.of(discovered, latest, reserved, suspects,
                                  peer_due=_peer_due(store, discovered, now) if store is not None else ())
    claim = _claimer(store, discovered.settings, given.run, dag_id, run_id, run_ended) if store is not None else None
    plan = planner.plan(given, now=now, claim=claim).plan
    if store is not None:
        plan = _with_probes(plan, store, discovered.settings, now)
    _log_plan(plan, given, now)
    return plan


def _with_probes(plan: Plan, store: Any, settings: Settings, now: dt.datetime) -> Plan:
    """The plan's gpu_health pairs whose node's speed probe is due (``domain.fail_slow.probe_due``: loaded
    since its last probe and ``slow_probe_min_interval_hours`` past it, ``slow_probe_max_age_hours`` old,
    never probed, or suspect of being slow) carry the probe's seconds; the others do not probe. Best
    effort: a store that cannot answer leaves this run without probes, never without its checks."""
    seconds = settings.slow_probe_seconds if settings.suite_device == "cuda" else min(settings.slow_probe_seconds, 0.2)
    health = [p for p in plan.pairs if p.test_name == stored_fail_slow.PROBE_TEST]
    if not seconds or not health:
        return plan
    try:
        due = stored_fail_slow.due_probes(
            store.connect, [p.node_name for p in health], now=now,
            min_interval=dt.timedelta(hours=settings.slow_probe_min_interval_hours),
            max_age=dt.timedelta(hours=settings.slow_probe_max_age_hours),
            window=dt.timedelta(hours=settings.slow_signal_window_hours))
    except Exception as exc:  # noqa: BLE001 - the probe is an addition to the sweep, not a condition of it
        log.warning("speed probe: could not read when nodes were last probed (%s); none probes this run",
                    one_line(exc, 300))
        return plan
    if due:
        log.info("speed probe: %d of %d gpu_health node(s) probe this run (%g s per benchmark)", len(due),
                 len(health), seconds)
    return plan.model_copy(update={"pairs": [
        p.model_copy(update={"probe_seconds": seconds}) if p.test_name == stored_fail_slow.PROBE_TEST
        and p.node_name in due else p for p in plan.pairs]})


def _peer_due(store: Any, discovered: Discovered, now: dt.datetime) -> frozenset[str]:
    """The free nodes whose peer test is due (setting peer_tests), which the health sweep leaves to the peer
    tests; none when peer tests are off."""
    if not discovered.settings.peer_tests:
        return frozenset()
    free = [n.name for n in discovered.free]
    with store.connection() as conn:
        history = stored_peers.peer_results(conn, since=stored_peers.evidence_since(discovered.settings, now),
                                            nodes=free)
    return planner.peer_due(free, history, discovered.settings, now)


def _claimer(store: Any, settings: Settings, run: RunParams, dag_id: str | None, run_id: str | None,
             run_ended: Callable[[str, str], bool] | None) -> planner.Claimer:
    """Claims in the results DB: of the candidate bundles, in priority order, the first ``max_pairs``
    pairs' nodes no other live run holds (a dry run claims nothing but defers the same way). A claim
    holds its node for the whole bundle (its TTL covers every step)."""
    if not dag_id or not run_id:
        raise ValueError("prioritize with a store needs the run's dag_id and run_id to claim its nodes")

    def claim(found: Sequence[planner.NodeBundle]) -> planner.Claimed:
        outcome = claims.claim(
            store.connect,
            [(b.node_name, b.pairs[0].test_name, claims.ttl_s(settings, [p.test_name for p in b.urgent]),
              len(b.urgent)) for b in found],
            dag_id=dag_id, run_id=run_id, limit=run.max_pairs, dry_run=run.dry_run, run_ended=run_ended)
        return planner.Claimed(granted=frozenset(c.node_name for c in outcome.granted),
                                held=tuple(HeldPair(**h.to_dict()) for h in outcome.held))
    return claim


def _log_plan(plan: Plan, given: planner.PlanInput, now: dt.datetime) -> None:
    planned, held = plan.pairs, plan.held_by_other_runs
    if planned:
        swept = len({p.node_name for p in planned if p.why == due.SWEEP})
        log.info("plan (%d pair(s) on %d node(s), each node's suites one after another%s%s):\n%s", len(planned),
                 len(plan.nodes()), f"; {swept} node(s) of the health sweep" if swept else "",
                 ", dry run: no pods" if plan.dry_run else "", table(
                     [[i + 1, p.node_name, p.test_name, p.why, p.last_status or "-", age(p.last_finished_at, now)]
                      for i, p in enumerate(planned)], ["#", "NODE", "TEST", "WHY", "LAST", "AGE"]))
    else:
        log.info("%s", plan.why_empty)
    if given.blocked:
        log.error("not planned: %s (%s)", ", ".join(given.blocked), given.blocked_problem)
    if held:
        log.warning("deferred %d node(s), held by another live run: %s", len(held), "; ".join(
            f"{h.node_name} (run {h.run_id}, until {h.expires_at.isoformat()})" for h in held))


# ---------------------------------------------------------------------------- 4. ship suites
def ship_suites(discovered: Discovered, planned: Plan, core_v1: Any) -> list[Bundle]:
    """Make sure this run's suite code is in the cluster (an immutable ConfigMap named after its
    content hash) and hand every planned node's due bundle to the mapped validate task group (the health
    sweep's bundles go to the sweep group: ``sweep_bundles``)."""
    nodes = _planned_nodes(planned, sweep=False)
    if not planned.creates_pods or not nodes:
        return []
    return _bundles(planned, nodes, _ship(discovered, core_v1))


def sweep_bundles(discovered: Discovered, planned: Plan, core_v1: Any, shipped: RunConfig | None) -> list[Bundle]:
    """The health sweep's bundles, for the mapped sweep task group, whose steps take a pool
    slot after every due bundle's. ``shipped``: the suite code ship_suites already shipped (None when it
    shipped nothing: shipped here then)."""
    nodes = _planned_nodes(planned, sweep=True)
    if not planned.creates_pods or not nodes:
        return []
    bundles = _bundles(planned, nodes, shipped or _ship(discovered, core_v1))
    log.info("health sweep: %d free node(s) whose last health check is older than %g h: %s", len(bundles),
             discovered.settings.sweep_interval_hours, compress(nodes))
    return bundles


def _planned_nodes(planned: Plan, *, sweep: bool) -> list[str]:
    """The plan's nodes, in plan order: those of the health sweep (every pair of theirs is), or the others."""
    swept = {p.node_name for p in planned.pairs if p.why == due.SWEEP}
    swept -= {p.node_name for p in planned.pairs if p.why != due.SWEEP}
    return [n for n in planned.nodes() if (n in swept) == sweep]


def _ship(discovered: Discovered, core_v1: Any) -> RunConfig:
    shipped = suite_code.ship(core_v1, discovered.settings)
    return RunConfig(settings=discovered.settings, configmap=shipped.configmap, suite_version=shipped.version,
                     suite_files=list(shipped.files))


def _bundles(planned: Plan, nodes: Sequence[str], run_config: RunConfig) -> list[Bundle]:
    bundles = []
    for node in nodes:
        pairs = [p for p in planned.pairs if p.node_name == node]
        bundles.append(Bundle(node_name=node, gpu_count=pairs[0].gpu_count, gpu_model=pairs[0].gpu_model,
                              node_gpus=pairs[0].node_gpus, planned_at=planned.planned_at,
                              reserved=node in planned.reserved,
                              steps=[BundleStep(test_name=p.test_name, why=p.why, probe_seconds=p.probe_seconds)
                                     for p in pairs],
                              run_config=run_config))
    return bundles


# ---------------------------------------------------------------------------- 5. finish a node
def finish_node(bundle: Bundle, reported: Sequence[Mapping[str, Any] | None], store: Any, core_v1: Any | None, *,
                dag_id: str, run_id: str) -> str:
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
    policy = ReservationPolicy.from_mapping(bundle.run_config.settings.reservation)
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


# ---------------------------------------------------------------------------- 6. record

def record(
    planned: Plan,
    reported: Sequence[Mapping[str, Any] | None],
    store: Any,
    *,
    dag_id: str,
    run_id: str,
    now: dt.datetime | None = None,
    settings: Settings | None = None,
) -> Recorded:
    """Write every attempt of the run (``reported``: the validate tasks' ``attempt`` XComs, each
    checked here); a planned pair whose task never reported gets a row too. Then judge the executed
    ones against the fleet and their own past (straggler/drift verdicts)."""
    now = now or _now()
    attempts: dict[tuple[str, str], Attempt] = {}
    for item in reported:
        if not item:
            continue
        try:
            attempt = Attempt.from_dict(item)
        except InvalidAttempt as exc:
            log.error("ignoring a malformed attempt from XCom: %s", exc)
            continue
        attempts[(attempt.node_name, attempt.test_name)] = attempt
    if not planned.dry_run:
        group_index = {node: i for i, node in enumerate(planned.nodes())}  # the validate group's map index
        for pair in planned.pairs:
            key = (pair.node_name, pair.test_name)
            if key not in attempts:
                attempts[key] = Attempt(
                    node_name=key[0], test_name=key[1], status=Status.SKIPPED, finished_at=now,
                    reason=UNREPORTED, gpu_model=pair.gpu_model, gpu_count=pair.gpu_count, dag_id=dag_id,
                    run_id=run_id, map_index=group_index[pair.node_name], try_number=0)
    # Whatever any run on any worker spooled first (quiet runs too); if writing this run's attempts
    # fails, they are spooled durably (settings.spool_dir, shared by every worker) and the task fails.
    result = spool.record_or_spool(store, list(attempts.values()),
                                   storage.spool(settings if settings is not None else Settings.load()))
    if planned.creates_pods:
        _release_claims(store, planned.pairs, dag_id=dag_id, run_id=run_id)
    if attempts:
        log.info("recorded %d attempt(s) (%d already written by the validation tasks)",
                 result.inserted, result.duplicates)
        verdicts.judge_recorded(store.connect, [a.to_dict() for a in attempts.values()],
                                fleet_verdicts.BaselinePolicy.from_mapping(settings.fleet_verdicts if settings else None))
    return Recorded(attempts=list(attempts.values()))


def _release_claims(store: Any, pairs: Sequence[PlannedPair], *, dag_id: str, run_id: str) -> None:
    """The run is done with its nodes once their attempts are stored. Best effort: the rows are
    committed already, and a claim not released just expires (claims.ttl_s)."""
    try:
        released = claims.release(store.connect, dag_id=dag_id, run_id=run_id, nodes=[p.node_name for p in pairs])
    except Exception as exc:
        log.warning("could not release this run's claims on %d node(s) (%s); they expire on their own",
                    len(pairs), one_line(exc, 300))
        return
    log.info("released this run's claims on %d node(s)", released)


# ---------------------------------------------------------------------------- 7. summarize, verdict
def summarize(discovered: Discovered, planned: Plan, recorded: Recorded | None, store: Any, *,
              dag_id: str | None = None, run_id: str | None = None, now: dt.datetime | None = None,
              waited: str | None = None, reservation_breaker: str | None = None) -> RunSummary:
    """Counts, newly failing nodes, ineligible nodes, coverage, why nothing was planned, what the run
    waited for; and the run's CTRF report on disk."""
    from cluster_doctor.reports import ctrf
    from cluster_doctor.reports import summary as report

    now = now or _now()
    attempts = recorded.attempts if recorded is not None else []
    latest_rows = store.latest(tests=discovered.params.tests) if discovered.gpu_nodes else []
    fleet_coverage, detail = report.from_inventory(store, discovered, now)  # what every view of the fleet counts
    summary = report.run_summary(discovered, planned, attempts, latest_rows, now=now, fleet_coverage=fleet_coverage,
                                 detail=detail)
    summary = summary.model_copy(update={"spool": spool_state(discovered.settings, now),
                                         "why_empty": planned.why_empty, "waited": waited,
                                         "reservation_breaker": reservation_breaker})
    log.info("%s", report.render(summary))
    if dag_id and run_id:
        path = ctrf.write_run_report([a.to_dict() for a in attempts], summary, settings=discovered.settings,
                                     dag_id=dag_id, run_id=run_id, now=now,
                                     reports_dir=storage.reports_dir(discovered.settings))
        summary = summary.model_copy(update={"ctrf_path": str(path) if path else None})
    return summary


def spool_state(settings: Settings, now: dt.datetime) -> SpoolState:
    """What waits in the attempt spool (never raises: an unreadable spool is said to be one)."""
    status = storage.spool(settings).status()
    return SpoolState(location=status.location, waiting=status.waiting, rejected=status.rejected,
                      oldest_at=status.oldest_at, error=status.error, line=status.describe(now))


def unrecorded(discovered: Discovered, now: dt.datetime | None = None) -> str:
    """Why summarize stops when record failed, with what waits in the spool."""
    line = spool_state(discovered.settings, now or _now()).line
    return "the attempts of this run could not be recorded: see the record task" + (f"; {line}" if line else "")


def verdict(summary: RunSummary) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    from cluster_doctor.reports import summary as report

    problem = report.verdict(summary)
    notices = report.notices(summary)
    if problem:
        raise AirflowFailException("; ".join([problem, *notices]))
    for notice in notices:
        log.warning("%s", notice)
    if summary.why_empty:
        log.info("%s", summary.why_empty)
    log.info("no node failed a check in this run")


def waited_line(run_type: str | None, run_after: dt.datetime | None, started: dt.datetime | None) -> str | None:
    """What the run waited for before it started (its first task logs it, its note says it): a scheduled
    or manual run that started well after it was due waited for a free run slot (``max_active_runs=1``:
    another run of this DAG was still going) or for the scheduler. Backfill runs are due in the past."""
    if run_type not in ("scheduled", "manual") or run_after is None or started is None:
        return None
    waited = (started - run_after).total_seconds()
    if not WAIT_NOTE_S <= waited <= 24 * 3600:
        return None
    return (f"this run started {age(run_after, started)} after it was due ({run_after.isoformat(timespec='minutes')}): "
            "it waited for the run before it to end (max_active_runs=1) or for the scheduler")


# ---------------------------------------------------------------------------- 8. quarantine (opt-in)
def quarantine(discovered: Discovered, store: Any, core_v1: Any, *, run_id: str | None = None,
               now: dt.datetime | None = None) -> QuarantineReport:
    """Label (and optionally taint) nodes with confirmed failures, release recovered ones, name repeat
    offenders (settings repeat_offender_*); off by default. An open circuit breaker fails the
    task: a human decides."""
    from cluster_doctor.domain.transitions import RepeatPolicy
    from cluster_doctor.kube import quarantine as q

    settings = discovered.settings
    report = q.quarantine_failing(core_v1, store.connect, q.QuarantinePolicy.from_mapping(settings.quarantine),
                         tests=discovered.params.tests, gpu_resource=settings.gpu_resource,
                         node_selector=settings.node_selector, now=now, repeat=RepeatPolicy.of(settings),
                         run_id=run_id, slow_window=dt.timedelta(hours=settings.slow_signal_window_hours))
    log.info("%s", report.describe())
    if report.breaker_open:
        from airflow.sdk.exceptions import AirflowFailException

        raise AirflowFailException(f"quarantine circuit breaker open: {report.breaker_reason}")
    return report
