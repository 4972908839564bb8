"""`cluster-doctor status` says which nodes are suspect since when and why, and since when a failing node
fails: its first failing evidence (a signal its failure confirmed) and its last pass."""

import datetime as dt
import json

from cluster_doctor.domain.signals import Evidence
from cluster_doctor.store import suspects
from cluster_doctor.store.history import ResultStore

from tests.support.cli import cli


def test_status_shows_suspects_and_failing_since(db_url, tmp_path):
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    hours = lambda h: (now - dt.timedelta(hours=h)).isoformat()  # noqa: E731
    attempts = [{"node_name": "gpu-001", "test_name": "gpu_health", "status": "pass", "finished_at": hours(5),
                 "run_id": "r1"},
                {"node_name": "gpu-002", "test_name": "gpu_health", "status": "pass", "finished_at": hours(30),
                 "run_id": "r1"}]
    path = tmp_path / "a.json"
    path.write_text(json.dumps(attempts))
    assert cli("record", "--attempts", str(path), "--db-url", db_url).returncode == 0
    store = ResultStore(db_url)
    xid = dt.datetime.now(dt.UTC) - dt.timedelta(hours=2)
    suspects.record(store.connect, [Evidence("gpu-001", "event", "u1", "XidHardwareFailure: Xid 79", xid),
                                    Evidence("gpu-002", "reboot", "b2", "rebooted")], seen_at=xid)
    store.record([{"node_name": "gpu-002", "test_name": "gpu_health", "status": "fail", "run_id": "r2",
                   "started_at": xid + dt.timedelta(minutes=5), "finished_at": xid + dt.timedelta(minutes=6)}])
    out = cli("status", "--db-url", db_url, env={"CLUSTER_DOCTOR_TESTS": "gpu_health"}).stdout
    assert "suspect: 1 GPU node(s)" in out
    assert f"  gpu-001  suspect since {xid:%Y-%m-%d %H:%M} UTC: event: XidHardwareFailure: Xid 79" in out
    assert "failing: 1 GPU node(s)" in out
    assert (f"  gpu-002  failing since {xid:%Y-%m-%d %H:%M} UTC (reboot: rebooted); last pass "
            f"{now - dt.timedelta(hours=30):%Y-%m-%d %H:%M} UTC") in out
