"""`cluster-doctor status` rounds a share as the fleet page and the daily report do, and its coverage SLO
over the last 30 days starts when the fleet was first seen: the days before have no data, not 0 %."""

import datetime as dt
import json
import os
import subprocess
import sys

from cluster_doctor.domain import coverage
from cluster_doctor.store import inventory
from cluster_doctor.store.history import ResultStore

from tests import clock

# No PYTHONPATH: the CLI as the installed (editable) distribution runs it.
ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AIRFLOW_CONN_VALIDATION_DB")}


def cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "cluster_doctor", *args], capture_output=True, text=True,
                          env={**ENV, **(env or {})}, timeout=120)


def test_status_rounds_one_way_and_counts_the_slo_from_first_seen(db_url, tmp_path):
    now = clock.now()
    seen_at = now - dt.timedelta(minutes=20)  # a 20-minute-old stack: 24 GPU nodes discovered
    store = ResultStore(db_url)
    inventory.record_discovery(store.connect, [inventory.SeenNode(f"gpu-{i:03d}", 8, "H100", inventory.FREE)
                                               for i in range(1, 25)], seen_at=seen_at, complete=True)
    attempts = [{"node_name": f"gpu-{i:03d}", "test_name": "gpu_health", "status": "pass", "run_id": "r1",
                 "finished_at": (seen_at + dt.timedelta(minutes=5)).isoformat()} for i in range(1, 5)]
    path = tmp_path / "a.json"
    path.write_text(json.dumps(attempts))
    assert cli("record", "--attempts", str(path), "--db-url", db_url).returncode == 0
    out = cli("status", "--db-url", db_url, env={"CLUSTER_DOCTOR_TESTS": "gpu_health"}).stdout
    # 4 of 24: 16.7 % (the page floored it to 16.6 %)
    assert "coverage: 4/24 GPU node(s) fully validated within 7 d (16.7 %)" in out
    days = sum(end > seen_at for end in coverage.day_ends(now, coverage.SLO_DAYS))
    period = "day" if days == 1 else "days"
    # every day of the 30 before the first sighting read 0 % and pulled the figure to 0.6 %
    assert (f"coverage SLO: 16.7 % of node-test pairs validated within 7 d now; "
            f"{'16.7 %' if days == 1 else ''}") in out
    assert f"over the {days} {period} since the fleet was first seen (no data for the {30 - days} before)" in out
