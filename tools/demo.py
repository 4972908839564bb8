"""make demo: Cluster Doctor on embedded defaults (embedded PostgreSQL, a simulated cluster)."""

from __future__ import annotations

import datetime as dt
import pathlib
import sys

from cluster_doctor import cli, database
from cluster_doctor.store import ResultStore

REPO = pathlib.Path(__file__).resolve().parents[1]
DEMO_DIR = REPO / ".demo"


def main() -> int:
    DEMO_DIR.mkdir(exist_ok=True)
    server = database.embedded_server(DEMO_DIR / "pgdata")
    url = server.get_uri()
    store = ResultStore(url)
    print(store.upgrade().describe())
    now = dt.datetime.now(dt.UTC)
    sample = []
    for i, (node, status, days) in enumerate([("gpu-001", "pass", 1), ("gpu-002", "fail", 0.5),
                                               ("gpu-003", "pass", 9), ("gpu-004", "error", 2)]):
        sample.append({"node_name": node, "test_name": "dl_unit", "status": status,
                       "finished_at": now - dt.timedelta(days=days), "dag_id": "demo", "run_id": f"sample-{i}",
                       "reason": {"fail": "gemm_bf16_tflops on cuda:3: 512 < 657 TFLOPS",
                                  "error": "CUDA error: out of memory"}.get(status)})
    store.record(sample)
    print("\n== fleet status ==")
    cli.main(["status", "--db-url", url])
    print("\n== next run's plan (free nodes gpu-[001-006]) ==")
    return cli.main(["plan", "--nodes", "gpu-[001-006]", "--db-url", url])


if __name__ == "__main__":
    sys.exit(main())
