"""The pool simulator: the real planner over a simulated cluster (the command: cli/test_simulate.py)."""

from __future__ import annotations

import dataclasses
import math

import pytest
from cluster_doctor.domain import reservation
from cluster_doctor.domain.planning import plan as planner
from cluster_doctor.simulator import simulate

SMALL = simulate.SimConfig(nodes=60, days=10, slots=2, seed=3)


def test_runs_the_real_prioritizer(monkeypatch):
    calls = []
    real = planner.bundles

    def spy(*args, **kwargs):
        calls.append(kwargs["policy"])
        return real(*args, **kwargs)

    monkeypatch.setattr(planner, "bundles", spy)
    result = simulate.run(SMALL)
    assert len(calls) == 240  # one plan per simulated hourly run
    assert calls[0].staleness.days == 7 and calls[0].max_pairs == SMALL.pairs_per_run() and calls[0].bundle
    assert result.executed > 0 and result.preempted > 0


def test_every_hour_plans_with_the_dags_planner_without_claims(monkeypatch):
    calls = []
    real = planner.plan

    def spy(given, **kwargs):
        calls.append((given, kwargs))
        return real(given, **kwargs)

    monkeypatch.setattr(planner, "plan", spy)
    simulate.run(dataclasses.replace(SMALL, days=2))
    assert len(calls) == 48 and all(kwargs.get("claim") is None for _, kwargs in calls)
    given = calls[0][0]
    assert given.run.max_pairs == SMALL.pairs_per_run() and given.run.tests == SMALL.tests
    assert len(given.free) + len(given.ineligible) == SMALL.nodes  # every node: free, or busy with a user job


def test_more_slots_never_make_staleness_worse_and_coverage_is_reported():
    few = simulate.run(dataclasses.replace(SMALL, nodes=300, slots=1))
    many = simulate.run(dataclasses.replace(SMALL, nodes=300, slots=8))
    assert many.executed > few.executed
    assert many.worst_staleness_h <= few.worst_staleness_h
    assert many.final_p95_h <= few.final_p95_h
    assert len(few.coverage) == 10 and all(0 <= share <= 1 for _, share in few.coverage)


def test_an_idle_cluster_keeps_everything_fresh_and_a_full_one_validates_nothing():
    idle = simulate.run(dataclasses.replace(SMALL, occupancy=0.0, slots=4, start="fresh"))
    assert idle.never_validated == 0 and idle.preempted == 0
    assert idle.coverage[-1][1] == 1.0
    busy = simulate.run(dataclasses.replace(SMALL, occupancy=0.999, job_hours=20, max_job_hours=1000, start="fresh"))
    assert busy.executed < idle.executed / 10


def test_failures_are_retested():
    result = simulate.run(dataclasses.replace(SMALL, failure_rate=0.3, occupancy=0.0, slots=4))
    assert result.failed > 0.2 * result.executed


def test_min_slots_finds_the_smallest_sufficient_count():
    cfg = simulate.SimConfig(nodes=200, days=14, occupancy=0.3, job_hours=2, max_job_hours=6,
                             staleness_days=3, seed=5)
    slots, floor, tried = simulate.min_slots(cfg, target_h=4 * 24)
    assert slots is not None and floor.worst_staleness_h <= 4 * 24
    assert tried[slots].worst_staleness_h <= 96
    if slots > 1:
        assert tried[slots - 1].worst_staleness_h > 96  # one fewer misses the target


def test_bundles_serve_every_due_suite_of_a_free_window():
    cfg = dataclasses.replace(SMALL, nodes=200, slots=8, start="fresh", days=4)
    bundled, single = simulate.run(cfg), simulate.run(dataclasses.replace(cfg, bundle=False))
    # from nothing validated, bundles cover the fleet in fewer windows than one suite per node per run
    assert bundled.never_validated < single.never_validated
    assert bundled.coverage[-1][1] > single.coverage[-1][1]


def test_reservation_keeps_every_pair_within_the_target_at_a_small_idle_cost():
    cfg = simulate.SimConfig(nodes=200, days=14, slots=6, staleness_days=5.5, target_days=7, seed=11)
    without, reserved = simulate.run(cfg), simulate.run(dataclasses.replace(cfg, reserve=True))
    assert without.worst_staleness_h > 168 and without.reservations == 0 and without.reserved_gpu_hours == 0
    assert reserved.worst_staleness_h <= 168 and reserved.within_target_share == 1.0
    assert reserved.reservations > 0 and 0 < reserved.reserved_share < 0.02
    assert sum(reserved.reservations_released.values()) <= reserved.reservations
    assert reserved.max_reserved_at_once <= cfg.reservation_policy().limit(cfg.nodes)


def test_without_gaps_only_reservation_validates():
    cfg = simulate.SimConfig(nodes=100, days=7, slots=4, staleness_days=2, target_days=3, no_gap=True,
                             max_job_hours=12, seed=2)
    assert simulate.run(cfg).executed == 0
    reserved = simulate.run(dataclasses.replace(cfg, reserve=True, reservation={"max_share": 0.5, "breaker_share": 1}))
    assert reserved.executed > 0 and reserved.worst_staleness_h <= 72 and reserved.breaker_open_runs == 0
    assert reserved.reserved_gpu_hours > 0  # every validation idles a node that would have run a job
    # at most 20 % of the nodes reserved at once is too few for a 3-day target here: overdue nodes pile
    # up past 30 % of the fleet and the breaker stops reserving, as the DAG's task would (and fail)
    capped = simulate.run(dataclasses.replace(cfg, reserve=True))
    assert capped.breaker_open_runs > 0 and capped.worst_staleness_h > 72


# ---------------------------------------------------------------------------- sweep, faults, signals
from cluster_doctor.simulator import faults as sim_faults  # noqa: E402

BUSY = simulate.SimConfig(nodes=300, days=14, slots=8, occupancy=0.85, staleness_days=5.5, target_days=7,
                          reserve=True, seed=5)


def test_the_health_sweep_runs_gpu_health_on_free_nodes_after_the_bundles_and_costs_gpu_hours(monkeypatch):
    sweeps = []
    real = planner.plan

    def spy(given, **kwargs):
        found = real(given, **kwargs)
        sweeps.append([(p.test_name, p.why) for b in found.sweeps for p in b.pairs])
        # the sweep's bundles come after every due one
        kinds = [planner.is_sweep(b) for b in found.bundles]
        assert kinds == sorted(kinds)
        return found

    monkeypatch.setattr(planner, "plan", spy)
    swept = simulate.run(dataclasses.replace(SMALL, occupancy=0.6))
    monkeypatch.undo()
    plain = simulate.run(dataclasses.replace(SMALL, occupancy=0.6, sweep_interval_hours=0))
    assert {pair for run in sweeps for pair in run} == {("gpu_health", "health sweep")}
    assert swept.swept > 0 and plain.swept == 0
    assert swept.validation_gpu_hours > plain.validation_gpu_hours > 0
    assert 0 < plain.validation_share < swept.validation_share < 0.1
    assert swept.worst_staleness_h <= plain.worst_staleness_h + 24  # the bundles keep their pool time


def test_without_faults_there_is_nothing_to_detect():
    result = simulate.run(SMALL)
    assert result.faults == 0 and result.time_to_detect_h is None and result.jobs_on_broken_node is None


def test_the_sweep_finds_faults_sooner_and_signals_sooner_still_with_fewer_jobs_on_broken_nodes():
    """Today's rule (no sweep, no signals) waits for staleness; the sweep catches what gpu_health sees on
    free nodes; signals (a crashed job, an Xid) make the node suspect within minutes. The same fault times
    in all three (their own random stream; one arriving on a node still broken is not counted)."""
    faulty = dataclasses.replace(BUSY, faults=20)
    today = simulate.run(dataclasses.replace(faulty, sweep_interval_hours=0, signals=False))
    sweep = simulate.run(dataclasses.replace(faulty, signals=False))
    signals = simulate.run(faulty)
    counts = [r.faults for r in (today, sweep, signals)]
    assert min(counts) > 50 and max(counts) - min(counts) <= 0.1 * max(counts)
    medians = [r.time_to_detect_h["median"] for r in (today, sweep, signals)]
    assert medians[0] > 24 and medians[1] < medians[0] / 4 and medians[2] < 0.5
    jobs = [r.jobs_on_broken_node["mean"] for r in (today, sweep, signals)]
    assert jobs[0] > jobs[1] > jobs[2] and jobs[2] < 2
    assert signals.suspect_taints > 0 and signals.fast_path_runs > 0 and today.suspect_taints == 0
    for r in (today, sweep, signals):
        assert r.worst_staleness_h <= 7 * 24  # every suite still within its target
        assert r.time_to_detect_h["median"] <= r.time_to_detect_h["p90"] <= r.time_to_detect_h["max"]


def test_a_suspect_is_tainted_busy_or_free_and_a_free_one_takes_no_user_job_until_its_bundle_is_done():
    """As the DAG's fast path does (reservation on): a suspect gets the taint at the read, within the limit,
    busy or free; a free one's next user job does not start, its idle time counts from the taint until our
    pod; the run that validates it releases it. Without reservation nothing is tainted."""
    cfg = dataclasses.replace(BUSY, nodes=40, days=1, faults=0.001)  # a fault object, almost surely no fault
    sim = simulate._Simulation(cfg)
    cluster = sim.cluster
    free, busy = min(cluster.free), next(n for n in range(cfg.nodes) if cluster.busy[n])
    cluster.mark_suspect(free, 0.0)
    cluster.mark_suspect(busy, 0.0)
    sim._advance(0.0)  # the read: tainted suspects held as reservations
    assert {free, busy} <= cluster.reserved and sim.reserved_at[free] == sim.reserved_at[busy] == 0.0
    assert cluster.free_since == {free: 0.0} and cluster.until[free] == math.inf and not cluster.busy[free]
    assert sim.suspect_taints == 2
    sim.hour(0)  # the hourly run plans the suspects first: the free one is validated and released
    assert free not in cluster.reserved and free not in cluster.suspects and free not in sim.reserved_at
    assert sim.released.get(reservation.VALIDATED, 0) >= 1 and cluster.until[free] < math.inf  # users again
    assert busy in cluster.reserved or not cluster.busy[busy]  # kept while its job runs

    limited = simulate._Simulation(cfg).cluster
    limited.taint_limit = 1
    for n in sorted(limited.free)[:2]:
        limited.mark_suspect(n, 0.0)
    assert len(limited.reserved) == 1  # the limit holds
    off = simulate._Simulation(dataclasses.replace(cfg, reserve=False)).cluster
    n = min(off.free)
    off.mark_suspect(n, 0.0)
    assert not off.reserved and off.until[n] < math.inf  # no reservation: its next user job comes


def test_the_issue_goal_at_1000_nodes():
    """The goal at 1,000 nodes: median ≤ 1 h, p90 ≤ 6 h, jobs on a broken node ≤ 1.5 on average, validation
    share ≤ 1 %, every suite within its staleness target; with --no-gap median ≤ 2 h. At this seed (7, the
    command's) the README measures 0.08 h, 1.9 h, 1.47 and 0.94 %: the jobs goal holds narrowly, and the
    p90 (the 17th longest of 169 waits, among network faults whose first job survived) moves with the
    random draws — a change that moves it past the goal has to say why in the README's table."""
    goal = simulate.SimConfig(nodes=1000, occupancy=0.85, days=28, slots=24, reserve=True, faults=6.5,
                              staleness_days=5.5, target_days=7)
    result = simulate.run(goal)
    assert result.time_to_detect_h["median"] <= 1 and result.time_to_detect_h["p90"] <= 6
    assert result.jobs_on_broken_node["mean"] <= 1.5 and result.validation_share <= 0.01
    assert result.worst_staleness_h <= 7 * 24 and result.within_target_share == 1.0
    queued = simulate.run(dataclasses.replace(goal, no_gap=True))
    assert queued.time_to_detect_h["median"] <= 2 and queued.swept == 0  # no free node, nothing to sweep


def test_nodes_that_join_or_return_broken_take_user_jobs_unless_the_acceptance_gate_holds_them():
    """Nodes join (new, no history), reboot and come back from repair, some broken on
    arrival (rates raised here to see enough of them), the same schedule whatever the rule. With nothing
    reading the changes user jobs land on them; the signals (a new or rebooted node is suspect) catch most;
    the gate taints every one at the first read, so only a job landing before that read reaches one."""
    cfg = dataclasses.replace(BUSY, faults=20, joins=60, reboots=2, broken_on_join=0.2, broken_on_reboot=0.05,
                              bad_repair=0.3)
    runs = {(signals, gate): simulate.run(dataclasses.replace(cfg, signals=signals, acceptance=gate))
            for signals in (False, True) for gate in (False, True)}
    for r in runs.values():
        came = r.arrivals
        assert 55 <= came["new"]["nodes"] <= 60 and came["reboot"]["nodes"] > 200 and came["repair"]["nodes"] > 50
        assert came["new"]["broken"] >= 5 and came["reboot"]["broken"] >= 5 and came["repair"]["broken"] >= 20
        assert r.returned_broken == sum(a["broken"] for a in came.values())
        assert r.jobs_on_returned_broken == sum(a["jobs_on_broken"] for a in came.values())
    blind, signals, gated = runs[(False, False)], runs[(True, False)], runs[(True, True)]
    assert blind.jobs_on_returned_broken >= 2 * blind.returned_broken  # nothing looks: users find them
    assert gated.jobs_on_returned_broken < signals.jobs_on_returned_broken < blind.jobs_on_returned_broken / 5
    assert gated.jobs_on_returned_broken <= 0.05 * gated.returned_broken
    assert runs[(False, True)].jobs_on_returned_broken <= 0.05 * blind.returned_broken  # the gate alone too
    assert blind.gated == signals.gated == 0
    assert gated.gated >= sum(a["nodes"] for a in gated.arrivals.values())  # every arrival (and each repair)
    assert gated.validation_share < signals.validation_share + 0.005  # whole bundles for ~500 arrivals
    for r in runs.values():
        assert r.worst_staleness_h <= 7 * 24


def test_a_new_node_has_no_history_and_its_whole_bundle_runs_before_users_behind_the_gate(monkeypatch):
    """A join replaces a node by a new one: its pairs are never executed (planned first, whole) and its
    staleness counts from its arrival; the gate keeps it free of user jobs until its bundle is done."""
    planned = []
    real = planner.plan

    def spy(given, **kwargs):
        found = real(given, **kwargs)
        planned.append({(p.node_name, p.test_name): (p.why, p.last_status) for p in found.pairs})
        return found

    monkeypatch.setattr(planner, "plan", spy)
    cfg = simulate.SimConfig(nodes=20, days=2, slots=2, occupancy=0.5, joins=3, broken_on_join=0.0,
                             acceptance=True, sweep_interval_hours=0, seed=3)
    sim = simulate._Simulation(cfg)
    joined, read = [], sim._arrived

    def arrived(n, since, how, at):
        read(n, since, how, at)
        joined.append((n, since, n in sim.cluster.reserved))  # tainted at the first read

    sim._arrived = arrived
    for hour in range(48):
        sim.hour(hour)
    assert sim.faults.arrivals["new"] == 3 and sim.gated == 3 and [j[2] for j in joined] == [True] * 3
    node, since = sim.names[joined[0][0]], joined[0][1]
    whys = [{t: w for (n, t), w in plan.items() if n == node} for plan in planned]
    whole = [w for w in whys if set(w) == set(cfg.tests)]
    assert whole and set(whole[0].values()) == {("suspect", None)}  # every suite first, none executed before
    assert all(sim.last[(node, t)] >= since > 0 for t in cfg.tests)  # from its arrival, not from the start
    assert not sim.gated_now  # each released once its bundle passed


@pytest.mark.parametrize("field, value, message", [
    ("bad_repair", 1.5, r"bad_repair: must be a share in \[0, 1\]"),
    ("broken_on_join", -0.1, r"broken_on_join: must be a share in \[0, 1\]"),
    ("broken_on_reboot", True, r"broken_on_reboot: must be a share in \[0, 1\]"),
    ("joins", 2.5, r"joins: must be an integer >= 0"),
    ("reboots", -1, r"reboots: must be a number >= 0"),
    ("acceptance_max_nodes", 0, r"acceptance_max_nodes: must be an integer >= 1"),
])
def test_arrival_settings_are_checked(field, value, message):
    with pytest.raises(simulate.InvalidSimulation, match=message):
        dataclasses.replace(BUSY, **{field: value})


def test_the_arrival_schedule_is_the_same_whatever_the_rule_and_follows_its_rates():
    def faults():
        return sim_faults.Faults(nodes=500, hours=24 * 30, rate=0, shares=sim_faults.DEFAULT_SHARES,
                                 crash_probability=0.7, seed=11, joins=40, reboots=1.0, broken_on_join=0.25,
                                 broken_on_reboot=0.0)
    a, b = faults(), faults()
    got = []
    while a.next_arrival_at() < float("inf"):
        assert a.next_arrival_at() == b.next_arrival_at()
        got.append((a.arrive(), b.arrive()))
    assert all(x == y for x, y in got)
    assert a.arrivals["new"] == 40 and 400 < a.arrivals["reboot"] < 600  # 1 per node per 30 days
    broken = [f for f in a.all if f.arrival is not None]
    assert {f.arrival for f in broken} == {"new"} and 4 <= len(broken) <= 18  # 25 % of 40, none on reboot
    assert all(f.node in a.active for f in broken)  # broken from the moment they arrive


def test_a_thermal_fault_is_seen_by_the_idle_health_check_only_once_a_user_job_loaded_the_node():
    """gpu_health judges NVML's thermal-violation counter by its growth since its previous sample: a GPU
    whose cooling failed throttles under load only, so the sweep sees it after a user job, never before;
    dl_unit (its own load) sees it at once; no crash, no Xid."""
    faults = sim_faults.Faults(nodes=2, hours=1000, rate=1000, shares={"thermal": 1.0}, crash_probability=1.0,
                               seed=1)
    fault = faults.inject()
    n = fault.node
    assert not faults.sees(n, "gpu_health") and faults.sees(n, "dl_unit") and not faults.raises_xid(n)
    assert faults.job_started(n, fault.at + 1, 5.0) is None and fault.jobs == 1  # runs on, slower
    assert faults.sees(n, "gpu_health") and not faults.sees(n, "nccl_loopback")
    assert sim_faults.KINDS["thermal"].seen_by == "dl_unit; gpu_health after a user job"


def test_a_fault_is_detected_by_a_suite_that_sees_it_or_from_a_suspect_mark_no_job_broke():
    faults = sim_faults.Faults(nodes=2, hours=1000, rate=1000, shares={"network": 1.0}, crash_probability=1.0,
                               seed=1)
    first = faults.inject()
    n = first.node
    assert not faults.sees(n, "gpu_health") and faults.sees(n, "nccl_loopback") and not faults.raises_xid(n)
    assert faults.crashes(first) and first.jobs == 1  # the running job counts, and crashes
    faults.suspect(n, first.at + 1)
    assert faults.job_started(n, first.at + 2, 5.0) is not None and first.suspect_since is None  # a job broke it
    faults.suspect(n, first.at + 3)
    faults.detected(n, first.at + 4)
    assert first.detected_at == first.at + 3 and first.jobs == 2 and n not in faults.active
    figures = faults.figures(end=1000)
    assert figures["faults"] == 1 and figures["time_to_detect_h"]["median"] == 3
    assert figures["jobs_on_broken_node"] == {"mean": 2.0, "p90": 2.0}
