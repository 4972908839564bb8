"""Which node-test pairs to validate now (seeds 000 and 001), pure Python.

A pair of a free node and an enabled test is due when
  * it has never executed (no pass/fail/error result), or
  * its last executed result is older than the staleness threshold (default 7 days), or
  * its last executed result failed or errored longer ago than the failed-retest interval
    (default 6 h; tells a flaky check from a bad node), or
  * its last executed result is older than an explicit ``stale_before`` (re-validation, backfill).
Only pass/fail/error make a pair fresh: a timeout, preemption or skip leaves it due.

Order: never-executed pairs first, then the oldest executed result first. Ties break on the node's
most recent executed result of any enabled test (a node never validated at all goes before a node
that only misses one suite, so fleet coverage grows fastest), then on the oldest last attempt of any
status (a node whose pod just timed out goes after untried ones), then the node name (natural order),
then the test's position in the enabled list: deterministic.

Bundles (issue 21): a free window is rare on a busy cluster, so a chosen node runs *every* suite due on
it in the same run, one after another (``gpu_health`` first: a node failing health skips the rest), and
pairs that would fall due within ``bundle_ahead`` join them, so a node's suites fall due together and
one window serves them all from then on. Nodes are ordered by their most urgent pair (``suspects``
first: a signal says they may be broken, and a free suspect can take a user job any moment; then the
``first`` nodes, the reserved ones, which stand idle until validated; then all others); a suspect node
runs every enabled suite whatever its staleness (its whole bundle). At most ``max_pairs`` pairs per run,
the last node's bundle cut to its most urgent pairs. ``bundle=False`` is the former rule, at most one
pair per node per run.

The health sweep (issue 28 §1): free nodes with no due pair run the short health suites
(``SWEEP_SUITES``) whose last executed result passed longer ago than ``sweep_interval`` (less
``SWEEP_SLACK``: runs are hourly, so a check done during one run is due again in the run nearest to the
interval), the oldest check first, after every due bundle (``sweeps``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Collection, Iterable, Mapping, Sequence

import hostlist

from cluster_doctor.domain.status import EXECUTED, Status

NEVER = "never executed"
STALE = "stale"
RETEST = "retest after failure"
OLDER_THAN_STALE_BEFORE = "older than stale_before"
AHEAD = "due soon, bundled"
SUSPECT = "suspect"  # a signal says the node may be broken: its whole bundle, first (issue 28 §2)
SWEEP = "health sweep"  # a free node's short health suites, its last check older than the sweep interval
# Runs first in every bundle: seconds long, and a node failing it is not worth the long suites.
HEALTH_FIRST = "gpu_health"
# The short health suites a free node runs when its last check is older than the sweep interval: seconds
# long, no load. ib_health only where it is enabled (`tests`) and the node has HCAs (run_plan decides).
SWEEP_SUITES = (HEALTH_FIRST, "ib_health")
# Runs are hourly and a sweep ends minutes into its run: a check younger than the interval by at most
# this much is due all the same, so a 1 h interval sweeps a free node in every run, not every other one.
SWEEP_SLACK = dt.timedelta(minutes=30)

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@dataclasses.dataclass(frozen=True)
class PairState:
    """What the store knows of one (node, test) pair: a row of ``validation_latest``."""

    status: str | None = None  # last executed status (pass|fail|error) or None
    finished_at: dt.datetime | None = None  # when that executed attempt finished
    last_attempt_at: dt.datetime | None = None  # last attempt of any status
    last_attempt_status: str | None = None

    def __post_init__(self) -> None:
        if self.status is not None and self.status not in EXECUTED:
            raise ValueError(f"PairState.status must be an executed status, got {self.status!r}")
        if (self.status is None) != (self.finished_at is None):
            raise ValueError("PairState.status and finished_at go together")


@dataclasses.dataclass(frozen=True)
class Policy:
    staleness: dt.timedelta = dt.timedelta(days=7)
    failed_retest: dt.timedelta = dt.timedelta(hours=6)  # zero disables
    max_pairs: int = 16
    stale_before: dt.datetime | None = None
    bundle: bool = True  # every due suite of a chosen node in one run (False: one pair per node)
    bundle_ahead: dt.timedelta = dt.timedelta(hours=48)  # pairs due within this long join a bundle
    sweep_interval: dt.timedelta = dt.timedelta(hours=1)  # a free node's health check this old is swept (0: off)

    def __post_init__(self) -> None:
        if self.bundle_ahead < dt.timedelta(0):
            raise ValueError("bundle_ahead must be >= 0")
        if self.sweep_interval < dt.timedelta(0):
            raise ValueError("sweep_interval must be >= 0")
        if self.staleness <= dt.timedelta(0):
            raise ValueError("staleness must be positive")
        if self.failed_retest < dt.timedelta(0):
            raise ValueError("failed_retest must be >= 0")
        if self.max_pairs < 0:
            raise ValueError("max_pairs must be >= 0")
        if self.stale_before is not None and self.stale_before.tzinfo is None:
            raise ValueError("stale_before must be time-zone aware")


@dataclasses.dataclass(frozen=True)
class PlannedPair:
    node_name: str
    test_name: str
    why: str  # one of NEVER, STALE, RETEST, OLDER_THAN_STALE_BEFORE, AHEAD, SUSPECT, SWEEP
    last_status: str | None
    last_finished_at: dt.datetime | None
    last_attempt_at: dt.datetime | None = None
    last_attempt_status: str | None = None

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        for key in ("last_finished_at", "last_attempt_at"):
            if out[key] is not None:
                out[key] = out[key].isoformat()
        return out


def why_due(state: PairState | None, now: dt.datetime, policy: Policy) -> str | None:
    """The reason the pair is due now, or None when it is fresh."""
    if state is None or state.status is None:
        return NEVER
    finished = state.finished_at
    if policy.stale_before is not None and finished < policy.stale_before:
        return OLDER_THAN_STALE_BEFORE
    if now - finished >= policy.staleness:
        return STALE
    if state.status != Status.PASS and policy.failed_retest > dt.timedelta(0) and now - finished >= policy.failed_retest:
        return RETEST
    return None


def bundle_order(tests: Sequence[str]) -> list[str]:
    """The order a node's suites run in, one after another: health first, then the given order."""
    tests = list(dict.fromkeys(tests))
    return ([HEALTH_FIRST] if HEALTH_FIRST in tests else []) + [t for t in tests if t != HEALTH_FIRST]


@dataclasses.dataclass(frozen=True)
class Bundle:
    """One node's pairs of this run. ``urgent``: most urgent first (what a cut keeps); ``pairs``: the
    order they run in (``bundle_order``)."""

    node_name: str
    urgent: tuple[PlannedPair, ...]
    order: tuple[str, ...]

    @property
    def pairs(self) -> list[PlannedPair]:
        rank = {t: i for i, t in enumerate(self.order)}
        return sorted(self.urgent, key=lambda p: rank[p.test_name])

    def cut(self, size: int) -> Bundle:
        """The ``size`` most urgent pairs (health kept when it is due: it gates the rest)."""
        if size >= len(self.urgent):
            return self
        keep = [p for p in self.urgent if p.test_name == HEALTH_FIRST and p.why != AHEAD][:size]
        keep += [p for p in self.urgent if p not in keep][:size - len(keep)]
        return dataclasses.replace(self, urgent=tuple(p for p in self.urgent if p in keep))


def bundles(
    free_nodes: Iterable[str],
    tests: Sequence[str],
    latest: Mapping[tuple[str, str], PairState],
    *,
    now: dt.datetime,
    policy: Policy = Policy(),
    first: Collection[str] = (),
    suspects: Collection[str] = (),
) -> list[Bundle]:
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
    for node in dict.fromkeys(free_nodes):  # de-duplicate, keep order
        rank = 0 if node in suspects else 1 if node in first else 2
        due, soon = _node_pairs(node, rank, test_rank, latest, now, policy, ahead)
        if not due:  # pairs due soon only ride along with a due one
            continue
        chosen = due + soon if policy.bundle or rank == 0 else due[:1]
        found.append((due[0][0], Bundle(node, tuple(p for _, p in chosen), order)))
    found.sort(key=lambda item: item[0])
    return [b for _, b in found]


def _node_pairs(node: str, rank: int, test_rank: Mapping[str, int], latest: Mapping[tuple[str, str], PairState],
                now: dt.datetime, policy: Policy, ahead: Policy | None) -> tuple[list, list]:
    """One node's due pairs and those due soon, each with its sort key, most urgent first. ``rank`` 0: a
    suspect, every test due."""
    executed = [s.finished_at for t in test_rank if (s := latest.get((node, t))) and s.finished_at]
    node_validated_at = max(executed) if executed else _EPOCH
    node_key = hostlist.numeric_sort_key(node)
    due, soon = [], []
    for test, position in test_rank.items():
        state = latest.get((node, test))
        why = SUSPECT if rank == 0 else why_due(state, now, policy)
        if why is None and ahead is not None and why_due(state, now, ahead) is not None:
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
        (soon if why == AHEAD else due).append((key, PlannedPair(
            node_name=node,
            test_name=test,
            why=why,
            last_status=state.status if state else None,
            last_finished_at=executed_at,
            last_attempt_at=attempted_at,
            last_attempt_status=state.last_attempt_status if state else None,
        )))
    due.sort(key=lambda item: item[0])
    soon.sort(key=lambda item: item[0])
    return due, soon


def sweep_due(state: PairState | None, now: dt.datetime, policy: Policy) -> bool:
    """Whether a health suite's last check is old enough to sweep: it passed (a failed or errored one is
    the retest rule's), at least ``sweep_interval`` less ``SWEEP_SLACK`` ago. Off with a zero interval."""
    if policy.sweep_interval <= dt.timedelta(0) or state is None or state.status != Status.PASS:
        return False
    return now - state.finished_at >= max(policy.sweep_interval - SWEEP_SLACK, dt.timedelta(0))


def sweeps(
    nodes: Mapping[str, Sequence[str]],
    latest: Mapping[tuple[str, str], PairState],
    *,
    now: dt.datetime,
    policy: Policy = Policy(),
) -> list[Bundle]:
    """The health sweep: of ``nodes`` (free nodes with no due pair, each with the health suites it may
    run), those with a suite whose last check is old enough (``sweep_due``), each a bundle of those suites
    (health first), the node with the oldest check first (then the node's name, naturally sorted)."""
    found = []
    for node, suites in nodes.items():
        old = [(latest[(node, t)], t) for t in dict.fromkeys(suites) if sweep_due(latest.get((node, t)), now, policy)]
        if not old:
            continue
        pairs = tuple(PlannedPair(node_name=node, test_name=t, why=SWEEP, last_status=s.status,
                                  last_finished_at=s.finished_at, last_attempt_at=s.last_attempt_at,
                                  last_attempt_status=s.last_attempt_status) for s, t in old)
        oldest = min(s.finished_at for s, _ in old)
        found.append(((oldest, hostlist.numeric_sort_key(node), node),
                      Bundle(node, pairs, tuple(bundle_order([t for _, t in old])))))
    found.sort(key=lambda item: item[0])
    return [b for _, b in found]


@dataclasses.dataclass(frozen=True)
class PoolWeights:
    """The Airflow ``priority_weight`` (absolute) of every task that takes a pool slot: a sweep step below
    every step of a due bundle, so sweeps use the pool after the bundles; within each, a node's later steps
    above other nodes' first ones (a node that is free now finishes first); a peer test as a bundle's first
    step."""

    validate: tuple[int, ...]
    sweep: tuple[int, ...]
    peer: int


def pool_weights(steps: Sequence[str], sweep_steps: Sequence[str]) -> PoolWeights:
    """The weights of the validate group's ``steps`` and the sweep group's ``sweep_steps``, in their order."""
    below = len(sweep_steps)
    return PoolWeights(validate=tuple(below + 1 + i for i in range(len(steps))),
                       sweep=tuple(1 + i for i in range(below)), peer=below + 1)


def take(found: Iterable[Bundle], max_pairs: int) -> list[Bundle]:
    """The first bundles holding at most ``max_pairs`` pairs, the last one cut to fit."""
    chosen: list[Bundle] = []
    room = max_pairs
    for bundle in found:
        if room <= 0:
            break
        bundle = bundle.cut(room)
        chosen.append(bundle)
        room -= len(bundle.urgent)
    return chosen


def plan(
    free_nodes: Iterable[str],
    tests: Sequence[str],
    latest: Mapping[tuple[str, str], PairState],
    *,
    now: dt.datetime,
    policy: Policy = Policy(),
    first: Collection[str] = (),
) -> list[PlannedPair]:
    """The pairs to validate in this run: node by node, most urgent node first, each node's pairs in
    the order they run (``bundle_order``)."""
    return [p for b in take(bundles(free_nodes, tests, latest, now=now, policy=policy, first=first),
                            policy.max_pairs) for p in b.pairs]
