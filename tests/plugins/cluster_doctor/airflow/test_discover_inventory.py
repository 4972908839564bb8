"""The discover task keeps the GPU node inventory and hands on only node ranges: against the Kubernetes
API emulator (real client) and a real PostgreSQL."""

from __future__ import annotations

import datetime as dt
import json
import logging

import pytest
from cluster_doctor.airflow import tasks
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.payloads import Discovered
from cluster_doctor.store import inventory
from cluster_doctor.store.history import ResultStore

from tests.support.emulator import create_namespace

NOW = dt.datetime(2026, 11, 25, 12, tzinfo=dt.UTC)


@pytest.fixture
def cluster(validation_cluster):
    create_namespace(validation_cluster, "ml")
    for i in range(1, 5):
        validation_cluster.add_gpu_node(f"gpu-{i:03d}")
    validation_cluster.cordon("gpu-003")
    validation_cluster.add_user_pod("gpu-004", gpus=8, name="trainer-0", namespace="ml")
    return validation_cluster


def rows(store):
    with store.connect() as conn, conn.cursor() as cur:
        return inventory.read(cur)


def test_discover_writes_every_gpu_node_and_passes_ranges(cluster, store):
    found = tasks.discover({}, Settings(), cluster.core_v1(), now=NOW, store=store)
    assert found.inventory_at == NOW
    assert [g.nodes for g in found.free_groups] == ["gpu-[001-002]"]
    assert found.not_eligible == {"busy": "gpu-004", "cordoned": "gpu-003"}
    wire = json.dumps(found.to_xcom())
    assert "trainer-0" not in wire and Discovered.from_xcom(json.loads(wire)).gpu_nodes == found.gpu_nodes
    got = rows(store)
    assert {n: r.eligibility for n, r in got.items()} == {"gpu-001": "free", "gpu-002": "free",
                                                         "gpu-003": "cordoned", "gpu-004": "busy"}
    assert got["gpu-004"].eligibility_detail == "ml/trainer-0 requests 8 nvidia.com/gpu"
    assert got["gpu-001"].gpu_model == "NVIDIA-H100-80GB-HBM3" and got["gpu-001"].gpu_count == 8


def test_a_node_range_run_leaves_the_others_and_a_full_run_marks_the_missing_gone(cluster, store):
    tasks.discover({}, Settings(), cluster.core_v1(), now=NOW, store=store)
    cluster.core_v1().delete_node("gpu-002")
    tasks.discover({"node_range": "gpu-00[3-4]"}, Settings(), cluster.core_v1(), now=NOW + dt.timedelta(hours=1),
                   store=store)
    assert rows(store)["gpu-002"].gone_at is None  # not looked at: not gone
    tasks.discover({}, Settings(), cluster.core_v1(), now=NOW + dt.timedelta(hours=2), store=store)
    assert rows(store)["gpu-002"].gone_at == NOW + dt.timedelta(hours=2)


class Kept(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def test_an_unreachable_results_db_does_not_stop_the_run(cluster):
    dead = ResultStore({"host": "127.0.0.1", "port": 1, "dbname": "x", "user": "postgres", "connect_timeout": 1})
    kept, logger = Kept(), logging.getLogger("cluster_doctor.airflow.tasks")
    logger.addHandler(kept)  # whatever logging configuration an earlier test left (Airflow's structlog)
    try:
        found = tasks.discover({}, Settings(), cluster.core_v1(), now=NOW, store=dead)
    finally:
        logger.removeHandler(kept)
    assert found.inventory_at is None and len(found.free) == 2  # the run still plans from what it found
    (line,) = [m for m in kept.lines if "GPU node inventory not updated" in m]
    assert "cannot connect to the results database" in line and "\n" not in line
