"""The pool simulator: the real planner and policies over a simulated cluster, to size the pool.

Every simulated hour is one run of the continuous_validation DAG. User jobs come and go on every node
(lengths from a log-normal distribution, cut at the cluster's job limit; idle gaps sized so the fleet
is busy the requested share of the time, or none at all with ``no_gap``: a queue-backed cluster where
a new job starts the moment one ends). With ``reserve``, the reservation policy the DAG applies
(``reservation.overdue`` / ``reservation.choose``, the same functions) taints overdue busy nodes: when
their job ends no new one starts until their validation is done. The free nodes are planned by
``planner.plan`` (``plan_hour``) — the planner the DAG's prioritize task calls — reserved nodes first,
every due suite of a chosen node in one bundle; the bundles then run on the pool's slots, a slot
running one node's suites one after another (the DAG's later steps outrank new nodes for a slot), within
the run's window. A bundle whose turn comes more than the queue limit after planning is skipped; a user
job claiming the node before a suite ends preempts it and skips the rest; a failed health check skips
the rest. All of these leave the pairs due, as in production. Executed results fail with the given
probability (and are retested after the failed-retest interval).

With ``peer_tests`` every run also plans peer tests — ``peers.match_peers``, the DAG's
function — among the free nodes no bundle took: each holds two free nodes and two pool slots at once for
its duration (after the run's bundles, in the same window and queue limit), a user job claiming either
node preempts it, and its staleness per node (hours since the node's last executed peer test) is its
own figure.

A run's result holds coverage over time, p50/p95/max staleness per pair, the worst staleness over the
period, the share of pair-hours within the target, and the reservations' idle GPU-hours; ``search`` finds
the fewest pool slots that keep every pair within a target (a search over slots, the same seed for each
try). ``cluster-doctor simulate`` (``cluster_doctor.cli.simulate``) parses its options and prints them.

The health sweep comes with the planner: free nodes with no due suite run gpu_health when
their last check is older than ``sweep_interval_hours``, after the due bundles on the same slots. With
``faults`` (``sim_faults``), nodes break at that rate and a broken node crashes user jobs; with
``signals`` a crash or an Xid makes the node suspect minutes later (tainted at once with reservation,
busy or free, as the DAG's fast path does), the hourly plan puts its whole bundle first, and a fast path
every ``fast_path_minutes`` triggers a run for the free suspects in between — as the DAG's
``suspect_signals`` decides: not while a run is running, nor within ``fast_path_quiet_minutes`` of the
scheduled one, which then waits for the triggered run's end (``max_active_runs`` 1). The result then holds
the time to detect, the user jobs on broken nodes, and what validation costs (``validation_share``: our
pods' GPU-hours and the reserved-idle ones — from a reserved node's job end to our first pod on it — over
the fleet's).

With ``slow_faults`` (or ``speed``), ``simulator.slow`` degrades nodes without failing them and gives every
measurement the node's spread, transients and noise: dl_unit's and nccl_loopback's metrics get the product's
fleet verdicts (today's rule), and with ``probe`` every gpu_health ``fail_slow.probe_due`` picks carries the
speed probe, whose verdicts and the passive speed signals give the node's state by ``fail_slow.slow_state``
(the new rule); ``goal`` compares the two over five seeds (``cluster-doctor simulate --goal``).

Pure Python, no cluster and no database: seconds at 1,000 nodes.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import heapq
import math
import random
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from cluster_doctor.domain import fast_path, peers, reservation
from cluster_doctor.domain.acceptance import AcceptancePolicy
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.nodes import parse_node_range
from cluster_doctor.domain.payloads import GpuNode, PlannedPair
from cluster_doctor.domain.planning import due
from cluster_doctor.domain.planning import plan as planner
from cluster_doctor.domain.planning import steps
from cluster_doctor.domain.planning.params import RunParams
from cluster_doctor.domain.status import EXECUTED, Status
from cluster_doctor.domain import fail_slow
from cluster_doctor.simulator import faults as sim_faults
from cluster_doctor.simulator import slow as sim_slow
from cluster_doctor.simulator.cluster import Cluster

# gpu_health reads NVML and the kernel log and runs DCGM's level-1 diagnostic, "quick deployment checks,
# normally lasting seconds" (dcgmi diag's reference): half a minute, not its 120 s budget; the pod's start
# (pod_startup_minutes) comes on top of every suite.
DEFAULT_SUITE_MINUTES = {"gpu_health": 0.5, "dl_unit": 12.0, "nccl_loopback": 6.0, "storage_fio": 10.0}
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
BUSY = "busy"  # why a simulated node is not free: a user job holds it


class InvalidSimulation(ValueError):
    pass


def _setting(name: str) -> Any:
    """The product's default of a setting: the simulated rules run with the thresholds the DAG runs with."""
    return Settings.model_fields[name].default


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
    staleness_days: float = _setting("staleness_days")  # the threshold Z: a pair is due when older
    target_days: float = 7.0  # the promise: within_target_share counts pair-hours at most this old
    failed_retest_hours: float = _setting("failed_retest_hours")
    failure_rate: float = 0.01
    max_pairs: int | None = None  # per run; None: what the slots can run in one run window
    run_window_minutes: float = 55.0  # a run ends before the next hourly one starts
    max_queue_minutes: float = _setting("max_queue_s") / 60
    gpu_models: dict = dataclasses.field(default_factory=lambda: {"NVIDIA-H100-80GB-HBM3": 1.0})
    gpus_per_node: int = 8
    start: str = "steady"  # steady: last results spread over the threshold; fresh: nothing validated yet
    bundle: bool = True  # every due suite of a chosen node in one run (False: one suite per node per run)
    bundle_ahead_hours: float = _setting("bundle_ahead_hours")
    no_gap: bool = False  # a queue-backed cluster: a new job starts the moment one ends
    reserve: bool = False  # taint overdue busy nodes (the DAG's opt-in reservation)
    reservation: dict = dataclasses.field(default_factory=dict)  # ReservationPolicy keys (target_days: ours)
    seed: int = 7
    peer_tests: bool = False  # plan peer tests too (setting peer_tests)
    peer_cadence_days: float = _setting("peer_cadence_days")
    peer_max_per_run: int = _setting("peer_max_per_run")
    peer_minutes: float = 10.0  # one peer test: both pods, NCCL all-reduce and ib_write_bw per rail
    sweep_interval_hours: float = _setting("sweep_interval_hours")  # the health sweep (0: off, --no-sweep)
    faults: float = 0.0  # faults per 1,000 node-days (0: none injected)
    fault_kinds: dict = dataclasses.field(default_factory=lambda: dict(sim_faults.DEFAULT_SHARES))
    crash_probability: float = 0.7  # a job on a broken node crashes (the running one included)
    signals: bool = True  # a crashed job or an Xid makes its node suspect (False: --no-signals)
    signal_minutes: float = 5.0  # from the crash or Xid to the node suspect (a busy one tainted, with reservation)
    fast_path_minutes: float = _setting("fast_path_minutes")  # the fast path reads the signals this often
    fast_path_quiet_minutes: float = _setting("fast_path_quiet_minutes")  # no fast-path run this close to the hour
    # nodes that join or return, some broken on arrival (assumed rates: no published ones we know)
    joins: int = 0  # nodes replaced by new ones over the period, each at a random time (no history)
    reboots: float = 0.0  # reboots per node per 30 days (maintenance, one node at a time)
    broken_on_join: float = 0.05  # a new node is broken on arrival (infant mortality)
    broken_on_reboot: float = 0.01  # a rebooted node comes back broken (a GPU lost at boot, a bad driver)
    bad_repair: float = 0.0  # a node back from repair is still broken (with faults)
    acceptance: bool = False  # the acceptance gate: a node that joined or returned runs its bundle before users
    # gated at once at most (setting acceptance's max_nodes); the rest: suspects
    acceptance_max_nodes: int = AcceptancePolicy().max_nodes
    # fail-slow (simulator.slow): nodes degraded without failing, the speed each measurement reads (spread,
    # transients, noise) and the rules that find them. ``speed`` models it at all (implied by slow_faults > 0);
    # ``probe``: the speed probe in the health sweep (fail_slow.probe_due) and the passive speed signals — the
    # new rule; without them only dl_unit's and nccl_loopback's fleet verdicts at their staleness (today's)
    speed: bool = False
    slow_faults: float = 0.0  # slow faults per 1,000 node-days (an assumption: docs/simulator.md)
    slow_kinds: dict = dataclasses.field(default_factory=lambda: dict(sim_slow.DEFAULT_SHARES))
    probe: bool = True
    probe_minutes: float = 0.25  # the probe inside gpu_health's pod: GEMM, HBM, all-reduce, all GPUs at once
    probe_min_interval_hours: float = 6.0  # a loaded node is probed at most this often (probe_due) ...
    probe_max_age_hours: float = 24.0  # ... an idle one at least this often
    speed_spread: float = 0.02  # natural node-to-node spread of every measurement (sigma)
    speed_noise: float = 0.01  # one measurement's own noise (sigma)
    transient_rate: float = 0.2  # transient slowness episodes (congestion, a noisy neighbour) per node-day
    false_signal: float = 0.005  # a user job on a healthy node raises a passive speed signal
    signal_window_hours: float = 24.0  # a passive signal (or a bundle suite's verdict) counts with a probe's flag this long
    # a suspect's confirming probe waits this long after its last probe; two flagged probes fail it this far apart
    confirm_spacing_hours: float = _setting("slow_confirm_spacing_hours")

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
        self._check_faults()
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

    def _check_faults(self) -> None:
        for name in ("sweep_interval_hours", "faults", "signal_minutes", "fast_path_quiet_minutes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise InvalidSimulation(f"{name}: must be a number >= 0, got {value!r}")
        if not 0 < self.fast_path_minutes <= 60:
            raise InvalidSimulation(f"fast_path_minutes: must be in (0, 60], got {self.fast_path_minutes!r}")
        for name in ("bad_repair", "broken_on_join", "broken_on_reboot"):
            if isinstance(getattr(self, name), bool) or not 0 <= getattr(self, name) <= 1:
                raise InvalidSimulation(f"{name}: must be a share in [0, 1], got {getattr(self, name)!r}")
        if isinstance(self.joins, bool) or not isinstance(self.joins, int) or self.joins < 0:
            raise InvalidSimulation(f"joins: must be an integer >= 0, got {self.joins!r}")
        if isinstance(self.reboots, bool) or not 0 <= self.reboots < math.inf:
            raise InvalidSimulation(f"reboots: must be a number >= 0, got {self.reboots!r}")
        if not isinstance(self.acceptance_max_nodes, int) or self.acceptance_max_nodes < 1:
            raise InvalidSimulation(f"acceptance_max_nodes: must be an integer >= 1, got {self.acceptance_max_nodes!r}")
        for name in ("slow_faults", "probe_minutes", "probe_min_interval_hours", "probe_max_age_hours",
                     "speed_spread", "speed_noise", "transient_rate", "signal_window_hours",
                     "confirm_spacing_hours"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise InvalidSimulation(f"{name}: must be a number >= 0, got {value!r}")
        if isinstance(self.false_signal, bool) or not 0 <= self.false_signal <= 1:
            raise InvalidSimulation(f"false_signal: must be a share in [0, 1], got {self.false_signal!r}")
        unknown = [k for k in self.slow_kinds if k not in sim_slow.SLOW]
        if unknown or not self.slow_kinds or any(not v > 0 for v in self.slow_kinds.values()):
            raise InvalidSimulation(f"slow_kinds: shares > 0 of {', '.join(sim_slow.SLOW)}, got {self.slow_kinds!r}")
        if not 0 <= self.crash_probability <= 1:
            raise InvalidSimulation(f"crash_probability: must be a share in [0, 1], got {self.crash_probability!r}")
        unknown = [k for k in self.fault_kinds if k not in sim_faults.KINDS]
        if unknown or not self.fault_kinds or any(not v > 0 for v in self.fault_kinds.values()):
            raise InvalidSimulation(f"fault_kinds: shares > 0 of {', '.join(sim_faults.KINDS)}, got "
                                    f"{self.fault_kinds!r}")

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

    @property
    def models_speed(self) -> bool:
        return self.speed or self.slow_faults > 0


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
    # the health sweep's executed pairs; what validation costs (our pods' GPU-hours, and with the
    # reserved-idle ones, the share of the fleet's); suspects tainted, fast-path runs; with faults, the time
    # to detect them (hours; sim_faults.Faults.figures) and the user jobs a broken node ran meanwhile
    swept: int = 0
    validation_gpu_hours: float = 0.0
    validation_share: float = 0.0
    suspect_taints: int = 0
    fast_path_runs: int = 0
    faults: int = 0
    faults_undetected: int = 0
    time_to_detect_h: dict | None = None  # {"median", "p90", "max"}
    jobs_on_broken_node: dict | None = None  # {"mean", "p90"}
    faults_by_kind: dict | None = None
    # nodes that joined or returned broken (new, rebooted, back from repair), the user jobs that
    # started on them before a suite saw it, the gates applied; ``arrivals``: by how they came, {"nodes",
    # "broken", "jobs_on_broken"}
    returned_broken: int = 0
    jobs_on_returned_broken: int = 0
    gated: int = 0
    arrivals: dict | None = None
    # fail-slow (with speed): simulator.slow.Slow.figures — slow faults, their time to detect, slow
    # job-node-hours, false stragglers
    slow: dict | None = None
    plan_seconds: float = 0.0
    wall_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["config"] = dataclasses.asdict(self.config)
        return out


@dataclasses.dataclass
class _Counts:
    executed: int = 0
    skipped: int = 0
    preempted: int = 0
    failed: int = 0
    health_gated: int = 0
    swept: int = 0  # executed pairs of the health sweep
    validation_h: float = 0.0  # node-hours our pods held a node: executed suites, and preempted ones until then


@dataclasses.dataclass(frozen=True)
class _Ended:
    """How a bundle on a slot ended: when the slot is free again (minutes into its run), whether the run
    is done with the node (every pair executed, health failed, or a user job claimed it: a reserved node is
    released then) and whether the node was validated (every pair executed, or health failed); ``began``:
    when its first pod took the node (a reserved node stood idle until then; our pods' time is validation's)."""

    at: float
    done: bool
    validated: bool
    began: float = 0.0


# A step that never started: its turn came past the queue limit, or it would not end within the run's window.
_WAITED = "not started within the queue limit or the run's window"


@dataclasses.dataclass(frozen=True)
class _Step:
    """A simulated step's attempt as ``steps.stop_cause`` and ``steps.done_with_node`` read it."""

    test_name: str
    status: str
    reason: str | None = None
    finished_at: dt.datetime | None = None


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
                self._record(a, b, Status.PASS, at)

    def due(self, free: list[str], now: dt.datetime) -> frozenset[str]:
        """The free nodes whose peer test is due, as the DAG's prioritize task tells them (the sweep's
        exclusion)."""
        return planner.peer_due(free, self.results, self.settings, now)

    def _record(self, a: str, b: str, status: str, at_h: float) -> None:
        when = T0 + dt.timedelta(hours=at_h)
        self.results += [peers.PeerResult(a, b, status, when), peers.PeerResult(b, a, status, when)]
        self.last[a] = self.last[b] = at_h

    def run(self, hour: int, free: list[str], slots: list[float], cluster: Cluster, index: dict[str, int]) -> None:
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
                self._record(*match.nodes, Status.FAIL if self.outcomes.random() < cfg.failure_rate else Status.PASS, hour + end / 60)
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


def plan_hour(cfg: SimConfig, free: Sequence[GpuNode], states: Mapping[tuple[str, str], due.PairState], *,
              now: dt.datetime, reserved: Collection[str] = (), busy: Sequence[str] = (),
              suspects: Mapping[str, str] | None = None, peer_due: Collection[str] = ()) -> planner.RunPlan:
    """One simulated run's planning step: the DAG's planner (``planner.plan``) over the free nodes, the
    suspects and the reserved ones first, the health sweep last (the nodes whose peer test is due left to
    the peer tests), ``cfg`` as the settings and the run's params (every node, every suite, what the slots
    can run); no claims (one run at a time)."""
    given = planner.PlanInput(settings=cfg, run=_run_params(cfg), free=free, states=states,
                               ineligible=[(n, BUSY) for n in busy], suspects=dict(suspects or {}),
                               reserved=reserved, peer_due=peer_due, bundle=cfg.bundle)
    return planner.plan(given, now=now)


def _run_params(cfg: SimConfig) -> RunParams:
    return RunParams(node_range=parse_node_range(""), tests=cfg.tests, stale_before=None,
                     max_pairs=cfg.pairs_per_run(), dry_run=False)


class _Simulation:
    """One simulation's state over its hourly runs; ``hour`` is one run of the DAG, in its order: the
    cluster moves on, reservations, the plan, the bundles on the pool's slots, peer tests, the samples;
    then, with signals, the fast path every few minutes until the next run."""

    def __init__(self, cfg: SimConfig):
        self.cfg = cfg
        self.started = time.perf_counter()
        # separate streams: the same seed gives the same user jobs whatever the slots (fair comparisons)
        rnd, self.outcomes = random.Random(cfg.seed), random.Random(cfg.seed + 1)
        self.names = [f"gpu-{i:05d}" for i in range(cfg.nodes)]
        model = next(iter(cfg.gpu_models))
        self.nodes = [GpuNode(name=name, gpu_count=cfg.gpus_per_node, gpu_model=model) for name in self.names]
        self.index = {name: i for i, name in enumerate(self.names)}
        self.z_h, self.target_h = cfg.staleness_days * 24, cfg.target_days * 24
        self.rpolicy = cfg.reservation_policy()
        self.faults = sim_faults.Faults(nodes=cfg.nodes, hours=cfg.days * 24, rate=cfg.faults, shares=cfg.fault_kinds,
                                        crash_probability=cfg.crash_probability, seed=cfg.seed + 5,
                                        bad_repair=cfg.bad_repair, joins=cfg.joins, reboots=cfg.reboots,
                                        broken_on_join=cfg.broken_on_join, broken_on_reboot=cfg.broken_on_reboot) \
            if cfg.faults > 0 or cfg.joins or cfg.reboots or cfg.models_speed else None
        self.slow = sim_slow.Slow(sim_slow.SlowSettings(
            nodes=cfg.nodes, hours=cfg.days * 24, rate=cfg.slow_faults, shares=cfg.slow_kinds,
            spread=cfg.speed_spread, noise=cfg.speed_noise, transient_rate=cfg.transient_rate,
            false_signal=cfg.false_signal if cfg.probe else 0.0, signal_h=cfg.signal_minutes / 60,
            signal_window_h=cfg.signal_window_hours, seed=cfg.seed + 11,
            confirm_spacing_h=cfg.confirm_spacing_hours), T0) if cfg.models_speed else None
        self.slow_pending: set[int] = set()  # a probe made them suspect in the bundle running now
        self._probing = False  # the gpu_health step running now probes the node's speed
        self.cluster = Cluster(cfg, random.Random(cfg.seed + 2), faults=self.faults,
                               signal_h=cfg.signal_minutes / 60 if cfg.signals else None,
                               taint_limit=self.rpolicy.limit(cfg.nodes) if self.rpolicy.enabled else 0,
                               slow=self.slow, slow_signal=self._slow_signal if cfg.probe else None)
        self.due_policy = due.policy(cfg, _run_params(cfg), bundle=cfg.bundle)
        self.peer_runs = _Peers(cfg, self.names, random.Random(cfg.seed + 3)) if cfg.peer_tests else None
        self.last: dict[tuple[str, str], float] = {}  # last executed result per pair, in simulated hours
        self.states: dict[tuple[str, str], due.PairState] = {}
        if cfg.start == "steady":
            for name in self.names:
                for test in cfg.tests:
                    at = -rnd.random() * self.z_h
                    self.last[(name, test)] = at
                    when = T0 + dt.timedelta(hours=at)
                    self.states[(name, test)] = due.PairState(Status.PASS, when, when, Status.PASS)
        if self.slow is not None and cfg.start == "steady":
            measured = [m for test in cfg.tests for m in sim_slow.SUITE_METRICS.get(test, {})]
            probed = list(sim_slow.PROBE_METRICS) if cfg.probe else []
            self.slow.seed_history(self.names, measured + probed, self.z_h)
        self.total_pairs = cfg.nodes * len(cfg.tests)
        self.coverage: list[tuple[float, float]] = []
        self.worst, self.within, self.samples = 0.0, 0, 0
        self.counts = _Counts()
        self.reserved_at: dict[int, float] = {}
        self.released: dict[str, int] = {}
        self.reservations = self.most_reserved = self.breaker_runs = self.suspect_taints = self.fast_runs = 0
        self.idle_h = self.plan_s = 0.0
        self.run_until = 0.0  # when the run going now ends (hours): the fast path triggers none before
        self.repaired: set[int] = set()  # a suite saw their fault in the bundle running now: back after it
        self.gated = 0
        self.gated_now: set[int] = set()  # nodes the acceptance gate holds now

    def hour(self, hour: int) -> None:
        """The scheduled run of ``hour``: it starts when a fast-path run still going ends (max_active_runs
        is 1), then the fast path's reads until the next one."""
        start = max(float(hour), self.run_until)
        self._advance(start)
        now = T0 + dt.timedelta(hours=start)
        t = time.perf_counter()
        if self.rpolicy.enabled:
            self._reserve(start, now)
        # Handing the planner only the free nodes is exact (a busy node adds no candidate) and keeps
        # 1,000-node runs in seconds.
        cluster = self.cluster
        free = [self.nodes[n] for n in sorted(cluster.free)]
        peer_due = self.peer_runs.due([f.name for f in free], now) if self.peer_runs is not None else ()
        found = plan_hour(self.cfg, free, self.states, now=now, reserved={self.names[n] for n in cluster.reserved},
                          busy=[self.names[n] for n in range(self.cfg.nodes) if cluster.busy[n]],
                          suspects=self._suspects(free), peer_due=peer_due).bundles
        self.plan_s += time.perf_counter() - t
        slots = self._validate(start, found)
        if self.peer_runs is not None:  # the free nodes no bundle took, on the slots the bundles left
            taken = {b.node_name for b in found}
            slots += [0.0] * max(0, self.cfg.slots - len(slots))
            heapq.heapify(slots)
            self.peer_runs.run(start, [f.name for f in free if f.name not in taken], slots, cluster, self.index)
            self.peer_runs.sample(hour)
        self.run_until = start + max(slots, default=0.0) / 60
        self._sample(hour)
        if (self.cfg.signals or self.cfg.acceptance) and self.faults is not None:
            step = self.cfg.fast_path_minutes / 60
            for k in range(1, math.ceil(1 / step)):
                if hour + k * step > start:
                    self._advance(hour + k * step)
                    self._fast_path(hour + k * step, hour + 1)

    def _advance(self, at: float) -> None:
        """The cluster up to ``at`` (a read: the hourly run's discovery or a fast-path tick); the nodes that
        joined or returned meanwhile are read (``_arrived``); the suspects it tainted are held as reservations
        (max hold included)."""
        self.cluster.advance(at)
        for n, since, how in self.cluster.arrived:
            self._arrived(n, since, how, at)
        self.cluster.arrived.clear()
        for n, since in self.cluster.tainted:
            self.reserved_at[n] = since
            self.suspect_taints += 1
        self.cluster.tainted.clear()
        self.most_reserved = max(self.most_reserved, len(self.reserved_at))

    def _arrived(self, n: int, since: float, how: str, at: float) -> None:
        """A node that joined (``since``: a new one, no history: its staleness counts from then) or returned
        is read at ``at``: the acceptance gate taints it, busy or free, and makes it suspect (its whole bundle
        first, released when done; over ``acceptance_max_nodes`` gated at once, a suspect untainted, as the
        DAG does); without the gate, the signals read the change (a node new or rebooted) and make it suspect,
        tainted within the reservation's limit, busy or free."""
        if how == sim_faults.NEW:
            for test in self.cfg.tests:
                self.states.pop((self.names[n], test), None)
                self.last[(self.names[n], test)] = since
        if self.cfg.acceptance and len(self.gated_now) < self.cfg.acceptance_max_nodes:
            self.cluster.gate(n, at)
            self.reserved_at.setdefault(n, at)
            self.gated_now.add(n)
            self.gated += 1
        elif self.cfg.signals or self.cfg.acceptance:
            self.cluster.mark_suspect(n, at)

    def _suspects(self, free: Sequence[GpuNode]) -> dict[str, str]:
        """The free suspect nodes, each with its evidence (what the planner puts first)."""
        suspects = self.cluster.suspects
        return {node.name: f"a user job crashed at {suspects[n]:.2f} h" for node in free
                if (n := self.index[node.name]) in suspects}

    def _fast_path(self, at: float, next_run: float) -> None:
        """One read of the fast path (the DAG ``suspect_signals``, ``airflow.tasks.signals.tick``): it taints the
        suspects, busy or free (with reservation, within its limit), and triggers a run for the free suspects
        whose evidence no run took yet when ``fast_path.decide`` says so, the function the DAG calls: not while
        a run is queued or running, nor within the quiet window before the scheduled one (which plans suspects
        first). The triggered run plans only them (their whole bundles, the same planner) on the pool; the
        next scheduled run waits for its end."""
        cluster = self.cluster
        if self.rpolicy.enabled:
            for n in sorted(cluster.suspects):
                cluster.taint_suspect(n, at)
            self._advance(at)
        decision = self._decide(at, next_run)
        if not decision.nodes:
            return
        pending = [self.nodes[self.index[name]] for name in decision.nodes]
        cluster.fresh.difference_update(self.index[p.name] for p in pending)
        self.fast_runs += 1
        found = plan_hour(self.cfg, pending, self.states, now=T0 + dt.timedelta(hours=at),
                          reserved={self.names[n] for n in cluster.reserved}, suspects=self._suspects(pending))
        slots = self._validate(at, found.bundles)
        self.run_until = at + max(slots, default=0.0) / 60

    def _decide(self, at: float, next_run: float) -> fast_path.Decision:
        """The fast path's decision at ``at`` hours, the next scheduled run at ``next_run``: the DAG's rule
        over what the DAG would read (the suspects no run took yet, the free nodes, whether a run is going,
        when the next one is due)."""
        cluster = self.cluster
        return fast_path.decide([self.names[n] for n in cluster.fresh], [self.names[n] for n in cluster.free],
                                paused=False, active_runs=1 if at < self.run_until else 0,
                                next_run=T0 + dt.timedelta(hours=next_run), now=T0 + dt.timedelta(hours=at),
                                quiet=dt.timedelta(minutes=self.cfg.fast_path_quiet_minutes))

    def _reserve(self, hour: int, now: dt.datetime) -> None:
        """The DAG's reserve task: release what was held too long, taint the overdue busy nodes chosen."""
        cluster, rpolicy = self.cluster, self.rpolicy
        for n in [n for n, at in self.reserved_at.items() if hour - at >= rpolicy.max_hold_hours]:
            self._release(n, hour, reservation.MAX_HOLD)
        busy = [self.names[n] for n in range(self.cfg.nodes) if cluster.busy[n] and n not in cluster.reserved]
        choice = reservation.choose(
            reservation.overdue(busy, self.cfg.tests, self.states, now=now, due_policy=self.due_policy,
                                policy=rpolicy),
            reserved=len(self.reserved_at), overdue_reserved=len(self.reserved_at), gpu_nodes=self.cfg.nodes,
            policy=rpolicy)
        self.breaker_runs += choice.breaker_open
        for node in choice.reserve:
            n = self.index[node.node_name]
            cluster.reserved.add(n)
            self.reserved_at[n] = hour
            self.reservations += 1
        self.most_reserved = max(self.most_reserved, len(self.reserved_at))

    def _release(self, n: int, at: float, why: str, idle_until: float | None = None) -> None:
        self.idle_h += self.cluster.release(n, at, idle_until=idle_until)
        self.gated_now.discard(n)
        del self.reserved_at[n]
        self.released[why] = self.released.get(why, 0) + 1

    def _validate(self, hour: int, found: Sequence[planner.NodeBundle]) -> list[float]:
        """The planned bundles on the pool's slots, in plan order (the health sweep's last); a reserved node
        is released when its bundle is done. Returns the slots (a heap: minutes into the run when each is
        free again)."""
        slots = [0.0] * min(self.cfg.slots, len(found))
        for bundle in found:
            n = self.index[bundle.node_name]
            begin = heapq.heappop(slots)
            ended = self._run_bundle(bundle, begin, hour, n)
            heapq.heappush(slots, ended.at)
            self._finished(n, hour, ended)
        return slots

    def _finished(self, n: int, at: float, ended: _Ended) -> None:
        """After a node's bundle: a suspect validated is suspect no longer; a node whose fault a suite saw is
        repaired and back when its bundle is over (maybe still broken), read like a reboot — a gated one stays
        gated through its repair (the gate's taint stays on a fail); a reserved node done is released."""
        cluster = self.cluster
        if ended.validated and n in cluster.suspects:
            del cluster.suspects[n]
            cluster.fresh.discard(n)
            if self.faults is not None:
                self.faults.cleared(n)  # still broken (no suite saw it): suspicion cleared all the same
        if n in self.repaired:
            self.repaired.discard(n)
            back = at + ended.at / 60
            self.faults.back_from_repair(n, back)
            if n in self.gated_now:  # idle until our pod; gated again at once, from its return
                self.idle_h += max(0.0, at + ended.began / 60 - cluster.free_since.pop(n, math.inf))
                cluster.gate(n, back)
                self.gated += 1
                return
            cluster.arrived.append((n, back, sim_faults.REPAIR))
        if ended.done and n in cluster.reserved and n in self.reserved_at:
            self._release(n, at + ended.at / 60, reservation.VALIDATED, idle_until=at + ended.began / 60)
        if n in self.slow_pending:  # a probe flagged it in this bundle: suspect from its end, a retest soon
            self.slow_pending.discard(n)
            self.slow.suspect(n, at + ended.at / 60)
            cluster.mark_suspect(n, at + ended.at / 60)

    def _run_bundle(self, bundle: planner.NodeBundle, start: float, at: float, n: int) -> _Ended:
        """One node's suites on one slot from ``start`` (minutes into the run that began at ``at`` hours), as
        the DAG's task group runs them: a step runs unless ``steps.stop_cause`` of the steps before it says
        it must not, and the run is done with the node when ``steps.done_with_node`` says so (the functions
        the DAG's steps and its finish task call)."""
        now = T0 + dt.timedelta(hours=at)
        pairs = bundle.pairs
        ran: list[_Step] = []
        t = start
        for i, pair in enumerate(pairs):
            if steps.stop_cause(ran) is not None:
                break
            step, t = self._step(pair, i, t, at, n, now)
            ran.append(step)
        last = ran[-1]
        self._count_stopped(pairs, ran, at, t)
        done = steps.done_with_node([p.test_name for p in pairs], ran)
        validated = all(s.status in EXECUTED for s in ran)
        # a step past the queue limit or the run's window ends the slot's turn when it would have started
        began = 0.0 if last.reason == _WAITED else start
        return _Ended(t, done, validated, began)

    def _step(self, pair: PlannedPair, i: int, t: float, at: float, n: int, now: dt.datetime) -> tuple[_Step, float]:
        """One step ``t`` minutes into the run: not started (past the queue limit or the run's window), taken
        by a user job (before our pod started: the pre-submit check skips it; after: preempted) or executed.
        The step and when the slot is free again."""
        cfg, counts = self.cfg, self.counts
        duration = cfg.pod_startup_minutes + cfg.suite_minutes[pair.test_name]
        self._probing = (self.slow is not None and cfg.probe and pair.test_name == sim_slow.PROBE_SUITE
                         and self.slow.probe_now(n, at + t / 60, min_interval_h=cfg.probe_min_interval_hours,
                                                 max_age_h=cfg.probe_max_age_hours))
        duration += cfg.probe_minutes if self._probing else 0.0
        claimed = (self.cluster.until[n] - at) * 60  # minutes into the run when a user job takes the node
        if (t > cfg.max_queue_minutes and i == 0) or t + duration > cfg.run_window_minutes:
            return _Step(pair.test_name, Status.SKIPPED, _WAITED), t  # the rest waits for a run
        if claimed <= t or claimed < t + duration:
            what = Status.SKIPPED if claimed <= t else Status.PREEMPTED
            counts.validation_h += max(0.0, claimed - t) / 60
            prev = self.states.get((pair.node_name, pair.test_name))
            self.states[(pair.node_name, pair.test_name)] = due.PairState(
                prev.status if prev else None, prev.finished_at if prev else None,
                now + dt.timedelta(minutes=min(claimed, t + duration)), what)
            return _Step(pair.test_name, what, steps.NODE_TAKEN), max(t, min(claimed, t + duration))
        t += duration
        counts.validation_h += duration / 60
        failed = self._executed(pair, n, now, at, t)
        return _Step(pair.test_name, Status.FAIL if failed else Status.PASS), t

    def _count_stopped(self, pairs: Sequence[PlannedPair], ran: Sequence[_Step], at: float, t: float) -> None:
        """What a bundle's stop left: the steps not run (skipped), a step a user job took (preempted, or
        skipped before its pod started), and after an executed step that stopped the rest (a failing health
        check, by ``steps.stop_cause``), the rest judged (the node is known bad), which is what the staleness
        figures measure."""
        counts, last = self.counts, ran[-1]
        rest = len(pairs) - len(ran)
        counts.preempted += last.status == Status.PREEMPTED
        counts.skipped += rest + (last.status == Status.SKIPPED)
        if last.status in EXECUTED and steps.stop_cause(ran) is not None:
            for pair in pairs[len(ran):]:
                self.last[(pair.node_name, pair.test_name)] = at + t / 60
            counts.health_gated += rest

    def _executed(self, pair: PlannedPair, n: int, now: dt.datetime, at: float, t: float) -> bool:
        """A suite ran to its end ``t`` minutes into the run: it fails at the failure rate, or because the
        node's fault is one it sees (detected then). Whether it failed."""
        counts = self.counts
        failed = self.outcomes.random() < self.cfg.failure_rate  # drawn always: the same outcomes stream
        if self.faults is not None and self.faults.sees(n, pair.test_name):
            failed = True
            self.faults.detected(n, at + t / 60)
            self.repaired.add(n)
        elif self.slow is not None:
            failed |= self._speed(pair, n, at + t / 60)
        status = Status.FAIL if failed else Status.PASS
        counts.failed += failed
        counts.executed += 1
        counts.swept += pair.why == due.SWEEP
        finished = now + dt.timedelta(minutes=t)
        self.states[(pair.node_name, pair.test_name)] = due.PairState(status, finished, finished, status)
        self.last[(pair.node_name, pair.test_name)] = at + t / 60
        return failed

    def _speed(self, pair: PlannedPair, n: int, at: float) -> bool:
        """The speed a suite measured on ``n``, judged as the product judges it: the probe in gpu_health (when
        ``probe_due`` said so) gives the node's state by ``slow_state`` — failing fails the health check (code
        SLOW: the bundle stops, the node is repaired), suspect marks it once the bundle is over; dl_unit's and
        nccl_loopback's metrics get their fleet verdicts — a verdict fails the attempt (retested after
        ``failed_retest_hours``), one confirmed on the next attempt makes the node failing, and with the probe
        a verdict is a sighting for ``slow_state`` too (``bundle_verdicts``: with a flagged last probe the
        spacing apart the node is failing; alone, the next due probe answers it). Whether it failed."""
        slow = self.slow
        if pair.test_name == sim_slow.PROBE_SUITE and self._probing:
            why = (sim_slow.PROBE_AND_SIGNAL if slow.signal_flagged(n, at) else
                   sim_slow.PROBE_AND_BUNDLE if slow.bundle_verdicts(n, at) else sim_slow.TWO_PROBES)
            state, flagged = slow.probe(n, pair.node_name, at)
            if state == fail_slow.SlowState.FAILING:
                slow.failing(n, at, why)
                return True
            # new evidence: suspect, the product's rule (a clean probe after a signal leaves it as it was)
            if fail_slow.probe_suspect(flagged, state):
                self.slow_pending.add(n)
            return False
        if pair.test_name in sim_slow.SUITE_METRICS:
            flagged, confirmed = slow.suite(pair.test_name, n, pair.node_name, at)
            if confirmed:
                slow.failing(n, at, sim_slow.CONFIRMED)
            elif flagged and self.cfg.probe and slow.state(n, at) == fail_slow.SlowState.FAILING:
                # the verdict and the node's flagged last probe: two sightings (the quarantine's slow_nodes)
                slow.failing(n, at, sim_slow.PROBE_AND_BUNDLE)
            return flagged
        return False

    def _slow_signal(self, n: int, at: float) -> None:
        """A passive speed signal read at ``at`` (a user job on ``n`` throttled, a link below its rate): with
        the node's last probe flagged it is failing (``slow_state``: quarantined, its running job ends on it),
        else suspect — tainted within the reservation's limit, its bundle first when it is free."""
        state = self.slow.state(n, at)
        if state == fail_slow.SlowState.FAILING:
            self.slow.failing(n, at, sim_slow.PROBE_AND_SIGNAL)
        elif state == fail_slow.SlowState.SUSPECT:
            self.slow.suspect(n, at)
        else:
            return
        self.cluster.mark_suspect(n, at)

    def _sample(self, hour: int) -> None:
        last, target_h = self.last, self.target_h
        if len(last) == self.total_pairs:
            ages = [hour - v for v in last.values()]
            self.worst = max(self.worst, max(ages))
            self.within += sum(1 for a in ages if a <= target_h)
        else:
            self.worst = math.inf
            self.within += sum(1 for v in last.values() if hour - v <= target_h)
        self.samples += self.total_pairs

    def cover(self, hour: int) -> None:
        """The day's coverage: the share of pairs validated within the threshold."""
        fresh = sum(1 for v in self.last.values() if hour - v <= self.z_h)
        self.coverage.append(((hour + 1) / 24, fresh / self.total_pairs))

    def result(self, end: int) -> SimResult:
        cfg, counts = self.cfg, self.counts
        idle_h = self.idle_h
        for n in list(self.reserved_at):  # still reserved at the end: count the idle time so far
            idle_h += max(0.0, end - self.cluster.free_since.get(n, end))
        ages = sorted(end - v for v in self.last.values()) + [math.inf] * (self.total_pairs - len(self.last))
        gpu_hours, fleet = idle_h * cfg.gpus_per_node, cfg.nodes * cfg.gpus_per_node * end
        validation = counts.validation_h * cfg.gpus_per_node
        return SimResult(
            config=cfg, coverage=self.coverage, worst_staleness_h=self.worst,
            within_target_share=self.within / self.samples if self.samples else 0.0,
            final_p50_h=_quantile(ages, 0.5), final_p95_h=_quantile(ages, 0.95), final_max_h=ages[-1],
            executed=counts.executed, skipped=counts.skipped, preempted=counts.preempted, failed=counts.failed,
            health_gated=counts.health_gated, never_validated=self.total_pairs - len(self.last),
            reservations=self.reservations, reservations_released=self.released,
            max_reserved_at_once=self.most_reserved, reserved_gpu_hours=gpu_hours,
            reserved_share=gpu_hours / fleet if end else 0.0, breaker_open_runs=self.breaker_runs,
            swept=counts.swept, validation_gpu_hours=validation,
            validation_share=(validation + gpu_hours) / fleet if end else 0.0,
            suspect_taints=self.suspect_taints, fast_path_runs=self.fast_runs, gated=self.gated,
            plan_seconds=self.plan_s, wall_seconds=time.perf_counter() - self.started,
            slow=self.slow.figures(end, cfg.nodes * end / 24) if self.slow is not None else None,
            **(self.faults.figures(end) if self.faults is not None else {}),
            **(self.peer_runs.figures(end) if self.peer_runs is not None else {}))


def run(cfg: SimConfig, *, stop_above_h: float | None = None) -> SimResult:
    """Simulate ``cfg.days`` of hourly runs; with ``stop_above_h``, stop as soon as the worst staleness
    exceeds it (the slots search only needs to know that it does)."""
    sim = _Simulation(cfg)
    hours = int(cfg.days * 24)
    for hour in range(hours):
        sim.hour(hour)
        if stop_above_h is not None and sim.worst > stop_above_h:
            break
        if hour % 24 == 23 or hour == hours - 1:
            sim.cover(hour)
    return sim.result(hours)


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


GOAL_SEEDS = (7, 1, 2, 3, 4)


def goal(cfg: SimConfig, seeds: Sequence[int] = GOAL_SEEDS) -> dict[str, Any]:
    """The fail-slow goal over ``seeds``: per seed, today's rule (``probe`` off: dl_unit's and nccl_loopback's
    fleet verdicts at their staleness) and the new one (the probe in the sweep, the passive speed signals)
    over the same faults, and each rule on a healthy fleet (no fault of either kind; spread and transients) for
    its false stragglers. Returns {"seeds": [...], "rules": {rule: {"per_seed": [...], "mean": {...}}}}."""
    rules = {"today": dataclasses.replace(cfg, probe=False), "new": dataclasses.replace(cfg, probe=True)}
    out: dict[str, Any] = {"seeds": list(seeds), "rules": {}}
    for rule, base in rules.items():
        rows = []
        for seed in seeds:
            faulty = run(dataclasses.replace(base, seed=seed))
            healthy = run(dataclasses.replace(base, seed=seed, faults=0.0, slow_faults=0.0, speed=True))
            rows.append(_goal_row(seed, faulty, healthy))
        out["rules"][rule] = {"per_seed": rows, "mean": {k: _mean([r[k] for r in rows]) for k in rows[0]
                                                          if k != "seed"}}
    today, new = (out["rules"][r]["mean"]["slow_job_node_hours"] for r in ("today", "new"))
    out["slow_job_node_hours_fewer"] = 1 - new / today if today else 0.0
    return out


def _mean(values: Sequence[float]) -> float:
    """The mean over the seeds that have the figure (a seed without slow faults has no time to detect)."""
    known = [v for v in values if not math.isnan(v)]
    return sum(known) / len(known) if known else math.nan


def _goal_row(seed: int, faulty: SimResult, healthy: SimResult) -> dict[str, Any]:
    slow, ttd = faulty.slow or {}, (faulty.slow or {}).get("slow_time_to_detect_h") or {}
    crash, jobs = faulty.time_to_detect_h or {}, faulty.jobs_on_broken_node or {}
    return {"seed": seed, "slow_faults": slow.get("slow_faults", 0),
            "slow_median_h": ttd.get("median", math.nan), "slow_p90_h": ttd.get("p90", math.nan),
            "slow_job_node_hours": slow.get("slow_job_node_hours", 0.0),
            "slow_share": slow.get("slow_job_node_hours", 0.0) / slow["user_job_node_hours"]
            if slow.get("user_job_node_hours") else 0.0,
            "false_stragglers_per_1000_node_days": (healthy.slow or {}).get("false_stragglers_per_1000_node_days", 0.0),
            "crash_median_h": crash.get("median", math.nan), "crash_p90_h": crash.get("p90", math.nan),
            "jobs_on_broken_node": jobs.get("mean", math.nan), "validation_share": faulty.validation_share,
            "healthy_validation_share": healthy.validation_share, "worst_staleness_h": faulty.worst_staleness_h,
            "wall_seconds": faulty.wall_seconds + healthy.wall_seconds}
