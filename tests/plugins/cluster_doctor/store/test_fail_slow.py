"""cluster_doctor.store.fail_slow against a real PostgreSQL: the speed probe's figures judged against the fleet
(straggler verdicts on gpu_health), the speed signals, and what domain.fail_slow makes of them; quarantine's
confirmed failures name a slow node with code SLOW; when the probe is due."""

from __future__ import annotations

import datetime as dt
import uuid

from cluster_doctor.domain import fail_slow as rule
from cluster_doctor.domain.actions import SLOW_ACTION
from cluster_doctor.domain.attempts import Attempt
from cluster_doctor.domain.signals import SPEED, Evidence
from cluster_doctor.store import fail_slow, inventory, suspects
from cluster_doctor.store import quarantine as stored_quarantine
from cluster_doctor.store import verdicts
from cluster_doctor.store.inventory import SeenNode

from tests.clock import now as clock_now

NOW = clock_now().replace(microsecond=0)
H = dt.timedelta(hours=1)
MODEL = "NVIDIA-H100-80GB-HBM3"
WINDOW = dt.timedelta(hours=24)
HEALTHY = {f"gpu-{i:03d}": 700.0 + 3 * (i % 5) for i in range(1, 13)}  # a few % of spread


def probe(store, node: str, when: dt.datetime, gemm: float, *, probed: bool = True) -> list:
    """One gpu_health attempt (with the probe's figures, or without: a sweep that did not probe), judged."""
    metrics = {"gpus_visible": 8, "xid_events": 0}
    if probed:
        metrics |= {"probe_gemm_tflops_min": gemm, "probe_hbm_gbps_min": 3000.0}
    a = Attempt(node_name=node, test_name="gpu_health", status="pass", finished_at=when, metrics=metrics,
                gpu_model=MODEL, gpu_count=8, dag_id="continuous_validation", run_id=f"r-{uuid.uuid4().hex[:8]}")
    store.record([a])
    return verdicts.judge_recorded(store.connect, [a.to_dict()], now=when)


def fleet(store, start: dt.datetime) -> None:
    for day in range(3):
        for node, gemm in HEALTHY.items():
            probe(store, node, start + day * 24 * H, gemm)


def slow(store, at: dt.datetime) -> dict:
    return fail_slow.read_slow_nodes(store.connect, now=at, window=WINDOW)


def test_two_flagged_probes_in_a_row_make_a_node_failing_with_code_slow(store):
    fleet(store, NOW - 80 * H)
    assert probe(store, "gpu-100", NOW - 60 * H, 702.0) == []  # its own healthy past
    found = probe(store, "gpu-100", NOW - 7 * H, 625.0)  # 11 % slow: above the old 620 floor of dl_unit
    assert [(v.metric, v.kind) for v in found] == [("probe_gemm_tflops_min", "straggler")]
    first = slow(store, NOW - 6 * H)["gpu-100"]
    assert first.state == rule.SlowState.SUSPECT and not first.failing
    assert first.probes and first.probes[0].startswith("straggler:probe_gemm_tflops_min=625")
    assert "gpu-100" not in stored_quarantine.confirmed_failures(store.connect, ["gpu_health"], now=NOW - 6 * H)
    probe(store, "gpu-100", NOW - H, 623.0)  # the retest: flagged again
    second = slow(store, NOW)["gpu-100"]
    assert second.state == rule.SlowState.FAILING and second.describe().startswith("slow (failing, SLOW): probe ")
    [failure] = stored_quarantine.confirmed_failures(store.connect, ["gpu_health"], now=NOW)["gpu-100"]
    assert (failure.test_name, failure.code, failure.action, failure.verdict) == ("gpu_health", "SLOW", SLOW_ACTION,
                                                                                  False)
    assert set(slow(store, NOW)) == {"gpu-100"}  # the healthy fleet with its spread: nobody else


def test_a_flagged_probe_and_a_speed_signal_make_a_node_failing(store):
    fleet(store, NOW - 80 * H)
    signal = Evidence("gpu-200", SPEED, "clock_event_0x40/gpu2@x", "GPU 2: hardware thermal slowdown", NOW - 3 * H)
    suspects.record(store.connect, [signal], seen_at=NOW - 3 * H)
    only_signal = slow(store, NOW - 2 * H)["gpu-200"]
    assert only_signal.state == rule.SlowState.SUSPECT and only_signal.signals == ("GPU 2: hardware thermal slowdown",)
    probe(store, "gpu-200", NOW - H, 610.0)
    both = slow(store, NOW)["gpu-200"]
    assert both.failing and "signal GPU 2: hardware thermal slowdown" in both.describe()
    # a signal older than the window no longer counts: one flagged probe is a suspect again
    assert slow(store, NOW + 25 * H)["gpu-200"].state == rule.SlowState.SUSPECT


def test_a_sweep_that_did_not_probe_is_no_probe(store):
    fleet(store, NOW - 80 * H)
    probe(store, "gpu-300", NOW - 5 * H, 612.0)
    probe(store, "gpu-300", NOW - 2 * H, 0.0, probed=False)  # only the health checks ran
    assert slow(store, NOW)["gpu-300"].state == rule.SlowState.SUSPECT  # its last probe stays the flagged one


def test_when_the_probe_is_due(store):
    fleet(store, NOW - 80 * H)  # every healthy node last probed 32 h ago
    for at, first in ((NOW - 40 * H, "free"), (NOW - 20 * H, "busy"), (NOW - 10 * H, "free")):
        inventory.record_discovery(store.connect, [SeenNode("gpu-001", 8, MODEL, first),
                                                   SeenNode("gpu-002", 8, MODEL, "free")], seen_at=at, complete=False)
    due = fail_slow.due_probes(store.connect, ["gpu-001", "gpu-002", "gpu-999"], now=NOW, min_interval=6 * H,
                               max_age=72 * H, window=WINDOW)
    # gpu-001 ran a job since its probe; gpu-002 stayed idle (probed again at 72 h); gpu-999 was never probed
    assert due == {"gpu-001", "gpu-999"}
    assert fail_slow.due_probes(store.connect, ["gpu-002"], now=NOW + 41 * H, min_interval=6 * H, max_age=72 * H,
                                window=WINDOW) == {"gpu-002"}


def test_status_and_the_metrics_name_the_slow_node_with_its_evidence(store, db_dsn):
    from cluster_doctor.cli import main as cli
    from cluster_doctor.domain.config import Settings
    from cluster_doctor.reports import metrics
    from cluster_doctor.store import fleet as stored_fleet

    from tests.support.metrics import samples

    fleet(store, NOW - 80 * H)
    probe(store, "gpu-100", NOW - 7 * H, 625.0)
    probe(store, "gpu-100", NOW - H, 623.0)
    with stored_fleet.open_for(Settings(), db_dsn, now=NOW) as q:
        found = q.slow_nodes()
    lines = cli.since_lines({}, {}, cli.parse_node_range(None), {}, found)
    assert lines[0] == "slow: 1 GPU node(s)"
    assert lines[1].startswith("  gpu-100  slow (failing, SLOW): probe straggler:probe_gemm_tflops_min=623")
    registry = metrics.make_registry(metrics.ClusterDoctorCollector(
        lambda s: db_dsn, lambda: Settings(tests=["gpu_health"]), clock=lambda: NOW, cache_ttl_s=0))
    series = samples(metrics.render(registry, None)[0].decode())
    assert series[("cluster_doctor_fleet_slow_nodes", frozenset({("state", "failing")}))] == 1
    assert series[("cluster_doctor_fleet_slow_nodes", frozenset({("state", "suspect")}))] == 0
    [(labels, at)] = [(dict(k[1]), v) for k, v in series.items()
                      if k[0] == "cluster_doctor_node_slow_since_timestamp_seconds"]
    assert labels["node"] == "gpu-100" and labels["state"] == "failing" and at == (NOW - H).timestamp()
    assert labels["evidence"].startswith("probe straggler:probe_gemm_tflops_min=623")
