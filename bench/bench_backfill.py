"""make bench-backfill: the README's "re-validate a rack" backfill on a real Airflow scheduler.

``make up``'s stack (tools/stack.py: a real Airflow 3.3 with LocalExecutor, the emulator, an embedded
PostgreSQL) in a throwaway state dir, without churn. Then the recipe twice, each over fresh results
(the range made due again by ``stale_before``): ``airflow backfill create`` (through the REST API, as
the CLI does) of RUNS hourly runs over NODE_RANGE with ``stale_before``, first with
``--max-active-runs 10`` (Airflow's default: every run at once, sharing the range through the claims),
then the baseline with 2 (the runs mostly one after another). Printed per backfill: the pairs each run
validated, what the runs that planned nothing said (their note), and whether the range was covered;
the figure line last. The stack is stopped at the end, whatever happened, and the run checks that
nothing of it is left (tools/leftovers.py).

Settings (the environment of ``up``): two suites (gpu_health, storage_fio: seconds in CPU mode), at most
MAX_PAIRS pairs per run, the pool's 2 slots.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import pathlib
import socket
import sys
import time
import urllib.parse

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))

import interrupts  # noqa: E402
import stack as stack_tool  # noqa: E402  (tools/stack.py: make up / make down)
from leftovers import Leftovers  # noqa: E402

DAG = "continuous_validation"
NODES = 24
NODE_RANGE = "gpu-[001-012]"
RANGE_NODES = [f"gpu-{i:03d}" for i in range(1, 13)]
TESTS = ["gpu_health", "storage_fio"]
MAX_PAIRS = 4  # 2 nodes' bundles per run: 6 runs cover the range
RUNS = 8
TIMEOUT_S = 1800
SETTINGS = {"CLUSTER_DOCTOR_TESTS": ",".join(TESTS), "CLUSTER_DOCTOR_MAX_PAIRS_PER_RUN": str(MAX_PAIRS),
            "CLUSTER_DOCTOR_PENDING_TIMEOUT_S": "120", "CLUSTER_DOCTOR_AVAILABILITY_CHECK_S": "10"}


def _free_port() -> int:
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Api:
    def __init__(self, base: str, password: str):
        self.base, self.jwt = base, stack_tool.token(base, password)

    def call(self, method: str, path: str, body=None):
        status, out = stack_tool.http(method, self.base + path, body, token=self.jwt, timeout=30)
        if status not in (200, 201):
            raise RuntimeError(f"{method} {path}: {status} {out}")
        return out


def backfill(api: Api, results_url: str, max_active_runs: int, first_hour: dt.datetime) -> dict:
    """One backfill of RUNS runs; what each run validated once every run has ended."""
    stale_before = dt.datetime.now(dt.UTC).isoformat()
    started = time.monotonic()
    created = api.call("POST", "/api/v2/backfills", {
        "dag_id": DAG, "from_date": first_hour.isoformat(),
        "to_date": (first_hour + dt.timedelta(hours=RUNS - 1)).isoformat(), "max_active_runs": max_active_runs,
        "dag_run_conf": {"node_range": NODE_RANGE, "stale_before": stale_before}})
    backfill_id = created["id"]
    while True:
        runs = [r for r in api.call("GET", f"/api/v2/dags/{DAG}/dagRuns?limit=100&run_type=backfill")["dag_runs"]
                if (r.get("conf") or {}).get("stale_before") == stale_before]
        if len(runs) == RUNS and all(r["state"] in ("success", "failed") for r in runs):
            break
        if time.monotonic() - started > TIMEOUT_S:
            raise RuntimeError(f"backfill {backfill_id} did not end within {TIMEOUT_S} s: "
                               f"{sorted((r['dag_run_id'], r['state']) for r in runs)}")
        time.sleep(3)
    wall = time.monotonic() - started
    # the scheduler marks the backfill complete a moment after its last run: a new one is refused before
    while not api.call("GET", f"/api/v2/backfills/{backfill_id}").get("completed_at"):
        if time.monotonic() - started > TIMEOUT_S:
            raise RuntimeError(f"backfill {backfill_id} ran its runs but was never marked complete")
        time.sleep(2)
    import psycopg

    per_run = []
    with psycopg.connect(results_url) as conn:
        for r in sorted(runs, key=lambda r: r["logical_date"]):
            rows = conn.execute("SELECT node_name, test_name, status FROM validation_history WHERE run_id = %s",
                                (r["dag_run_id"],)).fetchall()
            run = api.call("GET", f"/api/v2/dags/{DAG}/dagRuns/{urllib.parse.quote(r['dag_run_id'])}")
            per_run.append({"run_id": r["dag_run_id"], "state": r["state"], "rows": rows,
                            "executed": sum(1 for _, _, s in rows if s in ("pass", "fail", "error")),
                            "note": (run.get("note") or "").replace("\n\n", " | ")})
        fresh = conn.execute(
            "SELECT count(DISTINCT (node_name, test_name)) FROM validation_latest WHERE node_name = ANY(%s) "
            "AND test_name = ANY(%s) AND finished_at >= %s", (RANGE_NODES, TESTS, stale_before)).fetchone()[0]
    return {"max_active_runs": max_active_runs, "runs": per_run, "covered_pairs": fresh,
            "range_pairs": len(RANGE_NODES) * len(TESTS), "wall_s": wall}


def report(result: dict) -> str:
    lines = [f"--max-active-runs {result['max_active_runs']}: {RUNS} runs over {NODE_RANGE}, "
             f"{result['wall_s']:.0f} s until every run had ended"]
    for i, run in enumerate(result["runs"], 1):
        lines.append(f"  run {i:2d} {run['state']:7s} validated {run['executed']} pair(s)  {run['note'][:160]}")
    lines.append(f"  range covered: {result['covered_pairs']}/{result['range_pairs']} pairs executed after "
                 "stale_before (the rest: stopped by a failing health check, or on nodes busy with user jobs)")
    return "\n".join(lines)


def main() -> int:
    os.environ.update(SETTINGS)
    leftovers = Leftovers()
    results: list[dict] = []
    with leftovers.tempdir("cd-bench-backfill-") as state:
        port = _free_port()
        leftovers.port(port)
        try:
            info = stack_tool.up(state, port=port, nodes=NODES, churn_interval=0, seed=11, timeout=600,
                                 say=lambda *_: None)
            api = Api(info["url"], info["password"])
            hour = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0)
            for max_active_runs, days in ((10, 2), (2, 1)):
                results.append(backfill(api, info["results_url"], max_active_runs, hour - dt.timedelta(days=days)))
                print(report(results[-1]), flush=True)
        finally:
            record = stack_tool.Record.load(state)
            if record is not None:
                stack_tool.stop(record, say=lambda *_: None)
    figure = "; ".join(
        f"max-active-runs {r['max_active_runs']}: {r['covered_pairs']}/{r['range_pairs']} pairs covered, "
        f"pairs per run {[run['executed'] for run in r['runs']]}" for r in results)
    return leftovers.finish(f"bench-backfill: {figure}")


if __name__ == "__main__":
    sys.exit(interrupts.run(main))
