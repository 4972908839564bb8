"""Suspect nodes in the metrics: how many, and since when each."""

import datetime as dt

from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.signals import Evidence
from cluster_doctor.reports import metrics
from cluster_doctor.store import suspects

from tests.support.metrics import samples


def scrape(dsn, now):
    registry = metrics.make_registry(metrics.ClusterDoctorCollector(lambda s: dsn, lambda: Settings(tests=["gpu_health"]),
                                                                    clock=lambda: now, cache_ttl_s=0))
    return samples(metrics.render(registry, None)[0].decode())


def test_the_suspect_nodes_and_since_when(store, db_dsn):
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    assert scrape(db_dsn, now)[("cluster_doctor_fleet_suspect_nodes", frozenset())] == 0
    suspects.record(store.connect, [Evidence("gpu-002", "reboot", "b2", "rebooted", now - dt.timedelta(minutes=3))],
                    seen_at=now)
    series = scrape(db_dsn, now)
    assert series[("cluster_doctor_fleet_suspect_nodes", frozenset())] == 1
    assert series[("cluster_doctor_node_suspect_since_timestamp_seconds", frozenset({("node", "gpu-002")}))] == \
        (now - dt.timedelta(minutes=3)).timestamp()
    store.record([{"node_name": "gpu-002", "test_name": "gpu_health", "status": "pass", "run_id": "r",
                   "started_at": now + dt.timedelta(seconds=1), "finished_at": now + dt.timedelta(seconds=2)}])
    series = scrape(db_dsn, now + dt.timedelta(minutes=1))
    assert series[("cluster_doctor_fleet_suspect_nodes", frozenset())] == 0  # its bundle passed
    assert not [k for k in series if k[0] == "cluster_doctor_node_suspect_since_timestamp_seconds"]
