"""prioritize: plan this run's bundles and claim their nodes (step 3)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Collection, Mapping, Sequence

from cluster_doctor.airflow.tasks import signals
from cluster_doctor.airflow.tasks._common import _now, log
from cluster_doctor.domain.planning import due
from cluster_doctor.domain.planning import plan as planner
from cluster_doctor.domain.planning.params import RunParams
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.errors import one_line
from cluster_doctor.domain.payloads import Discovered, HeldPair, Latest, Plan
from cluster_doctor.reports.text import age, table
from cluster_doctor.store import claims
from cluster_doctor.store import fail_slow as stored_fail_slow
from cluster_doctor.store import peers as stored_peers
from cluster_doctor.store.history import ResultStore


def prioritize(discovered: Discovered, latest: Latest, now: dt.datetime | None = None,
               *, store: ResultStore | None = None, dag_id: str | None = None, run_id: str | None = None,
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
        suspects = {node: s.describe() for node, s in signals.current_suspects(
            store, discovered.settings.tests, [n.name for n in discovered.free], now).items()}
    given = planner.PlanInput.of(discovered, latest, reserved, suspects,
                                  peer_due=_peer_due(store, discovered, now) if store is not None else ())
    claim = _claimer(store, discovered.settings, given.run, dag_id, run_id, run_ended) if store is not None else None
    plan = planner.plan(given, now=now, claim=claim).plan
    if store is not None:
        plan = _with_probes(plan, store, discovered.settings, now)
    _log_plan(plan, given, now)
    return plan


def _with_probes(plan: Plan, store: ResultStore, settings: Settings, now: dt.datetime) -> Plan:
    """The plan's gpu_health pairs whose node's speed probe is due (``domain.fail_slow.probe_due``: loaded
    since its last probe and ``slow_probe_min_interval_hours`` past it, ``slow_probe_max_age_hours`` old,
    never probed, or suspect of being slow and ``slow_confirm_spacing_hours`` past it) carry the probe's
    seconds; the others do not probe. Best effort: a store that cannot answer leaves this run without
    probes, never without its checks."""
    seconds = settings.slow_probe_seconds if settings.suite_device == "cuda" else min(settings.slow_probe_seconds, 0.2)
    health = [p for p in plan.pairs if p.test_name == stored_fail_slow.PROBE_TEST]
    if not seconds or not health:
        return plan
    try:
        due = stored_fail_slow.due_probes(
            store.connect, [p.node_name for p in health], now=now,
            min_interval=dt.timedelta(hours=settings.slow_probe_min_interval_hours),
            max_age=dt.timedelta(hours=settings.slow_probe_max_age_hours),
            window=dt.timedelta(hours=settings.slow_signal_window_hours),
            spacing=dt.timedelta(hours=settings.slow_confirm_spacing_hours))
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


def _peer_due(store: ResultStore, discovered: Discovered, now: dt.datetime) -> frozenset[str]:
    """The free nodes whose peer test is due (setting peer_tests), which the health sweep leaves to the peer
    tests; none when peer tests are off."""
    if not discovered.settings.peer_tests:
        return frozenset()
    free = [n.name for n in discovered.free]
    with store.connection() as conn:
        history = stored_peers.peer_results(conn, since=stored_peers.evidence_since(discovered.settings, now),
                                            nodes=free)
    return planner.peer_due(free, history, discovered.settings, now)


def _claimer(store: ResultStore, settings: Settings, run: RunParams, dag_id: str | None, run_id: str | None,
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
