"""cluster-doctor simulate: the real prioritizer over a simulated cluster."""

from __future__ import annotations

import dataclasses
import json

import pytest
from cluster_doctor.cli import main as cli
from cluster_doctor.domain import priority, simulate

SMALL = simulate.SimConfig(nodes=60, days=10, slots=2, seed=3)


def test_runs_the_real_prioritizer(monkeypatch):
    calls = []
    real = priority.bundles

    def spy(*args, **kwargs):
        calls.append(kwargs["policy"])
        return real(*args, **kwargs)

    monkeypatch.setattr(priority, "bundles", spy)
    result = simulate.run(SMALL)
    assert len(calls) == 240  # one plan per simulated hourly run
    assert calls[0].staleness.days == 7 and calls[0].max_pairs == SMALL.pairs_per_run() and calls[0].bundle
    assert result.executed > 0 and result.preempted > 0


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


def test_cli_target_staleness(capsys):
    code = cli.main(["simulate", "--nodes", "150", "--days", "10", "--occupancy", "0.3", "--job-hours", "2",
                     "--max-job-hours", "6", "--target-staleness", "4d", "--staleness", "3d"])
    out = capsys.readouterr().out
    assert code == 0, out
    line = out.strip().splitlines()[-1]
    assert line.startswith("min_slots=") and "target_staleness=4.0d nodes=150" in line
    assert int(line.split()[0].split("=")[1]) >= 1


def test_cli_says_when_no_slot_count_is_enough(capsys):
    code = cli.main(["simulate", "--nodes", "60", "--days", "10", "--occupancy", "0.95", "--job-hours", "48",
                     "--max-job-hours", "200", "--target-staleness", "3d", "--staleness", "1d"])
    out = capsys.readouterr().out
    assert code == 1
    assert "no number of slots keeps the worst staleness within 3.0d without reservation, nor with" in out
    assert out.strip().splitlines()[-1].startswith("min_slots=none")


def test_cli_target_staleness_answers_with_reservation_and_its_cost(capsys):
    code = cli.main(["simulate", "--nodes", "120", "--days", "10", "--target-staleness", "7d", "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["reachable"] and data["staleness_threshold_h"] == 132
    assert data["without_reservation"]["min_slots"] is None  # bundling alone: the occupancy floor
    assert data["without_reservation"]["occupancy_floor_h"] > 168
    found = data["with_reservation"]
    assert found["min_slots"] >= 1
    best = found["at_min_slots"]
    assert best["slots"] == found["min_slots"] and best["worst_staleness_h"] <= 168
    assert best["within_target_share"] == 1.0 and best["reserved_share"] <= 0.01


def test_cli_json(capsys):
    assert cli.main(["simulate", "--nodes", "40", "--days", "3", "--reserve", "--no-gap", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["config"]["nodes"] == 40 and data["config"]["no_gap"] and data["config"]["reserve"]
    for key in ("worst_staleness_h", "within_target_share", "reserved_gpu_hours", "reserved_share"):
        assert isinstance(data[key], float), key


@pytest.mark.parametrize("argv, message", [
    (["--nodes", "0"], "nodes: must be an integer > 0"),
    (["--occupancy", "1.2"], "occupancy: must be a share in [0, 1)"),
    (["--target-staleness", "soon"], "--target-staleness: expected a duration like 7d"),
    (["--target-staleness", "7d", "--staleness", "7d"], "--staleness (7d) must be below --target-staleness (7d)"),
    (["--suite-minutes", "dl_unit=abc"], "--suite-minutes: 'dl_unit=abc' is not name=number"),
    (["--suite-minutes", "dl_unit=0"], "suite_minutes: every suite needs a duration > 0"),
])
def test_bad_input_is_one_line_exit_2(argv, message, capsys):
    assert cli.main(["simulate", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
