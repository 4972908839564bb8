"""store.trend: covered nodes and fresh pairs at a few moments, from validation_history in one query."""

import datetime as dt

import pytest
from cluster_doctor.domain.attempts import Attempt
from cluster_doctor.store import inventory, trend

T = dt.datetime(2026, 11, 10, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)


def passed(node, test, finished):
    return Attempt(node_name=node, test_name=test, status="pass", finished_at=finished, dag_id="d",
                   run_id=f"r-{node}-{test}-{finished.timestamp()}")


def test_a_pair_is_fresh_for_the_staleness_after_its_result(store):
    store.record([passed("gpu-001", "a", T + dt.timedelta(hours=36)), passed("gpu-001", "b", T + 2 * DAY),
                  passed("gpu-002", "a", T + dt.timedelta(hours=1)),
                  Attempt(node_name="gpu-002", test_name="b", status="timeout", finished_at=T, dag_id="d",
                          run_id="t")])
    ends = [T + i * DAY for i in range(1, 5)]  # the ends of four days
    with store.connection() as conn, conn.cursor() as cur:
        samples = trend.coverage_trend(cur, ends=ends, nodes=["gpu-001", "gpu-002", "gpu-001"],
                                       tests=["a", "b"], staleness=2 * DAY, from_first_seen=True)
        fixed = trend.coverage_trend(cur, ends=ends, nodes=["gpu-001", "gpu-002"], tests=["a", "b"],
                                     staleness=2 * DAY)
        assert trend.counts(cur, ends=ends, nodes=[], tests=["a"], staleness=DAY) == {}
    # fresh in [end - 2 d, end): gpu-001 a at the 2nd and 3rd ends, b (finished at the 2nd end) at the 3rd
    # and 4th; gpu-002 a at the 1st and 2nd, b never executed: gpu-001 covered at the 3rd end only
    assert [(s["covered_nodes"], s["fresh_pairs"]) for s in samples] == [(0, 1), (0, 2), (1, 2), (0, 1)]
    assert [s["as_of"] for s in samples] == ends
    # gpu-001's first record is 36 h in: the first day counts gpu-002 alone
    assert [(s["nodes"], s["pairs"]) for s in samples] == [(1, 2), (2, 4), (2, 4), (2, 4)]
    assert {(s["nodes"], s["pairs"]) for s in fixed} == {(2, 4)}  # without it: the whole fleet every day
    assert samples[2]["coverage"] == 0.5 and samples[3]["pair_coverage"] == 0.25


def test_at_most_62_moments_at_once(store):
    with store.connection() as conn, conn.cursor() as cur, pytest.raises(ValueError, match="at most 62"):
        trend.coverage_trend(cur, ends=[T + i * DAY for i in range(63)], nodes=["gpu-001"], tests=["a"],
                             staleness=DAY)


def test_days_before_the_fleet_was_first_seen_have_no_data_not_zero(store):
    """A fleet discovery first saw at the start of the third day: the two days before are no data (no
    share at all), not 0 %; a node known from an attempt before discovery listed it counts from that
    attempt."""
    inventory.record_discovery(store.connect, [inventory.SeenNode("gpu-001", 8, "H100", inventory.FREE),
                                               inventory.SeenNode("gpu-002", 8, "H100", inventory.FREE)],
                               seen_at=T + 2 * DAY + dt.timedelta(hours=1), complete=True)
    store.record([passed("gpu-001", "a", T + 3 * DAY), passed("gpu-002", "a", T + 3 * DAY),
                  Attempt(node_name="gpu-003", test_name="a", status="timeout", finished_at=T + dt.timedelta(hours=12),
                          dag_id="d", run_id="t")])
    ends = [T + i * DAY for i in range(1, 5)]
    with store.connection() as conn, conn.cursor() as cur:
        seen = trend.node_first_seen(cur, nodes=["gpu-001", "gpu-002", "gpu-003", "gpu-004"], tests=["a"])
        samples = trend.coverage_trend(cur, ends=ends, nodes=["gpu-001", "gpu-002"], tests=["a"], staleness=2 * DAY,
                                       from_first_seen=True)
    assert seen == {"gpu-001": T + 2 * DAY + dt.timedelta(hours=1), "gpu-002": T + 2 * DAY + dt.timedelta(hours=1),
                    "gpu-003": T + dt.timedelta(hours=12)}  # gpu-004: known from nothing
    assert [s["pairs"] for s in samples] == [0, 0, 2, 2]
    assert [s["pair_coverage"] for s in samples] == [None, None, 0.0, 1.0]
    assert [s["coverage"] for s in samples[:2]] == [None, None]
