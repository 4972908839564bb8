"""The one planner of a run: which nodes' bundles to validate next and, when none, why (pure Python).

The DAG's ``prioritize`` task, ``cluster-doctor plan`` and the simulator's hourly run all call ``plan``
with what they know: the discovered nodes, each pair's latest state (suspect pairs already marked as
failing), the suspect nodes (a signal says they may be broken: their whole bundle goes first), the
reserved nodes, the tests blocked by a volume problem, the settings and the run's params. After the due
bundles come the health sweep's (issue 28 §1): free nodes with no due pair whose last health check is
older than ``sweep_interval_hours`` run the short health suites, within the same ``max_pairs`` — except
the nodes whose peer test is due (with ``peer_tests``): the peer tests, planned next from the free nodes
the plan leaves, are due validations too, and the sweep never takes a due validation's node.
Claims are the caller's: the DAG passes a ``Claimer`` that claims the candidate nodes in the results
DB; the others pass none and every candidate is theirs.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

from cluster_doctor.domain import peers, planning, priority
from cluster_doctor.domain.payloads import Discovered, GpuNode, HeldPair, Latest, Plan, PlannedPair
from cluster_doctor.domain.planning import RunParams

IB_HEALTH = "ib_health"  # swept only where the node has HCAs


@dataclasses.dataclass(frozen=True)
class Claimed:
    """A claimer's answer: the candidate nodes this run may validate, and the pairs whose node another
    live run holds (deferred)."""

    granted: frozenset[str]
    held: tuple[HeldPair, ...] = ()


# Given every candidate bundle in priority order (possibly none: a retried run drops its old claims),
# which nodes the run got and which another run holds.
Claimer = Callable[[Sequence[priority.Bundle]], Claimed]


@dataclasses.dataclass(frozen=True)
class PlanInput:
    """What a run plans from. ``ineligible``: (node, reason) of the GPU nodes that are not free;
    ``states``: the latest state of each (node, test) pair, suspect pairs marked; ``suspects``: nodes a
    signal made suspect, each with its evidence (every enabled suite of a free one is planned, before all
    other nodes); ``reserved``: nodes tainted for validation (planned next when free); ``blocked_tests``:
    tests whose pods could not mount their volume (``blocked_problem`` says why), planned for no node;
    ``without_hcas``: GPU models whose nodes have no HCAs (no ib_health in their health sweep);
    ``peer_due``: nodes whose peer test is due (``peer_due``), left to the peer tests, not swept."""

    settings: planning.DueSettings
    run: RunParams
    free: Sequence[GpuNode]
    states: Mapping[tuple[str, str], priority.PairState]
    ineligible: Sequence[tuple[str, str]] = ()
    suspects: Mapping[str, str] = dataclasses.field(default_factory=dict)
    reserved: Collection[str] = ()
    blocked_tests: Collection[str] = ()
    blocked_problem: str | None = None
    without_hcas: Collection[str] = ()
    peer_due: Collection[str] = ()
    bundle: bool = True  # False: one suite per node per run (the simulator's --no-bundle)

    @classmethod
    def of(cls, discovered: Discovered, latest: Latest, reserved: Collection[str] = (),
           suspects: Mapping[str, str] | None = None, peer_due: Collection[str] = ()) -> PlanInput:
        """The DAG's input: what discover found (its settings, params, nodes and volume check) and the
        states load_latest read."""
        return cls(settings=discovered.settings, run=discovered.params.run_params(), free=discovered.free,
                   states=pair_states(latest), ineligible=[(n.name, n.reason) for n in discovered.ineligible],
                   suspects=dict(suspects or {}), reserved=reserved, blocked_tests=discovered.volumes.blocked_tests,
                   blocked_problem=discovered.volumes.problem,
                   without_hcas=planning.models_without_hcas(discovered.settings), peer_due=peer_due)

    @property
    def tests(self) -> list[str]:
        """The run's tests that can run (those blocked by a volume problem left out)."""
        return [t for t in self.run.tests if t not in self.blocked_tests]

    @property
    def blocked(self) -> list[str]:
        """The run's tests left out because their pods could not mount their volume."""
        return [t for t in self.run.tests if t in self.blocked_tests]

    def sweep_suites(self, node: GpuNode) -> list[str]:
        """The health suites ``node`` may run in the sweep: those of ``priority.SWEEP_SUITES`` the run
        enables, ib_health only where the node's GPU model is not one without HCAs."""
        return [t for t in priority.SWEEP_SUITES if t in self.tests
                and not (t == IB_HEALTH and node.gpu_model in self.without_hcas)]


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """``plan``'s answer: the payload the DAG hands on (pairs with their node's GPUs, deferred pairs, the
    reserved nodes planned, why it is empty), the chosen bundles it was made of (the due ones, then the
    health sweep's), and the tests it left out."""

    plan: Plan
    bundles: list[priority.Bundle]
    blocked: list[str]

    @property
    def pairs(self) -> list[priority.PlannedPair]:
        """The planned pairs, node by node, each node's in the order they run."""
        return [p for b in self.bundles for p in b.pairs]

    @property
    def sweeps(self) -> list[priority.Bundle]:
        """The health sweep's bundles (after every due one)."""
        return [b for b in self.bundles if is_sweep(b)]

    @property
    def suspects(self) -> list[str]:
        """The suspect nodes planned (first)."""
        return [b.node_name for b in self.bundles if any(p.why == priority.SUSPECT for p in b.urgent)]


def is_sweep(bundle: priority.Bundle) -> bool:
    """Whether a chosen bundle is the health sweep's (its pairs all are)."""
    return all(p.why == priority.SWEEP for p in bundle.urgent)


def peer_due(free: Iterable[str], history: Iterable[peers.PeerResult], settings: peers.Settings,
             now: dt.datetime) -> frozenset[str]:
    """The free nodes whose peer test is due by the recent peer-test rows ``history`` (none when
    ``peer_tests`` is off): the health sweep leaves them to the peer tests."""
    if not settings.peer_tests:
        return frozenset()
    verdicts = peers.triangulate(history)
    return frozenset(n for n in free if peers.why_due(verdicts.get(n), now, settings) is not None)


def pair_states(latest: Latest) -> dict[tuple[str, str], priority.PairState]:
    """load_latest's rows as the prioritizer reads them."""
    return {(r.node_name, r.test_name): priority.PairState(
        status=r.status, finished_at=r.finished_at, last_attempt_at=r.last_attempt_at,
        last_attempt_status=r.last_attempt_status) for r in latest.rows}


def plan(given: PlanInput, *, now: dt.datetime, claim: Claimer | None = None) -> RunPlan:
    """This run's bundles: every free node with a due pair, most urgent first (suspect nodes with every
    suite, then reserved nodes, before all), each with all its due suites and those due within
    ``bundle_ahead_hours``; then the health sweep of the free nodes with no due pair; the nodes ``claim``
    grants (all without one), at most ``max_pairs`` pairs, the last bundle cut to fit."""
    run = given.run
    free = {n.name: n for n in given.free}
    tests = given.tests
    first = [n for n in given.reserved if n in free]
    policy = planning.policy(given.settings, run, bundle=given.bundle)
    found = priority.bundles(list(free), tests, given.states, now=now, first=first, policy=policy,
                             suspects=[n for n in given.suspects if n in free])
    taken = {b.node_name for b in found} | set(given.peer_due)
    swept = priority.sweeps({name: given.sweep_suites(node) for name, node in free.items() if name not in taken},
                            given.states, now=now, policy=policy)
    candidates = found + swept  # the sweep after every due bundle: it never takes a due pair's place
    if claim is None:
        chosen, held = priority.take(candidates, run.max_pairs), []
    else:
        claimed = claim(candidates)
        chosen = priority.take([b for b in candidates if b.node_name in claimed.granted], run.max_pairs)
        held = list(claimed.held)
    planned = [PlannedPair(node_name=p.node_name, test_name=p.test_name, why=p.why, last_status=p.last_status,
                           last_finished_at=p.last_finished_at, last_attempt_at=p.last_attempt_at,
                           last_attempt_status=p.last_attempt_status, gpu_count=free[p.node_name].gpu_count,
                           gpu_model=free[p.node_name].gpu_model, node_gpus=free[p.node_name].node_gpus)
               for b in chosen for p in b.pairs]
    chosen_nodes = {b.node_name for b in chosen}
    result = Plan(planned_at=now, dry_run=run.dry_run, pairs=planned, held_by_other_runs=held,
                  reserved=[n for n in first if n in chosen_nodes],
                  why_empty=None if planned else why_empty(given, found, held))
    return RunPlan(plan=result, bundles=chosen, blocked=given.blocked)


def why_empty(given: PlanInput, found: Sequence[priority.Bundle], held: Sequence[HeldPair]) -> str:
    """Why a run planned nothing (``planning.why_empty``): from the nodes, the pairs' states, the due nodes
    found and those another run holds."""
    not_free: dict[str, int] = {}
    for _, reason in given.ineligible:
        not_free[reason] = not_free.get(reason, 0) + 1
    free = list(dict.fromkeys(n.name for n in given.free))
    tests = given.tests
    fresh = [s.finished_at for node in free for test in tests
             if (s := given.states.get((node, test))) is not None and s.finished_at is not None]
    holders: dict[str, list[HeldPair]] = {}
    for h in held:
        holders.setdefault(h.run_id, []).append(h)
    return planning.why_empty(
        params=given.run, gpu_nodes=len(free) + len(given.ineligible), free=len(free), not_free=not_free,
        tests=tests, oldest_fresh=min(fresh) if fresh else None, due_nodes=len(found),
        held=[planning.HeldBy(run_id, len(hs), max(h.expires_at for h in hs)) for run_id, hs in holders.items()],
        blocked=given.blocked_problem)
