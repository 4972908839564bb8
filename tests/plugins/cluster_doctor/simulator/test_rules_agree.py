"""The simulator takes the DAG's decisions, from the same inputs, with the same functions: when a bundle
stops (``steps.stop_cause``) and when the run is done with the node (``steps.done_with_node``), when the
fast path triggers a run (``fast_path.decide``), and the thresholds the rules run with (the settings'
defaults). Each scenario is fed both to the DAG's code path (the rule over the attempts its steps record)
and to the simulator's call site; then the simulator is shown to have no private copy: replacing the
domain's function changes what it simulates, and its source defines and compares none of the rules."""

from __future__ import annotations

import ast
import dataclasses
import datetime as dt
import pathlib

import pytest
from cluster_doctor.domain import fail_slow, fast_path
from cluster_doctor.domain.acceptance import AcceptancePolicy
from cluster_doctor.domain.attempts import Attempt
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.payloads import GpuNode, PlannedPair
from cluster_doctor.domain.planning import due
from cluster_doctor.domain.planning import plan as planner
from cluster_doctor.domain.planning import steps
from cluster_doctor.domain.status import Status
from cluster_doctor.simulator import simulate

SIMULATOR = pathlib.Path(simulate.__file__).parent
TESTS = ["gpu_health", "dl_unit", "storage_fio"]
# each step's pod start plus suite: gpu_health [0, 2] min, dl_unit [2, 5], storage_fio [5, 9] from a start at 0;
# the first step starts within 30 minutes (the queue limit), the last ends within 38 (the run's window)
CFG = simulate.SimConfig(nodes=4, days=1, slots=1, occupancy=0.0, start="fresh", pod_startup_minutes=1.0,
                         suite_minutes={"gpu_health": 1.0, "dl_unit": 2.0, "storage_fio": 3.0},
                         max_queue_minutes=30.0, run_window_minutes=38.0)
WAITED = "the decision is 31 min old, over the max queue time of 30 min; no pod created"
KILLED = "the validation task was killed before the suite finished (DagRun timeout)"


# (start minute, minute a user job takes the node or None, executed steps that fail) -> what the DAG's steps
# record, one attempt per step that ran: (status, reason)
SCENARIOS = {
    "every step passes": (0, None, set(), [("pass", None)] * 3),
    "health fails: the rest stops": (0, None, {"gpu_health"}, [("fail", "Xid 79")]),
    "another suite fails: the next still runs": (0, None, {"dl_unit"}, [("pass", None), ("fail", "gemm"),
                                                                        ("pass", None)]),
    "a user job preempts the second step": (0, 3.0, set(), [("pass", None), ("preempted", "evicted")]),
    "a user job takes the node before the second pod": (0, 2.0, set(), [
        ("pass", None), ("skipped", f"{steps.NODE_TAKEN} (ml/train-7)")]),
    "the first step waits past the queue limit": (31, None, set(), [("skipped", WAITED)]),
    "the third step would end past the run's window": (30, None, set(), [("pass", None), ("pass", None),
                                                                          ("skipped", KILLED)]),
}


def dag_steps(recorded: list[tuple[str, str | None]], now: dt.datetime) -> tuple[list[tuple[str, str]], bool]:
    """The DAG's code path: each validate step asks ``stop_cause`` of the attempts before it (a stopped
    step records a skip with the cause, no pod), then the group's last task asks ``done_with_node``. The
    steps that ran (test, status) and whether the run is done with the node."""
    attempts: list[Attempt] = []
    ran: list[tuple[str, str]] = []
    outcomes = iter(recorded)
    for test in TESTS:
        cause = steps.stop_cause(attempts)
        if cause is not None:
            attempts.append(Attempt("gpu-00000", test, Status.SKIPPED, now, reason=f"{cause}; no pod created"))
            continue
        status, reason = next(outcomes)
        attempts.append(Attempt("gpu-00000", test, status, now, reason=reason))
        ran.append((test, status))
    return ran, steps.done_with_node(TESTS, attempts)


def simulated_steps(start: float, claimed: float | None, failing: set[str],
                    monkeypatch) -> tuple[list[tuple[str, str]], bool]:
    """The simulator's call site: one bundle of the three suites on a node from ``start`` minutes into the
    run, its user job (if any) taking the node ``claimed`` minutes in, the executed steps in ``failing``
    failing. The steps that ran (test, status) and whether the run is done with the node."""
    sim = simulate._Simulation(CFG)
    sim.cluster.until[0] = claimed / 60 if claimed is not None else 1e9
    ran: list[tuple[str, str]] = []
    real_step = sim._step

    def step(*args):
        found, t = real_step(*args)
        ran.append((found.test_name, str(found.status)))
        return found, t

    monkeypatch.setattr(sim, "_step", step)
    monkeypatch.setattr(sim, "_executed", lambda pair, n, now, at, t: pair.test_name in failing)
    bundle = planner.bundles([GpuNode(name=sim.names[0], gpu_count=8)], TESTS, {}, now=simulate.T0)[0]
    assert [p.test_name for p in bundle.pairs] == TESTS
    return ran, sim._run_bundle(bundle, start, 0.0, 0).done


@pytest.mark.parametrize("start, claimed, failing, recorded", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_the_simulator_runs_and_stops_a_bundle_as_the_dag_does(start, claimed, failing, recorded, monkeypatch):
    assert simulated_steps(start, claimed, failing, monkeypatch) == dag_steps(recorded, simulate.T0)


def test_a_stopped_bundle_is_counted_as_the_rule_says(monkeypatch):
    """A failing health check: the rest is skipped and judged (the node is known bad)."""
    sim = simulate._Simulation(CFG)
    sim.cluster.until[0] = 1e9
    monkeypatch.setattr(sim, "_executed", lambda pair, n, now, at, t: pair.test_name == "gpu_health")
    bundle = planner.bundles([GpuNode(name=sim.names[0], gpu_count=8)], TESTS, {}, now=simulate.T0)[0]
    ended = sim._run_bundle(bundle, 0.0, 0.0, 0)
    assert (ended.done, ended.validated) == (True, True)
    assert (sim.counts.skipped, sim.counts.health_gated) == (2, 2)


FAST_PATH = {
    # (fresh suspects, free nodes, a run going until (h), now (h), next run (h)) at T0 + hours
    "a free fresh suspect, nothing running": ({1, 2}, {1, 3}, 0.0, 5.25, 6.0),
    "nothing fresh and free": ({2}, {1, 3}, 0.0, 5.25, 6.0),
    "a run still going": ({1}, {1}, 5.5, 5.25, 6.0),
    "within the quiet window of the scheduled run": ({1}, {1}, 0.0, 5 + 50 / 60, 6.0),
    "just before the quiet window": ({1}, {1}, 0.0, 5 + 45 / 60, 6.0),
}


@pytest.mark.parametrize("fresh, free, run_until, at, next_run", FAST_PATH.values(), ids=FAST_PATH.keys())
def test_the_simulated_fast_path_triggers_as_the_dags_does(fresh, free, run_until, at, next_run):
    sim = simulate._Simulation(CFG)
    sim.cluster.fresh, sim.cluster.free, sim.run_until = set(fresh), set(free), run_until
    name = sim.names.__getitem__
    # what suspect_signals' tick hands the rule: the untriggered suspects, the free nodes, the runs going,
    # the next scheduled run, the quiet window of the settings
    dag = fast_path.decide(map(name, fresh), map(name, free), paused=False, active_runs=int(at < run_until),
                           next_run=simulate.T0 + dt.timedelta(hours=next_run),
                           now=simulate.T0 + dt.timedelta(hours=at),
                           quiet=dt.timedelta(minutes=Settings.model_fields["fast_path_quiet_minutes"].default))
    assert sim._decide(at, next_run) == dag


def test_the_simulator_runs_with_the_products_thresholds():
    defaults = simulate.SimConfig()
    for name in ("staleness_days", "failed_retest_hours", "bundle_ahead_hours", "sweep_interval_hours",
                 "fast_path_minutes", "fast_path_quiet_minutes", "peer_cadence_days", "peer_max_per_run"):
        assert getattr(defaults, name) == Settings.model_fields[name].default, name
    assert defaults.max_queue_minutes * 60 == Settings.model_fields["max_queue_s"].default
    # fail-slow: the confirmation spacing and the window the store's slow_nodes and due_probes are given
    assert defaults.confirm_spacing_hours == Settings.model_fields["slow_confirm_spacing_hours"].default
    assert defaults.signal_window_hours == Settings.model_fields["slow_signal_window_hours"].default
    assert defaults.acceptance_max_nodes == AcceptancePolicy().max_nodes


FAULTY = simulate.SimConfig(nodes=80, days=4, slots=2, occupancy=0.6, faults=200.0, reserve=True, seed=5)


def test_the_simulator_has_no_private_copy_of_the_rules(monkeypatch):
    """Replacing a domain rule changes the simulation: the simulator calls it, it does not copy it."""
    real = simulate.run(FAULTY)
    assert real.health_gated > 0 and real.fast_path_runs > 0 and real.reservations_released.get("validated")
    monkeypatch.setattr(steps, "stop_cause", lambda previous: None)
    assert simulate.run(FAULTY).health_gated == 0  # nothing stops a bundle any more
    monkeypatch.undo()
    monkeypatch.setattr(fast_path, "decide", lambda *a, **kw: fast_path.Decision([], why_not="never"))
    assert simulate.run(FAULTY).fast_path_runs == 0
    monkeypatch.undo()
    monkeypatch.setattr(steps, "done_with_node", lambda planned, attempts: False)
    assert not simulate.run(FAULTY).reservations_released.get("validated")


# A flagged speed probe: (earlier probes, hours before this one, flagged), this probe flagged, a speed signal an
# hour before it -> whether the node becomes a suspect (its bundle first, reservation may hold it)
PROBE_SCENARIOS = {
    "one flagged probe": ([], True, False, True),
    "a clean probe": ([], False, False, False),
    "a clean probe after a speed signal": ([], False, True, False),
    "flagged again within the spacing: one sighting": ([(1.0, True)], True, False, True),
    "flagged again the spacing apart: failing, quarantined": ([(4.0, True)], True, False, False),
    "flagged with a speed signal: failing, quarantined": ([], True, True, False),
}
FLEET = {f"gpu-{i:03d}": 700.0 + 3 * (i % 5) for i in range(1, 13)}
MODEL = "NVIDIA-H100-80GB-HBM3"


def product_probe_suspect(store, before, flagged: bool, signal: bool) -> bool:
    """The DAG's code path: the probes recorded and judged (a flagged one 11 % under the fleet's GEMM), a
    speed signal as the signals record it, then what the record task makes of the last probe."""
    from cluster_doctor.domain import signals
    from cluster_doctor.store import fail_slow as stored_fail_slow
    from cluster_doctor.store import suspects, verdicts

    from tests.clock import now as clock_now

    now, h = clock_now().replace(microsecond=0), dt.timedelta(hours=1)

    def probe(node, when, gemm):
        a = Attempt(node_name=node, test_name="gpu_health", status="pass", finished_at=when, gpu_model=MODEL,
                    gpu_count=8, metrics={"probe_gemm_tflops_min": gemm, "probe_hbm_gbps_min": 3000.0},
                    dag_id="continuous_validation", run_id=f"r-{node}-{when.timestamp():.0f}")
        store.record([a])
        verdicts.judge_recorded(store.connect, [a.to_dict()], now=when)
        return a.to_dict()

    for day in range(3):
        for node, gemm in FLEET.items():
            probe(node, now - (80 - 24 * day) * h, gemm)
    at = now - 2 * h
    for hours, was_flagged in before:
        probe("gpu-900", at - hours * h, 620.0 if was_flagged else 703.0)
    if signal:
        suspects.record(store.connect, [signals.Evidence("gpu-900", signals.SPEED, "k", "GPU 0: slow", at - h)],
                        seen_at=at - h)
    last = probe("gpu-900", at, 619.0 if flagged else 703.0)
    spacing = dt.timedelta(hours=Settings.model_fields["slow_confirm_spacing_hours"].default)
    window = dt.timedelta(hours=Settings.model_fields["slow_signal_window_hours"].default)
    found = stored_fail_slow.record_probe_suspects(store.connect, [last], now=at + dt.timedelta(seconds=5),
                                                 window=window, spacing=spacing)  # the record task, after
    with store.connection() as conn, conn.cursor() as cur:  # what prioritize and reserve read; a signal's own
        current = suspects.current(cur, ["gpu_health"]).get("gpu-900")  # suspicion is not the probe's
    listed = current is not None and any(line.startswith(f"{signals.PROBE}: ") for line in current.evidence)
    assert listed == ("gpu-900" in found.suspect)
    return listed


def simulated_probe_suspect(before, flagged: bool, signal: bool, monkeypatch) -> bool:
    """The simulator's call site: the health check's probe on node 0 judged (flagged as the scenario says),
    then the bundle's end, where a probe-flagged node is marked suspect (``cluster.mark_suspect``)."""
    sim = simulate._Simulation(dataclasses.replace(CFG, speed=True))
    slow, at = sim.slow, 10.0
    slow.probes[0] = [fail_slow.ProbeOutcome(simulate.T0 + dt.timedelta(hours=at - hours), was)
                      for hours, was in sorted(before, reverse=True)]
    if signal:
        slow.signal_at[0] = at - 1.0
    monkeypatch.setattr(slow, "judge", lambda metric, *a: frozenset({"straggler"}) if flagged else frozenset())
    sim._probing = True
    pair = PlannedPair(node_name=sim.names[0], test_name="gpu_health", why=due.SWEEP, gpu_count=8)
    sim._speed(pair, 0, at)
    sim._finished(0, at, simulate._Ended(1.0, False, False, 0.0))
    return 0 in sim.cluster.suspects


@pytest.mark.parametrize("before, flagged, signal, suspect", PROBE_SCENARIOS.values(), ids=PROBE_SCENARIOS.keys())
def test_a_flagged_probe_makes_a_suspect_in_the_simulator_exactly_when_the_product_records_one(
        before, flagged, signal, suspect, store, monkeypatch):
    assert simulated_probe_suspect(before, flagged, signal, monkeypatch) == suspect
    assert product_probe_suspect(store, before, flagged, signal) == suspect


def test_the_simulator_and_the_product_call_the_one_probe_suspect_rule(store, monkeypatch):
    """Replacing the shared rule changes both: neither keeps a copy of "a flagged probe makes a suspect"."""
    monkeypatch.setattr(fail_slow, "probe_suspect", lambda flagged, state: False)
    assert not simulated_probe_suspect([], True, False, monkeypatch)
    assert not product_probe_suspect(store, [], True, False)


RULES = {"stop_cause", "done_with_node", "ready_at", "decide", "why_due", "sweep_due", "bundles", "sweeps", "take",
         "plan", "overdue", "choose",
         # fail-slow: the node's state, the probe's schedule, the fleet verdicts (simulator.slow calls them)
         "slow_state", "probe_due", "probe_suspect", "is_low", "judge_metric", "fleet_baseline", "node_value", "own_baseline"}


def test_the_simulators_source_defines_and_compares_none_of_the_rules():
    for path in sorted(SIMULATOR.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defined = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
        assert not defined & RULES, f"{path.name} defines {defined & RULES}"
        # the health-first rule and the quiet window are the domain's: no comparison with them here
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                names = {n.attr if isinstance(n, ast.Attribute) else getattr(n, "id", None) for n in ast.walk(node)}
                assert not names & {"HEALTH_FIRST", "fast_path_quiet_minutes", "NODE_TAKEN", "rel_margin", "k_mad",
                                    "drift_margin"}, \
                    f"{path.name}:{node.lineno} compares a rule's threshold itself"


def test_the_rule_scan_finds_a_copy(tmp_path):
    copy = tmp_path / "copy.py"
    copy.write_text("def stop_cause(previous):\n    return previous[-1].test_name == steps.HEALTH_FIRST\n")
    tree = ast.parse(copy.read_text())
    assert {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)} & RULES == {"stop_cause"}
    compares = [n for n in ast.walk(tree) if isinstance(n, ast.Compare)]
    assert any(isinstance(c.comparators[0], ast.Attribute) and c.comparators[0].attr == "HEALTH_FIRST"
               for c in compares)


def test_the_scenarios_cover_every_way_a_step_ends():
    statuses = {status for *_, recorded in SCENARIOS.values() for status, _ in recorded}
    assert statuses == {"pass", "fail", "preempted", "skipped"}
    assert dataclasses.is_dataclass(simulate._Step)
