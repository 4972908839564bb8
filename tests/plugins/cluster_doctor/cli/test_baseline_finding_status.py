"""`cluster-doctor status` names a missing baseline once per node pool, with its action."""

import datetime as dt

from cluster_doctor.store.history import ResultStore

from tests.support.cli import cli

NOT_JUDGED = [{"name": "baseline", "status": "skip", "code": "BASELINE_MISSING"}]


def test_status_names_the_node_pool_without_a_baseline_once(db_url):
    at = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)
    ResultStore(db_url).record([{"node_name": n, "test_name": "nccl_loopback", "status": "error", "run_id": f"r-{n}",
                                 "gpu_model": "NVIDIA-GB200", "started_at": at, "finished_at": at, "checks": NOT_JUDGED}
                                for n in ("gpu-001", "gpu-002")])
    out = cli("status", "--db-url", db_url, env={"CLUSTER_DOCTOR_TESTS": "nccl_loopback"}).stdout
    lines = [line for line in out.splitlines() if line.startswith("configuration: ")]
    assert lines == [next(line for line in lines if "no baseline for NVIDIA-GB200: 2 node(s), nccl_loopback not judged"
                          in line)]
    assert "action: add the GPU model to baselines.yaml" in lines[0]
