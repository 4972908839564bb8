"""make test-celery: the real continuous_validation DAG under a real CeleryExecutor, with a results-DB
outage that makes one worker spool and the other record.

``python tools/celery_run.py [--nodes 4] [--local-spool] [--keep]`` starts, all on this machine and all
stopped at the end (also on failure or Ctrl-C):

* a Redis server of its own (Debian ``redis-server``) on a free port, the Celery broker;
* two fresh databases on the PostgreSQL at ``--pg-url`` (default 127.0.0.1:5432, the test server): the
  Airflow metadata DB (also Celery's result backend) and the results DB, migrated by its owner; the
  tasks reach the results DB as a least-privilege run-time role, through a TCP proxy this process can
  switch off (the outage);
* the Kubernetes API emulator with ``--nodes`` GPU nodes, running the suites in CPU mode;
* Airflow 3.3 (api-server, scheduler, dag-processor) with ``CeleryExecutor``, and two Celery workers,
  each with an ``AIRFLOW_HOME`` of its own (as two hosts would have), sharing one spool directory
  (``CLUSTER_DOCTOR_SPOOL_DIR``; ``--local-spool`` leaves it unset to show what a per-host spool does).

The scenario: worker A alone runs the DAG; once the run has planned, the results DB goes away, so the
record task's first try (on A) spools the run's attempts and fails. Worker A is then stopped, worker B
started, the database comes back: the record task's retry runs on B and records what A spooled. The
last line is ``stranded <n>, recorded <rows> of <attempts>`` (exit 0 when nothing is stranded and every
attempt has its row).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid

import interrupts
import stack  # tools/stack.py: process records, spawning, HTTP, waiting

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.support.tcp_proxy: the switchable TCP forwarder of the tests

DAG_ID = "continuous_validation"
NAMESPACE = "cluster-doctor"
PVC = "cluster-doctor-results"


def say(text: str) -> None:
    print(f"[{dt.datetime.now().strftime('%H:%M:%S')}] {text}", flush=True)


# ------------------------------------------------------------------ databases
class Databases:
    """The metadata and results databases (unique names) and the run-time role; dropped by ``drop``."""

    def __init__(self, admin_url: str):
        import psycopg
        from cluster_doctor.store import database

        self.psycopg, self.admin = psycopg, database.libpq_params(admin_url)
        suffix = uuid.uuid4().hex[:10]
        self.meta, self.results, self.role = f"cd_celery_meta_{suffix}", f"cd_celery_results_{suffix}", f"cd_celery_rt_{suffix}"
        self.created: list[str] = []

    def _admin(self, dbname: str = "postgres"):
        return self.psycopg.connect(**{**self.admin, "dbname": dbname}, autocommit=True)

    def create(self) -> None:
        from cluster_doctor.store import roles
        from cluster_doctor.store.history import ResultStore
        from psycopg import sql

        with self._admin() as conn:
            for name in (self.meta, self.results):
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
                self.created.append(name)
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(self.role)))
        ResultStore({**self.admin, "dbname": self.results}).upgrade()  # migrations as the owner
        with self.psycopg.connect(**{**self.admin, "dbname": self.results}) as conn:
            roles.grant_runtime(conn, self.role)

    def url(self, dbname: str, *, user: str | None = None, port: int | None = None, driver: str = "postgresql") -> str:
        host, user = self.admin.get("host", "127.0.0.1"), user or self.admin.get("user", "postgres")
        return f"{driver}://{user}@{host}:{port or self.admin.get('port', 5432)}/{dbname}"

    def query(self, dbname: str, sql_text: str, params=()) -> list[tuple]:
        with self._admin(dbname) as conn:
            return conn.execute(sql_text, params).fetchall()

    def drop(self) -> None:
        from psycopg import sql

        with self._admin() as conn:
            for name in self.created:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (self.role,))
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(self.role)))


# ------------------------------------------------------------------ the cluster
def start_cluster(state: pathlib.Path, nodes: int):
    import yaml
    from k8s_emulator import EmulatorProcess
    from kubernetes import client

    pvc_dir = state / "pvc"
    pvc_dir.mkdir(parents=True)
    emu = EmulatorProcess(state_dir=str(state / "emulator"), kubeconfig_path=str(state / "kubeconfig"),
                          pvc_dirs={PVC: str(pvc_dir)}, exec_env={stack.MARKER: state.name})
    emu.start()
    v1 = emu.core_v1()
    v1.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    priority = yaml.safe_load((REPO / "include" / "k8s" / "priorityclass.yaml").read_text())
    client.SchedulingV1Api(emu.api_client()).create_priority_class(priority)
    for i in range(1, nodes + 1):
        emu.add_gpu_node(f"gpu-{i:03d}", gpus=8)
    return emu


# ------------------------------------------------------------------ Airflow
def airflow_env(state: pathlib.Path, home: pathlib.Path, *, dbs: Databases, proxy_port: int, redis_port: int,
                kubeconfig: str, port: int, shared_spool: pathlib.Path | None) -> dict:
    """One component's environment: Celery over our Redis, metadata in Postgres, its own AIRFLOW_HOME."""
    env = stack.airflow_env(state, port=port, stack_id=state.name, socket_dir="/nonexistent", kubeconfig=kubeconfig)
    env.pop("CLUSTER_DOCTOR_SPOOL_DIR", None)
    meta = dbs.url(dbs.meta)
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(home / "plugins"),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(state / "passwords.json"),
        "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": meta.replace("postgresql://", "postgresql+psycopg2://"),
        "AIRFLOW__CELERY__BROKER_URL": f"redis://127.0.0.1:{redis_port}/0",
        "AIRFLOW__CELERY__RESULT_BACKEND": "db+" + meta,
        "AIRFLOW__CELERY__WORKER_CONCURRENCY": "4",
        "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "600",
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "600",
        "AIRFLOW_CONN_VALIDATION_DB": dbs.url(dbs.results, user=dbs.role, port=proxy_port),
        "CLUSTER_DOCTOR_TESTS": "gpu_health",
        "CLUSTER_DOCTOR_PENDING_TIMEOUT_S": "120",
        "CLUSTER_DOCTOR_AVAILABILITY_CHECK_S": "5",
    })
    if shared_spool is not None:
        env["CLUSTER_DOCTOR_SPOOL_DIR"] = str(shared_spool)
    (home / "plugins").mkdir(parents=True, exist_ok=True)
    return env


def worker_argv(name: str) -> list[str]:
    return [str(stack.BIN / "airflow"), "celery", "worker", "--celery-hostname", f"{name}@%h", "--concurrency", "4",
            "--skip-serve-logs"]


def wait_for(what: str, check, timeout: float, procs: dict, interval: float = 1.0):
    return stack._wait(what, check, procs, timeout, interval)


def ti_rows(dbs: Databases, run_id: str) -> dict[str, tuple]:
    """{task_id[.map_index]: (state, hostname, try_number)} of the run, from the metadata DB."""
    rows = dbs.query(dbs.meta, "SELECT task_id, map_index, state, hostname, try_number FROM task_instance "
                               "WHERE dag_id = %s AND run_id = %s", (DAG_ID, run_id))
    return {(t if m < 0 else f"{t}[{m}]"): (s, h, n) for t, m, s, h, n in rows}


def record_tries(dbs: Databases, run_id: str) -> list[tuple[int, str, str]]:
    """(try, state, worker hostname) of every try of the record task: the history holds the earlier ones."""
    earlier = dbs.query(dbs.meta, "SELECT try_number, state, hostname FROM task_instance_history WHERE dag_id = %s "
                                  "AND run_id = %s AND task_id = 'record'", (DAG_ID, run_id))
    last = dbs.query(dbs.meta, "SELECT try_number, state, hostname FROM task_instance WHERE dag_id = %s "
                               "AND run_id = %s AND task_id = 'record'", (DAG_ID, run_id))
    return sorted({(n, s, h) for n, s, h in [*earlier, *last]})


def ran_on(state: pathlib.Path, run_id: str, try_number: int) -> list[str]:
    """Which Celery worker executed the record task's try: both run on this host, so the task
    instance's hostname cannot tell; each worker's own log can."""
    needle = f"task_id='record', dag_id='{DAG_ID}', run_id='{run_id}', try_number={try_number}"
    return [w for w in ("worker-a", "worker-b")
            if (state / "logs" / f"{w}.log").exists() and needle in (state / "logs" / f"{w}.log").read_text()]


def spooled(paths: list[pathlib.Path]) -> int:
    return sum(len(list(p.glob("*.json"))) for p in paths if p.is_dir())


# ------------------------------------------------------------------ the scenario
def scenario(record: stack.Record, state: pathlib.Path, args) -> tuple[int, int, int]:
    """The whole run, start to figures. Long on purpose: one linear script of a fault drill, each step
    commented, reads better than the same steps scattered over helpers."""
    from tests.support.tcp_proxy import TcpProxy

    dbs = Databases(args.pg_url)
    record.data["databases"] = [dbs.meta, dbs.results]
    record.data["role"] = dbs.role
    record.save()
    cleanup = [dbs.drop]
    record.cleanup = cleanup
    dbs.create()
    say(f"databases {dbs.meta} (metadata) and {dbs.results} (results, migrated by the owner; tasks log in "
        f"as {dbs.role}: rows only)")
    proxy = TcpProxy(dbs.admin.get("host", "127.0.0.1"), int(dbs.admin.get("port", 5432)))
    cleanup.insert(0, proxy.close)

    redis_port = free_port()
    redis = stack.spawn(record, "redis", ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1",
                                          "--save", "", "--appendonly", "no"], dict(os.environ))
    emu = start_cluster(state / "cluster", args.nodes)
    cleanup.insert(0, emu.cleanup)
    say(f"redis on {redis_port}; emulator with {args.nodes} GPU nodes at {emu.url}")

    shared = None if args.local_spool else state / "shared-volume" / "spool"
    port = free_port()
    envs = {name: airflow_env(state, state / name, dbs=dbs, proxy_port=proxy.port, redis_port=redis_port,
                              kubeconfig=emu.kubeconfig_path, port=port, shared_spool=shared)
            for name in ("airflow", "worker-a", "worker-b")}
    password = "admin-" + uuid.uuid4().hex[:12]
    stack.secret_file(state / "passwords.json", json.dumps({stack.USER: password}))
    main_env = envs["airflow"]
    subprocess.run([str(stack.BIN / "airflow"), "db", "migrate"], env=main_env, check=True, capture_output=True,
                   timeout=600)
    subprocess.run([str(stack.BIN / "airflow"), "pools", "set", "gpu_validation", "2", "GPU validation",
                    "--include-deferred"], env=main_env, check=True, capture_output=True, timeout=300)
    procs = {"redis": (redis, state / "logs" / "redis.log")}
    for name, argv in (("api-server", ["api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]),
                       ("scheduler", ["scheduler", "--skip-serve-logs"]), ("dag-processor", ["dag-processor"])):
        procs[name] = (stack.spawn(record, name, [str(stack.BIN / "airflow"), *argv], main_env),
                       state / "logs" / f"{name}.log")
    worker_a = stack.spawn(record, "worker-a", worker_argv("worker-a"), envs["worker-a"])
    procs["worker-a"] = (worker_a, state / "logs" / "worker-a.log")
    base = f"http://127.0.0.1:{port}"
    wait_for("the api-server", lambda: stack.http("GET", f"{base}/api/v2/monitor/health")[0] == 200, 300, procs)
    jwt = stack.token(base, password)
    wait_for(f"{DAG_ID} to be parsed", lambda: stack.http("GET", f"{base}/api/v2/dags/{DAG_ID}", token=jwt)[0] == 200,
             300, procs, interval=2)
    # unpausing a catchup=False DAG creates the latest interval's run at once: that run is the drill
    stack.http("PATCH", f"{base}/api/v2/dags/{DAG_ID}", {"is_paused": False}, token=jwt)
    run_id = wait_for("the first DagRun", lambda: next(iter(r for (r,) in dbs.query(
        dbs.meta, "SELECT run_id FROM dag_run WHERE dag_id = %s ORDER BY id", (DAG_ID,))), None), 300, procs)
    say(f"Airflow with CeleryExecutor up; worker A alone; run {run_id} started")

    # 1. the outage: once the run has planned (its nodes claimed), the results DB goes away
    wait_for("prioritize to succeed", lambda: (ti_rows(dbs, run_id).get("prioritize") or ("",))[0] == "success",
             600, procs, interval=1)
    proxy.down()
    say("results database DOWN (connections refused) after prioritize")
    # 2. the record task's first try, on worker A, spools the run's attempts and fails
    spools = [p for p in (shared, state / "worker-a" / "cluster_doctor" / "spool") if p is not None]
    wait_for("the record task to spool and fail its first try",
             lambda: spooled(spools) and (ti_rows(dbs, run_id).get("record") or ("",))[0] in ("up_for_retry", "failed"),
             900, procs, interval=2)
    attempts = spooled(spools)
    say(f"record try 1 spooled {attempts} attempt(s) to {', '.join(map(str, spools))}")
    # 3. worker A goes, worker B comes, the database is back: the retry runs on B
    stop_worker(record, "worker-a")
    procs.pop("worker-a")
    procs["worker-b"] = (stack.spawn(record, "worker-b", worker_argv("worker-b"), envs["worker-b"]),
                         state / "logs" / "worker-b.log")
    proxy.up()
    say("worker A stopped, worker B started, results database UP")
    final = wait_for("the run to end", lambda: _run_state(dbs, run_id), 900, procs, interval=3)
    for number, state_, _host in record_tries(dbs, run_id):
        say(f"record try {number}: {state_} on {', '.join(ran_on(state, run_id, number)) or 'no worker'}")
    every_spool = [shared, *(state / w / "cluster_doctor" / "spool" for w in ("airflow", "worker-a", "worker-b"))]
    stranded = spooled([p for p in every_spool if p is not None])
    rows = dbs.query(dbs.results, "SELECT count(*) FROM validation_history WHERE run_id = %s", (run_id,))[0][0]
    say(f"run {run_id}: {final}; validation_history rows of the run: {rows}")
    return stranded, rows, attempts


def _run_state(dbs: Databases, run_id: str) -> str | None:
    rows = dbs.query(dbs.meta, "SELECT state FROM dag_run WHERE dag_id = %s AND run_id = %s", (DAG_ID, run_id))
    return rows[0][0] if rows and rows[0][0] in ("success", "failed") else None


def stop_worker(record: stack.Record, name: str) -> None:
    """SIGTERM: Celery's warm shutdown (running tasks finish), then its process group is gone."""
    pid = record.data["processes"][name]["pid"]
    stack._signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + 120
    while stack.leader_alive(record, pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    stack._signal_group(pid, signal.SIGKILL)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tools/celery_run.py", description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--pg-url", default=os.environ.get("CLUSTER_DOCTOR_TEST_PG_URL",
                                                      "postgresql://postgres@127.0.0.1:5432/postgres"))
    p.add_argument("--local-spool", action="store_true",
                   help="no shared spool: each worker spools under its own AIRFLOW_HOME (shows the stranding)")
    p.add_argument("--keep", action="store_true", help="keep the state dir (logs) afterwards")
    args = p.parse_args(argv)
    if shutil.which("redis-server") is None:
        print("error: redis-server not found (Debian package redis-server; tools/system-packages installs it)",
              file=sys.stderr)
        return 2
    state = pathlib.Path(tempfile.mkdtemp(prefix="cd-celery-"))
    (state / "logs").mkdir()
    record = stack.Record(state, {"id": state.name, "started_at": time.time(), "processes": {}})
    record.cleanup = []
    record.save()
    started = time.monotonic()
    try:
        stranded, rows, attempts = scenario(record, state, args)
    except (stack.StackError, subprocess.CalledProcessError, KeyboardInterrupt) as exc:
        if isinstance(exc, stack.StackError):
            stack.report(exc)
        else:
            print(f"error: {exc}", file=sys.stderr)
        print(f"logs: {state / 'logs'}", file=sys.stderr)
        args.keep = True
        return 1
    finally:
        with contextlib.suppress(stack.StackError):
            stack.stop(record, say=lambda text: None)
        for step in record.cleanup:
            with contextlib.suppress(Exception):
                step()
        if not args.keep:
            shutil.rmtree(state, ignore_errors=True)
    say(f"took {time.monotonic() - started:.0f} s" + (f"; logs kept in {state}" if args.keep else ""))
    print(f"stranded {stranded}, recorded {rows} of {attempts}", flush=True)
    return 0 if stranded == 0 and rows == attempts and attempts > 0 else 1


if __name__ == "__main__":
    sys.exit(interrupts.run(main))  # SIGTERM, SIGHUP, a closed pipe: as Ctrl-C
