"""make demo: one real run of the continuous_validation DAG on embedded defaults.

* results DB: a real embedded PostgreSQL (pgserver) in .demo/pgdata — never SQLite;
* cluster: the Kubernetes API emulator with 8 simulated GPU nodes — two busy with user jobs, one
  with an injected fault (an uncorrectable ECC error in its kernel log, which the real gpu_health suite
  finds: ``gpu_fault``), the rest healthy;
* Airflow: the real DAG through ``dag.test()`` on a SQLite metadata DB in .demo/airflow, with the
  pool gpu_validation created by ``airflow pools set``; the validation pods run the real suites in
  CPU mode (the emulator's kubelet executes the pod's command);
* then the fleet status table, the run's CTRF report and the daily fleet report's headline and
  failures; the embedded PostgreSQL is stopped at the end, its data stays in .demo for the CLI
  (``CLUSTER_DOCTOR_HOME=.demo cluster-doctor status``).

Exit status 1 when the DAG run could not complete (a task other than a validation or the verdict
failed): a node failing a check is the demo working, a broken run is not.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import pathlib
import random
import shutil
import subprocess
import sys

import dag_runner
import gpu_fault
import interrupts
import psycopg
import timing
from cluster_doctor.cli import main as cli
from cluster_doctor.domain import suites
from cluster_doctor.store import database
from cluster_doctor.store.history import ResultStore
from k8s_emulator import EmulatorProcess

REPO = pathlib.Path(__file__).resolve().parents[1]
# CLUSTER_DOCTOR_DEMO_DIR: another directory (the tests interrupt a demo of their own there)
DEMO = pathlib.Path(os.environ.get("CLUSTER_DOCTOR_DEMO_DIR") or REPO / ".demo")
NODES = [f"gpu-{i:03d}" for i in range(1, 9)]
FAULTY = "gpu-004"
BUSY = {"gpu-007": "ml-research/llama-finetune-0", "gpu-008": "inference/vllm-7b-5d9f"}


PHASES = timing.Phases()  # where the demo's time goes: its last line says it


def say(text: str, phase: str) -> None:
    PHASES.mark(phase)
    print(f"\n== {text}", flush=True)


def results_db(pgdata: pathlib.Path) -> tuple[object, str]:
    """A fresh demo results DB on the embedded server in ``pgdata``; the caller stops the server.

    The server's default database, the one the CLI's embedded fallback opens: with
    ``CLUSTER_DOCTOR_HOME`` pointing at the demo directory, ``cluster-doctor status`` reads the demo's
    results after it has ended."""
    server = database.embedded_server(pgdata, cleanup_mode="stop")
    url = server.get_uri()
    with psycopg.connect(**database.libpq_params(url), autocommit=True) as conn:
        # a fresh schema each demo, so the output is reproducible (CASCADE: the view, triggers, functions)
        conn.execute("DROP SCHEMA IF EXISTS public CASCADE")
        conn.execute("CREATE SCHEMA public")
        conn.execute("DROP DATABASE IF EXISTS cluster_doctor_demo WITH (FORCE)")  # where older demos kept it
    return server, url


def stop_results_db(server) -> None:
    """The demo stops the PostgreSQL it started: nothing of it keeps running after `make demo`."""
    database.stop_embedded(server)
    pgdata = pathlib.Path(server.pgdata)
    print(f"embedded PostgreSQL in {shown_path(pgdata)} stopped; its data stays, for the CLI: "
          f"CLUSTER_DOCTOR_HOME={shown_path(pgdata.parent)} .venv/bin/cluster-doctor status")


def shown_path(path: pathlib.Path) -> str:
    """A path as the user would type it from the checkout (.demo), else absolute."""
    try:
        return str(path.relative_to(pathlib.Path.cwd()))
    except ValueError:
        return str(path)


def daily_report_section(markdown: str) -> str:
    """The daily report's headline, attempts and failures of the day: everything before its
    coverage trend, without the title block."""
    body = markdown.split("\n## ", 1)[1] if "\n## " in markdown else markdown
    body = "## " + body.split("\n## Coverage trend", 1)[0]
    return "\n".join(line for line in body.strip().splitlines())


def run_broke(run: dict) -> list[str]:
    """The tasks whose failure means the run broke, not a node failing a check: any but the
    validations (``validate``, or the tasks of its group) and the verdict that reports them."""
    def judged(task_id: str) -> bool:
        return task_id in ("validate", "verdict") or task_id.startswith("validate.")

    return sorted({ti["task_id"] for ti in run["task_instances"]
                   if ti["state"] in ("failed", "upstream_failed") and not judged(ti["task_id"])})


# What the suites measure in CPU mode on a laptop-class machine (the demo's pods run them so): the
# figures of earlier runs are drawn around these, so the node page's plots continue into this run's.
CPU_MODE_FIGURES = {
    "dl_unit": {"gemm_fp32_tflops_min": 0.1, "mem_bw_gbps_min": 28.0},
    "nccl_loopback": {"nccl_busbw_gbps": 0.8},
    "storage_fio": {"fio_seq_read_mibps": 1200.0, "fio_seq_write_mibps": 3000.0, "fio_rand_read_iops": 43000.0,
                    "fio_rand_write_iops": 20000.0},
}
EARLIER_RUNS_DAYS = (13, 11, 9, 7, 5, 3)  # days ago, before each seeded pair's latest result


def cpu_mode_metrics(test: str, node: str, when: dt.datetime) -> dict:
    """Figures like a CPU-mode run of ``test`` records, within a deterministic +-8 %."""
    noise = random.Random(f"{node}/{test}/{when:%Y%m%d%H}")
    return {k: round(v * noise.uniform(0.92, 1.08), 3) for k, v in CPU_MODE_FIGURES.get(test, {}).items()}


def seed_history(url: str, now: dt.datetime | None = None) -> None:
    """Earlier results, so this run has different suites due on different nodes, and the node pages
    have a history to plot: gpu-001..003 passed all but one suite a day ago (and every two days
    before), gpu-005 passed dl_unit nine days ago (stale now, and before that)."""
    now = now or dt.datetime.now(dt.UTC)
    latest = {(node, test): now - dt.timedelta(days=1)
              for node, due_test in {"gpu-001": "dl_unit", "gpu-002": "nccl_loopback", "gpu-003": "storage_fio"}.items()
              for test in suites.CATALOG if test != due_test}
    latest[("gpu-005", "dl_unit")] = now - dt.timedelta(days=9)
    rows = []
    for (node, test), last in latest.items():
        for when in [now - dt.timedelta(days=d) for d in EARLIER_RUNS_DAYS if now - dt.timedelta(days=d) < last]:
            rows.append({"node_name": node, "test_name": test, "status": "pass", "finished_at": when,
                         "duration_s": 60.0, "gpu_model": "NVIDIA-H100-80GB-HBM3", "gpu_count": 8,
                         "metrics": cpu_mode_metrics(test, node, when), "dag_id": "continuous_validation",
                         "run_id": f"earlier-{when:%Y%m%d}"})
        rows.append({"node_name": node, "test_name": test, "status": "pass", "finished_at": last,
                     "duration_s": 60.0, "gpu_model": "NVIDIA-H100-80GB-HBM3", "gpu_count": 8,
                     "metrics": cpu_mode_metrics(test, node, last), "dag_id": "continuous_validation",
                     "run_id": "earlier"})
    result = ResultStore(url).record(rows)
    print(f"seeded {result.inserted} earlier attempt(s) of {len(latest)} node-test pairs")


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
    # the real gpu_health suite finds the fault in the node's kernel log; its other suites run as anywhere
    gpu_fault.inject(emu, FAULTY, DEMO / "faults", once=False)
    print(f"{len(NODES)} GPU nodes + 1 CPU node; busy: {', '.join(BUSY)}; injected fault: {FAULTY} "
          f"({gpu_fault.WHAT})")


RUN_LOG = DEMO / "run.log"


def run_dags(home: pathlib.Path, url: str, emu: EmulatorProcess) -> tuple[dict | None, dict | None]:
    """continuous_validation once, then daily_fleet_report for today, in one Airflow process (Airflow
    imported and the DAG files parsed once, the pool set there too): their results, None where a run
    did not complete (its log: RUN_LOG)."""
    env = dag_runner.airflow_env(home, extra={
        "AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps(
            {"conn_type": "kubernetes", "extra": {"kube_config_path": emu.kubeconfig_path}}),
        "AIRFLOW_CONN_VALIDATION_DB": url,
        "CLUSTER_DOCTOR_SUITE_DEVICE": "cpu",
        "CLUSTER_DOCTOR_REPORTS_DIR": str(DEMO / "reports"),
        # the operator notices a pod's end this often: the demo's pods take seconds
        "CLUSTER_DOCTOR_AVAILABILITY_CHECK_S": "1",
    })
    out, daily = DEMO / "run.json", DEMO / "daily.json"
    for stale in (out, daily):
        stale.unlink(missing_ok=True)
    today = dt.datetime.now(dt.UTC).date().isoformat()
    with open(RUN_LOG, "w") as fh:
        subprocess.run(dag_runner.command("--out", str(out), "--pool", "gpu_validation=2", "--then",
                                          "daily_fleet_report", json.dumps({"day": today}), str(daily)),
                       env=env, stdout=fh, stderr=subprocess.STDOUT)
    if not out.exists():
        print(f"the DAG run could not complete; see {RUN_LOG}")
        return None, None
    return json.loads(out.read_text()), json.loads(daily.read_text()) if daily.exists() else None


def main() -> int:
    DEMO.mkdir(exist_ok=True)
    for stale in ("pvc", "reports"):
        shutil.rmtree(DEMO / stale, ignore_errors=True)
        (DEMO / stale).mkdir()

    say("results database (embedded PostgreSQL)", "database")
    server = None
    try:
        with interrupts.held():  # a server half started has no handle to stop it by yet
            server, url = results_db(DEMO / "pgdata")
        return demo(url)
    finally:
        if server is not None:
            with interrupts.held():
                stop_results_db(server)
        # measured from the process start, PostgreSQL's stop included: the figure the README quotes
        print("\n" + PHASES.line("make demo finished"))


def demo(url: str) -> int:
    print(ResultStore(url).upgrade().describe())
    seed_history(url)

    say("Airflow (SQLite metadata DB in .demo/airflow, pool gpu_validation with 2 slots)", "airflow")
    home = DEMO / "airflow"
    home.mkdir(exist_ok=True)
    if not (home / "airflow.db").exists():  # the first demo of a checkout; later ones reuse it
        dag_runner.airflow(dag_runner.airflow_env(home), "db", "migrate")
    print("metadata DB migrated; the DAG runner sets pool gpu_validation = 2 slots")

    say("simulated cluster (Kubernetes API emulator)", "cluster")
    with EmulatorProcess(pvc_dirs={"cluster-doctor-results": str(DEMO / "pvc")}) as emu:
        cluster(emu)
        say("running the continuous_validation DAG once (real suites in CPU mode in the pods), then the "
            "daily_fleet_report DAG", "DAG runs")
        run, daily = run_dags(home, url, emu)
        if run is None:
            return 1
        width = max((len(ti["task_id"]) for ti in run["task_instances"]), default=0)
        label_width = max((len(ti["label"] or ti["task_id"]) for ti in run["task_instances"]), default=0)
        for ti in run["task_instances"]:
            label = ti["label"] or ti["task_id"]
            print(f"  {ti['task_id']:<{width}}  {label:<{label_width}}  {ti['state']}")
        broke = run_broke(run)
        outcome = (f"the run could not complete: {', '.join(broke)} failed" if broke else
                   "a node failed a check" if run["state"] == "failed" else "no node failed")
        print(f"DagRun {run['run_id']}: {run['state']} ({outcome}) in {run['took_s']:.0f} s; "
              f"task logs: {RUN_LOG}")
        if broke:
            return 1
        for reason, names in ((run.get("summary") or {}).get("not_eligible") or {}).items():
            print(f"not eligible ({reason}): {', '.join(names)}")
        leaked = emu.live_pods("app.kubernetes.io/name=cluster-doctor")
        print(f"validation pods left in the cluster: {len(leaked)}")

    say("daily fleet report (the daily_fleet_report DAG)", "report")
    reports = sorted((DEMO / "reports" / "daily").glob("*.md"))
    if daily is None or not reports:
        print(f"the daily report could not be written; see {RUN_LOG}")
        return 1
    print(f"(its DAG run took {daily['took_s']:.0f} s)")
    print(daily_report_section(reports[-1].read_text()))

    say("fleet status (cluster-doctor status)", "status")
    cli.main(["status", "--db-url", url])
    summary = run.get("summary") or {}
    if summary.get("ctrf_path"):
        print(f"\nCTRF report of the run: {summary['ctrf_path']}")
    for path in sorted((DEMO / "reports" / "daily").glob("*")):
        print(f"daily report in full: {path}")
    print(f"logs and results on the shared volume: {DEMO / 'pvc'}")
    PHASES.mark("stop")
    return 0


if __name__ == "__main__":
    sys.exit(interrupts.run(main))
