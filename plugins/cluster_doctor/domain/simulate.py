"""``cluster-doctor simulate``: the real planner and policies over a simulated cluster, to size the pool.

Every simulated hour is one run of the continuous_validation DAG. User jobs come and go on every node
(lengths from a log-normal distribution, cut at the cluster's job limit; idle gaps sized so the fleet
is busy the requested share of the time, or none at all with ``no_gap``: a queue-backed cluster where
a new job starts the moment one ends). With ``reserve``, the reservation policy the DAG applies
(``reservation.overdue`` / ``reservation.choose``, the same functions) taints overdue busy nodes: when
their job ends no new one starts until their validation is done. The free nodes are planned by
``priority.bundles`` / ``priority.take`` — what the DAG's prioritize task runs — reserved nodes first,
every due suite of a chosen node in one bundle; the bundles then run on the pool's slots, a slot
running one node's suites one after another (the DAG's later steps outrank new nodes for a slot), within
the run's window. A bundle whose turn comes more than the queue limit after planning is skipped; a user
job claiming the node before a suite ends preempts it and skips the rest; a failed health check skips
the rest. All of these leave the pairs due, as in production. Executed results fail with the given
probability (and are retested after the failed-retest interval).

With ``peer_tests`` (issue 23 §2) every run also plans peer tests — ``peers.match_peers``, the DAG's
function — among the free nodes no bundle took: each holds two free nodes and two pool slots at once for
its duration (after the run's bundles, in the same window and queue limit), a user job claiming either
node preempts it, and its staleness per node (hours since the node's last executed peer test) is its
own figure.

It prints coverage over time, p50/p95/max staleness per pair, the worst staleness over the period, the
share of pair-hours within the target, and the reservations' idle GPU-hours; with
``--target-staleness`` the fewest pool slots that keep every pair within the target, without and with
reservation, and what reservation costs (a search over slots, the same seed for each try).

Pure Python, no cluster and no database: seconds at 1,000 nodes.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import heapq
import math
import random
import re
import sys
import time
from collections.abc import Sequence
from typing import Any

from cluster_doctor.domain import peers, priority, reservation

DEFAULT_SUITE_MINUTES = {"gpu_health": 2.0, "dl_unit": 12.0, "nccl_loopback": 6.0, "storage_fio": 10.0}
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class InvalidSimulation(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class SimConfig:
    nodes: int = 1000
    days: float = 28.0
    slots: int = 2
    occupancy: float = 0.85  # share of the time a node runs a user job (ignored with no_gap)
    job_hours: float = 4.0  # median user job length (log-normal)
    job_sigma: float = 0.8  # log-normal shape
    max_job_hours: float = 24.0  # the cluster's job time limit (jobs are cut there)
    suite_minutes: dict = dataclasses.field(default_factory=lambda: dict(DEFAULT_SUITE_MINUTES))
    pod_startup_minutes: float = 1.0
    staleness_days: float = 7.0  # the prioritizer's threshold Z: a pair is due when older
    target_days: float = 7.0  # the promise: within_target_share counts pair-hours at most this old
    failed_retest_hours: float = 6.0
    failure_rate: float = 0.01
    max_pairs: int | None = None  # per run; None: what the slots can run in one run window
    run_window_minutes: float = 55.0  # a run ends before the next hourly one starts
    max_queue_minutes: float = 30.0
    gpu_models: dict = dataclasses.field(default_factory=lambda: {"NVIDIA-H100-80GB-HBM3": 1.0})
    gpus_per_node: int = 8
    start: str = "steady"  # steady: last results spread over the threshold; fresh: nothing validated yet
    bundle: bool = True  # every due suite of a chosen node in one run (False: one suite per node per run)
    bundle_ahead_hours: float = 48.0
    no_gap: bool = False  # a queue-backed cluster: a new job starts the moment one ends
    reserve: bool = False  # taint overdue busy nodes (the DAG's opt-in reservation)
    reservation: dict = dataclasses.field(default_factory=dict)  # ReservationPolicy keys (target_days: ours)
    seed: int = 7
    peer_tests: bool = False  # plan peer tests too (setting peer_tests)
    peer_cadence_days: float = 7.0
    peer_max_per_run: int = 4
    peer_minutes: float = 10.0  # one peer test: both pods, NCCL all-reduce and ib_write_bw per rail

    def __post_init__(self) -> None:
        def positive(name, integer=False):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 or (integer and not isinstance(v, int)):
                raise InvalidSimulation(f"{name}: must be {'an integer' if integer else 'a number'} > 0, got {v!r}")
        for name in ("nodes", "slots", "gpus_per_node"):
            positive(name, integer=True)
        for name in ("days", "job_hours", "job_sigma", "max_job_hours", "staleness_days", "target_days",
                     "run_window_minutes", "max_queue_minutes", "peer_cadence_days", "peer_minutes"):
            positive(name)
        positive("peer_max_per_run", integer=True)
        if not 0 <= self.occupancy < 1:
            raise InvalidSimulation(f"occupancy: must be a share in [0, 1), got {self.occupancy!r}")
        if not 0 <= self.failure_rate < 1:
            raise InvalidSimulation(f"failure_rate: must be a share in [0, 1), got {self.failure_rate!r}")
        if self.failed_retest_hours < 0 or self.pod_startup_minutes < 0 or self.bundle_ahead_hours < 0:
            raise InvalidSimulation("failed_retest_hours, pod_startup_minutes and bundle_ahead_hours must be >= 0")
        if not self.suite_minutes or any(not isinstance(v, (int, float)) or v <= 0 for v in self.suite_minutes.values()):
            raise InvalidSimulation(f"suite_minutes: every suite needs a duration > 0, got {self.suite_minutes!r}")
        if self.max_pairs is not None and (not isinstance(self.max_pairs, int) or self.max_pairs < 1):
            raise InvalidSimulation(f"max_pairs: must be an integer >= 1, got {self.max_pairs!r}")
        if not self.gpu_models or any(v <= 0 for v in self.gpu_models.values()):
            raise InvalidSimulation(f"gpu_models: shares must be > 0, got {self.gpu_models!r}")
        if self.start not in ("steady", "fresh"):
            raise InvalidSimulation(f"start: 'steady' or 'fresh', got {self.start!r}")
        try:
            self.reservation_policy()
        except reservation.InvalidReservationPolicy as exc:
            raise InvalidSimulation(str(exc)) from None

    @property
    def tests(self) -> list[str]:
        return list(self.suite_minutes)

    def pairs_per_run(self) -> int:
        if self.max_pairs is not None:
            return self.max_pairs
        mean = sum(self.suite_minutes.values()) / len(self.suite_minutes) + self.pod_startup_minutes
        return max(1, self.slots * math.floor(self.run_window_minutes / mean))

    def reservation_policy(self) -> reservation.ReservationPolicy:
        """The DAG's policy, its target the simulated one, its lead by default the longest job + 6 h."""
        values = {"lead_hours": self.max_job_hours + 6, "max_hold_hours": self.max_job_hours + 12,
                  **self.reservation, "enabled": self.reserve, "target_days": self.target_days}
        return reservation.ReservationPolicy.from_mapping(values)


@dataclasses.dataclass
class SimResult:
    config: SimConfig
    coverage: list[tuple[float, float]]  # (day, share of pairs validated within the staleness threshold)
    # Staleness of a pair: hours since it last executed, or since its node failed gpu_health in a bundle
    # that then skipped it (the node is known bad). Worst over the whole period (hourly samples).
    worst_staleness_h: float
    within_target_share: float  # share of the hourly pair samples no older than the target
    final_p50_h: float
    final_p95_h: float
    final_max_h: float
    executed: int
    skipped: int
    preempted: int
    failed: int
    health_gated: int  # pairs skipped because their node failed gpu_health first (counted as judged then)
    never_validated: int
    reservations: int  # taints applied
    reservations_released: dict[str, int]  # taints removed, by why
    max_reserved_at_once: int
    reserved_gpu_hours: float  # GPU-hours reserved nodes stood idle, tainted, waiting for validation
    reserved_share: float  # of the fleet's GPU-hours over the period
    breaker_open_runs: int  # runs where the reservation breaker kept every candidate out
    # peer tests (with peer_tests): executed, preempted by a user job, skipped (no two slots in time);
    # peer staleness of a node: hours since its last executed peer test (inf: never)
    peer_executed: int = 0
    peer_preempted: int = 0
    peer_skipped: int = 0
    peer_worst_staleness_h: float | None = None  # worst over the period (hourly samples)
    peer_final_max_h: float | None = None
    peer_never: int = 0  # nodes never peer-tested at the end
    plan_seconds: float = 0.0
    wall_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["config"] = dataclasses.asdict(self.config)
        return out


class _Cluster:
    """User occupancy: each node alternates busy (log-normal job) and idle (exponential gap, or none with
    ``no_gap``) periods. A reserved node whose job ends stays idle until it is released."""

    def __init__(self, cfg: SimConfig, rnd: random.Random):
        self.rnd, self.cfg = rnd, cfg
        self.mu = math.log(cfg.job_hours)
        # the mean of the capped log-normal, estimated once from a fixed sample
        probe = random.Random(0)
        mean_job = sum(min(probe.lognormvariate(self.mu, cfg.job_sigma), cfg.max_job_hours)
                       for _ in range(20000)) / 20000
        self.mean_gap = 0.0 if cfg.no_gap else (
            mean_job * (1 - cfg.occupancy) / cfg.occupancy if cfg.occupancy > 0 else math.inf)
        self.busy = [False] * cfg.nodes
        self.until = [0.0] * cfg.nodes  # hours: when the current period ends (inf: not before a release)
        self.version = [0] * cfg.nodes  # events of an older version are stale (a release re-plans the node)
        self.reserved: set[int] = set()
        self.free_since: dict[int, float] = {}  # reserved nodes whose job ended: idle since
        self.events: list[tuple[float, int, int]] = []
        for n in range(cfg.nodes):
            busy = cfg.no_gap or rnd.random() < cfg.occupancy
            self.busy[n] = busy
            # a random point inside the current period (length-biased sampling is ignored: close enough)
            length = self._job() if busy else self._gap()
            self._set(n, rnd.random() * length)
        self.free = {n for n in range(cfg.nodes) if not self.busy[n]}

    def _job(self) -> float:
        return min(self.rnd.lognormvariate(self.mu, self.cfg.job_sigma), self.cfg.max_job_hours)

    def _gap(self) -> float:
        if self.mean_gap == math.inf:
            return math.inf
        return self.rnd.expovariate(1 / self.mean_gap) if self.mean_gap > 0 else 0.0

    def _set(self, n: int, until: float) -> None:
        self.version[n] += 1
        self.until[n] = until
        if until != math.inf:
            heapq.heappush(self.events, (until, n, self.version[n]))

    def advance(self, hour: float) -> None:
        events = self.events
        while events and events[0][0] <= hour:
            at, n, version = heapq.heappop(events)
            if version != self.version[n]:
                continue
            if self.busy[n] and n in self.reserved:  # the job ended; the taint keeps new ones off
                self.busy[n] = False
                self.free.add(n)
                self.free_since[n] = at
                self._set(n, math.inf)
            elif self.busy[n]:
                gap = self._gap()
                if gap > 0:
                    self.busy[n] = False
                    self.free.add(n)
                    self._set(n, at + gap)
                else:  # queue-backed: the next job starts at once
                    self._set(n, at + self._job())
            else:
                self.busy[n] = True
                self.free.discard(n)
                self._set(n, at + self._job())

    def release(self, n: int, at: float) -> float:
        """Remove the taint at ``at`` (hours); the idle hours the reservation cost."""
        self.reserved.discard(n)
        idle = max(0.0, at - self.free_since.pop(n, at))
        if not self.busy[n]:
            gap = self._gap()
            if gap > 0:
                self._set(n, at + gap)
            else:
                self.busy[n] = True
                self.free.discard(n)
                self._set(n, at + self._job())
        return idle


@dataclasses.dataclass
class _Counts:
    executed: int = 0
    skipped: int = 0
    preempted: int = 0
    failed: int = 0
    health_gated: int = 0


def _run_bundle(bundle: priority.Bundle, start: float, hour: int, n: int, cfg: SimConfig, cluster: _Cluster,
                states: dict, last: dict, outcomes: random.Random, counts: _Counts) -> tuple[float, bool]:
    """One node's suites on one slot from ``start`` (minutes into the run), as the DAG's task group runs
    them. Returns when the slot is free again and whether the bundle is done with the node (every pair
    executed, health failed, or a user job claimed it) — a reserved node is released then."""
    now = T0 + dt.timedelta(hours=hour)
    t = start
    pairs = bundle.pairs
    for i, pair in enumerate(pairs):
        duration = cfg.pod_startup_minutes + cfg.suite_minutes[pair.test_name]
        key = (pair.node_name, pair.test_name)
        prev = states.get(key)
        claimed = (cluster.until[n] - hour) * 60  # minutes into the run when a user job takes the node
        if (t > cfg.max_queue_minutes and i == 0) or t + duration > cfg.run_window_minutes:
            counts.skipped += len(pairs) - i  # queue limit, or the run's window: the rest waits for a run
            return (start if i == 0 else t), False
        if claimed <= t or claimed < t + duration:
            # before our pod starts: the pre-submit re-check skips it; after: the user job preempts it
            what = "skipped" if claimed <= t else "preempted"
            counts.preempted += what == "preempted"
            counts.skipped += len(pairs) - i - (what == "preempted")
            at = now + dt.timedelta(minutes=min(claimed, t + duration))
            states[key] = priority.PairState(prev.status if prev else None, prev.finished_at if prev else None,
                                             at, what)
            return max(t, min(claimed, t + duration)), True
        t += duration
        status = "fail" if outcomes.random() < cfg.failure_rate else "pass"
        counts.failed += status == "fail"
        counts.executed += 1
        at = now + dt.timedelta(minutes=t)
        states[key] = priority.PairState(status, at, at, status)
        last[key] = hour + t / 60
        if status == "fail" and pair.test_name == priority.HEALTH_FIRST:
            # The rest is not worth running on a failing node: skipped, they stay due for the planner;
            # the node is judged (known bad) now, which is what the staleness figures measure.
            for rest in pairs[i + 1:]:
                last[(rest.node_name, rest.test_name)] = hour + t / 60
            counts.skipped += len(pairs) - i - 1
            counts.health_gated += len(pairs) - i - 1
            return t, True
    return t, True


@dataclasses.dataclass(frozen=True)
class _PeerSettings:
    """What ``peers.match_peers`` reads of the settings."""

    peer_tests: bool
    peer_cadence_days: float
    peer_max_per_run: int
    failed_retest_hours: float


class _Peers:
    """Peer tests over the simulated hours: the DAG's matching on the free nodes no bundle took, each
    test on two slots at once; the recent results (the store's evidence window) kept for the matching."""

    def __init__(self, cfg: SimConfig, names: list[str], rnd: random.Random):
        self.cfg, self.names = cfg, names
        self.settings = _PeerSettings(True, cfg.peer_cadence_days, cfg.peer_max_per_run, cfg.failed_retest_hours)
        model = next(iter(cfg.gpu_models))
        self.candidates = {n: peers.PeerCandidate(n, model) for n in names}
        self.results: list[peers.PeerResult] = []
        self.last: dict[str, float] = {}  # node -> hour of its last executed peer test
        self.executed = self.preempted = self.skipped = 0
        self.outcomes = random.Random(cfg.seed + 4)  # its own stream: the bundles' outcomes stay the same
        self.worst = 0.0
        if cfg.start == "steady":  # last tests spread over one cadence, in random pairs
            order = list(names)
            rnd.shuffle(order)
            for a, b in zip(order[::2], order[1::2]):
                at = -rnd.random() * cfg.peer_cadence_days * 24
                self._record(a, b, "pass", at)

    def _record(self, a: str, b: str, status: str, at_h: float) -> None:
        when = T0 + dt.timedelta(hours=at_h)
        self.results += [peers.PeerResult(a, b, status, when), peers.PeerResult(b, a, status, when)]
        self.last[a] = self.last[b] = at_h

    def run(self, hour: int, free: list[str], slots: list[float], cluster: _Cluster, index: dict[str, int]) -> None:
        """Plan and run this hour's peer tests on the slots left by the bundles (a heap, changed in place)."""
        cfg = self.cfg
        now = T0 + dt.timedelta(hours=hour)
        keep = hour - peers_window_h(cfg)
        if self.results and self.results[0].finished_at < T0 + dt.timedelta(hours=keep):
            self.results = [r for r in self.results if r.finished_at >= T0 + dt.timedelta(hours=keep)]
        matches = peers.match_peers([self.candidates[n] for n in free], self.results, self.settings, now)
        while len(slots) < 2:
            slots.append(0.0)
        duration = cfg.pod_startup_minutes + cfg.peer_minutes
        for match in matches:
            first, second = heapq.heappop(slots), heapq.heappop(slots)
            start = max(first, second)
            if start > cfg.max_queue_minutes or start + duration > cfg.run_window_minutes:
                self.skipped += 1
                heapq.heappush(slots, first)
                heapq.heappush(slots, second)
                continue
            claimed = min((cluster.until[index[n]] - hour) * 60 for n in match.nodes)
            if claimed <= start:  # taken before our pods started: the pre-submit check skips it
                self.skipped += 1
                end = start
            elif claimed < start + duration:
                self.preempted += 1
                end = claimed
            else:
                end = start + duration
                self.executed += 1
                self._record(*match.nodes, "fail" if self.outcomes.random() < cfg.failure_rate else "pass", hour + end / 60)
            heapq.heappush(slots, end)
            heapq.heappush(slots, end)

    def sample(self, hour: int) -> None:
        ages = [hour - self.last[n] if n in self.last else math.inf for n in self.names]
        self.worst = max(self.worst, max(ages, default=0.0))

    def figures(self, end: float) -> dict[str, Any]:
        final = max((end - self.last[n] if n in self.last else math.inf for n in self.names), default=0.0)
        return {"peer_executed": self.executed, "peer_preempted": self.preempted, "peer_skipped": self.skipped,
                "peer_worst_staleness_h": self.worst, "peer_final_max_h": final,
                "peer_never": sum(1 for n in self.names if n not in self.last)}


def peers_window_h(cfg: SimConfig) -> float:
    """The peer-test evidence the matching sees: ``store.peers.EVIDENCE_CADENCES`` (4) cadences."""
    return 4 * cfg.peer_cadence_days * 24


def run(cfg: SimConfig, *, stop_above_h: float | None = None) -> SimResult:
    """Simulate ``cfg.days`` of hourly runs; with ``stop_above_h``, stop as soon as the worst staleness
    exceeds it (the slots search only needs to know that it does). Long: the DAG's hourly loop, in order
    (cluster, reservations, plan, bundles on slots, samples) — split, it would only scatter its state."""
    started = time.perf_counter()
    # separate streams: the same seed gives the same user jobs whatever the slots (fair comparisons)
    rnd, outcomes = random.Random(cfg.seed), random.Random(cfg.seed + 1)
    names = [f"gpu-{i:05d}" for i in range(cfg.nodes)]
    index = {name: i for i, name in enumerate(names)}
    tests = cfg.tests
    z_h, target_h = cfg.staleness_days * 24, cfg.target_days * 24
    cluster = _Cluster(cfg, random.Random(cfg.seed + 2))
    policy = priority.Policy(staleness=dt.timedelta(hours=z_h),
                             failed_retest=dt.timedelta(hours=cfg.failed_retest_hours),
                             max_pairs=cfg.pairs_per_run(), bundle=cfg.bundle,
                             bundle_ahead=dt.timedelta(hours=cfg.bundle_ahead_hours))
    rpolicy = cfg.reservation_policy()
    peer_runs = _Peers(cfg, names, random.Random(cfg.seed + 3)) if cfg.peer_tests else None
    # last executed result per pair, in simulated hours (None: never)
    last: dict[tuple[str, str], float] = {}
    states: dict[tuple[str, str], priority.PairState] = {}
    if cfg.start == "steady":
        for name in names:
            for test in tests:
                at = -rnd.random() * z_h
                last[(name, test)] = at
                when = T0 + dt.timedelta(hours=at)
                states[(name, test)] = priority.PairState("pass", when, when, "pass")
    hours = int(cfg.days * 24)
    coverage, worst, within, samples = [], 0.0, 0, 0
    counts = _Counts()
    reserved_at: dict[int, int] = {}
    released: dict[str, int] = {}
    reservations = most_reserved = breaker_runs = 0
    idle_h = 0.0
    plan_s = 0.0
    total_pairs = cfg.nodes * len(tests)
    for hour in range(hours):
        cluster.advance(hour)
        now = T0 + dt.timedelta(hours=hour)
        t = time.perf_counter()
        if rpolicy.enabled:
            for n in [n for n, at in reserved_at.items() if hour - at >= rpolicy.max_hold_hours]:
                idle_h += cluster.release(n, hour)
                del reserved_at[n]
                released[reservation.MAX_HOLD] = released.get(reservation.MAX_HOLD, 0) + 1
            busy = [names[n] for n in range(cfg.nodes) if cluster.busy[n] and n not in cluster.reserved]
            choice = reservation.choose(
                reservation.overdue(busy, tests, states, now=now, due_policy=policy, policy=rpolicy),
                reserved=len(reserved_at), overdue_reserved=len(reserved_at), gpu_nodes=cfg.nodes, policy=rpolicy)
            breaker_runs += choice.breaker_open
            for node in choice.reserve:
                n = index[node.node_name]
                cluster.reserved.add(n)
                reserved_at[n] = hour
                reservations += 1
            most_reserved = max(most_reserved, len(reserved_at))
        # Handing the planner only the free nodes with a due pair is exact (a node without one adds no
        # candidate) and keeps 1,000-node runs in seconds.
        free = [names[n] for n in sorted(cluster.free)]
        found = priority.take(priority.bundles(free, tests, states, now=now, policy=policy,
                                               first={names[n] for n in cluster.reserved}), policy.max_pairs)
        plan_s += time.perf_counter() - t
        slots = [0.0] * min(cfg.slots, len(found))  # heap: minutes into the run when a slot is free again
        for bundle in found:
            n = index[bundle.node_name]
            begin = heapq.heappop(slots)
            end, done = _run_bundle(bundle, begin, hour, n, cfg, cluster, states, last, outcomes, counts)
            heapq.heappush(slots, end)
            if done and n in cluster.reserved:
                idle_h += cluster.release(n, hour + end / 60)
                del reserved_at[n]
                released[reservation.VALIDATED] = released.get(reservation.VALIDATED, 0) + 1
        if peer_runs is not None:  # the free nodes no bundle took, on the slots the bundles left
            taken = {b.node_name for b in found}
            slots += [0.0] * max(0, cfg.slots - len(slots))
            heapq.heapify(slots)
            peer_runs.run(hour, [f for f in free if f not in taken], slots, cluster, index)
            peer_runs.sample(hour)
        if len(last) == total_pairs:
            ages = [hour - v for v in last.values()]
            worst = max(worst, max(ages))
            within += sum(1 for a in ages if a <= target_h)
        else:
            worst = math.inf
            within += sum(1 for v in last.values() if hour - v <= target_h)
        samples += total_pairs
        if stop_above_h is not None and worst > stop_above_h:
            break
        if hour % 24 == 23 or hour == hours - 1:
            fresh = sum(1 for v in last.values() if hour - v <= z_h)
            coverage.append(((hour + 1) / 24, fresh / total_pairs))
    end = hours
    for n in list(reserved_at):  # still reserved at the end: count the idle time so far
        idle_h += max(0.0, end - cluster.free_since.get(n, end))
    ages = sorted(end - v for v in last.values()) + [math.inf] * (total_pairs - len(last))
    gpu_hours = idle_h * cfg.gpus_per_node
    return SimResult(
        config=cfg, coverage=coverage, worst_staleness_h=worst, within_target_share=within / samples if samples else 0.0,
        final_p50_h=_quantile(ages, 0.5), final_p95_h=_quantile(ages, 0.95), final_max_h=ages[-1],
        executed=counts.executed, skipped=counts.skipped, preempted=counts.preempted, failed=counts.failed,
        health_gated=counts.health_gated, never_validated=total_pairs - len(last), reservations=reservations, reservations_released=released,
        max_reserved_at_once=most_reserved, reserved_gpu_hours=gpu_hours,
        reserved_share=gpu_hours / (cfg.nodes * cfg.gpus_per_node * hours) if hours else 0.0,
        breaker_open_runs=breaker_runs, plan_seconds=plan_s, wall_seconds=time.perf_counter() - started,
        **(peer_runs.figures(end) if peer_runs is not None else {}))


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    if not sorted_values:
        return math.nan
    return sorted_values[min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))]


def min_slots(cfg: SimConfig, target_h: float, *, max_reserved_share: float | None = None,
              reach_floor: bool = True) -> tuple[int | None, SimResult, dict[int, SimResult]]:
    """The fewest slots whose simulated worst staleness stays within ``target_h`` (and, with reservation,
    whose reserved idle share stays within ``max_reserved_share``: slots a reserved node waits for cost
    idle GPU-hours).

    First a reference run with a slot per node: what user occupancy alone allows (nodes that stay busy
    for days cannot be validated by any number of slots, unless they are reserved). When even that misses
    the target, returns None with the reference; the search then finds the slots that reach the
    reference's worst staleness (more slots would not help). Doubling, then bisection, the same user jobs
    for each try; ``reach_floor=False`` skips that search when the target is out of reach."""
    tried: dict[int, SimResult] = {}
    budget = max_reserved_share if cfg.reserve and max_reserved_share is not None else math.inf
    floor = run(dataclasses.replace(cfg, slots=cfg.nodes, max_pairs=cfg.nodes * len(cfg.tests)))
    reachable = floor.worst_staleness_h <= target_h and floor.reserved_share <= budget
    if not reachable and not reach_floor:
        return None, floor, tried
    goal = target_h if reachable else floor.worst_staleness_h + 1.0

    def ok(slots: int) -> bool:
        if slots not in tried:
            tried[slots] = run(dataclasses.replace(cfg, slots=slots), stop_above_h=goal)
        found = tried[slots]
        return found.worst_staleness_h <= goal and (not reachable or found.reserved_share <= budget)

    hi = 1
    while not ok(hi):
        if hi >= cfg.nodes:
            return None, floor, tried
        hi = min(cfg.nodes, hi * 2)
    lo = hi // 2  # known to miss (or 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return (hi if reachable else None), floor, tried


# ---------------------------------------------------------------------------- CLI
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([dhm]?)\s*$")


def parse_duration_hours(text: str, what: str) -> float:
    """'7d', '36h', '90m' or a number of days."""
    match = _DURATION.match(str(text))
    if not match:
        raise InvalidSimulation(f"{what}: expected a duration like 7d, 36h or 90m, got {text!r}")
    value = float(match.group(1))
    hours = value * {"d": 24, "": 24, "h": 1, "m": 1 / 60}[match.group(2)]
    if hours <= 0:
        raise InvalidSimulation(f"{what}: must be > 0, got {text!r}")
    return hours


def _shares(text: str, what: str) -> dict[str, float]:
    out = {}
    for item in text.split(","):
        name, sep, value = item.partition("=")
        try:
            out[name.strip()] = float(value) if sep else 1.0
        except ValueError:
            raise InvalidSimulation(f"{what}: {item!r} is not name=number") from None
        if not name.strip():
            raise InvalidSimulation(f"{what}: empty name in {text!r}")
    return out


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("simulate", help="size the pool: the real planner and policies over a simulated cluster",
                       description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--days", type=float, default=28.0, help="simulated period (default 28)")
    p.add_argument("--slots", type=int, default=2, help="pool slots (concurrent validation pods)")
    p.add_argument("--occupancy", type=float, default=0.85, help="share of time nodes are busy with user jobs")
    p.add_argument("--no-gap", action="store_true",
                   help="a queue-backed cluster: a new job starts the moment one ends (no idle gaps at all)")
    p.add_argument("--job-hours", type=float, default=4.0, help="median user job length (log-normal)")
    p.add_argument("--job-sigma", type=float, default=0.8, help="log-normal shape of job lengths")
    p.add_argument("--max-job-hours", type=float, default=24.0, help="job time limit of the cluster")
    p.add_argument("--suite-minutes", default=",".join(f"{k}={v:g}" for k, v in DEFAULT_SUITE_MINUTES.items()),
                   help="suite=minutes,... (the enabled suites and how long each runs)")
    p.add_argument("--target-staleness", default=None,
                   help="the promise, e.g. 7d (default 7d): the figures count pair-hours within it; given, "
                        "the command searches the fewest slots keeping every pair within it, without and "
                        "with reservation")
    p.add_argument("--staleness", default=None,
                   help="the prioritizer's threshold Z (default: the target less the longest job and 12 h, so "
                        "one full-length job fits before the target)")
    p.add_argument("--reserve", action="store_true",
                   help="reserve overdue busy nodes (the DAG's opt-in setting reservation)")
    p.add_argument("--no-reserve", action="store_true",
                   help="with --target-staleness: search bundling alone, never reservation")
    p.add_argument("--reserve-lead", type=float, default=None,
                   help="hours before the target a busy node is reserved (default: the longest job + 6)")
    p.add_argument("--max-reserved-share", type=float, default=0.01,
                   help="with --target-staleness: the idle share of the fleet's GPU-hours reservation may cost "
                        "(default 0.01); the search adds slots until it fits")
    p.add_argument("--no-bundle", action="store_true", help="one suite per node per run (the former planner)")
    p.add_argument("--bundle-ahead", type=float, default=48.0, help="hours: pairs due this soon join a bundle")
    p.add_argument("--failure-rate", type=float, default=0.01)
    p.add_argument("--max-pairs", type=int, default=None, help="per run (default: what the slots run in a run)")
    p.add_argument("--gpu-models", default="NVIDIA-H100-80GB-HBM3=1", help="model=share,...")
    p.add_argument("--start", choices=("steady", "fresh"), default="steady")
    p.add_argument("--peer-tests", action="store_true",
                   help="plan peer tests too (setting peer_tests): two free nodes and two slots each")
    p.add_argument("--peer-cadence", default="7d", help="a node's peer test is due after this long (default 7d)")
    p.add_argument("--peer-max-per-run", type=int, default=4, help="peer tests per run at most (default 4)")
    p.add_argument("--peer-minutes", type=float, default=10.0, help="how long one peer test runs (default 10)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--format", choices=("table", "json"), default="table")
    return p


def _config(args: argparse.Namespace) -> tuple[SimConfig, float | None]:
    """The simulation, and the target to search slots for (None: one simulation)."""
    target_h = parse_duration_hours(args.target_staleness or "7d", "--target-staleness")
    z_h = (parse_duration_hours(args.staleness, "--staleness") if args.staleness
           else max(target_h / 2, target_h - args.max_job_hours - 12))
    reservation_values = {"lead_hours": args.reserve_lead} if args.reserve_lead is not None else {}
    cfg = SimConfig(nodes=args.nodes, days=args.days, slots=args.slots, occupancy=args.occupancy,
                    job_hours=args.job_hours, job_sigma=args.job_sigma, max_job_hours=args.max_job_hours,
                    suite_minutes=_shares(args.suite_minutes, "--suite-minutes"), staleness_days=z_h / 24,
                    target_days=target_h / 24, failure_rate=args.failure_rate, max_pairs=args.max_pairs,
                    gpu_models=_shares(args.gpu_models, "--gpu-models"), start=args.start, seed=args.seed,
                    bundle=not args.no_bundle, bundle_ahead_hours=args.bundle_ahead, no_gap=args.no_gap,
                    reserve=args.reserve, reservation=reservation_values, peer_tests=args.peer_tests,
                    peer_cadence_days=parse_duration_hours(args.peer_cadence, "--peer-cadence") / 24,
                    peer_max_per_run=args.peer_max_per_run, peer_minutes=args.peer_minutes)
    if args.target_staleness and z_h >= target_h:
        raise InvalidSimulation(
            f"--staleness ({z_h / 24:g}d) must be below --target-staleness ({target_h / 24:g}d): a pair only "
            "becomes due at the threshold, so its worst staleness is the threshold plus the wait for a free node")
    return cfg, (target_h if args.target_staleness else None)


def _h(hours: float) -> str:
    if math.isinf(hours):
        return "never"
    return f"{hours / 24:.1f}d" if hours >= 48 else f"{hours:.0f}h"


def render(result: SimResult) -> str:
    cfg = result.config
    mode = "no gaps between jobs (queue-backed)" if cfg.no_gap else f"occupancy {cfg.occupancy:.0%}"
    lines = [f"simulated {cfg.nodes:,} nodes x {len(cfg.tests)} suites for {cfg.days:g} days: {cfg.slots} slot(s), "
             f"{cfg.pairs_per_run()} pairs/run max, {mode} (jobs median {cfg.job_hours:g} h, "
             f"at most {cfg.max_job_hours:g} h), threshold Z {cfg.staleness_days:g}d, target {cfg.target_days:g}d, "
             f"{'bundles' if cfg.bundle else 'one suite per node per run'}, "
             f"{'reservation on' if cfg.reserve else 'no reservation'}, failure rate {cfg.failure_rate:.1%}, "
             f"start {cfg.start}",
             "coverage (pairs validated within Z), by day:"]
    step = max(1, len(result.coverage) // 14)
    lines.append("  " + "  ".join(f"d{day:g} {share:.1%}" for day, share in result.coverage[::step]))
    lines.append(f"staleness per pair at the end: p50 {_h(result.final_p50_h)}, p95 {_h(result.final_p95_h)}, "
                 f"max {_h(result.final_max_h)}; worst over the period {_h(result.worst_staleness_h)}; "
                 f"pair-hours within the target: {result.within_target_share:.4%}")
    lines.append(f"attempts: {result.executed:,} executed ({result.failed:,} failed), {result.preempted:,} preempted "
                 f"by user jobs, {result.skipped:,} skipped (queue limit, run window, the node taken before the pod "
                 f"started, or its health check failed: {result.health_gated:,}); never validated at the end: "
                 f"{result.never_validated:,}")
    if cfg.reserve:
        released = ", ".join(f"{n} {why}" for why, n in sorted(result.reservations_released.items())) or "none"
        lines.append(f"reservations: {result.reservations:,} applied (released: {released}), at most "
                     f"{result.max_reserved_at_once} at once; idle while reserved {result.reserved_gpu_hours:,.0f} "
                     f"GPU-hours = {result.reserved_share:.3%} of the fleet's; breaker open in "
                     f"{result.breaker_open_runs} run(s)")
    if cfg.peer_tests:
        lines.append(peer_line(result))
    lines.append(f"took {result.wall_seconds:.2f} s ({result.plan_seconds:.2f} s planning)")
    return "\n".join(lines)


def peer_line(result: SimResult) -> str:
    cfg = result.config
    return (f"peer tests (cadence {cfg.peer_cadence_days:g}d, at most {cfg.peer_max_per_run}/run, "
            f"{cfg.peer_minutes:g} min on two nodes and two slots each): {result.peer_executed:,} executed, "
            f"{result.peer_preempted:,} preempted, {result.peer_skipped:,} skipped; peer staleness per node: worst "
            f"over the period {_h(result.peer_worst_staleness_h or 0.0)}, max at the end "
            f"{_h(result.peer_final_max_h or 0.0)}; never peer-tested at the end: {result.peer_never:,}")


@dataclasses.dataclass
class Search:
    """``min_slots`` for one configuration: the answer and what it tried."""

    slots: int | None
    floor: SimResult
    tried: dict[int, SimResult]
    target_h: float

    @property
    def best(self) -> SimResult | None:
        """The run at the fewest slots that reach the target (or, unreachable, the occupancy floor)."""
        if self.slots is not None:
            return self.tried[self.slots]
        fits = [n for n, r in self.tried.items() if r.worst_staleness_h <= self.floor.worst_staleness_h + 1]
        return self.tried[min(fits)] if fits else None

    def to_dict(self) -> dict[str, Any]:
        best = self.best
        return {"min_slots": self.slots, "occupancy_floor_h": self.floor.worst_staleness_h,
                "at_min_slots": _figures(best) if best is not None else None,
                "tried": {n: _figures(r) for n, r in sorted(self.tried.items())}}


def _figures(r: SimResult) -> dict[str, Any]:
    return {"slots": r.config.slots, "worst_staleness_h": r.worst_staleness_h,
            "within_target_share": r.within_target_share, "reserved_gpu_hours": r.reserved_gpu_hours,
            "reserved_share": r.reserved_share, "reservations": r.reservations,
            "max_reserved_at_once": r.max_reserved_at_once, "executed": r.executed,
            "peer_worst_staleness_h": r.peer_worst_staleness_h, "peer_executed": r.peer_executed,
            "wall_seconds": r.wall_seconds}


def search(cfg: SimConfig, target_h: float, max_reserved_share: float | None = None,
           reach_floor: bool = True) -> Search:
    return Search(*min_slots(cfg, target_h, max_reserved_share=max_reserved_share, reach_floor=reach_floor),
                  target_h=target_h)


def _search_lines(name: str, found: Search) -> list[str]:
    lines = [f"{name}: with a slot per node, worst staleness {_h(found.floor.worst_staleness_h)}"]
    for n, res in sorted(found.tried.items()):
        stopped = res.worst_staleness_h > max(found.target_h, found.floor.worst_staleness_h + 1)
        lines.append(f"  slots={n}: worst staleness {_h(res.worst_staleness_h)}{'+ (stopped early)' if stopped else ''}"
                     f", {res.wall_seconds:.1f} s")
    return lines


def cmd(args: argparse.Namespace, out=None) -> int:
    """One simulation, or with ``--target-staleness`` the slots search: bundling alone first, then (unless
    it already reaches the target) with reservation. Exits 0 when the target is reachable either way."""
    import json

    out = out or sys.stdout
    try:
        cfg, target_h = _config(args)
    except InvalidSimulation as exc:
        print(f"cluster-doctor: error: {exc}", file=sys.stderr)
        return 2
    if target_h is None:
        result = run(cfg)
        print(json.dumps(result.to_dict(), indent=2) if args.format == "json" else render(result), file=out)
        return 0
    searches: dict[str, Search] = {}
    if not cfg.reserve:  # bundling alone; out of reach, reservation is tried instead of more slots
        searches["without_reservation"] = search(cfg, target_h, reach_floor=args.no_reserve)
    if cfg.reserve or (searches["without_reservation"].slots is None and not args.no_reserve):
        searches["with_reservation"] = search(dataclasses.replace(cfg, reserve=True), target_h,
                                              args.max_reserved_share)
    reached = {k: v for k, v in searches.items() if v.slots is not None}
    answer = next(iter(reached.values()), None)
    if args.format == "json":
        print(json.dumps({"target_staleness_h": target_h, "staleness_threshold_h": cfg.staleness_days * 24,
                          "reachable": answer is not None, **{k: v.to_dict() for k, v in searches.items()}},
                         indent=2), file=out)
        return 0 if answer is not None else 1
    for name, found in searches.items():
        print("\n".join(_search_lines(name.replace("_", " "), found)), file=out)
    shown = answer or next(iter(searches.values()))
    if shown.best is not None:
        print(render(shown.best), file=out)
    tail = f"target_staleness={_h(target_h)} nodes={cfg.nodes}"
    if answer is None:
        print(f"no number of slots keeps the worst staleness within {_h(target_h)}"
              f"{'' if cfg.reserve else ' without reservation'}, nor with reservation within "
              f"{args.max_reserved_share:.1%} of the fleet's GPU-hours (worst {_h(shown.floor.worst_staleness_h)}, "
              f"idle {shown.floor.reserved_share:.2%} with a slot per node): user jobs keep some nodes busy longer "
              "than the lead. Lower --staleness, raise --reserve-lead or --max-reserved-share, or accept the bound.",
              file=out)
        print(f"min_slots=none {tail}", file=out)
        return 1
    best = answer.best
    if answer is searches.get("with_reservation"):
        if "without_reservation" in searches:
            print(f"bundling alone does not reach {_h(target_h)} (worst "
                  f"{_h(searches['without_reservation'].floor.worst_staleness_h)} with a slot per node); "
                  "with reservation it does:", file=out)
        print(f"settings: staleness_days={cfg.staleness_days:g}, pool slots {answer.slots}, reservation "
              f"{{\"enabled\": true, \"target_days\": {target_h / 24:g}, \"lead_hours\": "
              f"{cfg.reservation_policy().lead_hours:g}}}; it costs {best.reserved_gpu_hours:,.0f} idle GPU-hours, "
              f"{best.reserved_share:.2%} of the fleet's", file=out)
        print(f"min_slots={answer.slots} {tail} reserve=yes reserved_share={best.reserved_share:.4f}", file=out)
    else:
        print(f"min_slots={answer.slots} {tail} reserve=no", file=out)
    return 0
