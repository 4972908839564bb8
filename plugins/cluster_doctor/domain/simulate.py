"""``cluster-doctor simulate``: the real prioritizer over a simulated cluster, to size the pool.

Every simulated hour is one run of the continuous_validation DAG: the nodes that are free at that
moment (user jobs come and go, with lengths drawn from a log-normal distribution and idle gaps sized
so that the fleet is busy the requested share of the time) are planned by ``priority.plan`` — the
same function the DAG runs — with the latest state of every pair; the planned pairs then run on the
pool's slots one after another within the run's window. A pair whose turn comes more than the
queue limit after planning is skipped; a pair whose node is claimed by a user job before the suite
ends is preempted; both leave the pair due, as in production. Executed results fail with the given
probability (and are retested after the failed-retest interval).

It prints coverage over time (share of pairs validated within the target), p50/p95/max staleness
per pair, and with ``--target-staleness`` the minimum pool slots that keep the worst staleness
within the target over the simulated period (a search over slots, the same seed for each try).

Pure Python, no cluster and no database: seconds at 5,000 nodes.
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

from cluster_doctor.domain import priority

DEFAULT_SUITE_MINUTES = {"gpu_health": 2.0, "dl_unit": 12.0, "nccl_loopback": 6.0, "storage_fio": 10.0}
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class InvalidSimulation(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class SimConfig:
    nodes: int = 1000
    days: float = 28.0
    slots: int = 2
    occupancy: float = 0.85  # share of the time a node runs a user job
    job_hours: float = 4.0  # median user job length (log-normal)
    job_sigma: float = 0.8  # log-normal shape
    max_job_hours: float = 24.0  # the cluster's job time limit (jobs are cut there)
    suite_minutes: dict = dataclasses.field(default_factory=lambda: dict(DEFAULT_SUITE_MINUTES))
    pod_startup_minutes: float = 1.0
    staleness_days: float = 7.0  # the prioritizer's threshold Z: a pair is due when older
    failed_retest_hours: float = 6.0
    failure_rate: float = 0.01
    max_pairs: int | None = None  # per run; None: what the slots can run in one run window
    run_window_minutes: float = 55.0  # a run ends before the next hourly one starts
    max_queue_minutes: float = 30.0
    gpu_models: dict = dataclasses.field(default_factory=lambda: {"NVIDIA-H100-80GB-HBM3": 1.0})
    start: str = "steady"  # steady: last results spread over the threshold; fresh: nothing validated yet
    seed: int = 7

    def __post_init__(self) -> None:
        def positive(name, integer=False):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 or (integer and not isinstance(v, int)):
                raise InvalidSimulation(f"{name}: must be {'an integer' if integer else 'a number'} > 0, got {v!r}")
        for name in ("nodes", "slots"):
            positive(name, integer=True)
        for name in ("days", "job_hours", "job_sigma", "max_job_hours", "staleness_days", "run_window_minutes", "max_queue_minutes"):
            positive(name)
        if not 0 <= self.occupancy < 1:
            raise InvalidSimulation(f"occupancy: must be a share in [0, 1), got {self.occupancy!r}")
        if not 0 <= self.failure_rate < 1:
            raise InvalidSimulation(f"failure_rate: must be a share in [0, 1), got {self.failure_rate!r}")
        if self.failed_retest_hours < 0 or self.pod_startup_minutes < 0:
            raise InvalidSimulation("failed_retest_hours and pod_startup_minutes must be >= 0")
        if not self.suite_minutes or any(not isinstance(v, (int, float)) or v <= 0 for v in self.suite_minutes.values()):
            raise InvalidSimulation(f"suite_minutes: every suite needs a duration > 0, got {self.suite_minutes!r}")
        if self.max_pairs is not None and (not isinstance(self.max_pairs, int) or self.max_pairs < 1):
            raise InvalidSimulation(f"max_pairs: must be an integer >= 1, got {self.max_pairs!r}")
        if not self.gpu_models or any(v <= 0 for v in self.gpu_models.values()):
            raise InvalidSimulation(f"gpu_models: shares must be > 0, got {self.gpu_models!r}")
        if self.start not in ("steady", "fresh"):
            raise InvalidSimulation(f"start: 'steady' or 'fresh', got {self.start!r}")

    @property
    def tests(self) -> list[str]:
        return list(self.suite_minutes)

    def pairs_per_run(self) -> int:
        if self.max_pairs is not None:
            return self.max_pairs
        mean = sum(self.suite_minutes.values()) / len(self.suite_minutes) + self.pod_startup_minutes
        return max(1, self.slots * math.floor(self.run_window_minutes / mean))


@dataclasses.dataclass
class SimResult:
    config: SimConfig
    coverage: list[tuple[float, float]]  # (day, share of pairs validated within the staleness threshold)
    worst_staleness_h: float  # over the whole simulated period (hourly samples)
    final_p50_h: float
    final_p95_h: float
    final_max_h: float
    executed: int
    skipped: int
    preempted: int
    failed: int
    never_validated: int
    plan_seconds: float
    wall_seconds: float

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["config"] = dataclasses.asdict(self.config)
        return out


class _Cluster:
    """User occupancy: each node alternates busy (log-normal job) and idle (exponential gap) periods."""

    def __init__(self, cfg: SimConfig, rnd: random.Random):
        self.rnd, self.cfg = rnd, cfg
        self.mu = math.log(cfg.job_hours)
        # the mean of the capped log-normal, estimated once from a fixed sample
        probe = random.Random(0)
        mean_job = sum(min(probe.lognormvariate(self.mu, cfg.job_sigma), cfg.max_job_hours)
                       for _ in range(20000)) / 20000
        self.mean_gap = mean_job * (1 - cfg.occupancy) / cfg.occupancy if cfg.occupancy > 0 else math.inf
        self.busy = [False] * cfg.nodes
        self.until = [0.0] * cfg.nodes  # hours: when the current period ends
        self.events: list[tuple[float, int]] = []
        for n in range(cfg.nodes):
            busy = rnd.random() < cfg.occupancy
            self.busy[n] = busy
            # a random point inside the current period (length-biased sampling is ignored: close enough)
            length = self._job() if busy else self._gap()
            self.until[n] = rnd.random() * length
            heapq.heappush(self.events, (self.until[n], n))
        self.free = {n for n in range(cfg.nodes) if not self.busy[n]}

    def _job(self) -> float:
        return min(self.rnd.lognormvariate(self.mu, self.cfg.job_sigma), self.cfg.max_job_hours)

    def _gap(self) -> float:
        return self.rnd.expovariate(1 / self.mean_gap) if self.mean_gap != math.inf else math.inf

    def advance(self, hour: float) -> None:
        events = self.events
        while events and events[0][0] <= hour:
            at, n = heapq.heappop(events)
            if self.busy[n]:
                self.busy[n] = False
                self.free.add(n)
                self.until[n] = at + self._gap()
            else:
                self.busy[n] = True
                self.free.discard(n)
                self.until[n] = at + self._job()
            if self.until[n] != math.inf:
                heapq.heappush(events, (self.until[n], n))


def run(cfg: SimConfig, *, stop_above_h: float | None = None) -> SimResult:
    """Simulate ``cfg.days`` of hourly runs; with ``stop_above_h``, stop as soon as the worst staleness
    exceeds it (the slots search only needs to know that it does)."""
    started = time.perf_counter()
    # separate streams: the same seed gives the same user jobs whatever the slots (fair comparisons)
    rnd, outcomes = random.Random(cfg.seed), random.Random(cfg.seed + 1)
    names = [f"gpu-{i:05d}" for i in range(cfg.nodes)]
    index = {name: i for i, name in enumerate(names)}
    tests = cfg.tests
    z_h = cfg.staleness_days * 24
    cluster = _Cluster(cfg, random.Random(cfg.seed + 2))
    policy = priority.Policy(staleness=dt.timedelta(hours=z_h),
                             failed_retest=dt.timedelta(hours=cfg.failed_retest_hours),
                             max_pairs=cfg.pairs_per_run())
    # last executed result per pair, in simulated hours (None: never)
    last: dict[tuple[str, str], float] = {}
    states: dict[tuple[str, str], priority.PairState] = {}
    retest_h = cfg.failed_retest_hours if cfg.failed_retest_hours > 0 else z_h
    # When each node next has a due pair. Handing priority.plan only the free nodes that have one is
    # exact (a node without a due pair adds no candidate) and keeps 5,000-node runs in seconds.
    node_due = [-math.inf] * cfg.nodes
    if cfg.start == "steady":
        for name in names:
            for test in tests:
                at = -rnd.random() * z_h
                last[(name, test)] = at
                when = T0 + dt.timedelta(hours=at)
                states[(name, test)] = priority.PairState("pass", when, when, "pass")
            node_due[index[name]] = min(last[(name, t)] for t in tests) + z_h
    hours = int(cfg.days * 24)
    coverage, worst = [], 0.0
    executed = skipped = preempted = failed = 0
    plan_s = 0.0
    never = -math.inf
    for hour in range(hours):
        cluster.advance(hour)
        now = T0 + dt.timedelta(hours=hour)
        free = [names[n] for n in sorted(cluster.free) if node_due[n] <= hour]
        t = time.perf_counter()
        planned = priority.plan(free, tests, states, now=now, policy=policy)
        plan_s += time.perf_counter() - t
        slots = [0.0] * min(cfg.slots, len(planned))  # heap: minutes into the run when a slot is free again
        for pair in planned:
            start = heapq.heappop(slots)
            duration = cfg.pod_startup_minutes + cfg.suite_minutes[pair.test_name]
            key = (pair.node_name, pair.test_name)
            if start > cfg.max_queue_minutes or start + duration > cfg.run_window_minutes:
                skipped += 1
                heapq.heappush(slots, start)
                continue
            n = index[pair.node_name]
            end_h = hour + (start + duration) / 60
            prev = states.get(key)
            claimed = (cluster.until[n] - hour) * 60  # minutes into the run when a user job takes the node
            if claimed <= start or claimed < start + duration:
                # before our pod starts: the pre-submit re-check skips it; after: the user job preempts it
                what = "skipped" if claimed <= start else "preempted"
                if what == "skipped":
                    skipped += 1
                    heapq.heappush(slots, start)
                else:
                    preempted += 1
                    heapq.heappush(slots, claimed)
                at = now + dt.timedelta(minutes=min(claimed, start + duration))
                states[key] = priority.PairState(prev.status if prev else None, prev.finished_at if prev else None,
                                                 at, what)
                continue
            heapq.heappush(slots, start + duration)
            status = "fail" if outcomes.random() < cfg.failure_rate else "pass"
            failed += status == "fail"
            executed += 1
            at = now + dt.timedelta(minutes=start + duration)
            states[key] = priority.PairState(status, at, at, status)
            last[key] = end_h
            node_due[n] = min(
                (last[(pair.node_name, t)] + (z_h if states[(pair.node_name, t)].status == "pass" else retest_h))
                if (pair.node_name, t) in last else -math.inf for t in tests)
        oldest = min(last.values()) if len(last) == cfg.nodes * len(tests) else never
        worst = max(worst, hour - oldest)
        if stop_above_h is not None and worst > stop_above_h:
            break
        if hour % 24 == 23 or hour == hours - 1:
            fresh = sum(1 for v in last.values() if hour - v <= z_h)
            coverage.append(((hour + 1) / 24, fresh / (cfg.nodes * len(tests))))
    end = hours
    ages = sorted(end - v for v in last.values()) + [math.inf] * (cfg.nodes * len(tests) - len(last))
    return SimResult(
        config=cfg, coverage=coverage, worst_staleness_h=worst,
        final_p50_h=_quantile(ages, 0.5), final_p95_h=_quantile(ages, 0.95), final_max_h=ages[-1],
        executed=executed, skipped=skipped, preempted=preempted, failed=failed,
        never_validated=cfg.nodes * len(tests) - len(last), plan_seconds=plan_s,
        wall_seconds=time.perf_counter() - started)


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    if not sorted_values:
        return math.nan
    return sorted_values[min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))]


def min_slots(cfg: SimConfig, target_h: float) -> tuple[int | None, SimResult, dict[int, SimResult]]:
    """The fewest slots whose simulated worst staleness stays within ``target_h``.

    First a reference run with a slot per node: what user occupancy alone allows (nodes that stay busy
    for days cannot be validated by any number of slots). When even that misses the target, returns
    None with the reference; the search then finds the slots that reach the reference's worst
    staleness (more slots would not help). Doubling, then bisection, the same user jobs for each try."""
    tried: dict[int, SimResult] = {}
    floor = run(dataclasses.replace(cfg, slots=cfg.nodes, max_pairs=cfg.nodes))
    goal = target_h if floor.worst_staleness_h <= target_h else floor.worst_staleness_h + 1.0

    def ok(slots: int) -> bool:
        if slots not in tried:
            tried[slots] = run(dataclasses.replace(cfg, slots=slots), stop_above_h=goal)
        return tried[slots].worst_staleness_h <= goal

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
    return (hi if floor.worst_staleness_h <= target_h else None), floor, tried


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
    p = sub.add_parser("simulate", help="size the pool: the real prioritizer over a simulated cluster",
                       description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--days", type=float, default=28.0, help="simulated period (default 28)")
    p.add_argument("--slots", type=int, default=2, help="pool slots (concurrent validation pods)")
    p.add_argument("--occupancy", type=float, default=0.85, help="share of time nodes are busy with user jobs")
    p.add_argument("--job-hours", type=float, default=4.0, help="median user job length (log-normal)")
    p.add_argument("--job-sigma", type=float, default=0.8, help="log-normal shape of job lengths")
    p.add_argument("--max-job-hours", type=float, default=24.0, help="job time limit of the cluster")
    p.add_argument("--suite-minutes", default=",".join(f"{k}={v:g}" for k, v in DEFAULT_SUITE_MINUTES.items()),
                   help="suite=minutes,... (the enabled suites and how long each runs)")
    p.add_argument("--staleness", default=None,
                   help="the prioritizer's threshold Z (default 7d; with --target-staleness: the target less "
                        "the longest job and 12 h, so one full-length job fits before the target)")
    p.add_argument("--failure-rate", type=float, default=0.01)
    p.add_argument("--max-pairs", type=int, default=None, help="per run (default: what the slots run in a run)")
    p.add_argument("--gpu-models", default="NVIDIA-H100-80GB-HBM3=1", help="model=share,...")
    p.add_argument("--start", choices=("steady", "fresh"), default="steady")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--target-staleness", default=None,
                   help="e.g. 7d: print the minimum slots keeping the worst staleness within it")
    p.add_argument("--format", choices=("table", "json"), default="table")
    return p


def _config(args: argparse.Namespace) -> tuple[SimConfig, float | None]:
    target_h = parse_duration_hours(args.target_staleness, "--target-staleness") if args.target_staleness else None
    if args.staleness:
        z_h = parse_duration_hours(args.staleness, "--staleness")
    else:
        z_h = max(target_h / 2, target_h - args.max_job_hours - 12) if target_h else 7 * 24.0
    cfg = SimConfig(nodes=args.nodes, days=args.days, slots=args.slots, occupancy=args.occupancy,
                    job_hours=args.job_hours, job_sigma=args.job_sigma, max_job_hours=args.max_job_hours,
                    suite_minutes=_shares(args.suite_minutes, "--suite-minutes"), staleness_days=z_h / 24,
                    failure_rate=args.failure_rate, max_pairs=args.max_pairs,
                    gpu_models=_shares(args.gpu_models, "--gpu-models"), start=args.start, seed=args.seed)
    if target_h is not None and z_h >= target_h:
        raise InvalidSimulation(
            f"--staleness ({z_h / 24:g}d) must be below --target-staleness ({target_h / 24:g}d): a pair only "
            "becomes due at the threshold, so its worst staleness is the threshold plus the wait for a free node")
    return cfg, target_h


def _h(hours: float) -> str:
    if math.isinf(hours):
        return "never"
    return f"{hours / 24:.1f}d" if hours >= 48 else f"{hours:.0f}h"


def render(result: SimResult) -> str:
    cfg = result.config
    lines = [f"simulated {cfg.nodes:,} nodes x {len(cfg.tests)} suites for {cfg.days:g} days: {cfg.slots} slot(s), "
             f"{cfg.pairs_per_run()} pairs/run max, occupancy {cfg.occupancy:.0%} (jobs median {cfg.job_hours:g} h, "
             f"at most {cfg.max_job_hours:g} h), "
             f"threshold Z {cfg.staleness_days:g}d, failure rate {cfg.failure_rate:.1%}, start {cfg.start}",
             "coverage (pairs validated within Z), by day:"]
    step = max(1, len(result.coverage) // 14)
    lines.append("  " + "  ".join(f"d{day:g} {share:.1%}" for day, share in result.coverage[::step]))
    lines.append(f"staleness per pair at the end: p50 {_h(result.final_p50_h)}, p95 {_h(result.final_p95_h)}, "
                 f"max {_h(result.final_max_h)}; worst over the period {_h(result.worst_staleness_h)}")
    lines.append(f"attempts: {result.executed:,} executed ({result.failed:,} failed), {result.preempted:,} preempted "
                 f"by user jobs, {result.skipped:,} skipped (queue limit, or the node taken before the pod started); never validated at the end: "
                 f"{result.never_validated:,}")
    lines.append(f"took {result.wall_seconds:.2f} s ({result.plan_seconds:.2f} s in priority.plan)")
    return "\n".join(lines)


def cmd(args: argparse.Namespace, out=None) -> int:
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
    slots, floor, tried = min_slots(cfg, target_h)
    best = min((n for n, r in tried.items() if r.worst_staleness_h <= max(target_h, floor.worst_staleness_h + 1)),
               default=None)
    if args.format == "json":
        print(json.dumps({"target_staleness_h": target_h, "min_slots": slots, "slots_reaching_floor": best,
                          "occupancy_floor_h": floor.worst_staleness_h,
                          "tried": {k: v.to_dict() for k, v in sorted(tried.items())}}, indent=2), file=out)
        return 0 if slots is not None else 1
    print(f"with a slot per node (user occupancy alone): worst staleness {_h(floor.worst_staleness_h)}", file=out)
    for n, res in sorted(tried.items()):
        print(f"slots={n}: worst staleness {_h(res.worst_staleness_h)}"
              f"{'+ (stopped early)' if res.worst_staleness_h > max(target_h, floor.worst_staleness_h + 1) else ''}, "
              f"{res.wall_seconds:.1f} s", file=out)
    if best is not None:
        print(render(tried[best]), file=out)
    if slots is None:
        print(f"no number of slots keeps the worst staleness within {_h(target_h)}: user jobs keep some nodes busy "
              f"longer (worst {_h(floor.worst_staleness_h)} even with a slot per node; {best} slot(s) reach that). "
              "Lower --staleness, or accept the occupancy bound.", file=out)
        print(f"min_slots=none target_staleness={_h(target_h)} nodes={cfg.nodes} slots_reaching_floor={best}", file=out)
        return 1
    print(f"min_slots={slots} target_staleness={_h(target_h)} nodes={cfg.nodes}", file=out)
    return 0
