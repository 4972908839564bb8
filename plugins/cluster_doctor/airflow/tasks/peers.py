"""The peers task group of continuous_validation: peer tests between two free nodes.

* ``plan`` (after ship_suites, beside the validate group): with setting ``peer_tests`` on, the free
  nodes no bundle of this run uses are matched (``domain.peers.match_peers``, on the recent peer rows
  of ``store.peers``), and the matched nodes are claimed for the run like prioritize claims its nodes
  (``store.claims``, beside the bundles' claims: a node another live run holds is left to it, and so
  is its match); the suite code is the one ship_suites shipped (shipped here when it shipped none).
  One ``PeerTest`` per match: what ``test`` is mapped over. Off, or nothing matched: none.
* ``test`` (one mapped instance per match, two pool slots: one per node): the launcher
  (``kube.peers``) runs both pods to their end; the two attempts, each naming its peer, go to XCom
  (``attempts``, for record) and straight to the results DB.
* ``finish`` (whatever the tests did): the run's claims on the matched nodes go.

The DAG file only wires these; they take and return the typed payloads.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from cluster_doctor.domain import results
from cluster_doctor.domain.attempts import UNREPORTED, Attempt, InvalidAttempt
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.errors import one_line
from cluster_doctor.domain.payloads import Discovered, PeerTest, PeerTests, Plan, RunConfig
from cluster_doctor.domain.peers import PEER_SUITE, PeerCandidate, PeerMatch, match_peers
from cluster_doctor.domain.status import FAILING, Status
from cluster_doctor.kube import peers as launcher
from cluster_doctor.kube import suite_code
from cluster_doctor.kube.api import CoreV1
from cluster_doctor.store import claims
from cluster_doctor.store import peers as stored
from cluster_doctor.store.history import ResultStore

log = logging.getLogger(__name__)

TASK_ID = "peers.test"  # the DAG's peer-test task: its pods say so (the reaper's owner)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


# ---------------------------------------------------------------------------- plan
def plan(discovered: Discovered, planned: Plan | None, store: ResultStore, core_v1: CoreV1, *, dag_id: str, run_id: str,
         run_ended: Callable[[str, str], bool] | None = None, now: dt.datetime | None = None,
         shipped: RunConfig | None = None) -> PeerTests:
    """``_plan``, logged; a problem is logged and plans no peer test: peer tests are opt-in, so planning
    them never stops the run's own validations. ``shipped``: the suite code ship_suites already shipped
    for the bundles (None when it shipped nothing: shipped here then)."""
    try:
        found = _plan(discovered, planned, store, core_v1, dag_id=dag_id, run_id=run_id, run_ended=run_ended,
                      now=now, shipped=shipped)
    except Exception as exc:  # noqa: BLE001
        log.exception("no peer test in this run: planning them failed: %s", one_line(exc))
        return PeerTests(why_empty=f"planning peer tests failed: {one_line(exc)}")
    if found.why_empty:
        log.info("%s", found.why_empty)
    else:
        log.info("%d peer test(s): %s", len(found.tests), "; ".join(t.label for t in found.tests))
    return found


def _plan(discovered: Discovered, planned: Plan | None, store: ResultStore, core_v1: CoreV1, *, dag_id: str,
          run_id: str, run_ended: Callable[[str, str], bool] | None = None, now: dt.datetime | None = None,
          shipped: RunConfig | None = None) -> PeerTests:
    """This run's peer tests: off (setting ``peer_tests``), a dry run or nothing matched gives none, with
    why. The nodes of this run's bundles are not used; the peers' nodes are claimed beside the bundles'
    (``keep_others``), so it may run while validate steps already release theirs."""
    now = now or _now()
    settings = discovered.settings
    if not settings.peer_tests:
        return PeerTests(why_empty="peer tests are off (setting peer_tests)")
    if planned is None:
        return PeerTests(why_empty="planning failed: no peer test")
    busy = set(planned.nodes())
    free = [n for n in discovered.free if n.name not in busy]
    labels = launcher.topology_labels(core_v1, settings, [n.name for n in free])
    candidates = [PeerCandidate.of(n.name, n.gpu_model, labels.get(n.name), settings.peer_topology_labels)
                  for n in free]
    with store.connection() as conn:
        history = stored.peer_results(conn, since=stored.evidence_since(settings, now), nodes=[n.name for n in free])
    matches = match_peers(candidates, history, settings, now)
    if not matches:
        return PeerTests(why_empty=f"no peer test: {len(free)} free node(s) outside this run's bundles, "
                                   "none due with a partner of its GPU model")
    for m in matches:
        log.info("peer test %s ↔ %s (%s): %s", m.server, m.client, m.model, m.reason)
    if planned.dry_run:
        return PeerTests(why_empty=f"dry run: {len(matches)} peer test(s) would run, no pod")
    matches = _claimed(matches, settings, store, dag_id=dag_id, run_id=run_id, run_ended=run_ended)
    if not matches:
        return PeerTests(why_empty="no peer test: the matched nodes are held by another live run")
    run_config = shipped
    if run_config is None:
        code = suite_code.ship(core_v1, settings)
        run_config = RunConfig(settings=settings, configmap=code.configmap, suite_version=code.version,
                               suite_files=list(code.files))
    gpus = {n.name: (n.gpu_count, n.gpu_model, n.node_gpus) for n in free}
    return PeerTests(tests=[PeerTest(match=m, gpus={n: gpus[n] for n in m.nodes}, planned_at=now,
                                     run_config=run_config, label=f"{m.server} ↔ {m.client}") for m in matches])


def _claimed(matches: list[PeerMatch], settings: Settings, store: ResultStore, *, dag_id: str, run_id: str,
             run_ended: Callable[[str, str], bool] | None) -> list[PeerMatch]:
    """The matches whose two nodes this run could claim; a match with one node held elsewhere gives its
    other node back."""
    ttl = claims.ttl_s(settings, PEER_SUITE) + launcher.PEER_GRACE_S
    candidates = [(node, PEER_SUITE, ttl, 1) for m in matches for node in m.nodes]
    outcome = claims.claim(store.connect, candidates, dag_id=dag_id, run_id=run_id, limit=len(candidates),
                           run_ended=run_ended, keep_others=True)
    granted = {c.node_name for c in outcome.granted}
    kept = [m for m in matches if set(m.nodes) <= granted]
    orphans = [n for m in matches if m not in kept for n in m.nodes if n in granted]
    for h in outcome.held:
        log.warning("peer test without %s: held by run %s", h.node_name, h.holder.run_id)
    if orphans:
        claims.release(store.connect, dag_id=dag_id, run_id=run_id, nodes=orphans)
    return kept


# ---------------------------------------------------------------------------- test
def run_peer_test(peer_test: PeerTest, core_v1: CoreV1, store: ResultStore | None, *, dag_id: str,
                  run_id: str, map_index: int, try_number: int, logger: Any = None,
                  task_id: str = TASK_ID) -> list[Attempt]:
    """Run one peer test to its end (``kube.peers.PeerLauncher``); both sides' attempts, each naming its
    peer. Written to the results DB here (best effort: the record task writes them from XCom too). The pods
    carry this try's identity, so the next run's reaper deletes one whose deletion failed."""
    m, config = peer_test.match, peer_test.run_config
    settings = config.settings
    server, client = launcher.sides(m.server, m.client, peer_test.gpus)
    waited = (_now() - peer_test.planned_at).total_seconds()
    if waited > settings.max_queue_s:
        reason = (f"the decision is {waited:.0f} s old, over the max queue time of {settings.max_queue_s} s; "
                  "no pod created")
        outcomes = [launcher.SideResult(side, results.PodOutcome(Status.SKIPPED, reason)) for side in (server, client)]
    else:
        run = launcher.PeerLauncher(core_v1, settings, server, client, run_id=run_id, configmap=config.configmap,
                                    suite_version=config.suite_version, suite_files=config.suite_files,
                                    logger=logger, owner=launcher.owner_labels(
                                        dag_id=dag_id, task_id=task_id, map_index=map_index,
                                        try_number=try_number)).run()
        outcomes = run.sides
    attempts = [results.to_attempt(r.outcome, node_name=r.side.node_name, test_name=PEER_SUITE,
                                   gpu_count=r.side.gpu_count, gpu_model=r.side.gpu_model,
                                   suite_version=config.suite_version, pod_name=r.pod_name, dag_id=dag_id,
                                   run_id=run_id, map_index=map_index, try_number=try_number, peer=r.side.peer,
                                   now=_now())
                for r in outcomes]
    if store is not None:
        try:
            store.record(attempts)
        except Exception as exc:  # noqa: BLE001 - the record task writes them from XCom, with retries
            log.warning("results DB write deferred to the record task: %s", one_line(exc))
    return attempts


def conclude(attempts: Sequence[Attempt]) -> str:
    """The task's state from both sides: both pass → success (the line returned); a side failed or
    errored → failed, its checks at the end of the log; else (timeout, preempted, skipped) → skipped."""
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    line = "; ".join(f"{a.node_name} (peer {a.peer}): {str(a.status).upper()}"
                     + (f" — {a.reason}" if a.reason else "") for a in attempts)
    statuses = {a.status for a in attempts}
    if statuses == {Status.PASS}:
        log.info("%s", line)
        return line
    if statuses & set(FAILING):
        for a in attempts:
            for check in results.failing_checks({"checks": a.checks}):
                log.error("  %s: %s", a.node_name, check)
        line += ": both nodes suspect, neither blamed, until a third node was tried with each"
        log.error("%s", line)
        raise AirflowFailException(line)
    log.warning("%s", line)
    raise AirflowSkipException(line)


# ---------------------------------------------------------------------------- finish, record
def finish(planned: PeerTests | None, store: ResultStore, *, dag_id: str, run_id: str) -> str:
    """The run is done with the matched nodes: their claims go (best effort: a claim expires)."""
    nodes = planned.nodes() if planned else []
    if not nodes:
        return "no peer test"
    try:
        claims.release(store.connect, dag_id=dag_id, run_id=run_id, nodes=nodes)
    except Exception as exc:  # noqa: BLE001
        log.warning("could not release this run's claims on %s (%s); they expire on their own", ", ".join(nodes),
                    one_line(exc, 300))
    return f"released {', '.join(nodes)}"


def reported(pulled: Any, planned: PeerTests | None, *, dag_id: str, run_id: str,
             now: dt.datetime | None = None) -> list[dict[str, Any]]:
    """The peer tests' attempts for record: what the ``test`` instances pushed (a list per instance),
    and for a planned side that never reported, a ``skipped`` row naming its peer (UNREPORTED)."""
    out: list[dict[str, Any]] = []
    for item in _flat(pulled):
        if isinstance(item, Mapping):
            out.append(dict(item))
    seen = set()
    for item in out:
        try:
            a = Attempt.from_dict(item)
        except InvalidAttempt:
            continue
        seen.add(a.node_name)
    now = now or _now()
    for i, t in enumerate(planned.tests if planned else []):
        for node in t.match.nodes:
            if node not in seen:
                count, model = t.gpus.get(node, (None, None))
                peer = t.match.client if node == t.match.server else t.match.server
                out.append(Attempt(node_name=node, test_name=PEER_SUITE, status=Status.SKIPPED, finished_at=now,
                                   reason=UNREPORTED, gpu_model=model, gpu_count=count, dag_id=dag_id,
                                   run_id=run_id, map_index=i, try_number=0, peer=peer).to_dict())
    return out


def _flat(value: Any) -> Iterable[Any]:
    if value is None:
        return
    if isinstance(value, Mapping):
        yield value
        return
    for item in value:
        yield from _flat(item)
