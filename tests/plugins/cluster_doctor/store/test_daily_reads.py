"""store.daily: the daily report's reads in one read-only REPEATABLE READ snapshot, returned as typed
records (the report's numbers are checked by hand in tests/plugins/cluster_doctor/reports/test_daily.py)."""

import datetime as dt

import psycopg
import pytest
from cluster_doctor.domain.attempts import Attempt
from cluster_doctor.store import daily as reads
from cluster_doctor.store import reservations

T = dt.datetime(2026, 11, 10, tzinfo=dt.UTC)  # start of the day read
END = T + dt.timedelta(days=1)
H100 = "NVIDIA-H100-80GB-HBM3"


def at(hours: float) -> dt.datetime:
    return T + dt.timedelta(hours=hours)


def attempt(node, test, status, finished, **kw):
    executed = status in ("pass", "fail", "error")
    return Attempt(node_name=node, test_name=test, status=status, finished_at=finished,
                   started_at=finished - dt.timedelta(seconds=900), duration_s=900.0 if executed else None,
                   gpu_model=kw.pop("gpu_model", H100), gpu_count=8, dag_id="continuous_validation",
                   run_id=f"r-{node}-{test}-{finished.timestamp()}", **kw)


def test_the_snapshot_is_read_only_and_repeatable(store, db_dsn):
    store.record([attempt("gpu-001", "gpu_health", "fail", at(2), reason="first")])
    with reads.snapshot(store) as cur:
        before = reads.failed_attempts(cur, start=T, end=END)
        # another writer commits while the report reads: the snapshot does not see it
        with psycopg.connect(**db_dsn) as other:
            other.execute("INSERT INTO validation_history (node_name, test_name, status, finished_at, dag_id, "
                          "run_id, map_index, try_number) VALUES ('gpu-002', 'gpu_health', 'error', %s, 'd', "
                          "'later', 0, 1)", (at(3),))
        assert reads.failed_attempts(cur, start=T, end=END) == before
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            cur.execute("DELETE FROM validation_history")
    with reads.snapshot(store) as cur:  # a new snapshot sees the committed row
        found = reads.failed_attempts(cur, start=T, end=END)
    assert sorted(f.node_name for f in found) == ["gpu-001", "gpu-002"]


def test_failed_attempts_carry_their_failing_checks_and_previous_result_but_no_peer_test(store):
    failing = {"name": "gemm", "status": "fail", "value": 1.0}
    store.record([attempt("gpu-001", "dl_unit", "pass", at(-30)),
                  attempt("gpu-001", "dl_unit", "fail", at(5),
                          checks=[{"name": "ok", "status": "pass"}, failing]),
                  attempt("gpu-002", "fabric_peer", "fail", at(6), peer="gpu-003"),
                  attempt("gpu-002", "dl_unit", "fail", END + dt.timedelta(hours=1))])  # the next day
    with reads.snapshot(store) as cur:
        [found] = reads.failed_attempts(cur, start=T, end=END)
    assert (found.node_name, found.status, found.previous_status) == ("gpu-001", "fail", "pass")
    assert found.previous_finished_at == at(-30) and found.finished_at == at(5)
    assert found.failing_checks == [failing]


def test_fleet_as_of_reads_each_pair_before_the_moment(store):
    store.record([attempt("gpu-001", "gpu_health", "pass", at(-48)),
                  attempt("gpu-001", "gpu_health", "fail", at(-24), reason="xid"),
                  attempt("gpu-001", "gpu_health", "fail", at(1), reason="xid again"),
                  attempt("gpu-001", "gpu_health", "timeout", at(2), reason="pending"),
                  attempt("gpu-001", "gpu_health", "pass", at(30))])  # after the moment: not read
    with reads.snapshot(store) as cur:
        assert reads.fleet_as_of(cur, nodes=[], tests=["gpu_health"], as_of=END) == []  # no query
        pairs = reads.fleet_as_of(cur, nodes=["gpu-001", "gpu-002"], tests=["gpu_health"], as_of=END)
    by_node = {p.node_name: p for p in pairs}
    one = by_node["gpu-001"]
    assert (one.status, one.finished_at, one.reason) == ("fail", at(1), "xid again")
    assert (one.status_since, one.previous_status) == (at(-24), "pass")
    assert (one.last_attempt_status, one.last_attempt_at) == ("timeout", at(2))
    assert by_node["gpu-002"].status is None and by_node["gpu-002"].as_row()["node_name"] == "gpu-002"


def test_day_counts_and_model_figures_are_typed(store):
    store.record([attempt("gpu-001", "dl_unit", "pass", at(1), metrics={"gemm_bf16_tflops_min": 700.0}),
                  attempt("gpu-002", "dl_unit", "pass", at(2), metrics={"gemm_bf16_tflops_min": 600.0}),
                  attempt("gpu-003", "dl_unit", "fail", at(3), gpu_model=None),
                  attempt("gpu-004", "dl_unit", "timeout", at(4))])
    with reads.snapshot(store) as cur:
        counts = {(c.test_name, c.status): c for c in reads.day_counts(cur, start=T, end=END)}
        models = {m.gpu_model: m for m in reads.model_counts(cur, start=T, end=END)}
        metrics = reads.model_metrics(cur, start=T, end=END, key_pairs=[("dl_unit", "gemm_bf16_tflops_min")])
    assert (counts[("dl_unit", "pass")].attempts, counts[("dl_unit", "pass")].gpu_hours) == (2, 4.0)
    assert counts[("dl_unit", "timeout")].gpu_hours == 0.0
    assert (models[H100].passed, models[H100].failed, models[""].failed) == (2, 0, 1)
    [m] = metrics
    assert (m.gpu_model, m.n, m.median, m.minimum, m.skipped) == (H100, 2, 650.0, 600.0, 0)


def test_reservations_of_a_window(store):
    with reads.snapshot(store) as cur:
        assert reads.reservations(cur, start=T, end=END) == reads.ReservationsOfDay(0, {}, 0, 0.0)
    reservations.opened(store.connect, "gpu-001", gpu_count=8, run_id="r1", at=at(2))
    reservations.closed(store.connect, "gpu-001", reason="validated", at=at(3), free=True)
    reservations.opened(store.connect, "gpu-002", gpu_count=8, run_id="r1", at=at(4))
    with reads.snapshot(store) as cur:
        found = reads.reservations(cur, start=T, end=END)
    assert found == reads.ReservationsOfDay(applied=2, released={"validated": 1}, open_now=1,
                                            idle_gpu_hours=8.0)
