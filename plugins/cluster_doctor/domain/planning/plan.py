"""The one planner of a run: which nodes' bundles to validate next and, when none, why (pure Python).

The DAG's ``prioritize`` task, ``cluster-doctor plan`` and the simulator's hourly run all call ``plan``
with what they know: the discovered nodes, each pair's latest state (suspect pairs already marked as
failing), the suspect nodes (a signal says they may be broken: their whole bundle goes first), the
reserved nodes, the tests blocked by a volume problem, the settings and the run's params.

Bundles: a free window is rare on a busy cluster, so a chosen node runs *every* suite due on it
(``due.why_due``) in the same run, one after another (``steps.bundle_order``: ``gpu_health`` first, a node
failing it skips the rest), and pairs that would fall due within ``bundle_ahead`` join them, so a node's
suites fall due together and one window serves them all from then on. Nodes are ordered by their most
urgent pair (``suspects`` first: a signal says they may be broken, and a free suspect can take a user job
any moment; then the reserved nodes, which stand idle until validated; then all others); a suspect node
runs every enabled suite whatever its staleness. Pairs: never-executed first, then the oldest executed
result first; ties break on the node's most recent executed result of any enabled test (a node never
validated at all goes before one that only misses a suite, so fleet coverage grows fastest), then on the
oldest last attempt of any status (a node whose pod just timed out goes after untried ones), then the node
name (natural order), then the test's position in the enabled list: deterministic. At most ``max_pairs``
pairs per run, the last node's bundle cut to its most urgent pairs. ``bundle=False``: at most one pair per
node per run.

After the due bundles come the health sweep's: free nodes with no due pair whose last health check is
older than ``sweep_interval_hours`` (``due.sweep_due``) run the short health suites (``SWEEP_SUITES``), the
oldest check first, within the same ``max_pairs`` — except the nodes whose peer test is due (with
``peer_tests``): the peer tests, planned next from the free nodes the plan leaves, are due validations
too, and the sweep never takes a due validation's node.

Claims are the caller's: the DAG passes a ``Claimer`` that claims the candidate nodes in the results
DB; the others pass none and every candidate is theirs.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

import hostlist

from cluster_doctor.domain import peers
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.payloads import Discovered, GpuNode, HeldPair, Latest, Plan, PlannedPair
from cluster_doctor.domain.planning import due
from cluster_doctor.domain.planning.due import AHEAD, SUSPECT, SWEEP, PairState, Policy
from cluster_doctor.domain.planning.params import RunParams
from cluster_doctor.domain.planning.steps import HEALTH_FIRST, bundle_order
from cluster_doctor_suites.baselines import parse_expect  # the pods' own grammar of CLUSTER_DOCTOR_EXPECT

IB_HEALTH = "ib_health"  # swept only where the node has HCAs
# The short health suites a free node runs when its last check is older than the sweep interval: seconds
# long, no load. ib_health only where it is enabled (`tests`) and the node has HCAs (``PlanInput.sweep_suites``).
SWEEP_SUITES = (HEALTH_FIRST, IB_HEALTH)

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@dataclasses.dataclass(frozen=True)
class NodeBundle:
    """One node's candidate pairs of this run. ``urgent``: most urgent first (what a cut keeps); ``pairs``:
    the order they run in (``steps.bundle_order``). The DAG hands a chosen one on as ``payloads.Bundle``."""

    node_name: str
    urgent: tuple[PlannedPair, ...]
    order: tuple[str, ...]

    @property
    def pairs(self) -> list[PlannedPair]:
        rank = {t: i for i, t in enumerate(self.order)}
        return sorted(self.urgent, key=lambda p: rank[p.test_name])

    def cut(self, size: int) -> NodeBundle:
        """The ``size`` most urgent pairs (health kept when it is due: it gates the rest)."""
        if size >= len(self.urgent):
            return self
        keep = [p for p in self.urgent if p.test_name == HEALTH_FIRST and p.why != AHEAD][:size]
        keep += [p for p in self.urgent if p not in keep][:size - len(keep)]
        return dataclasses.replace(self, urgent=tuple(p for p in self.urgent if p in keep))


def _pair(node: GpuNode, test: str, why: str, state: PairState | None) -> PlannedPair:
    """A planned pair of ``node``: why, what the store knew of it, and the node's GPUs (its pod's request)."""
    return PlannedPair(node_name=node.name, test_name=test, why=why, last_status=state.status if state else None,
                       last_finished_at=state.finished_at if state else None,
                       last_attempt_at=state.last_attempt_at if state else None,
                       last_attempt_status=state.last_attempt_status if state else None,
                       gpu_count=node.gpu_count, gpu_model=node.gpu_model, node_gpus=node.node_gpus)


def bundles(
    free_nodes: Iterable[GpuNode],
    tests: Sequence[str],
    latest: Mapping[tuple[str, str], PairState],
    *,
    now: dt.datetime,
    policy: Policy = Policy(),
    first: Collection[str] = (),
    suspects: Collection[str] = (),
) -> list[NodeBundle]:
    """Every free node with a due pair, most urgent node first, with the pairs it would run (all of its
    due pairs and those due within ``bundle_ahead``; only its most urgent one without ``bundle``).
    ``suspects``: nodes a signal made suspect, each with every test, before all others; ``first``: nodes
    that go next (reserved nodes: they idle until validated)."""
    if now.tzinfo is None:
        raise ValueError("now must be time-zone aware")
    test_rank = {t: i for i, t in enumerate(dict.fromkeys(tests))}
    order = tuple(bundle_order(list(test_rank)))
    ahead = dataclasses.replace(policy, staleness=max(policy.staleness - policy.bundle_ahead, dt.timedelta(seconds=1)),
                                stale_before=None) if policy.bundle and policy.bundle_ahead else None
    first, suspects = set(first), set(suspects)
    found = []
    for node in {n.name: n for n in free_nodes}.values():  # de-duplicate, keep order
        rank = 0 if node.name in suspects else 1 if node.name in first else 2
        due_now, soon = _node_pairs(node, rank, test_rank, latest, now, policy, ahead)
        if not due_now:  # pairs due soon only ride along with a due one
            continue
        chosen = due_now + soon if policy.bundle or rank == 0 else due_now[:1]
        found.append((due_now[0][0], NodeBundle(node.name, tuple(p for _, p in chosen), order)))
    found.sort(key=lambda item: item[0])
    return [b for _, b in found]


def _node_pairs(gpu_node: GpuNode, rank: int, test_rank: Mapping[str, int],
                latest: Mapping[tuple[str, str], PairState], now: dt.datetime, policy: Policy,
                ahead: Policy | None) -> tuple[list, list]:
    """One node's due pairs and those due soon, each with its sort key, most urgent first. ``rank`` 0: a
    suspect, every test due."""
    node = gpu_node.name
    executed = [s.finished_at for t in test_rank if (s := latest.get((node, t))) and s.finished_at]
    node_validated_at = max(executed) if executed else _EPOCH
    node_key = hostlist.numeric_sort_key(node)
    now_due, soon = [], []
    for test, position in test_rank.items():
        state = latest.get((node, test))
        why = SUSPECT if rank == 0 else due.why_due(state, now, policy)
        if why is None and ahead is not None and due.why_due(state, now, ahead) is not None:
            why = AHEAD
        if why is None:
            continue
        executed_at = state.finished_at if state and state.finished_at else None
        attempted_at = state.last_attempt_at if state and state.last_attempt_at else None
        key = (
            rank,
            0 if executed_at is None else 1,
            executed_at or _EPOCH,
            node_validated_at,
            attempted_at or _EPOCH,  # never attempted sorts first among equals
            0 if attempted_at is None else 1,
            node_key,
            node,
            position,
        )
        (soon if why == AHEAD else now_due).append((key, _pair(gpu_node, test, why, state)))
    now_due.sort(key=lambda item: item[0])
    soon.sort(key=lambda item: item[0])
    return now_due, soon


def sweeps(
    nodes: Iterable[tuple[GpuNode, Sequence[str]]],
    latest: Mapping[tuple[str, str], PairState],
    *,
    now: dt.datetime,
    policy: Policy = Policy(),
) -> list[NodeBundle]:
    """The health sweep: of ``nodes`` (free nodes with no due pair, each with the health suites it may
    run), those with a suite whose last check is old enough (``due.sweep_due``), each a bundle of those suites
    (health first), the node with the oldest check first (then the node's name, naturally sorted)."""
    found = []
    for gpu_node, suites in nodes:
        node = gpu_node.name
        old = [(latest[(node, t)], t) for t in dict.fromkeys(suites)
               if due.sweep_due(latest.get((node, t)), now, policy)]
        if not old:
            continue
        pairs = tuple(_pair(gpu_node, t, SWEEP, s) for s, t in old)
        oldest = min(s.finished_at for s, _ in old)
        found.append(((oldest, hostlist.numeric_sort_key(node), node),
                      NodeBundle(node, pairs, tuple(bundle_order([t for _, t in old])))))
    found.sort(key=lambda item: item[0])
    return [b for _, b in found]


def take(found: Iterable[NodeBundle], max_pairs: int) -> list[NodeBundle]:
    """The first bundles holding at most ``max_pairs`` pairs, the last one cut to fit."""
    chosen: list[NodeBundle] = []
    room = max_pairs
    for bundle in found:
        if room <= 0:
            break
        bundle = bundle.cut(room)
        chosen.append(bundle)
        room -= len(bundle.urgent)
    return chosen


@dataclasses.dataclass(frozen=True)
class Claimed:
    """A claimer's answer: the candidate nodes this run may validate, and the pairs whose node another
    live run holds (deferred)."""

    granted: frozenset[str]
    held: tuple[HeldPair, ...] = ()


# Given every candidate bundle in priority order (possibly none: a retried run drops its old claims),
# which nodes the run got and which another run holds.
Claimer = Callable[[Sequence[NodeBundle]], Claimed]


@dataclasses.dataclass(frozen=True)
class PlanInput:
    """What a run plans from. ``ineligible``: (node, reason) of the GPU nodes that are not free;
    ``states``: the latest state of each (node, test) pair, suspect pairs marked; ``suspects``: nodes a
    signal made suspect, each with its evidence (every enabled suite of a free one is planned, before all
    other nodes); ``reserved``: nodes tainted for validation (planned next when free); ``blocked_tests``:
    tests whose pods could not mount their volume (``blocked_problem`` says why), planned for no node;
    ``without_hcas``: GPU models whose nodes have no HCAs (no ib_health in their health sweep);
    ``peer_due``: nodes whose peer test is due (``peer_due``), left to the peer tests, not swept."""

    settings: due.DueSettings
    run: RunParams
    free: Sequence[GpuNode]
    states: Mapping[tuple[str, str], PairState]
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
        return cls(settings=discovered.settings, run=RunParams.of(discovered.params), free=discovered.free,
                   states=pair_states(latest), ineligible=[(n.name, n.reason) for n in discovered.ineligible],
                   suspects=dict(suspects or {}), reserved=reserved, blocked_tests=discovered.volumes.blocked_tests,
                   blocked_problem=discovered.volumes.problem,
                   without_hcas=models_without_hcas(discovered.settings), peer_due=peer_due)

    @property
    def tests(self) -> list[str]:
        """The run's tests that can run (those blocked by a volume problem left out)."""
        return [t for t in self.run.tests if t not in self.blocked_tests]

    @property
    def blocked(self) -> list[str]:
        """The run's tests left out because their pods could not mount their volume."""
        return [t for t in self.run.tests if t in self.blocked_tests]

    def sweep_suites(self, node: GpuNode) -> list[str]:
        """The health suites ``node`` may run in the sweep: those of ``SWEEP_SUITES`` the run
        enables, ib_health only where the node's GPU model is not one without HCAs."""
        return [t for t in SWEEP_SUITES if t in self.tests
                and not (t == IB_HEALTH and node.gpu_model in self.without_hcas)]


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """``plan``'s answer: the payload the DAG hands on (pairs with their node's GPUs, deferred pairs, the
    reserved nodes planned, why it is empty), the chosen bundles it was made of (the due ones, then the
    health sweep's), and the tests it left out."""

    plan: Plan
    bundles: list[NodeBundle]
    blocked: list[str]

    @property
    def pairs(self) -> list[PlannedPair]:
        """The planned pairs, node by node, each node's in the order they run."""
        return [p for b in self.bundles for p in b.pairs]

    @property
    def sweeps(self) -> list[NodeBundle]:
        """The health sweep's bundles (after every due one)."""
        return [b for b in self.bundles if is_sweep(b)]

    @property
    def suspects(self) -> list[str]:
        """The suspect nodes planned (first)."""
        return [b.node_name for b in self.bundles if any(p.why == SUSPECT for p in b.urgent)]


def is_sweep(bundle: NodeBundle) -> bool:
    """Whether a chosen bundle is the health sweep's (its pairs all are)."""
    return all(p.why == SWEEP for p in bundle.urgent)


def peer_due(free: Iterable[str], history: Iterable[peers.PeerResult], settings: peers.Settings,
             now: dt.datetime) -> frozenset[str]:
    """The free nodes whose peer test is due by the recent peer-test rows ``history`` (none when
    ``peer_tests`` is off): the health sweep leaves them to the peer tests."""
    if not settings.peer_tests:
        return frozenset()
    verdicts = peers.triangulate(history)
    return frozenset(n for n in free if peers.why_due(verdicts.get(n), now, settings) is not None)


def pair_states(latest: Latest) -> dict[tuple[str, str], PairState]:
    """load_latest's rows as the prioritizer reads them."""
    return {(r.node_name, r.test_name): PairState(
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
    policy = due.policy(given.settings, run, bundle=given.bundle)
    found = bundles(list(free.values()), tests, given.states, now=now, first=first, policy=policy,
                    suspects=[n for n in given.suspects if n in free])
    taken = {b.node_name for b in found} | set(given.peer_due)
    swept = sweeps([(node, given.sweep_suites(node)) for name, node in free.items() if name not in taken],
                   given.states, now=now, policy=policy)
    candidates = found + swept  # the sweep after every due bundle: it never takes a due pair's place
    if claim is None:
        chosen, held = take(candidates, run.max_pairs), []
    else:
        claimed = claim(candidates)
        chosen = take([b for b in candidates if b.node_name in claimed.granted], run.max_pairs)
        held = list(claimed.held)
    planned = [p for b in chosen for p in b.pairs]
    chosen_nodes = {b.node_name for b in chosen}
    result = Plan(planned_at=now, dry_run=run.dry_run, pairs=planned, held_by_other_runs=held,
                  reserved=[n for n in first if n in chosen_nodes],
                  why_empty=None if planned else _why_empty(given, found, held))
    return RunPlan(plan=result, bundles=chosen, blocked=given.blocked)


def _why_empty(given: PlanInput, found: Sequence[NodeBundle], held: Sequence[HeldPair]) -> str:
    """Why a run planned nothing (``why_empty``): from the nodes, the pairs' states, the due nodes
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
    return why_empty(
        params=given.run, gpu_nodes=len(free) + len(given.ineligible), free=len(free), not_free=not_free,
        tests=tests, oldest_fresh=min(fresh) if fresh else None, due_nodes=len(found),
        held=[HeldBy(run_id, len(hs), max(h.expires_at for h in hs)) for run_id, hs in holders.items()],
        blocked=given.blocked_problem)


def models_without_hcas(settings: Settings) -> frozenset[str]:
    """The GPU models whose node pools say they have no HCAs (``hcas=0`` in ``node_pool_expectations``):
    the health sweep runs no ib_health there."""
    return frozenset(model for model, text in settings.node_pool_expectations.items()
                     if parse_expect(text).get("hcas") == 0)


@dataclasses.dataclass(frozen=True)
class HeldBy:
    run_id: str
    nodes: int
    until: dt.datetime


def why_empty(
    *,
    params: RunParams,
    gpu_nodes: int,
    free: int,
    not_free: Mapping[str, int],
    tests: list[str],
    oldest_fresh: dt.datetime | None,
    due_nodes: int,
    held: list[HeldBy],
    blocked: str | None = None,
) -> str:
    """One line on why a run planned nothing, for its log, its verdict and its note: no GPU node in the
    range; none free (and why); every pair fresh (since when); every due node claimed by another run."""
    scope = f" in node_range {params.node_range.expression}" if params.node_range.expression else ""
    if params.max_pairs == 0:
        return "nothing planned: max_pairs is 0"
    if not tests:
        return f"nothing planned: no test can run ({blocked or 'every enabled test is blocked'})"
    if gpu_nodes == 0:
        return f"nothing planned: no GPU node{scope}"
    if free == 0:
        why = ", ".join(f"{n} {reason}" for reason, n in sorted(not_free.items())) or "none"
        return f"nothing planned: none of the {gpu_nodes} GPU node(s){scope} is free ({why})"
    if due_nodes == 0:
        rule = (f"older than stale_before {params.stale_before.isoformat()}" if params.stale_before
                else "due")
        since = f" since {oldest_fresh.isoformat(timespec='minutes')}" if oldest_fresh else ""
        return (f"nothing planned: all pairs of the {free} free node(s){scope} are fresh{since} "
                f"(none {rule}; tests {', '.join(tests)})")
    holders = "; ".join(f"{h.nodes} by run {h.run_id} until {h.until.isoformat(timespec='minutes')}"
                        for h in sorted(held, key=lambda h: (-h.nodes, h.run_id)))
    return (f"nothing planned: all {due_nodes} free node(s) with a due pair{scope} are claimed by other "
            f"live runs ({holders or 'their claims ended meanwhile'})")
