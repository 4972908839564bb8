"""Peer tests in the metrics: suspects counted apart from blamed nodes."""

from cluster_doctor.domain.config import Settings
from cluster_doctor.reports import metrics

from tests.support import fleet_seed as seed
from tests.support.metrics import samples


def scrape(dsn, settings):
    registry = metrics.make_registry(metrics.ClusterDoctorCollector(lambda s: dsn, lambda: settings,
                                                                    clock=lambda: seed.NOW))
    return samples(metrics.render(registry, None)[0].decode())


def verdicts(series):
    return {dict(labels)["verdict"]: v for (name, labels), v in series.items()
            if name == "cluster_doctor_fleet_peer_nodes"}


def test_peer_nodes_by_verdict(store, db_dsn):
    store.record(seed.peer_test("gpu-001", "gpu-002", "fail", 30) + seed.peer_test("gpu-001", "gpu-003", "fail", 20)
                 + seed.peer_test("gpu-002", "gpu-003", "pass", 10) + seed.peer_test("gpu-004", "gpu-005", "fail", 5))
    assert verdicts(scrape(db_dsn, Settings(peer_tests=True))) == {"pass": 2, "fail": 1, "suspect": 2}
    assert verdicts(scrape(db_dsn, Settings())) == {"pass": 0, "fail": 0, "suspect": 0}  # off


def test_the_daily_report_has_one_peer_line(store, db_dsn):
    from cluster_doctor.reports import daily

    store.record(seed.peer_test("gpu-001", "gpu-002", "fail", 30) + seed.peer_test("gpu-001", "gpu-003", "fail", 20)
                 + seed.peer_test("gpu-002", "gpu-003", "pass", 10) + seed.peer_test("gpu-004", "gpu-005", "fail", 5))
    day = seed.NOW.date()
    data = daily.build(store, day, tests=["gpu_health"], staleness_days=7, now=seed.NOW, peer_window_days=28)
    line = daily.peer_line(data["peers"])
    assert line == ("Peer tests: 5 node(s) peer-tested, 2 passed, 1 blamed: gpu-001 (with gpu-003); 2 suspect "
                    "(failed, not yet blamed on either side): gpu-004 (with gpu-005), gpu-005 (with gpu-004)")
    assert line in daily.render_markdown(data)
    # the failed peer tests are the peer line's suspects and blamed nodes, never a node's failures of the day
    assert data["failures_total"] == 0 and data["failing_nodes_today"] == 0
    assert daily.build(store, day, tests=["gpu_health"], staleness_days=7, now=seed.NOW)["peers"] is None
