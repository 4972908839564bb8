"""Fail-slow in the simulated fleet: nodes that run degraded without failing, what their speed measurements
read, the multi-node user jobs they pace, and when the product's rules find them.

A **slow fault** degrades one node from a random time (a Poisson process per node, ``rate`` per 1,000
node-days) with a kind (``SLOW_KINDS``): which speed measurements it lowers and by how much, how much of that
a synchronous job on the node feels, and how likely a user job on it raises a passive speed signal (throttle
reasons, a clock under load, a link trained below its rate or width). It lasts until a rule finds it (then it
is repaired: degraded hardware does not heal by itself).

Every node also has a **natural spread** (its own speed factor per measurement, normal around 1) and
**transient slowness that is not a fault**: episodes of network congestion (the measurements that cross the
fabric) or a noisy neighbour (shared power or cooling: the ones on the GPUs), each lasting from a minute to
ten hours; every measurement adds a little noise. A healthy node flagged failing is a false straggler.

A user job on a node is one node of a job of ``k`` nodes (``JOB_NODES``): a synchronous job runs at its
slowest node's pace, so the hours a job slice runs on a degraded node cost ``k`` node-hours (**slow
job-node-hours**). The cluster's per-node occupancy is unchanged (the other ``k - 1`` nodes are not
simulated; two degraded nodes in one job, rare at these rates, count twice).

Judging is the product's: a measurement is a ``fleet_verdicts`` sample judged against the fleet's per-node
values (``node_value``, ``fleet_baseline``: the baseline over the fleet, recomputed once per run and metric,
the judged node's own value left in; ``is_low``: straggler) and against the node's own past (``judge_metric``
over the node's own samples: drift), with the default ``BaselinePolicy``; the probe's outcomes and the
passive signals give the node's state through ``fail_slow.slow_state``, and the probe's schedule is
``fail_slow.probe_due``. Pure Python, its own random streams: the same faults, spread and transients whatever
rule is compared.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import heapq
import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

from cluster_doctor.domain import fail_slow, fleet_verdicts

# The speed measurements by role: the health sweep's probe (per GPU a few seconds of GEMM and HBM bandwidth,
# and an intra-node all-reduce over NVLink), dl_unit's GEMM and HBM minima, nccl_loopback's bus bandwidth
# (forced through the node's HCAs, so it crosses PCIe, the HCA and the fabric). Values are nominal H100 SXM
# figures; only ratios to the fleet matter.
GEMM, HBM, NVLINK, FABRIC = "gemm", "hbm", "nvlink", "fabric"
PROBE_SUITE = "gpu_health"
PROBE_METRICS = {"probe_gemm_tflops_min": GEMM, "probe_hbm_gbps_min": HBM, "probe_allreduce_busbw_gbps": NVLINK}
SUITE_METRICS = {"dl_unit": {"gemm_bf16_tflops_min": GEMM, "mem_bw_gbps_min": HBM},
                 "nccl_loopback": {"nccl_busbw_gbps": FABRIC}}
NOMINAL = {"probe_gemm_tflops_min": 700.0, "probe_hbm_gbps_min": 3000.0, "probe_allreduce_busbw_gbps": 360.0,
           "gemm_bf16_tflops_min": 700.0, "mem_bw_gbps_min": 3000.0, "nccl_busbw_gbps": 180.0}
PCIE = "pcie"  # a role of its own: nccl_loopback's path to the HCAs crosses it, the probe does not
ROLES_SEEN = {FABRIC: (FABRIC, PCIE)}  # nccl_loopback's busbw is lowered by a slow HCA or a slow PCIe link


@dataclasses.dataclass(frozen=True)
class SlowKind:
    """A kind of degraded node: the roles it lowers, by a share drawn uniformly from ``slowdown``; the share
    of that a synchronous job on the node feels (``job_pace``); the probability a user job on it raises a
    passive speed signal (``signal``); ``share``: of all slow faults, by default."""

    name: str
    share: float
    roles: tuple[str, ...]
    slowdown: tuple[float, float]
    job_pace: float
    signal: float
    what: str

    @property
    def seen_by(self) -> str:
        probe = [m for m, role in PROBE_METRICS.items() if role in self.roles]
        suites = [s for s, metrics in SUITE_METRICS.items()
                  if any(r in self.roles for role in metrics.values() for r in ROLES_SEEN.get(role, (role,)))]
        return ", ".join(probe + suites) + (f"; a passive signal {self.signal:.0%} of jobs" if self.signal else "")


# Shares, slowdowns and signal probabilities are assumptions (no published per-kind table for GPU fleets we
# know of), guided by Falcon (Wu et al., 2024, arXiv 2410.12588: fail-slows on a 10,000-GPU cluster come from
# GPU computation and cross-node networking) and Gunawi et al. (FAST '18: all hardware kinds fail slow, often
# by far more than 10 %); docs/simulator.md gives the reasoning.
SLOW_KINDS: tuple[SlowKind, ...] = (
    SlowKind("throttle", 0.40, (GEMM,), (0.05, 0.40), 1.0, 0.9,
             "a GPU that throttles (cooling, power brake, hardware slowdown): clocks cut under load"),
    SlowKind("hbm_slow", 0.13, (HBM,), (0.10, 0.30), 0.5, 0.0,
             "slow HBM: lower memory bandwidth, no counter that says so"),
    SlowKind("nvlink", 0.12, (NVLINK,), (0.25, 0.50), 0.5, 0.5,
             "NVLink degraded: links down or trained below rate"),
    SlowKind("pcie", 0.10, (PCIE,), (0.25, 0.50), 0.3, 0.9,
             "PCIe trained below the SKU's generation or width (GPU or HCA side)"),
    SlowKind("hca", 0.25, (FABRIC,), (0.50, 0.50), 0.6, 0.95,
             "an HCA at reduced rate: a port trained at half width or a lower speed"),
)
SLOW = {k.name: k for k in SLOW_KINDS}
DEFAULT_SHARES = {k.name: k.share for k in SLOW_KINDS}

# Transient slowness that is not a fault (assumptions): CONGESTION lowers what crosses the fabric, a NOISY
# neighbour (shared power or cooling) what runs on the GPUs; durations log-uniform from a minute to ten hours
# (Falcon: "lasting from tens of seconds to nearly ten hours").
CONGESTION, NOISY = "congestion", "noisy neighbour"
TRANSIENT_ROLES = {CONGESTION: (FABRIC,), NOISY: (GEMM, HBM, NVLINK)}
TRANSIENT_SHARES = {CONGESTION: 0.7, NOISY: 0.3}
TRANSIENT_H = (1 / 60, 10.0)
TRANSIENT_DEPTH = (0.05, 0.30)

# why a node was made failing for speed
TWO_PROBES, PROBE_AND_SIGNAL, CONFIRMED = "two probes", "probe and signal", "confirmed verdict"
PROBE_AND_BUNDLE = "probe and bundle verdict"

# Nodes per user job, weighted by the node-hours jobs of that size hold (assumption: most GPU time in jobs of
# several nodes, as in large training clusters); a node's job is one node of such a job.
JOB_NODES = {1: 0.20, 2: 0.10, 4: 0.15, 8: 0.20, 16: 0.15, 32: 0.10, 64: 0.10}


@dataclasses.dataclass(frozen=True)
class SlowSettings:
    """What the fail-slow model reads of the simulation's settings (``simulate.SimConfig``)."""

    nodes: int
    hours: float
    rate: float  # slow faults per 1,000 node-days
    shares: Mapping[str, float]
    spread: float  # natural node-to-node spread (a normal's sigma, share of the nominal)
    noise: float  # a measurement's own noise (sigma)
    transient_rate: float  # transient episodes per node-day
    false_signal: float  # a user job on a healthy node raises a passive speed signal with this probability
    signal_h: float  # from the job's start to the signal's read
    signal_window_h: float  # a signal (or a bundle suite's verdict) counts with the probe's outcome this long
    seed: int
    confirm_spacing_h: float = 0.0  # a suspect's confirming probe waits this long; two flagged probes this apart


@dataclasses.dataclass
class SlowFault:
    """One degraded node: since when, of which kind, how slow; ``suspect_since``: marked suspect, no user job
    started since; ``detected_at``: a rule found it; ``node_hours``: slow job-node-hours it caused."""

    node: int
    at: float
    kind: SlowKind
    slowdown: float
    suspect_since: float | None = None
    detected_at: float | None = None
    jobs: int = 0
    node_hours: float = 0.0
    lost_node_hours: float = 0.0


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


class Slow:
    """The slow faults, the spread and the transients of one simulation; the speed samples the suites and the
    probe record, judged as the product judges them; the user-job slices the degraded nodes pace."""

    def __init__(self, s: SlowSettings, t0: dt.datetime, *, policy: fleet_verdicts.BaselinePolicy | None = None):
        self.s, self.t0 = s, t0
        self.policy = policy or fleet_verdicts.BaselinePolicy()
        times = random.Random(s.seed)
        self._noise, self._signal = random.Random(s.seed + 1), random.Random(s.seed + 2)
        kinds = [SLOW[name] for name in s.shares]
        weights = [s.shares[name] for name in s.shares]
        per_hour = s.rate / 1000 / 24
        self._pending: list[tuple[float, int, str, float]] = []
        for node in range(s.nodes):
            at = times.expovariate(per_hour) if per_hour > 0 else math.inf
            while at < s.hours:
                kind = times.choices(kinds, weights)[0]
                self._pending.append((at, node, kind.name, times.uniform(*kind.slowdown)))
                at += times.expovariate(per_hour)
        heapq.heapify(self._pending)
        # the natural spread: a speed factor per node and metric
        spread = random.Random(s.seed + 3)
        metrics = list(PROBE_METRICS) + [m for ms in SUITE_METRICS.values() for m in ms]
        self.factor = {m: [max(0.5, spread.gauss(1.0, s.spread)) for _ in range(s.nodes)] for m in metrics}
        # transient episodes per node: (start, end, kind, depth), in time order
        episodes = random.Random(s.seed + 4)
        self.transients: list[list[tuple[float, float, str, float]]] = [[] for _ in range(s.nodes)]
        t_per_hour = s.transient_rate / 24
        lo, hi = math.log(TRANSIENT_H[0]), math.log(TRANSIENT_H[1])
        for node in range(s.nodes):
            at = -TRANSIENT_H[1] + (episodes.expovariate(t_per_hour) if t_per_hour > 0 else math.inf)
            while at < s.hours:
                kind = episodes.choices(list(TRANSIENT_SHARES), list(TRANSIENT_SHARES.values()))[0]
                length = math.exp(episodes.uniform(lo, hi))
                self.transients[node].append((at, at + length, kind, episodes.uniform(*TRANSIENT_DEPTH)))
                at += episodes.expovariate(t_per_hour)
        self._sizes = [random.Random(s.seed * 100_003 + node) for node in range(s.nodes)]
        self.active: dict[int, SlowFault] = {}
        self.all: list[SlowFault] = []
        self.signals: list[tuple[float, int]] = []  # (when a passive signal is read, node)
        self.signal_at: dict[int, float] = {}  # node -> its latest passive signal's read
        # (node, suite) -> (when its last attempt ended, whether a fleet verdict fell on it): dl_unit, nccl_loopback
        self.bundle_at: dict[tuple[int, str], tuple[float, bool]] = {}
        self.draining: dict[int, SlowFault] = {}  # found while a user job ran: it ends on the degraded node
        self.job: dict[int, tuple[float, int]] = {}  # node -> (its user job's start, nodes in that job)
        self.loaded: set[int] = set()  # nodes that ran a user job since their last probe
        self.last_probe: dict[int, dt.datetime] = {}
        self.probes: dict[int, list[fail_slow.ProbeOutcome]] = {}
        self.samples: dict[str, dict[str, list[fleet_verdicts.Sample]]] = {m: {} for m in metrics}
        self.values: dict[str, dict[str, float]] = {m: {} for m in metrics}
        self._baseline: dict[str, tuple[float, fleet_verdicts.Baseline | None]] = {}
        self._moved: dict[str, int] = {}
        self._flags: dict[tuple[int, str], frozenset[str]] = {}  # (node, metric) -> kinds on its previous attempt
        self._ids = 0
        self.false_failing = self.false_suspects = self.probed = self.flagged = self.signalled = 0
        self.false_by: dict[str, int] = {}  # false stragglers by the rule that failed them
        self.node_hours = 0.0  # user-job node-hours on every node (the denominator of the slow share)

    # ------------------------------------------------------------------ the fleet's history
    def seed_history(self, names: Sequence[str], metrics: Sequence[str], before_h: float) -> None:
        """Steady start: every node has ``drift_samples`` healthy values of ``metrics`` spread over the
        ``before_h`` hours before the start (no fault, no transient), as a fleet in service would."""
        rnd = random.Random(self.s.seed + 5)
        for node, name in enumerate(names):
            for metric in metrics:
                for _ in range(self.policy.drift_samples):
                    at = -rnd.random() * before_h
                    value = NOMINAL[metric] * self.factor[metric][node] * rnd.gauss(1.0, self.s.noise)
                    self._record(metric, name, at, value, frozenset())

    def _record(self, metric: str, name: str, at: float, value: float, flagged: frozenset[str]) -> None:
        """Keep a measurement as the store would for the verdicts: only unflagged values feed a node's fleet
        value and its own trailing median, the latest ``drift_samples`` of them at most."""
        if flagged:
            return
        self._ids += 1
        kept = self.samples[metric].setdefault(name, [])
        kept.append(fleet_verdicts.Sample(self._ids, name, self.t0 + dt.timedelta(hours=at), value))
        del kept[:-self.policy.drift_samples]
        value_now = fleet_verdicts.node_value(kept, self.policy)
        if value_now is not None:
            self.values[metric][name] = value_now

    def _fleet(self, metric: str, at: float) -> fleet_verdicts.Baseline | None:
        """The fleet's baseline of ``metric`` for the run at ``at`` (cached per run hour): the product's
        ``fleet_baseline`` over every node's value from its samples within the window."""
        hour = math.floor(at)
        cached = self._baseline.get(metric)
        if cached is None or cached[0] != hour:
            if self._moved.get(metric) != hour // 24:  # once a day: the window moved on
                self._moved[metric] = hour // 24
                since = self.t0 + dt.timedelta(hours=at - self.policy.window_days * 24)
                values = self.values[metric]
                for name, kept in self.samples[metric].items():
                    if kept and kept[0].finished_at < since:
                        value = fleet_verdicts.node_value([x for x in kept if x.finished_at >= since], self.policy)
                        if value is None:
                            values.pop(name, None)
                        else:
                            values[name] = value
            self._baseline[metric] = cached = (hour, fleet_verdicts.fleet_baseline(self.values[metric], self.policy))
        return cached[1]

    def judge(self, metric: str, node: int, name: str, at: float, value: float) -> frozenset[str]:
        """The verdict kinds on one measurement (straggler: ``is_low`` against the fleet's baseline; drift:
        ``judge_metric`` against the node's own past); it is recorded, flagged or not."""
        now = self.t0 + dt.timedelta(hours=at)
        latest = fleet_verdicts.Sample(self._ids + 1, name, now, value)
        found = set(fleet_verdicts.judge_metric(latest, {name: self.samples[metric].get(name, [])},
                                                self.policy, now=now))
        base = self._fleet(metric, at)
        if base is not None and fleet_verdicts.is_low(value, base.median, base.mad, self.policy):
            found.add(fleet_verdicts.STRAGGLER)
        flagged = frozenset(found)
        self._record(metric, name, at, value, flagged)
        return flagged

    # ------------------------------------------------------------------ what a measurement reads
    def value(self, metric: str, role: str, node: int, at: float) -> float:
        """A measurement of ``metric`` on ``node`` at ``at``: nominal x the node's spread x its slow fault x
        a transient episode going on x noise."""
        speed = NOMINAL[metric] * self.factor[metric][node] * self._noise.gauss(1.0, self.s.noise)
        fault = self.active.get(node)
        roles = ROLES_SEEN.get(role, (role,))
        if fault is not None and any(r in fault.kind.roles for r in roles):
            speed *= 1 - fault.slowdown
        for start, end, kind, depth in self._episodes(node, at):
            if any(r in TRANSIENT_ROLES[kind] for r in roles):
                speed *= 1 - depth
        return speed

    def _episodes(self, node: int, at: float) -> list[tuple[float, float, str, float]]:
        episodes = self.transients[node]
        while episodes and episodes[0][1] < at - TRANSIENT_H[1]:
            episodes.pop(0)  # long over: never read again (time only moves on)
        return [e for e in episodes if e[0] <= at < e[1]]

    # ------------------------------------------------------------------ the probe and the node's state
    def probe_now(self, node: int, at: float, *, min_interval_h: float, max_age_h: float) -> bool:
        """Whether this health check probes the node: ``fail_slow.probe_due``."""
        now = self.t0 + dt.timedelta(hours=at)
        return fail_slow.probe_due(now, self.last_probe.get(node), busy_since=node in self.loaded,
                                   min_interval=dt.timedelta(hours=min_interval_h),
                                   max_age=dt.timedelta(hours=max_age_h),
                                   suspect=self.awaiting(node),
                                   confirm_after=dt.timedelta(hours=self.s.confirm_spacing_h))

    def awaiting(self, node: int) -> bool:
        """A sighting no probe answered yet: the last probe was flagged, or a signal or a bundle suite's
        verdict came after it (the second sighting decides, so a sweep probes it once ``probe_due``'s
        confirmation spacing has passed)."""
        probes = self.probes.get(node)
        if probes and probes[-1].flagged:
            return True
        last = self.last_probe.get(node)
        seen = [self.signal_at.get(node)] + [b[0] for test in SUITE_METRICS
                                             if (b := self.bundle_at.get((node, test))) is not None and b[1]]
        return any(at is not None and (last is None or self.t0 + dt.timedelta(hours=at) > last) for at in seen)

    def signal_flagged(self, node: int, at: float) -> bool:
        signal = self.signal_at.get(node)
        return signal is not None and at - signal <= self.s.signal_window_h

    def bundle_verdicts(self, node: int, at: float) -> list[dt.datetime]:
        """When dl_unit's and nccl_loopback's last attempts ended, those with a fleet verdict that ended
        within the window (what ``store.fail_slow`` reads as ``slow_state``'s ``bundle_verdicts``)."""
        out = []
        for test in SUITE_METRICS:
            last = self.bundle_at.get((node, test))
            if last is not None and last[1] and at - last[0] <= self.s.signal_window_h:
                out.append(self.t0 + dt.timedelta(hours=last[0]))
        return out

    def state(self, node: int, at: float) -> fail_slow.SlowState:
        return fail_slow.slow_state(self.probes.get(node, []), self.signal_flagged(node, at),
                                    bundle_verdicts=self.bundle_verdicts(node, at),
                                    min_spacing=dt.timedelta(hours=self.s.confirm_spacing_h))

    def probe(self, node: int, name: str, at: float) -> tuple[fail_slow.SlowState, bool]:
        """The probe ran on ``node`` at ``at``: its metrics judged, its outcome kept; the node's state and
        whether this probe was flagged."""
        self.probed += 1
        flagged = False
        for metric, role in PROBE_METRICS.items():
            flagged |= bool(self.judge(metric, node, name, at, self.value(metric, role, node, at)))
        self.flagged += flagged
        when = self.t0 + dt.timedelta(hours=at)
        self.probes[node] = [*self.probes.get(node, [])[-1:], fail_slow.ProbeOutcome(when, flagged)]
        self.last_probe[node] = when
        self.loaded.discard(node)
        return self.state(node, at), flagged

    def suite(self, test: str, node: int, name: str, at: float) -> tuple[bool, bool]:
        """A suite that measures speed (dl_unit, nccl_loopback) ran to its end: its metrics judged as the
        product judges them after it is recorded. (flagged: a verdict on this attempt; confirmed: the same
        kind on the pair's previous executed attempt too, which makes the node failing)."""
        flagged = confirmed = False
        for metric, role in SUITE_METRICS.get(test, {}).items():
            kinds = self.judge(metric, node, name, at, self.value(metric, role, node, at))
            confirmed |= bool(kinds & self._flags.get((node, metric), frozenset()))
            flagged |= bool(kinds)
            self._flags[(node, metric)] = kinds
        if test in SUITE_METRICS:
            self.bundle_at[(node, test)] = (at, flagged)
        return flagged, confirmed

    def failing(self, node: int, at: float, why: str) -> bool:
        """A rule made ``node`` failing for speed at ``at``: its slow fault is found (since it turned suspect
        if no user job started between), else a false straggler; either way its history of flags is over."""
        self.probes.pop(node, None)
        self.signal_at.pop(node, None)
        for key in [k for k in self._flags if k[0] == node]:
            del self._flags[key]
        for key in [k for k in self.bundle_at if k[0] == node]:
            del self.bundle_at[key]
        fault = self.active.pop(node, None)
        if fault is None:
            self.false_failing += 1
            self.false_by[why] = self.false_by.get(why, 0) + 1
            return False
        if node in self.job:  # quarantined: no new job lands; the running one ends on the degraded node
            self.draining[node] = fault
        fault.detected_at = fault.suspect_since if fault.suspect_since is not None else at
        return True

    def suspect(self, node: int, at: float) -> None:
        """A sighting made ``node`` suspect for speed at ``at``."""
        fault = self.active.get(node)
        if fault is None:
            self.false_suspects += 1
        elif fault.suspect_since is None:
            fault.suspect_since = at

    # ------------------------------------------------------------------ events, user jobs
    def next_at(self) -> float:
        """When the next slow fault or passive signal happens (inf: none left)."""
        return min(self._pending[0][0] if self._pending else math.inf,
                   self.signals[0][0] if self.signals else math.inf)

    def pop(self, busy: bool | None = None) -> tuple[str, int, float]:
        """The next event: ("fault", node, when) — a node degrades — or ("signal", node, when)."""
        if self.signals and (not self._pending or self.signals[0][0] <= self._pending[0][0]):
            at, node = heapq.heappop(self.signals)
            self.signal_at[node] = at
            self.signalled += 1
            return "signal", node, at
        at, node, kind, slowdown = heapq.heappop(self._pending)
        if node not in self.active:
            fault = SlowFault(node, at, SLOW[kind], slowdown)
            self.active[node] = fault
            self.all.append(fault)
            if node in self.job:  # the running job now runs on a degraded node
                fault.jobs += 1
                self._maybe_signal(node, at, fault)
        return "fault", node, at

    def _maybe_signal(self, node: int, at: float, fault: SlowFault | None) -> None:
        p = fault.kind.signal if fault is not None else self.s.false_signal
        if self._signal.random() < p:
            heapq.heappush(self.signals, (at + self.s.signal_h, node))

    def job_started(self, node: int, at: float) -> None:
        """A user job lands on ``node``: one node of a job of k; on a degraded node it counts, ends a
        suspect's quiet spell and may raise a passive signal; on a healthy one a false signal may come."""
        sizes = self._sizes[node]
        self.job[node] = (at, sizes.choices(list(JOB_NODES), list(JOB_NODES.values()))[0])
        self.loaded.add(node)
        fault = self.active.get(node)
        if fault is not None:
            fault.jobs += 1
            fault.suspect_since = None
        self._maybe_signal(node, at, fault)

    def job_ended(self, node: int, at: float) -> None:
        """The user job on ``node`` ended at ``at``: its hours on a degraded node cost k node-hours each."""
        started = self.job.pop(node, None)
        if started is None:
            return
        start, k = started
        self.node_hours += k * (at - start)
        fault = self.active.get(node) or self.draining.pop(node, None)
        if fault is not None:
            hours = k * max(0.0, at - max(start, fault.at))
            fault.node_hours += hours
            fault.lost_node_hours += hours * fault.slowdown * fault.kind.job_pace

    def figures(self, end: float, node_days: float) -> dict[str, Any]:
        """The slow faults' time to detect (median, p90, max: one not found counts until the end or from its
        suspect mark with no job since), slow job-node-hours, false stragglers per 1,000 node-days."""
        for node in list(self.job):  # jobs still running at the end count so far
            self.job_ended(node, end)
        out: dict[str, Any] = {
            "slow_faults": len(self.all), "slow_undetected": sum(f.detected_at is None for f in self.all),
            "slow_job_node_hours": sum(f.node_hours for f in self.all),
            "slow_lost_node_hours": sum(f.lost_node_hours for f in self.all),
            "user_job_node_hours": self.node_hours,
            "false_stragglers": self.false_failing, "false_suspects": self.false_suspects,
            "false_stragglers_by_rule": dict(self.false_by),
            "false_stragglers_per_1000_node_days": 1000 * self.false_failing / node_days if node_days else 0.0,
            "probes": self.probed, "probes_flagged": self.flagged, "speed_signals": self.signalled,
            "slow_time_to_detect_h": None, "slow_by_kind": {}}
        if self.all:
            waits = [(f.detected_at if f.detected_at is not None else f.suspect_since
                      if f.suspect_since is not None else end) - f.at for f in self.all]
            out["slow_time_to_detect_h"] = {"median": _quantile(waits, 0.5), "p90": _quantile(waits, 0.9),
                                            "max": max(waits)}
            for kind in SLOW:
                mine = [(w, f) for w, f in zip(waits, self.all) if f.kind.name == kind]
                if mine:
                    out["slow_by_kind"][kind] = {
                        "faults": len(mine), "median_h": _quantile([w for w, _ in mine], 0.5),
                        "undetected": sum(f.detected_at is None for _, f in mine),
                        "job_node_hours": sum(f.node_hours for _, f in mine)}
        return out
