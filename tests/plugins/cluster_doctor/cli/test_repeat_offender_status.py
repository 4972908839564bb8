"""`cluster-doctor status` names the repeat offenders, since when and why, with their action: replace."""

import datetime as dt

from cluster_doctor.domain import transitions as life
from cluster_doctor.domain.transitions import Transition
from cluster_doctor.store import transitions
from cluster_doctor.store.history import ResultStore

from tests.support.cli import cli


def test_status_names_the_repeat_offenders(db_url):
    at = (dt.datetime.now(dt.UTC) - dt.timedelta(days=8)).replace(second=0, microsecond=0)
    store = ResultStore(db_url)
    store.record([{"node_name": n, "test_name": "gpu_health", "status": "pass", "finished_at": at, "run_id": "r1"}
                  for n in ("gpu-001", "gpu-002")])
    transitions.record(store.connect, [
        Transition("gpu-002", life.REPEAT_OFFENDER, at, "quarantined 3 times within 30 days"),
        Transition("gpu-001", life.REPEAT_OFFENDER, at, "quarantined 3 times within 30 days"),
        Transition("gpu-001", life.RELEASED, at + dt.timedelta(hours=1), "released by a person")])
    out = cli("status", "--db-url", db_url, env={"CLUSTER_DOCTOR_TESTS": "gpu_health"}).stdout
    assert "repeat offender: 1 GPU node(s)" in out
    assert (f"  gpu-002  repeat offender since {at:%Y-%m-%d %H:%M} UTC (quarantined 3 times within 30 days): "
            "action replace") in out
    assert "gpu-001  repeat offender" not in out  # a person released it
