"""cluster_doctor.airflow.tasks.daily_report: the task body of the daily_fleet_report DAG."""

import datetime as dt

from cluster_doctor.airflow import runtime
from cluster_doctor.airflow.tasks import daily_report
from cluster_doctor.domain.config import Settings
from cluster_doctor.store import inventory

from tests.support import fleet_seed as seed


def test_the_report_counts_the_inventory_and_never_asks_the_cluster(monkeypatch, store, db_url, tmp_path):
    """The fleet is the GPU node inventory the validation runs keep: a node never attempted counts,
    with its reason, and the Kubernetes API is not read (it may be down; the report still tells the
    same coverage as the page)."""
    def no_cluster(conn_id):
        raise AssertionError("the daily report must not read the Kubernetes API")

    day = dt.datetime(2026, 11, 10, 9, tzinfo=dt.UTC)
    inventory.record_discovery(store.connect, [
        inventory.SeenNode("gpu-001", 8, seed.H100, inventory.FREE),
        inventory.SeenNode("gpu-002", 8, seed.H100, "busy", "ml/pretrain-0 requests 8 nvidia.com/gpu"),
    ], seen_at=day - dt.timedelta(hours=2), complete=True)
    store.record([seed.attempt("gpu-001", "gpu_health", "pass", day)])
    monkeypatch.setattr(runtime, "core_v1", no_cluster)
    monkeypatch.setenv("AIRFLOW_CONN_VALIDATION_DB", db_url)
    result = daily_report.write_report(Settings(tests=["gpu_health"], reports_dir=str(tmp_path)), day="2026-11-10",
                                      now=day + dt.timedelta(days=1))
    assert result["coverage"] == {"covered": 1, "nodes": 2, "coverage": 0.5}
    md = (tmp_path / "daily" / "2026-11-10.md").read_text()
    assert "Never-validated nodes, and why (1)" in md
    assert "| busy | 1 | 2026-11-10 07:00 | ml/pretrain-0 requests 8 nvidia.com/gpu | gpu-002 |" in md
