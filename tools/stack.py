"""make up / make down: the whole product running locally, with its UI.

``python tools/stack.py up|down|status [--state-dir .stack] [--port 8080]`` — ``up`` starts, in the
background and under the state dir:

* an embedded PostgreSQL 16 (pgserver; Unix socket only) with two databases: ``airflow`` (metadata)
  and ``cluster_doctor`` (results, migrated like ``cluster-doctor db upgrade``);
* the simulated cluster (``tools/stack_cluster.py``): the Kubernetes API emulator, GPU nodes, and a
  churn driver (user jobs arrive and leave, nodes get cordoned, now and then an injected fault);
* a real Airflow 3.3 — api-server, scheduler, dag-processor, triggerer; LocalExecutor — configured
  as ``docker-compose.yaml`` configures its containers (a JWT secret shared by every component, the
  execution API URL, SimpleAuthManager with an ``admin`` user and a generated password in a 0600
  file), everything bound to 127.0.0.1; the pool ``gpu_validation``, the connections
  ``kubernetes_default`` and ``validation_db`` (environment), ``continuous_validation`` unpaused.

Every process it starts carries ``CD_LOCAL_STACK_ID=<this stack's id>`` in its environment (task
processes and validation pod processes inherit it), and the process groups are recorded in
``<state>/stack.json``: ``down`` stops exactly those, then the PostgreSQL it started, and checks that
nothing carrying the id is left. Data (both databases, logs, reports) stays in the state dir for the
next ``up``; ``rm -rf .stack`` starts over. Settings ``CLUSTER_DOCTOR_*`` in the caller's environment
reach the stack (e.g. ``CLUSTER_DOCTOR_TESTS=gpu_health make up``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
import warnings

import interrupts
import timing

REPO = pathlib.Path(__file__).resolve().parents[1]
BIN = pathlib.Path(sys.executable).parent
MARKER = "CD_LOCAL_STACK_ID"
PART = "CD_LOCAL_STACK_PART"  # "airflow" or "cluster": which side of the stack a process belongs to
DAG_ID = "continuous_validation"
POOL, POOL_SLOTS = "gpu_validation", 2
USER = "admin"
COMPONENTS = {  # name -> airflow command; the two log servers stay off: they bind every interface
    "api-server": ["api-server", "--host", "127.0.0.1", "--port", "{port}", "--workers", "1"],
    "scheduler": ["scheduler", "--skip-serve-logs"],
    "dag-processor": ["dag-processor"],
    "triggerer": ["triggerer", "--skip-serve-logs"],
}


class StackError(RuntimeError):
    """A one-line reason, plus optionally the tail of the log that explains it."""

    def __init__(self, message: str, log: pathlib.Path | None = None):
        super().__init__(message)
        self.log = log


# ------------------------------------------------------------------ the record of what runs
class Record:
    """``<state>/stack.json``: this stack's id, URL and every process group it started; written
    after each start, so a failed or interrupted ``up`` can still be taken down."""

    def __init__(self, state: pathlib.Path, data: dict):
        self.state, self.data = state, data

    @classmethod
    def path(cls, state: pathlib.Path) -> pathlib.Path:
        return state / "stack.json"

    @classmethod
    def load(cls, state: pathlib.Path) -> Record | None:
        try:
            return cls(state, json.loads(cls.path(state).read_text()))
        except FileNotFoundError:
            return None
        except ValueError as exc:
            raise StackError(f"{cls.path(state)} is unreadable ({exc}); "
                             "remove it after checking nothing of the stack runs") from None

    def save(self) -> None:
        tmp = self.path(self.state).with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=2))
        os.replace(tmp, self.path(self.state))

    def add(self, name: str, proc: subprocess.Popen, log: pathlib.Path) -> None:
        self.data["processes"][name] = {"pid": proc.pid, "log": str(log), "started_at": time.time()}
        self.save()

    def ready(self, what: str) -> None:
        """When a service the DAGs read answered (the scheduler starts after them all)."""
        self.data.setdefault("ready_at", {})[what] = time.time()
        self.save()

    @property
    def stack_id(self) -> str:
        return self.data["id"]

    def alive(self) -> dict[str, bool]:
        out = {name: leader_alive(self, p["pid"]) for name, p in self.data["processes"].items()}
        if "postgres" in self.data:
            out["postgres"] = postgres_alive(self.data["postgres"])
        return out


# ------------------------------------------------------------------ processes
# A process of this stack is one started after the record was written that either runs in a session
# the stack started (each component is a session leader; its children stay in its session, task
# processes included: they only change process group) or carries CD_LOCAL_STACK_ID in its environment
# (the emulator and its pod processes, which start sessions of their own). Not the environment alone:
# setproctitle (api-server, scheduler, task supervisors) overwrites what /proc shows of it.
_BOOT = float(next(line.split()[1] for line in open("/proc/stat") if line.startswith("btime")))
_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[str, int, float] | None:
    """(state, session id, start time as epoch seconds) of a process, None when it is gone."""
    try:
        fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[3]), _BOOT + int(fields[19]) / _TICK


def stack_processes(record: Record) -> dict[int, str]:
    """Live processes of the record's stack, each with its part: "airflow", "cluster" or ""."""
    sessions = {p["pid"]: "cluster" if name == "cluster" else "airflow"
                for name, p in record.data["processes"].items()}
    since = record.data["started_at"] - 2  # /proc's boot time has a one-second resolution
    needle = f"{MARKER}={record.stack_id}".encode()
    found = {}
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        pid = int(entry.name)
        st = _stat(pid)
        if st is None or st[0] == "Z" or st[2] < since:
            continue
        if st[1] in sessions:
            found[pid] = sessions[st[1]]
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:  # gone, or not ours to read (then not ours at all)
            continue
        if needle in env:
            found[pid] = next((e.split(b"=", 1)[1].decode() for e in env if e.startswith(PART.encode() + b"=")), "")
    return found


def leader_alive(record: Record, pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[0] != "Z" and st[1] == pid and st[2] >= record.data["started_at"] - 2


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _wait_gone(pids_now, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := pids_now()) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def postgres_alive(pg: dict) -> bool:
    try:
        cmdline = pathlib.Path(f"/proc/{pg['pid']}/cmdline").read_bytes()
    except OSError:
        return False
    st = _stat(pg["pid"])
    return pg["pgdata"].encode() in cmdline and st is not None and st[0] != "Z"


def stop_postgres(pg: dict, say) -> None:
    """Fast shutdown (SIGINT to the postmaster: sessions end, data is flushed), then harder."""
    for sig, wait in ((signal.SIGINT, 30), (signal.SIGQUIT, 10), (signal.SIGKILL, 10)):
        if not postgres_alive(pg):
            break
        with contextlib.suppress(ProcessLookupError):
            os.kill(pg["pid"], sig)
        _wait_gone(lambda: [pg["pid"]] if postgres_alive(pg) else [], wait)
    if postgres_alive(pg):
        raise StackError(f"PostgreSQL (pid {pg['pid']}) did not stop")
    say(f"PostgreSQL stopped (data kept in {pg['pgdata']})")


def _terminate(pids, sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def stop(record: Record, say=print) -> None:
    """Stop exactly what the record's stack started: Airflow first (its tasks delete their pods while
    the cluster still answers), then the cluster, then PostgreSQL; SIGKILL for whatever did not follow."""
    def part(name):
        return lambda: [pid for pid, p in stack_processes(record).items() if p == name]

    def every():
        return list(stack_processes(record))

    for name, proc in record.data["processes"].items():
        if name != "cluster" and leader_alive(record, proc["pid"]):  # never a recycled pid
            _signal_group(proc["pid"], signal.SIGTERM)
    # task processes run in process groups of their own: whatever did not follow the components
    _terminate(_wait_gone(part("airflow"), 15), signal.SIGTERM)
    _wait_gone(part("airflow"), 15)
    cluster = record.data["processes"].get("cluster")
    if cluster and leader_alive(record, cluster["pid"]):
        _signal_group(cluster["pid"], signal.SIGTERM)  # it stops the emulator, which stops its pods
    _terminate(_wait_gone(every, 20), signal.SIGKILL)
    if left := _wait_gone(every, 10):
        raise StackError(f"processes of the stack did not stop: {left}")
    if record.data["processes"]:
        say(f"stopped: {', '.join(record.data['processes'])}")
    if "postgres" in record.data:
        stop_postgres(record.data["postgres"], say)
    Record.path(record.state).unlink(missing_ok=True)


def spawn(record: Record, name: str, argv: list[str], env: dict) -> subprocess.Popen:
    log = record.state / "logs" / f"{name}.log"
    with open(log, "ab") as fh:
        # its own session: `down` signals the whole group and never the caller's
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=record.state)
    record.add(name, proc, log)
    return proc


def tail(path: pathlib.Path | None, lines: int = 40) -> str:
    if path is None:
        return ""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


# ------------------------------------------------------------------ HTTP
def http(method: str, url: str, body=None, token: str | None = None, timeout: float = 10):
    """(status, parsed JSON or text); None status when nothing answers."""
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, method=method, headers=headers,
                                 data=json.dumps(body).encode() if body is not None else None)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    except OSError:
        return None, None
    try:
        return status, json.loads(raw or b"null")
    except ValueError:
        return status, raw.decode(errors="replace")


def token(base: str, password: str) -> str:
    """A JWT from SimpleAuthManager's token endpoint (POST /auth/token)."""
    status, body = http("POST", f"{base}/auth/token", {"username": USER, "password": password})
    if status != 201:
        raise StackError(f"POST {base}/auth/token answered {status}: {body}")
    return body["access_token"]


# ------------------------------------------------------------------ configuration
def port_free(port: int) -> bool:
    with contextlib.closing(socket.socket()) as sock:
        # as uvicorn binds: connections of an earlier server in TIME_WAIT do not count
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def secret_file(path: pathlib.Path, content: str) -> None:
    """Written 0600 from the first byte, atomically."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(content)
    os.replace(tmp, path)


def persistent_secrets(state: pathlib.Path) -> dict:
    """The Fernet key outlives a down/up (connections and Variables in the metadata DB are encrypted
    with it); the JWT and session secrets are new at each up."""
    path = state / "secrets.json"
    if path.exists():
        return json.loads(path.read_text())
    from cryptography.fernet import Fernet

    values = {"fernet_key": Fernet.generate_key().decode()}
    secret_file(path, json.dumps(values))
    return values


def airflow_env(state: pathlib.Path, *, port: int, stack_id: str, socket_dir: str, kubeconfig: str) -> dict:
    home = state / "airflow"
    env = {k: v for k, v in os.environ.items()  # never the caller's own Airflow
           if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_", "AIRFLOW_VAR_", "AIRFLOW_HOME", "PYTHONPATH"))}
    # CLUSTER_DOCTOR_* of the caller win over these local defaults
    for key, value in {
        "CLUSTER_DOCTOR_SUITE_DEVICE": "cpu",  # no GPU here: the suites run in CPU mode in the emulator's pods
        "CLUSTER_DOCTOR_REPORTS_DIR": str(state / "reports"),
        "CLUSTER_DOCTOR_PENDING_TIMEOUT_S": "300",
        "CLUSTER_DOCTOR_AVAILABILITY_CHECK_S": "30",
    }.items():
        env.setdefault(key, value)
    secret = persistent_secrets(state)
    env.update({
        MARKER: stack_id,
        PART: "airflow",
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        # the plugin comes from the installed distribution's entry point, as in a real deployment
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(home / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        # tasks run as children of the scheduler; the pool, not this, limits validation pods
        "AIRFLOW__CORE__PARALLELISM": "6",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"postgresql+psycopg2://postgres@/airflow?host={socket_dir}",
        "AIRFLOW__CORE__FERNET_KEY": secret["fernet_key"],
        # shared by every component: the api-server signs the tokens of task processes, the
        # scheduler's supervisors present them to the execution API
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(48),
        "AIRFLOW__API__SECRET_KEY": secrets.token_urlsafe(32),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__CORE__AUTH_MANAGER":
            "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "passwords.json"),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        # importing the DAG file is mostly importing Airflow and the provider: ~11 s on a loaded
        # 2-core box, too close to the 30 s default
        "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "120",
        "AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT": "180",
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "120",
        "AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps({"conn_type": "kubernetes",
                                                       "extra": {"kube_config_path": kubeconfig}}),
        "AIRFLOW_CONN_VALIDATION_DB": f"postgresql://postgres@/cluster_doctor?host={socket_dir}",
    })
    return env


# ------------------------------------------------------------------ up
def _wait(what: str, check, procs: dict[str, tuple[subprocess.Popen, pathlib.Path]], timeout: float,
          interval: float = 0.5):
    """Poll check() until it returns a truthy value; fail at once when a started process exits."""
    deadline = time.monotonic() + timeout
    while True:
        if value := check():
            return value
        for name, (proc, log) in procs.items():
            if proc.poll() is not None:
                raise StackError(f"{name} exited with code {proc.returncode} while waiting for {what}", log)
        if time.monotonic() > deadline:
            raise StackError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def start_postgres(record: Record, say) -> tuple[str, str]:
    """The embedded server, its socket dir, and the two databases; returns (socket_dir, results URL)."""
    import psycopg
    from cluster_doctor.store import database

    pgdata = record.state / "pgdata"
    with warnings.catch_warnings():  # platformdirs on XDG_RUNTIME_DIR: noise, the socket lives in pgdata
        warnings.simplefilter("ignore")
        with interrupts.held():  # recorded before an interruption is let through: `stop` finds it then
            server = database.embedded_server(pgdata, cleanup_mode=None)  # None: it outlives this process
            record.data["postgres"] = {"pid": server.get_pid(), "pgdata": str(pgdata.resolve())}
            record.save()
    params = database.libpq_params(server.get_uri())
    with psycopg.connect(**{**params, "dbname": "postgres"}, autocommit=True) as conn:
        have = {row[0] for row in conn.execute("SELECT datname FROM pg_database")}
        for name in ("airflow", "cluster_doctor"):
            if name not in have:
                conn.execute(f'CREATE DATABASE "{name}"')  # fixed names, not input
    socket_dir = params["host"]
    url = f"postgresql://postgres@/cluster_doctor?host={socket_dir}"
    say(f"PostgreSQL {server.get_pid()}: databases airflow and cluster_doctor (socket in {socket_dir})")
    return socket_dir, url


def up(state: pathlib.Path, *, port: int, nodes: int, churn_interval: float, seed: int | None,
       timeout: float, say=print, phases: timing.Phases | None = None) -> dict:
    """Start the stack; on any failure stop what was started and raise StackError. ``phases`` marks
    where the time goes (the breakdown ``make up`` prints last)."""
    for sub in ("logs", "airflow/plugins", "reports"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    record = Record(state, {"id": uuid.uuid4().hex, "port": port, "url": f"http://127.0.0.1:{port}",
                            "started_at": time.time(), "processes": {}})
    record.save()
    started = time.monotonic()
    try:
        return _up(record, nodes=nodes, churn_interval=churn_interval, seed=seed, timeout=timeout,
                   say=say, started=started, mark=(phases or timing.Phases()).mark)
    except BaseException as exc:
        if isinstance(exc, StackError):
            report(exc)
        say("start failed: stopping what was started")
        with contextlib.suppress(StackError):
            stop(record, say=say)
        raise


def _up(record: Record, *, nodes: int, churn_interval: float, seed: int | None, timeout: float, say,
        started: float, mark) -> dict:
    """The start, in the order that waits least while no task runs before what it reads answers: the
    cluster boots while the databases are migrated; the api-server, dag-processor and triggerer start
    together; the pool is set through the REST API once the api-server answers (no CLI process competing
    with them for the CPUs); the scheduler starts last, once the api-server (the tasks' execution API) and
    the cluster answer: it alone starts DAG runs, and suspect_signals is unpaused by its definition, so
    started with the others its first run raced the api-server's start; the DAG is unpaused once parsed."""
    state, port = record.state, record.data["port"]
    deadline = started + timeout
    mark("PostgreSQL")
    socket_dir, results_url = start_postgres(record, say)
    mark("cluster start")
    cluster_dir = state / "cluster"
    procs = {"cluster": start_cluster(record, cluster_dir, nodes=nodes, churn_interval=churn_interval,
                                      seed=seed)}

    from cluster_doctor.store.history import ResultStore

    mark("results DB")
    ResultStore(results_url).upgrade()
    say("results DB migrated (cluster-doctor db upgrade)")
    # the kubeconfig the cluster writes (stack_cluster: <its state dir>/kubeconfig), before it exists
    env = airflow_env(state, port=port, stack_id=record.stack_id, socket_dir=socket_dir,
                      kubeconfig=str(cluster_dir.resolve() / "kubeconfig"))
    password = secrets.token_urlsafe(12)
    secret_file(pathlib.Path(env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"]),
                json.dumps({USER: password}))
    # the same configuration for the airflow CLI (set -a; . .stack/airflow.env; set +a), without the
    # stack's id: `down` stops what carries it, and a CLI command of the user is not the stack's
    secret_file(state / "airflow.env", "".join(f"{k}={shlex.quote(v)}\n" for k, v in sorted(env.items())
                                               if k.startswith(("AIRFLOW", "CLUSTER_DOCTOR_"))))
    mark("airflow db migrate")
    migrate_metadata(state, env, socket_dir, deadline, say)

    def start(name: str) -> None:
        proc = spawn(record, name, [str(BIN / "airflow"), *(a.format(port=port) for a in COMPONENTS[name])], env)
        procs[name] = (proc, pathlib.Path(record.data["processes"][name]["log"]))

    # one phase for the components (the README's timing lines name it): the scheduler's start waits for
    # the api-server and the cluster, which boot meanwhile
    mark("components healthy")
    for name in COMPONENTS:
        if name != "scheduler":
            start(name)
    base = record.data["url"]

    def healthy(*parts):
        def check():
            status, body = http("GET", f"{base}/api/v2/monitor/health")
            return status == 200 and all((body.get(part) or {}).get("status") == "healthy" for part in parts)
        return check

    _wait("the api-server to answer", healthy("metadatabase"), procs, deadline - time.monotonic())
    record.ready("api-server")
    jwt = token(base, password)
    set_pool(base, jwt)
    ready = _wait("the simulated cluster", lambda: (cluster_dir / "ready.json").exists() and
                  json.loads((cluster_dir / "ready.json").read_text()), procs, deadline - time.monotonic())
    record.ready("cluster")
    start("scheduler")  # last: what its DAG runs read (execution API, results DB, cluster) answers now
    _wait("the Airflow components to report healthy",
          healthy("metadatabase", "scheduler", "triggerer", "dag_processor"), procs, deadline - time.monotonic())
    say(f"Airflow up: api-server, dag-processor, triggerer, then the scheduler; pool {POOL} = {POOL_SLOTS} slots")

    mark("cluster ready")
    if pathlib.Path(ready["kubeconfig"]).resolve() != cluster_dir.resolve() / "kubeconfig":
        raise StackError(f"the cluster wrote its kubeconfig to {ready['kubeconfig']}, not where the "
                         "connection points")
    say(f"simulated cluster: {len(ready['nodes'])} GPU nodes at {ready['url']}, "
        f"churn every {churn_interval:g} s")

    mark("DAG parsed")
    unpause_when_parsed(base, jwt, procs, deadline)
    mark("unpaused")
    record.data["ready_s"] = round(time.monotonic() - started, 1)
    record.save()
    return {"url": base, "user": USER, "password": password, "record": record, "cluster": ready,
            "results_url": results_url, "env": env}


def start_cluster(record: Record, cluster_dir: pathlib.Path, *, nodes: int, churn_interval: float,
                  seed: int | None) -> tuple[subprocess.Popen, pathlib.Path]:
    """The simulated cluster's process (tools/stack_cluster.py), started, not waited for."""
    cluster_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    cluster_env.update({MARKER: record.stack_id, PART: "cluster"})
    (cluster_dir / "ready.json").unlink(missing_ok=True)
    argv = [sys.executable, str(REPO / "tools" / "stack_cluster.py"), "--state-dir", str(cluster_dir),
            "--nodes", str(nodes), "--interval", str(churn_interval)]
    argv += ["--seed", str(seed)] if seed is not None else []
    cluster = spawn(record, "cluster", argv, cluster_env)
    return cluster, pathlib.Path(record.data["processes"]["cluster"]["log"])


def _airflow_version() -> str:
    from importlib import metadata

    return metadata.version("apache-airflow-core")


def _alembic_revision(socket_dir: str) -> str | None:
    import psycopg

    try:
        with psycopg.connect(host=socket_dir, user="postgres", dbname="airflow", connect_timeout=5) as conn:
            row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    except psycopg.Error:
        return None
    return row[0] if row else None


def migrate_metadata(state: pathlib.Path, env: dict, socket_dir: str, deadline: float, say) -> None:
    """``airflow db migrate``, unless this state dir's metadata DB is at the revision the last migrate by
    this Airflow version left (state/airflow/migrated.json): a migrate with nothing to do costs an Airflow
    process start, seconds on a small machine."""
    done = state / "airflow" / "migrated.json"
    revision = _alembic_revision(socket_dir)
    try:
        last = json.loads(done.read_text())
    except (OSError, ValueError):
        last = {}
    if revision and last == {"airflow": _airflow_version(), "revision": revision}:
        say(f"Airflow metadata DB already migrated (revision {revision})")
        return
    migrate_log = state / "logs" / "db-migrate.log"
    with open(migrate_log, "wb") as fh:
        migrate = subprocess.run([str(BIN / "airflow"), "db", "migrate"], env=env, stdout=fh,
                                 stderr=subprocess.STDOUT, timeout=max(60.0, deadline - time.monotonic()))
    if migrate.returncode != 0:
        raise StackError(f"airflow db migrate failed (exit {migrate.returncode})", migrate_log)
    done.write_text(json.dumps({"airflow": _airflow_version(), "revision": _alembic_revision(socket_dir)}))
    say("Airflow metadata DB migrated")


def set_pool(base: str, jwt: str) -> None:
    """The pool a DAG cannot create itself, upserted at each up, deferred tasks counted (as the compose
    init's `airflow pools set ... --include-deferred`), through the REST API."""
    body = {"slots": POOL_SLOTS, "description": "Cluster Doctor: concurrent GPU validation pods",
            "include_deferred": True}
    status, answer = http("PATCH", f"{base}/api/v2/pools/{POOL}", {"name": POOL, **body}, token=jwt)
    if status == 404:
        status, answer = http("POST", f"{base}/api/v2/pools", {"name": POOL, **body}, token=jwt)
    if status not in (200, 201):
        raise StackError(f"could not set pool {POOL}: {status} {answer}")


def unpause_when_parsed(base: str, jwt: str, procs: dict, deadline: float) -> None:
    """Wait for the dag-processor to parse the DAG (an import error ends the wait), then unpause it."""
    def dag_parsed():
        status, body = http("GET", f"{base}/api/v2/importErrors", token=jwt)
        if status == 200 and body["total_entries"]:
            errors = "; ".join(e["filename"] + ": " + e["stack_trace"].strip().splitlines()[-1]
                               for e in body["import_errors"])
            raise StackError(f"the DAG files do not import: {errors}")
        return http("GET", f"{base}/api/v2/dags/{DAG_ID}", token=jwt)[0] == 200

    _wait(f"the dag-processor to parse {DAG_ID}", dag_parsed, procs, deadline - time.monotonic(), interval=1)
    status, body = http("PATCH", f"{base}/api/v2/dags/{DAG_ID}", {"is_paused": False}, token=jwt)
    if status != 200:
        raise StackError(f"could not unpause {DAG_ID}: {status} {body}")


def describe(state: pathlib.Path, info: dict) -> str:
    rel = os.path.relpath(state)
    rel = rel if not rel.startswith("..") else str(state)
    cluster = info["cluster"]
    return "\n".join([
        "",
        f"Cluster Doctor is running locally (ready in {info['record'].data['ready_s']:.0f} s):",
        f"  UI        {info['url']}  (Fleet health is in the navigation)",
        f"  report    {info['url']}/cluster-doctor/reports/daily  (Report in the navigation; "
        "daily_fleet_report is unpaused: a triggered run runs)",
        f"  login     {info['user']} / {info['password']}  ({rel}/airflow/passwords.json, mode 0600)",
        f"  cluster   {len(cluster['nodes'])} simulated GPU nodes, kubeconfig {cluster['kubeconfig']}; "
        f"churn journal {rel}/cluster/churn.jsonl",
        f"  results   {BIN / 'cluster-doctor'} status --db-url '{info['results_url']}'",
        f"  airflow   set -a; . {rel}/airflow.env; set +a; {BIN / 'airflow'} dags list",
        f"  logs      {rel}/logs/ (components), {rel}/airflow/logs/ (tasks)",
        f"  {DAG_ID} is unpaused (hourly): its first run starts now.",
        "  stop it:  " + ("make down" if state == REPO / ".stack"
                          else f"{BIN / 'python'} {REPO / 'tools' / 'stack.py'} down --state-dir {state}"),
    ])


# ------------------------------------------------------------------ CLI
def report(exc: StackError) -> None:
    if exc.log is not None and (text := tail(exc.log)):
        print(f"--- last lines of {exc.log}\n{text}\n---", file=sys.stderr)
    print(f"error: {exc}", file=sys.stderr)
    exc.reported = True


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tools/stack.py", description=__doc__.splitlines()[0])
    p.add_argument("command", choices=["up", "down", "status"])
    p.add_argument("--state-dir", type=pathlib.Path,
                   default=pathlib.Path(os.environ.get("STACK_DIR") or REPO / ".stack"))
    p.add_argument("--port", type=int, default=int(os.environ.get("STACK_PORT") or 8080))
    p.add_argument("--nodes", type=int, default=24, help="simulated GPU nodes")
    p.add_argument("--churn-interval", type=float, default=20.0, help="seconds between churn steps (0: none)")
    p.add_argument("--seed", type=int, default=None, help="seed of the churn")
    p.add_argument("--timeout", type=float, default=600.0, help="give up starting after this many seconds")
    args = p.parse_args(argv)
    state = args.state_dir.resolve()
    try:
        record = Record.load(state)
        if args.command == "down":
            if record is None:
                print(f"nothing to stop: no stack recorded in {state}")
                return 0
            stop(record)
            print("the local stack is down; nothing of it runs")
            return 0
        if args.command == "status":
            if record is None:
                print(f"not running (no stack recorded in {state})")
                return 1
            alive = record.alive()
            for name, ok in alive.items():
                print(f"  {name:<14} {'running' if ok else 'NOT RUNNING'}")
            print(f"UI {record.data['url']}")
            return 0 if all(alive.values()) else 1
        if record is not None:
            alive = record.alive()
            if any(alive.values()):
                down = [n for n, ok in alive.items() if not ok]
                raise StackError(f"a stack is already running from {state} ({record.data['url']})"
                                 + (f"; not running: {', '.join(down)}" if down else "")
                                 + ": `make down` first")
            Record.path(state).unlink()  # left by a crash: nothing of it runs
        if not port_free(args.port):
            raise StackError(f"port {args.port} on 127.0.0.1 is in use: "
                             "choose another with STACK_PORT=8090 make up")
        phases = timing.Phases()
        info = up(state, port=args.port, nodes=args.nodes, churn_interval=args.churn_interval, seed=args.seed,
                  timeout=args.timeout, phases=phases)
        print(describe(state, info))
        # measured from this command's start: the figure the README quotes
        print("\n" + phases.line("make up ready"))
        return 0
    except StackError as exc:
        if not getattr(exc, "reported", False):
            report(exc)
        return 1
    except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM (e.g. a CI timeout), SIGHUP, a closed pipe (interrupts)
        print(f"interrupted ({getattr(exc, 'why', 'SIGINT')}): stopped what was started", file=sys.stderr)
        return getattr(exc, "status", 130)


if __name__ == "__main__":
    sys.exit(interrupts.run(main))
