"""make demo: one real run of the continuous_validation DAG on embedded defaults.

* results DB: a real embedded PostgreSQL (pgserver) in .demo/pgdata — never SQLite;
* cluster: the Kubernetes API emulator with 8 simulated GPU nodes — two busy with user jobs, one
  carrying an injected fault (the emulator plays a GPU with uncorrected ECC errors), the rest healthy;
* Airflow: the real DAG through ``dag.test()`` on a SQLite metadata DB in .demo/airflow, with the
  pool gpu_validation created by ``airflow pools set``; the validation pods run the real suites in
  CPU mode (the emulator's kubelet executes the pod's command);
* then the fleet status table, the run's CTRF report and the daily fleet report.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

import dag_runner
import psycopg
from cluster_doctor.cli import main as cli
from cluster_doctor.domain import suites
from cluster_doctor.store import database
from cluster_doctor.store.history import ResultStore
from k8s_emulator import EmulatorProcess

REPO = pathlib.Path(__file__).resolve().parents[1]
DEMO = REPO / ".demo"
NODES = [f"gpu-{i:03d}" for i in range(1, 9)]
FAULTY = "gpu-004"
BUSY = {"gpu-007": "ml-research/llama-finetune-0", "gpu-008": "inference/vllm-7b-5d9f"}


def say(text: str) -> None:
    print(f"\n== {text}", flush=True)


def results_db(pgdata: pathlib.Path) -> tuple[object, str]:
    """A fresh demo results DB on the embedded server in ``pgdata``; the caller stops the server."""
    server = database.embedded_server(pgdata, cleanup_mode="stop")
    admin = database.libpq_params(server.get_uri())
    conn = psycopg.connect(**admin)
    conn.autocommit = True
    with conn.cursor() as cur:  # a fresh results DB each demo, so the output is reproducible
        cur.execute("DROP DATABASE IF EXISTS cluster_doctor_demo WITH (FORCE)")
        cur.execute("CREATE DATABASE cluster_doctor_demo")
    conn.close()
    host = admin["host"]
    return server, f"postgresql://{admin.get('user', 'postgres')}@/cluster_doctor_demo?host={host}" + (
        f"&port={admin['port']}" if admin.get("port") else "")


def stop_results_db(server) -> None:
    """The demo stops the PostgreSQL it started: nothing of it keeps running after `make demo`."""
    server.cleanup()
    print(f"embedded PostgreSQL in {DEMO / 'pgdata'} stopped (its data stays for the next demo)")


def seed_history(url: str) -> None:
    """Some earlier results, so this run has different suites due on different nodes."""
    now = dt.datetime.now(dt.UTC)
    fresh = now - dt.timedelta(days=1)
    rows = []
    due = {"gpu-001": "dl_unit", "gpu-002": "nccl_loopback", "gpu-003": "storage_fio"}
    for node, due_test in due.items():
        for test in suites.CATALOG:
            if test != due_test:
                rows.append({"node_name": node, "test_name": test, "status": "pass", "finished_at": fresh,
                             "duration_s": 60.0, "gpu_model": "NVIDIA-H100-80GB-HBM3", "gpu_count": 8,
                             "dag_id": "continuous_validation", "run_id": "earlier"})
    # gpu-005 passed dl_unit nine days ago: stale now
    rows.append({"node_name": "gpu-005", "test_name": "dl_unit", "status": "pass", "gpu_count": 8,
                 "finished_at": now - dt.timedelta(days=9), "duration_s": 240.0, "run_id": "last-week"})
    result = ResultStore(url).record(rows)
    print(f"seeded {result.inserted} earlier attempt(s)")


def fault_summary(node: str) -> str:
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    check = {"name": "ecc_uncorrected_volatile", "status": "fail", "device": "GPU 3", "value": 2,
             "unit": "errors", "threshold": "== 0", "message": "GPU 3 (00000000:9D:00.0): 2 uncorrected ECC errors"}
    return json.dumps({
        "schema_version": "1", "suite": "gpu_health", "node": node, "status": "fail",
        "reason": "ecc_uncorrected_volatile on GPU 3: 2 errors (threshold == 0)",
        "started_at": now, "finished_at": now, "duration_s": 2.1, "suite_version": "sha256:0000000000000000",
        "gpu_model": "NVIDIA-H100-80GB-HBM3", "gpu_count": 8, "metrics": {"gpus_visible": 8},
        "checks": [check], "check_counts": {"pass": 14, "fail": 1, "warn": 0, "error": 0, "skip": 0},
        "truncated": False, "log_path": None, "result_path": None})


def cluster(emu: EmulatorProcess) -> None:
    from kubernetes import client

    api = emu.core_v1()
    for ns in ("cluster-doctor", "ml-research", "inference"):
        api.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    client.SchedulingV1Api(emu.api_client()).create_priority_class({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "cluster-doctor-preemptible"},
        "value": -100, "preemptionPolicy": "Never"})
    for node in NODES:
        emu.add_gpu_node(node, gpus=8, product="NVIDIA-H100-80GB-HBM3")
    emu.add_gpu_node("cpu-001", gpus=0)
    for node, ref in BUSY.items():
        ns, name = ref.split("/")
        emu.add_user_pod(node, gpus=8, namespace=ns, name=name)
    summary = fault_summary(FAULTY)
    # only gpu_health pods play the ECC fault; another suite on this node runs for real
    emu.set_script(FAULTY, "exit", labels={"cluster-doctor.io/test": "gpu_health"}, exit_code=1, run_seconds=1.0,
                   termination_message=summary, log=f"gpu_health on {FAULTY}\nCLUSTER_DOCTOR_RESULT {summary}\n")
    print(f"{len(NODES)} GPU nodes + 1 CPU node; busy: {', '.join(BUSY)}; injected fault: {FAULTY} (GPU 3 ECC)")


def main() -> int:
    started = time.monotonic()
    DEMO.mkdir(exist_ok=True)
    for stale in ("pvc", "reports"):
        shutil.rmtree(DEMO / stale, ignore_errors=True)
        (DEMO / stale).mkdir()

    say("results database (embedded PostgreSQL)")
    server, url = results_db(DEMO / "pgdata")
    try:
        return demo(url, started)
    finally:
        stop_results_db(server)


def demo(url: str, started: float) -> int:
    print(ResultStore(url).upgrade().describe())
    seed_history(url)

    say("Airflow (SQLite metadata DB in .demo/airflow, pool gpu_validation with 2 slots)")
    home = DEMO / "airflow"
    home.mkdir(exist_ok=True)
    if not (home / "airflow.db").exists():
        dag_runner.prepare(dag_runner.airflow_env(home))
    else:
        dag_runner.airflow(dag_runner.airflow_env(home), "pools", "set", "gpu_validation", "2",
                           "GPU validation pods", "--include-deferred")
    print("metadata DB migrated, pool gpu_validation = 2 slots")

    say("simulated cluster (Kubernetes API emulator)")
    with EmulatorProcess(pvc_dirs={"cluster-doctor-results": str(DEMO / "pvc")}) as emu:
        cluster(emu)
        env = dag_runner.airflow_env(home, extra={
            "AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps(
                {"conn_type": "kubernetes", "extra": {"kube_config_path": emu.kubeconfig_path}}),
            "AIRFLOW_CONN_VALIDATION_DB": url,
            "CLUSTER_DOCTOR_SUITE_DEVICE": "cpu",
            "CLUSTER_DOCTOR_REPORTS_DIR": str(DEMO / "reports"),
            "CLUSTER_DOCTOR_AVAILABILITY_CHECK_S": "2",
        })
        say("running the continuous_validation DAG once (real suites in CPU mode in the pods)")
        out = DEMO / "run.json"
        log = DEMO / "run.log"
        with open(log, "w") as fh:
            proc = subprocess.run(dag_runner.command("--out", str(out)), env=env,
                                  stdout=fh, stderr=subprocess.STDOUT)
        if proc.returncode != 0 or not out.exists():
            print(f"the DAG run could not complete; see {log}")
            return 1
        run = json.loads(out.read_text())
        for ti in run["task_instances"]:
            label = ti["label"] or ti["task_id"]
            print(f"  {ti['task_id']:<12} {label:<28} {ti['state']}")
        print(f"DagRun {run['run_id']}: {run['state']} "
              f"({'a node failed a check' if run['state'] == 'failed' else 'no node failed'}); task logs: {log}")
        for reason, names in ((run.get("summary") or {}).get("not_eligible") or {}).items():
            print(f"not eligible ({reason}): {', '.join(names)}")
        leaked = emu.live_pods("app.kubernetes.io/name=cluster-doctor")
        print(f"validation pods left in the cluster: {len(leaked)}")

        say("daily fleet report (the daily_fleet_report DAG)")
        today = dt.datetime.now(dt.UTC).date().isoformat()
        daily = subprocess.run(dag_runner.command("--dag-id", "daily_fleet_report",
                                "--conf", json.dumps({"day": today}), "--out", str(DEMO / "daily.json")),
                               env=env, capture_output=True, text=True)
        if daily.returncode != 0:
            print(daily.stdout[-2000:] + daily.stderr[-2000:])

    say("fleet status (python -m cluster_doctor status)")
    cli.main(["status", "--db-url", url])
    summary = run.get("summary") or {}
    if summary.get("ctrf_path"):
        print(f"\nCTRF report of the run: {summary['ctrf_path']}")
    for path in sorted((DEMO / "reports" / "daily").glob("*")):
        print(f"daily report: {path}")
    print(f"logs and results on the shared volume: {DEMO / 'pvc'}")
    print(f"\ndemo finished in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    sys.exit(main())
