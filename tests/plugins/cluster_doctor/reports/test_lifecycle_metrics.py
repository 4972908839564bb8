"""The node lifecycle in the metrics: transitions counted by kind, the repeat offenders, how
long quarantines lasted and how long from a repair to the release."""

import datetime as dt

from cluster_doctor.domain import transitions as life
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.transitions import Transition
from cluster_doctor.reports import metrics
from cluster_doctor.store import transitions

from tests.support.metrics import samples

H = dt.timedelta(hours=1)


def scrape(dsn, now, accept=None):
    registry = metrics.make_registry(metrics.ClusterDoctorCollector(lambda s: dsn, lambda: Settings(tests=["gpu_health"]),
                                                                    clock=lambda: now, cache_ttl_s=0))
    return samples(metrics.render(registry, accept)[0].decode())


def test_transitions_repeat_offenders_and_how_long_quarantines_last(store, db_dsn):
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    empty = scrape(db_dsn, now)
    assert empty[("cluster_doctor_node_transitions_total", frozenset({("kind", "repaired")}))] == 0
    assert empty[("cluster_doctor_fleet_repeat_offender_nodes", frozenset())] == 0
    assert not [k for k in empty if k[0] == "cluster_doctor_quarantine_duration_seconds"]
    transitions.record(store.connect, [
        Transition("gpu-001", life.QUARANTINED, now - 50 * H, "x"), Transition("gpu-001", life.REPAIRED, now - 30 * H, "r"),
        Transition("gpu-001", life.RELEASED, now - 28 * H, "passes"),  # 22 h in quarantine, 2 h after its repair
        Transition("gpu-002", life.QUARANTINED, now - 12 * H, "x"), Transition("gpu-002", life.RELEASED, now - 8 * H, "p"),
        Transition("gpu-003", life.QUARANTINED, now - 40 * 24 * H, "x"),  # released before the window: not counted
        Transition("gpu-003", life.RELEASED, now - 35 * 24 * H, "p"),
        Transition("gpu-004", life.QUARANTINED, now - H, "x"), Transition("gpu-004", life.REPEAT_OFFENDER, now - H, "y")])
    series = scrape(db_dsn, now)
    assert series[("cluster_doctor_node_transitions_total", frozenset({("kind", "quarantined")}))] == 4
    assert series[("cluster_doctor_fleet_repeat_offender_nodes", frozenset())] == 1
    assert series[("cluster_doctor_quarantine_duration_seconds", frozenset({("quantile", "0.5")}))] == 13 * 3600
    assert series[("cluster_doctor_quarantine_duration_seconds", frozenset({("quantile", "0.9")}))] == 22 * 3600
    assert series[("cluster_doctor_repair_to_release_seconds", frozenset({("quantile", "0.5")}))] == 2 * 3600
    openmetrics = scrape(db_dsn, now, "application/openmetrics-text; version=1.0.0")
    assert openmetrics[("cluster_doctor_fleet_repeat_offender_nodes", frozenset())] == 1
