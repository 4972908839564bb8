"""Fail-slow in the simulator: degraded nodes pace multi-node jobs, the probe in the sweep and the passive
signals find them sooner than today's fleet verdicts at staleness, a healthy fleet's spread and transients
give the false stragglers; the decisions are the product's (fleet_verdicts, fail_slow), never copies."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest
from cluster_doctor.domain import fail_slow, fleet_verdicts
from cluster_doctor.simulator import simulate
from cluster_doctor.simulator import slow as sim_slow

T0 = simulate.T0
# a small fleet with many slow faults (no crash faults): enough of them to compare the rules in seconds
SLOWISH = simulate.SimConfig(nodes=80, days=8, slots=3, occupancy=0.85, reserve=True, slow_faults=150.0,
                             staleness_days=5.5, target_days=7, seed=3)


def settings(**overrides) -> sim_slow.SlowSettings:
    values = dict(nodes=30, hours=48.0, rate=0.0, shares=sim_slow.DEFAULT_SHARES, spread=0.02, noise=0.01,
                  transient_rate=0.0, false_signal=0.0, signal_h=5 / 60, signal_window_h=24.0, seed=1)
    return sim_slow.SlowSettings(**{**values, **overrides})


def test_a_degraded_node_costs_its_job_k_node_hours_an_hour_and_a_healthy_one_nothing():
    slow = sim_slow.Slow(settings(), T0)
    slow.active[4] = fault = sim_slow.SlowFault(4, 1.0, sim_slow.SLOW["throttle"], 0.2)
    slow.all.append(fault)
    slow.job_started(4, 0.0)  # the job began before the fault: only its hours on the degraded node count
    k = slow.job[4][1]
    slow.job_ended(4, 3.0)
    slow.job_started(5, 0.0)
    slow.job_ended(5, 3.0)
    assert fault.node_hours == pytest.approx(2.0 * k) and fault.jobs == 1
    assert fault.lost_node_hours == pytest.approx(2.0 * k * 0.2)
    assert slow.figures(3.0, 30 * 3 / 24)["slow_job_node_hours"] == pytest.approx(2.0 * k)
    assert slow.node_hours > fault.node_hours  # node 5's job counts in the total only


def test_the_simulators_verdict_on_a_measurement_is_fleet_verdicts_judge_metric():
    """The probe's verdict (straggler against the fleet, drift against the node's own past) agrees with the
    product's judge_metric over the same samples, for a node at, slightly below and well below the fleet."""
    slow = sim_slow.Slow(settings(), T0)
    names = [f"gpu-{i:05d}" for i in range(30)]
    metric = "probe_gemm_tflops_min"
    slow.seed_history(names, [metric], 72.0)
    policy = fleet_verdicts.BaselinePolicy()
    median = slow._fleet(metric, 1.0).median
    for node, share in ((3, 1.0), (4, 0.95), (5, 0.88), (6, 0.80), (7, 1.08)):
        value = median * share
        now = T0 + dt.timedelta(hours=1)
        latest = fleet_verdicts.Sample(10_000 + node, names[node], now, value)
        product = set(fleet_verdicts.judge_metric(latest, dict(slow.samples[metric]), policy, now=now))
        assert slow.judge(metric, node, names[node], 1.0, value) == product, share
    low = fleet_verdicts.Sample(1, names[8], now, median * 0.8)
    assert set(fleet_verdicts.judge_metric(low, dict(slow.samples[metric]), policy, now=now)) == {
        fleet_verdicts.STRAGGLER, fleet_verdicts.DRIFT}  # the scenario reaches both verdicts


@pytest.mark.parametrize("flags, signal", [((True, True), False), ((False, True), True), ((True, False), True),
                                           ((False, True), False), ((False, False), True)])
def test_the_simulated_node_state_is_slow_state_over_its_probes_and_signals(flags, signal):
    slow = sim_slow.Slow(settings(), T0)
    probes = [fail_slow.ProbeOutcome(T0 + dt.timedelta(hours=h), f) for h, f in enumerate(flags)]
    slow.probes[2] = probes[-2:]
    if signal:
        slow.signal_at[2] = 1.5
    assert slow.state(2, 2.0) == fail_slow.slow_state(probes, signal)


@pytest.mark.parametrize("spacing_h", [0.0, 3.0])
@pytest.mark.parametrize("probe_h, verdicts", [
    ((0.0, 1.0), {}),  # two flagged probes an hour apart
    ((0.0, 4.0), {}),  # four hours apart
    ((4.0,), {"dl_unit": (3.5, True)}),  # a flagged probe half an hour after a bundle verdict
    ((4.0,), {"nccl_loopback": (0.5, True), "dl_unit": (3.9, False)}),  # hours before it, the other suite clean
    ((30.0,), {"dl_unit": (1.0, True)}),  # a verdict out of the window
    ((), {"dl_unit": (1.0, True)}),  # a verdict alone
])
def test_the_simulated_state_is_slow_state_with_the_spacing_and_the_bundle_verdicts(spacing_h, probe_h, verdicts):
    """The spacing and the bundle verdicts reach ``slow_state`` as the store hands them: the suites' last
    attempts within the window, flagged ones only; ``probe_due`` gets the same spacing."""
    slow = sim_slow.Slow(settings(confirm_spacing_h=spacing_h), T0)
    probes = [fail_slow.ProbeOutcome(T0 + dt.timedelta(hours=h), True) for h in probe_h]
    slow.probes[2] = probes
    for test, last in verdicts.items():
        slow.bundle_at[(2, test)] = last
    at = max((*probe_h, 5.0))
    flagged = [T0 + dt.timedelta(hours=when) for when, bad in verdicts.values() if bad and at - when <= 24.0]
    assert slow.state(2, at) == fail_slow.slow_state(probes, False, bundle_verdicts=flagged,
                                                     min_spacing=dt.timedelta(hours=spacing_h))
    if probes:
        slow.last_probe[2] = probes[-1].at
        now = probes[-1].at + dt.timedelta(hours=1)
        assert slow.probe_now(2, probe_h[-1] + 1.0, min_interval_h=6.0, max_age_h=24.0) == fail_slow.probe_due(
            now, probes[-1].at, busy_since=False, min_interval=dt.timedelta(hours=6), max_age=dt.timedelta(hours=24),
            suspect=True, confirm_after=dt.timedelta(hours=spacing_h))


def test_the_spacing_spares_the_healthy_fleet_the_false_stragglers_of_one_transient():
    """The simulator's case for the setting: a healthy fleet in a storm of transients (each lowers every
    measurement taken inside it) fails fewer nodes when two sightings count only hours apart."""
    stormy = dataclasses.replace(SLOWISH, slow_faults=0.0, speed=True, transient_rate=5.0)
    at_once = simulate.run(dataclasses.replace(stormy, confirm_spacing_hours=0.0)).slow
    spaced = simulate.run(dataclasses.replace(stormy, confirm_spacing_hours=3.0)).slow
    assert at_once["false_stragglers"] > spaced["false_stragglers"]
    assert at_once["false_stragglers_by_rule"].get(sim_slow.TWO_PROBES, 0) > spaced["false_stragglers_by_rule"].get(
        sim_slow.TWO_PROBES, 0)


def test_the_new_rule_finds_slow_nodes_sooner_and_spares_most_slow_job_node_hours():
    today = simulate.run(dataclasses.replace(SLOWISH, probe=False))
    new = simulate.run(SLOWISH)
    assert new.slow["slow_faults"] >= 10 and today.slow["slow_faults"] >= 10
    assert today.slow["probes"] == 0 and new.slow["probes"] > 0
    assert new.slow["slow_time_to_detect_h"]["median"] < today.slow["slow_time_to_detect_h"]["median"]
    assert new.slow["slow_job_node_hours"] < 0.5 * today.slow["slow_job_node_hours"]
    assert new.slow["slow_undetected"] <= today.slow["slow_undetected"]


def test_a_healthy_fleet_without_transients_has_no_false_straggler_and_transients_make_some():
    healthy = dataclasses.replace(SLOWISH, slow_faults=0.0, speed=True, transient_rate=0.0)
    calm = simulate.run(healthy)
    assert calm.slow["slow_faults"] == 0 and calm.slow["probes"] > 0
    assert calm.slow["probes_flagged"] == 0 and calm.slow["false_stragglers"] == 0  # a 2 % spread passes
    stormy = simulate.run(dataclasses.replace(healthy, transient_rate=20.0))
    assert stormy.slow["probes_flagged"] > 0 and stormy.slow["false_stragglers"] > 0
    assert stormy.slow["false_stragglers_per_1000_node_days"] == pytest.approx(
        1000 * stormy.slow["false_stragglers"] / (healthy.nodes * healthy.days))


def test_the_probe_costs_gpu_hours_on_the_schedule_probe_due_gives(monkeypatch):
    healthy = dataclasses.replace(SLOWISH, slow_faults=0.0, speed=True)
    probed = simulate.run(healthy)
    monkeypatch.setattr(fail_slow, "probe_due", lambda *a, **kw: False)
    unprobed = simulate.run(healthy)
    assert unprobed.slow["probes"] == 0 < probed.slow["probes"]
    assert unprobed.validation_gpu_hours < probed.validation_gpu_hours


def test_the_simulator_has_no_private_copy_of_the_slow_rules(monkeypatch):
    """Replacing the product's rules changes what the simulator decides: it calls them."""
    real = simulate.run(SLOWISH)
    assert real.slow["probes_flagged"] > 0
    monkeypatch.setattr(fleet_verdicts, "is_low", lambda *a, **kw: False)
    monkeypatch.setattr(fleet_verdicts, "judge_metric", lambda *a, **kw: {})
    assert simulate.run(SLOWISH).slow["probes_flagged"] == 0
    monkeypatch.undo()
    monkeypatch.setattr(fail_slow, "slow_state", lambda probes, signal, **kw: fail_slow.SlowState.OK)
    never = simulate.run(SLOWISH).slow
    assert not {sim_slow.TWO_PROBES, sim_slow.PROBE_AND_SIGNAL} & set(never["false_stragglers_by_rule"])
    assert never["slow_time_to_detect_h"]["median"] > real.slow["slow_time_to_detect_h"]["median"]


def test_without_the_speed_model_nothing_of_it_runs():
    plain = simulate.run(dataclasses.replace(SLOWISH, slow_faults=0.0))
    assert plain.slow is None


@pytest.mark.parametrize("field, value, message", [
    ("slow_faults", -1.0, "slow_faults"), ("slow_kinds", {"warp": 1.0}, "slow_kinds"),
    ("false_signal", 2.0, "false_signal"), ("probe_minutes", -0.1, "probe_minutes")])
def test_slow_settings_are_checked(field, value, message):
    with pytest.raises(simulate.InvalidSimulation, match=message):
        dataclasses.replace(SLOWISH, **{field: value})


def test_the_goal_compares_todays_rule_and_the_new_one_over_the_seeds():
    found = simulate.goal(dataclasses.replace(SLOWISH, nodes=40, days=3), seeds=(7, 1))
    assert found["seeds"] == [7, 1] and set(found["rules"]) == {"today", "new"}
    for rule in found["rules"].values():
        assert [r["seed"] for r in rule["per_seed"]] == [7, 1]
        assert {"slow_median_h", "slow_job_node_hours", "false_stragglers_per_1000_node_days", "crash_median_h",
                "validation_share"} <= set(rule["mean"])
    today, new = (found["rules"][r]["mean"]["slow_job_node_hours"] for r in ("today", "new"))
    assert found["slow_job_node_hours_fewer"] == pytest.approx(1 - new / today)
