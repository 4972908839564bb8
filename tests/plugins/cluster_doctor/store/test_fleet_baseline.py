"""Fleet-relative (straggler) and drift verdicts: the pure judge over simulated fleets, then the same
judge over synthetic histories in a real PostgreSQL."""

from __future__ import annotations

import datetime as dt
import random
import uuid
from collections import defaultdict

import pytest
from cluster_doctor.domain import fleet_verdicts as fv
from cluster_doctor.domain.attempts import Attempt
from cluster_doctor.store import verdicts as fb

T0 = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
# Realistic levels of an H100 SXM node (see the suites' baselines): the judge is scale-free, but
# keep the numbers recognisable.
LEVELS = {"gemm_bf16_tflops_min": 730.0, "mem_bw_gbps_min": 2900.0, "nccl_busbw_gbps": 480.0,
          "fio_seq_read_mibps": 2400.0, "fio_seq_write_mibps": 1800.0, "fio_rand_read_iops": 120000.0,
          "fio_rand_write_iops": 60000.0, "probe_gemm_tflops_min": 730.0, "probe_hbm_gbps_min": 2900.0}


class SimFleet:
    """An in-memory fleet: every hour a few (node, test) pairs run, each result is judged by the real
    ``judge_attempt`` against the samples so far, and a flagged pair is retested at the next hour (the
    failed-retest path, 6 h later), where a repeat confirms it."""

    def __init__(self, nodes: int, seed: int, *, noise: float = 0.015, node_spread: float = 0.015,
                 policy: fv.BaselinePolicy = fv.BaselinePolicy()):
        self.rnd = random.Random(seed)
        self.nodes = [f"gpu-{i:03d}" for i in range(nodes)]
        self.offset = {n: self.rnd.uniform(-node_spread, node_spread) for n in self.nodes}
        self.noise, self.policy = noise, policy
        self.samples = {t: {m: defaultdict(list) for m in ms} for t, ms in fv.JUDGED_METRICS.items()}
        self.last_flags: dict[tuple[str, str], dict[str, frozenset[str]]] = {}
        self.pairs = [(n, t) for n in self.nodes for t in fv.JUDGED_METRICS]
        self.rnd.shuffle(self.pairs)
        self.cursor = 0
        self.retest: list[tuple[int, tuple[str, str]]] = []
        self.next_id = 1
        self.factor = defaultdict(lambda: 1.0)  # node -> true performance factor (1.0 healthy)
        self.verdicts: list[fv.Verdict] = []

    def value(self, node: str, metric: str) -> float:
        return LEVELS[metric] * self.factor[node] * (1 + self.offset[node]) * (1 + self.rnd.gauss(0, self.noise))

    def run(self, hour: int, per_run: int = 4) -> list[fv.Verdict]:
        now = T0 + dt.timedelta(hours=hour)
        # flagged pairs come back after the failed-retest interval (6 h), at most half the slots
        due = [p for h, p in self.retest if h <= hour][:per_run // 2]
        self.retest = [(h, p) for h, p in self.retest if p not in due]
        chosen = list(due)
        while len(chosen) < per_run:
            pair = self.pairs[self.cursor % len(self.pairs)]
            self.cursor += 1
            if pair not in chosen:
                chosen.append(pair)
        found = []
        for node, test in chosen:
            hid, self.next_id = self.next_id, self.next_id + 1
            metrics = {m: self.value(node, m) for m in fv.JUDGED_METRICS[test]}
            for m, v in metrics.items():
                self.samples[test][m][node].append(fv.Sample(hid, node, now, v))
            verdicts = fv.judge_attempt(
                history_id=hid, node_name=node, test_name=test, gpu_model="NVIDIA-H100-80GB-HBM3",
                finished_at=now, metrics=metrics, fleet=self.samples[test],
                previous_flags=self.last_flags.get((node, test), {}), policy=self.policy, now=now)
            flags: dict[str, set[str]] = defaultdict(set)
            for v in verdicts:
                flags[v.metric].add(v.kind)
                series = self.samples[test][v.metric][node]
                series[-1] = fv.Sample(hid, node, now, series[-1].value, frozenset(flags[v.metric]))
            self.last_flags[(node, test)] = {m: frozenset(k) for m, k in flags.items()}
            if verdicts:
                self.retest.append((hour + 6, (node, test)))
            found += verdicts
        self.verdicts += found
        return found


def test_a_healthy_fleet_with_3_percent_noise_flags_nothing_over_1000_runs():
    sim = SimFleet(nodes=48, seed=11)
    for hour in range(1000):
        sim.run(hour)
    judged = sim.next_id - 1
    assert judged == 4000
    assert [v.describe() for v in sim.verdicts if v.confirmed] == []
    # not even a suspect: ±3 % is far inside both margins, and k MADs alone would not flag
    assert sim.verdicts == []


def test_mad_alone_would_flag_the_healthy_fleet_so_the_relative_margin_matters():
    # Same fleet, the relative margin made negligible: the k-MAD test alone flags noise.
    sim = SimFleet(nodes=48, seed=11, policy=fv.BaselinePolicy(rel_margin=0.001, k_mad=2.0))
    for hour in range(300):
        sim.run(hour)
    assert any(v.kind == fv.STRAGGLER for v in sim.verdicts)


def test_a_straggler_and_a_drifting_node_are_found_and_confirmed_and_nobody_else():
    sim = SimFleet(nodes=48, seed=5)
    sim.factor["gpu-007"] = 0.85  # 15 % slower than its identical peers from day one
    for hour in range(1000):
        if hour == 600:
            sim.factor["gpu-031"] = 0.86  # degrades mid-way (thermal paste, a failing HCA, ...)
        sim.run(hour)
    confirmed = {(v.node_name, v.kind) for v in sim.verdicts if v.confirmed}
    assert ("gpu-007", fv.STRAGGLER) in confirmed
    assert ("gpu-031", fv.DRIFT) in confirmed
    assert {node for node, _ in confirmed} == {"gpu-007", "gpu-031"}
    assert {v.node_name for v in sim.verdicts} == {"gpu-007", "gpu-031"}
    # the drift is caught by the first judged results after the drop, not never
    first_drift = min(v.history_id for v in sim.verdicts if v.node_name == "gpu-031" and v.kind == fv.DRIFT)
    assert first_drift > 2400
    straggler = [v for v in sim.verdicts if v.node_name == "gpu-007" and v.confirmed][-1]
    assert straggler.percentile < 5 and straggler.fleet_nodes >= 40
    assert 0.83 < straggler.value / straggler.fleet_median < 0.87


def test_a_drifted_node_does_not_become_its_own_new_normal():
    # Flagged values stay out of the node's trailing median, so drift keeps being reported.
    sim = SimFleet(nodes=24, seed=3)
    for hour in range(400):
        if hour == 100:
            sim.factor["gpu-002"] = 0.8
        sim.run(hour)
    late = [v for v in sim.verdicts if v.node_name == "gpu-002" and v.kind == fv.DRIFT and v.history_id > 1200]
    assert late and all(v.confirmed for v in late[1:])


def _samples(values: dict[str, list[float]]) -> dict[str, list[fv.Sample]]:
    out, hid = {}, 1
    for node, vals in values.items():
        out[node] = []
        for i, v in enumerate(vals):
            out[node].append(fv.Sample(hid, node, T0 + dt.timedelta(hours=i), v))
            hid += 1
    return out


def test_judge_metric_numbers_and_minimum_sample():
    policy = fv.BaselinePolicy(min_fleet_nodes=5)
    fleet = _samples({f"n{i}": [100.0 + i % 3] for i in range(6)})
    latest = fv.Sample(999, "slow", T0 + dt.timedelta(days=1), 80.0)
    fleet["slow"] = [latest]
    found = fv.judge_metric(latest, fleet, policy, now=latest.finished_at)
    assert set(found) == {fv.STRAGGLER}
    assert found[fv.STRAGGLER]["fleet_median"] == 101.0
    assert found[fv.STRAGGLER]["fleet_nodes"] == 6
    assert found[fv.STRAGGLER]["percentile"] == 0.0
    assert found[fv.STRAGGLER]["own_median"] is None  # no own history yet: drift not judged
    # one node fewer than the minimum: not judged at all (not "passed" either: no verdict, no numbers)
    del fleet["n0"]
    assert fv.judge_metric(latest, fleet, fv.BaselinePolicy(min_fleet_nodes=6), now=latest.finished_at) == {}


def test_outliers_do_not_feed_the_baseline():
    # 4 slow nodes out of 14 pull a plain median down; the trimmed baseline is the healthy majority's.
    policy = fv.BaselinePolicy(min_fleet_nodes=5)
    values = {f"h{i}": 100.0 + (i % 5) * 0.5 for i in range(10)} | {f"s{i}": 60.0 for i in range(4)}
    base = fv.fleet_baseline(values, policy)
    assert 100.0 <= base.median <= 102.0 and base.nodes == 10
    # a node's own flagged values never count for it
    flagged = [fv.Sample(1, "x", T0, 50.0, frozenset({fv.DRIFT})), fv.Sample(2, "x", T0, 100.0)]
    assert fv.node_value(flagged, policy) == 100.0


def test_drift_needs_enough_own_history_and_a_real_drop():
    policy = fv.BaselinePolicy(min_fleet_nodes=50)  # no fleet verdicts here
    own = [100.0, 101.0, 99.0, 100.5]
    fleet = _samples({"n": own})
    for value, expect in ((95.0, {}), (85.0, {fv.DRIFT})):
        latest = fv.Sample(100, "n", T0 + dt.timedelta(days=1), value)
        fleet["n"] = fleet["n"][:4] + [latest]
        assert set(fv.judge_metric(latest, fleet, policy, now=latest.finished_at)) == set(expect)
    short = _samples({"n": [100.0, 100.0]})
    latest = fv.Sample(100, "n", T0 + dt.timedelta(days=1), 50.0)
    assert fv.judge_metric(latest, short | {"n": short["n"] + [latest]}, policy, now=latest.finished_at) == {}


def test_values_older_than_the_windows_are_ignored():
    policy = fv.BaselinePolicy(min_fleet_nodes=5, window_days=14, drift_window_days=30)
    old = {f"n{i}": [fv.Sample(i, f"n{i}", T0, 200.0)] for i in range(8)}
    latest = fv.Sample(99, "x", T0 + dt.timedelta(days=40), 100.0)
    assert fv.judge_metric(latest, old | {"x": [fv.Sample(50, "x", T0, 200.0), latest]}, policy,
                           now=latest.finished_at) == {}


@pytest.mark.parametrize("values, message", [
    ({"rel_margin": 1.5}, "fleet_verdicts.rel_margin: must be a share between 0 and 1"),
    ({"k_mad": 0}, "fleet_verdicts.k_mad: must be a number > 0"),
    ({"min_fleet_nodes": "ten"}, "fleet_verdicts.min_fleet_nodes: must be an integer >= 1"),
    ({"window": 3}, "fleet_verdicts: unknown key(s) window"),
    ({"enabled": "yes"}, "fleet_verdicts.enabled: expected true or false"),
    ({"drift_samples": 2, "drift_min_samples": 3}, "drift_min_samples must not exceed drift_samples"),
])
def test_bad_policy_is_refused_by_name(values, message):
    with pytest.raises(fv.InvalidBaselinePolicy, match=message.replace("(", r"\(").replace(")", r"\)")):
        fv.BaselinePolicy.from_mapping(values)


def test_judged_metrics_are_key_metrics_of_the_catalog():
    from cluster_doctor.domain import suites

    for test, metrics in fv.JUDGED_METRICS.items():
        assert set(metrics) <= set(suites.CATALOG[test].key_metrics), test


# ---------------------------------------------------------------------------- real PostgreSQL
MODEL = "NVIDIA-H100-80GB-HBM3"


def _attempt(node: str, when: dt.datetime, factor: float, rnd: random.Random, *, run: str,
             status: str = "pass", model: str = MODEL) -> Attempt:
    metrics = {"nccl_busbw_gbps": round(480.0 * factor * (1 + rnd.gauss(0, 0.015)), 2), "transport": "IB"}
    return Attempt(node_name=node, test_name="nccl_loopback", status=status, finished_at=when, metrics=metrics,
                   gpu_model=model, gpu_count=8, dag_id="continuous_validation", run_id=run)


def _history(store, rnd: random.Random, *, days: int = 20, nodes: int = 16,
             factors: dict | None = None, drift_from: dict | None = None) -> None:
    """Every node validated daily for ``days`` days, at realistic ±3 % noise."""
    factors, drift_from = factors or {}, drift_from or {}
    attempts = []
    for day in range(days):
        for i in range(nodes):
            node = f"gpu-{i:03d}"
            when = T0 + dt.timedelta(days=day, minutes=i)
            factor = factors.get(node, 1.0)
            if node in drift_from and day >= drift_from[node][0]:
                factor *= drift_from[node][1]
            attempts.append(_attempt(node, when, factor, rnd, run=f"d{day}"))
    store.record(attempts)


def _judge_new(store, node: str, when: dt.datetime, factor: float, rnd, policy=fv.BaselinePolicy()):
    attempt = _attempt(node, when, factor, rnd, run=f"new-{uuid.uuid4().hex[:6]}")
    store.record([attempt])
    return fb.judge_recorded(store.connect, [attempt.to_dict()], policy)


def test_postgres_history_finds_the_straggler_and_the_drifting_node_then_confirms(store):
    rnd = random.Random(1)
    _history(store, rnd, factors={"gpu-003": 0.85}, drift_from={"gpu-009": (19, 0.85)})
    when = T0 + dt.timedelta(days=20, hours=1)
    verdicts = {}
    for i in range(16):
        node = f"gpu-{i:03d}"
        factor = 0.85 if node in ("gpu-003", "gpu-009") else 1.0
        verdicts[node] = _judge_new(store, node, when + dt.timedelta(minutes=i), factor, rnd)
    assert {n for n, v in verdicts.items() if v} == {"gpu-003", "gpu-009"}
    assert {v.kind for v in verdicts["gpu-003"]} == {fv.STRAGGLER}  # always slow: no drift against itself
    # gpu-009 dropped yesterday (not judged then): its own median still holds the older values
    assert fv.DRIFT in {v.kind for v in verdicts["gpu-009"]}
    assert not any(v.confirmed for vs in verdicts.values() for v in vs)
    straggler = verdicts["gpu-003"][0]
    assert straggler.metric == "nccl_busbw_gbps" and straggler.gpu_model == MODEL
    assert 470 < straggler.fleet_median < 490 and straggler.fleet_nodes >= 13 and straggler.percentile < 10

    # stored, visible on the latest executed attempt, and the prioritizer sees those pairs as failing
    rows = fb.latest_verdicts(store.connect)
    assert {(r["node_name"], r["kind"]) for r in rows} >= {("gpu-003", fv.STRAGGLER), ("gpu-009", fv.DRIFT)}
    assert fb.latest_verdicts(store.connect, confirmed_only=True) == []
    latest = [[r["node_name"], r["test_name"], r["status"], r["finished_at"], r["last_attempt_at"],
               r["last_attempt_status"]] for r in store.latest()]
    marked = {(r[0], r[2]) for r in fb.mark_suspects(store.connect, latest)}
    assert ("gpu-003", "fail") in marked and ("gpu-009", "fail") in marked and ("gpu-001", "pass") in marked

    # the retest confirms both; a healthy retest of the straggler would have cleared it
    again = when + dt.timedelta(hours=7)
    assert all(v.confirmed for v in _judge_new(store, "gpu-003", again, 0.85, rnd))
    assert any(v.confirmed and v.kind == fv.DRIFT for v in _judge_new(store, "gpu-009", again, 0.85, rnd))
    assert {r["node_name"] for r in fb.latest_verdicts(store.connect, confirmed_only=True)} == {"gpu-003", "gpu-009"}
    assert _judge_new(store, "gpu-003", again + dt.timedelta(hours=7), 1.0, rnd) == []
    assert "gpu-003" not in {r["node_name"] for r in fb.latest_verdicts(store.connect)}


def test_postgres_judging_is_idempotent_and_skips_errors_and_other_models(store):
    rnd = random.Random(2)
    _history(store, rnd)
    slow = _attempt("gpu-001", T0 + dt.timedelta(days=21), 0.8, rnd, run="x")
    errored = _attempt("gpu-002", T0 + dt.timedelta(days=21), 0.5, rnd, run="x", status="error")
    other = _attempt("gpu-900", T0 + dt.timedelta(days=21), 0.5, rnd, run="x", model="NVIDIA-A100-SXM4-80GB")
    store.record([slow, errored, other])
    batch = [a.to_dict() for a in (slow, errored, other)]
    first = fb.judge_recorded(store.connect, batch)
    assert {(v.node_name, v.kind) for v in first} == {("gpu-001", fv.STRAGGLER), ("gpu-001", fv.DRIFT)}
    assert fb.judge_recorded(store.connect, batch) == first
    with store.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM validation_verdicts")
        assert cur.fetchone()[0] == 2
    assert fb.judge_recorded(store.connect, batch, fv.BaselinePolicy(enabled=False)) == []


def test_garbage_metric_values_are_not_judged(store):
    rnd = random.Random(4)
    _history(store, rnd, days=5)
    odd = Attempt(node_name="gpu-001", test_name="nccl_loopback", status="pass", finished_at=T0 + dt.timedelta(days=6),
                  metrics={"nccl_busbw_gbps": "fast"}, gpu_model=MODEL, dag_id="d", run_id="r")
    store.record([odd])
    assert fb.judge_recorded(store.connect, [odd.to_dict()]) == []


def test_the_record_task_judges_what_it_recorded(store):
    from cluster_doctor.airflow import tasks
    from cluster_doctor.domain.config import Settings
    from cluster_doctor.domain.payloads import Plan, PlannedPair

    rnd = random.Random(6)
    _history(store, rnd)
    slow = _attempt("gpu-002", T0 + dt.timedelta(days=21), 0.8, rnd, run="run-x")
    planned = Plan(planned_at=slow.finished_at, pairs=[
        PlannedPair(node_name="gpu-002", test_name="nccl_loopback", why="stale", gpu_count=8)])
    tasks.record(planned, [slow.to_dict()], store, dag_id=slow.dag_id, run_id="run-x", settings=Settings())
    assert {(r["node_name"], r["kind"]) for r in fb.latest_verdicts(store.connect)} == {
        ("gpu-002", fv.STRAGGLER), ("gpu-002", fv.DRIFT)}
