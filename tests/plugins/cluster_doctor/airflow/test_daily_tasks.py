"""cluster_doctor.airflow.daily_tasks: the task bodies of the daily_fleet_report DAG."""

from cluster_doctor.airflow import daily_tasks, runtime
from cluster_doctor.domain.config import Settings


def test_cluster_gpu_nodes_falls_back_when_the_cluster_cannot_be_read(monkeypatch, caplog):
    def no_cluster(conn_id):
        raise RuntimeError("connection kubernetes_default not found")

    monkeypatch.setattr(runtime, "core_v1", no_cluster)
    assert daily_tasks.cluster_gpu_nodes(Settings()) is None
    assert "taken from the results DB" in caplog.text
