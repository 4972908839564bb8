"""domain.coverage: one definition of fresh, stale, covered and failing, from rows the caller read (no
SQL, no connection: the store reads the rows and the trend's counts)."""

import datetime as dt
import math

from cluster_doctor.domain import coverage

NOW = dt.datetime(2026, 11, 10, 12, tzinfo=dt.UTC)
WEEK = dt.timedelta(days=7)


def row(node, test, status, days_ago, **kw):
    return {"node_name": node, "test_name": test, "status": status,
            "finished_at": NOW - dt.timedelta(days=days_ago) if days_ago is not None else None, **kw}


def test_pair_states_and_node_verdicts():
    rows = [row("gpu-001", "a", "pass", 1, gpu_model="H100"), row("gpu-001", "b", "pass", 2, incomplete=True),
            row("gpu-002", "a", "pass", 8), row("gpu-002", "b", "fail", 30),
            row("gpu-003", "a", "timeout", 0), row("gpu-003", "other", "pass", 1, gpu_model="A100"),
            row("gpu-009", "a", "pass", 1)]  # not in the fleet: ignored
    assessed = coverage.assess(rows, tests=["a", "b", "a"], now=NOW, staleness=WEEK,
                               nodes=["gpu-001", "gpu-002", "gpu-003"])
    states = {(p["node_name"], p["test_name"]): p["state"] for p in assessed.pairs}
    assert states == {("gpu-001", "a"): "pass", ("gpu-001", "b"): "pass", ("gpu-002", "a"): "stale",
                      ("gpu-002", "b"): "fail", ("gpu-003", "a"): "never", ("gpu-003", "b"): "never"}
    one, two, three = assessed.nodes.values()
    assert one.covered and not one.healthy and one.incomplete_tests == 1 and one.gpu_model == "H100"
    assert two.failing and two.stale and not two.never
    assert three.never and three.gpu_model == "A100"  # a test outside the enabled ones still names the model
    summary = assessed.summary()
    assert (summary["covered_nodes"], summary["fresh_pairs"], summary["pairs"]) == (1, 2, 6)
    assert summary["never_validated"] == ["gpu-003"] and summary["failing_nodes"] == ["gpu-002"]
    assert summary["worst_staleness_s"] == math.inf  # a pair never executed


def test_unix_seconds_and_the_freshness_boundary():
    fresh_after = (NOW - WEEK).timestamp()
    rows = [{"node_name": "gpu-001", "test_name": "a", "status": "pass", "finished_ts": fresh_after},
            {"node_name": "gpu-002", "test_name": "a", "status": "pass", "finished_ts": fresh_after - 1}]
    assessed = coverage.assess(rows, tests=["a"], now=NOW, staleness=WEEK)
    assert [p["fresh"] for p in assessed.pairs] == [True, False]
    assert [p["age_s"] for p in assessed.pairs] == [WEEK.total_seconds(), WEEK.total_seconds() + 1]


def test_trend_samples_from_the_stores_counts():
    ends = coverage.day_ends(NOW, 3)
    assert ends == [NOW.replace(hour=0) - dt.timedelta(days=1), NOW.replace(hour=0), NOW]
    samples = coverage.trend_samples(ends, nodes=4, tests=2, counts={0: (1, 5), 2: (4, 8)})
    assert [(s["as_of"], s["covered_nodes"], s["fresh_pairs"]) for s in samples] == [
        (ends[0], 1, 5), (ends[1], 0, 0), (ends[2], 4, 8)]
    assert [s["coverage"] for s in samples] == [0.25, 0.0, 1.0]
    assert coverage.period_pair_coverage(samples) == 13 / 24
    assert coverage.trend_samples(ends[:1], nodes=0, tests=2, counts={})[0]["coverage"] is None
