"""docker-compose.yaml and its pieces under deploy/compose/, checked offline with real tools.

- Debian's docker-compose (v1) resolves the file with the values of deploy/compose/.env.example
  (`config -q` must accept it); the structure is asserted on that resolved form, so anchors, merges
  and interpolation are exactly what compose will run.
- The init SQL runs in a real PostgreSQL 16 (pgserver) the way the postgres image runs it.
- airflow-init's script runs for real, twice, with this venv's Airflow 3.3.2 (SQLite metadata DB,
  since the image's asyncpg is not in the venv; the results DB is the real Postgres role from the
  init SQL), then the databases are inspected: migrations, pool, connections, UI login file.
"""

from __future__ import annotations

import base64
import json
import os
import pathlib
import re
import secrets
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import urllib.parse
import warnings

import psycopg2
import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yaml"
ENV_EXAMPLE = REPO / "deploy" / "compose" / ".env.example"
INIT_SQL = REPO / "deploy" / "compose" / "postgres-init" / "10-results-db.sql"
DOCKERFILE = REPO / "deploy" / "compose" / "Dockerfile"
DOCKERIGNORE = REPO / "deploy" / "compose" / "Dockerfile.dockerignore"

AIRFLOW_SERVICES = {"airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"}
CELERY_WORKERS = {"airflow-worker-1", "airflow-worker-2"}
ALL_AIRFLOW = AIRFLOW_SERVICES | CELERY_WORKERS | {"airflow-init", "airflow-cli"}
READ_ONLY_MOUNTS = {
    "/opt/airflow/dags": REPO / "dags",
    "/opt/cluster-doctor/plugins": REPO / "plugins",
    "/opt/cluster-doctor/include": REPO / "include",
}
KUBECONFIG_TARGET = "/home/airflow/.kube/config"
SECRET_VARS = ("POSTGRES_PASSWORD", "CLUSTER_DOCTOR_DB_PASSWORD", "CLUSTER_DOCTOR_APP_DB_PASSWORD", "AIRFLOW_FERNET_KEY",
               "AIRFLOW_JWT_SECRET", "AIRFLOW_API_SECRET_KEY", "AIRFLOW_ADMIN_PASSWORD")


# ---------------------------------------------------------------------------------------- helpers
def docker_compose(*args: str, env_file: pathlib.Path = ENV_EXAMPLE) -> subprocess.CompletedProcess:
    exe = shutil.which("docker-compose")
    # A clean environment: variables of the caller's shell would override the .env file.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/root")}
    return subprocess.run(
        [exe, "--project-directory", str(REPO), "-f", str(COMPOSE_FILE), "--env-file", str(env_file), *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
    )


def read_env_file(path: pathlib.Path) -> dict[str, str]:
    values = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    return values


def unescape(script: str) -> str:
    """What the container runs: compose turns $$ into $ (`config` prints the escaped form)."""
    return script.replace("$$", "$")


def depends(service: dict) -> dict[str, str]:
    return {name: spec["condition"] for name, spec in service.get("depends_on", {}).items()}


def mounts(service: dict) -> dict[str, dict]:
    out = {}
    for volume in service.get("volumes", []):
        assert isinstance(volume, dict), f"short volume syntax is not checked, use the long form: {volume!r}"
        out[volume["target"]] = volume
    return out


@pytest.fixture(scope="module")
def resolved() -> dict:
    result = docker_compose("config")
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


@pytest.fixture(scope="module")
def services(resolved) -> dict:
    return resolved["services"]


# ------------------------------------------------------------------------------- compose, resolved
@pytest.mark.requires_tool("docker-compose")
def test_docker_compose_config_accepts_the_file_with_the_example_env():
    result = docker_compose("config", "-q")
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "", f"docker-compose warned: {result.stderr}"


@pytest.mark.requires_tool("docker-compose")
def test_services_are_the_official_airflow3_set_with_local_executor(services):
    assert set(services) == ALL_AIRFLOW | {"postgres", "redis"}
    # Redis and the workers start only with the celery profile: LocalExecutor by default
    assert {n for n, s in services.items() if s.get("profiles") == ["celery"]} == CELERY_WORKERS | {"redis"}
    commands = {name: services[name].get("command") for name in AIRFLOW_SERVICES}
    assert commands == {"airflow-apiserver": "api-server", "airflow-scheduler": "scheduler",
                        "airflow-dag-processor": "dag-processor", "airflow-triggerer": "triggerer"}
    for name in ALL_AIRFLOW:
        env = services[name]["environment"]
        assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor", name
        assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://airflow-apiserver:8080/execution/"
        assert services[name]["user"].endswith(":0"), "the official image needs GID 0"
        assert services[name]["build"]["dockerfile"] == "deploy/compose/Dockerfile"
        assert services[name]["build"]["target"] == "runtime"
    assert services["airflow-cli"]["profiles"] == ["debug"], "the CLI helper must not start with `up`"


def celery_env_file(tmp_path) -> pathlib.Path:
    env = {**read_env_file(ENV_EXAMPLE), "AIRFLOW_EXECUTOR": "CeleryExecutor", "COMPOSE_PROFILES": "celery",
           "REDIS_PASSWORD": "redis-" + secrets.token_hex(8)}
    path = tmp_path / "celery.env"
    path.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    return path


@pytest.mark.requires_tool("docker-compose")
def test_the_celery_profile_is_redis_and_two_workers_sharing_spool_and_reports(tmp_path):
    result = docker_compose("config", env_file=celery_env_file(tmp_path))
    assert result.returncode == 0 and result.stderr.strip() == "", result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    for name in ALL_AIRFLOW:
        env = services[name]["environment"]
        assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor", name
        broker = urllib.parse.urlsplit(env["AIRFLOW__CELERY__BROKER_URL"])
        assert (broker.scheme, broker.hostname, broker.port) == ("redis", "redis", 6379) and broker.password
        assert env["AIRFLOW__CELERY__RESULT_BACKEND"].startswith("db+postgresql://airflow:")
    workers = {n: services[n] for n in CELERY_WORKERS}
    assert {w["command"] for w in workers.values()} == {"celery worker"}
    assert {w["hostname"] for w in workers.values()} == CELERY_WORKERS, "distinct Celery node names"
    for name, worker in workers.items():
        assert depends(worker) == {"postgres": "service_healthy", "redis": "service_healthy",
                                   "airflow-init": "service_completed_successfully",
                                   "airflow-apiserver": "service_healthy"}, name
        assert "inspect ping" in " ".join(worker["healthcheck"]["test"])
        assert worker["mem_limit"] and worker["cpus"], "worker resources are bounded"
        assert int(worker["environment"]["AIRFLOW__CELERY__WORKER_CONCURRENCY"]) >= 2
        assert not worker.get("ports"), "workers publish nothing"
    assert services["redis"]["healthcheck"]["test"] and not services["redis"].get("ports")


@pytest.mark.requires_tool("docker-compose")
def test_every_airflow_container_shares_one_spool_and_one_reports_volume(services):
    for name in ALL_AIRFLOW:
        env, by_target = services[name]["environment"], mounts(services[name])
        for setting, volume in (("CLUSTER_DOCTOR_SPOOL_DIR", "cluster-doctor-spool"),
                                ("CLUSTER_DOCTOR_REPORTS_DIR", "cluster-doctor-reports")):
            mount = by_target.get(env[setting])
            assert mount is not None and mount["type"] == "volume" and mount["source"] == volume, (name, setting)
            assert not mount.get("read_only"), (name, setting)

@pytest.mark.requires_tool("docker-compose")
def test_code_and_kubeconfig_are_mounted_read_only_in_every_airflow_container(services):
    for name in ALL_AIRFLOW:
        by_target = mounts(services[name])
        for target, source in READ_ONLY_MOUNTS.items():
            mount = by_target.get(target)
            assert mount is not None, f"{name}: {target} not mounted"
            assert mount["type"] == "bind" and pathlib.Path(mount["source"]) == source, (name, mount)
            assert mount.get("read_only") is True, f"{name}: {target} must be read-only"
        kube = by_target.get(KUBECONFIG_TARGET)
        assert kube is not None and kube["type"] == "bind" and kube.get("read_only") is True, (name, kube)
        assert kube["source"].endswith("/.kube/config") and not kube["source"].startswith("~"), kube
        # Nothing of the checkout is writable from a container.
        for mount in by_target.values():
            if mount["type"] == "bind" and pathlib.Path(mount["source"]).is_relative_to(REPO):
                assert mount.get("read_only") is True, (name, mount)


@pytest.mark.requires_tool("docker-compose")
def test_one_postgres16_holds_metadata_and_results_as_separate_databases(services):
    pg = services["postgres"]
    assert pg["image"] == "postgres:16"
    init_dir = mounts(pg)["/docker-entrypoint-initdb.d"]
    assert pathlib.Path(init_dir["source"]) == INIT_SQL.parent and init_dir.get("read_only") is True
    assert pg["environment"]["POSTGRES_DB"] == "airflow"

    scheduler_env = services["airflow-scheduler"]["environment"]
    meta = urllib.parse.urlsplit(scheduler_env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    results = urllib.parse.urlsplit(services["airflow-init"]["environment"]["AIRFLOW_CONN_VALIDATION_DB"])
    assert (meta.hostname, meta.path) == ("postgres", "/airflow")
    assert (results.hostname, results.path) == ("postgres", "/cluster_doctor")
    assert results.username == "cluster_doctor" != meta.username, "the results role must not be the superuser"
    # The SQL creates exactly that role and database.
    sql = INIT_SQL.read_text()
    assert "CREATE ROLE cluster_doctor" in sql
    assert "CREATE DATABASE cluster_doctor OWNER cluster_doctor" in sql
    # Only postgres (first init), airflow-init and the debug CLI see the results DB password; the
    # running services use the connection airflow-init stores in the metadata database.
    results_vars = {"CLUSTER_DOCTOR_DB_PASSWORD", "AIRFLOW_CONN_VALIDATION_DB"}
    holders = {n for n, s in services.items() if results_vars & set(s.get("environment", {}))}
    assert holders == {"postgres", "airflow-init", "airflow-cli"}
    # The run-time role's password: postgres creates the role, airflow-init stores the connection.
    app = {n for n, s in services.items() if "CLUSTER_DOCTOR_APP_DB_PASSWORD" in s.get("environment", {})}
    assert app == {"postgres", "airflow-init"}
    assert "CREATE ROLE cluster_doctor_app LOGIN" in sql


@pytest.mark.requires_tool("docker-compose")
def test_init_migrates_both_databases_creates_pool_and_connections(services):
    init = services["airflow-init"]
    assert init["command"][:2] == ["bash", "-c"]
    script = unescape(init["command"][2])
    steps = ["airflow db migrate\n", "python -m cluster_doctor db upgrade\n",
             "python -m cluster_doctor db grant-runtime cluster_doctor_app\n",
             "airflow pools set gpu_validation ", "airflow connections import --overwrite "]
    positions = [script.find(step) for step in steps]
    assert all(p >= 0 for p in positions), dict(zip(steps, positions))
    assert positions == sorted(positions), "schema first, then pool and connections"
    pool_line = script[positions[3]:].split("\n\n")[0]
    assert '"${CLUSTER_DOCTOR_POOL_SLOTS}"' in pool_line and "--include-deferred" in pool_line
    assert '"validation_db"' in script and '"kubernetes_default"' in script
    assert script.startswith("set -euo pipefail"), "a failing step must fail the init service"
    assert "restart" not in init, "a one-shot service"
    assert depends(init) == {"postgres": "service_healthy"}
    assert init["environment"]["CLUSTER_DOCTOR_POOL_SLOTS"] == "2"


@pytest.mark.requires_tool("docker-compose")
def test_services_start_after_init_and_have_healthchecks(services):
    for name in AIRFLOW_SERVICES | {"postgres"}:
        assert services[name].get("healthcheck", {}).get("test"), f"{name}: no healthcheck"
        assert services[name].get("restart") == "always", name
    for name in AIRFLOW_SERVICES:
        # what runs tasks or starts DAG runs waits for the api-server: a task's first call is to its execution API
        after_api = {"airflow-apiserver": "service_healthy"} if name == "airflow-scheduler" else {}
        assert depends(services[name]) == {
            "postgres": "service_healthy", "airflow-init": "service_completed_successfully", **after_api}, name
    assert "/api/v2/monitor/health" in " ".join(services["airflow-apiserver"]["healthcheck"]["test"])
    assert "8974/health" in " ".join(services["airflow-scheduler"]["healthcheck"]["test"])
    assert services["airflow-scheduler"]["environment"]["AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK"] == "true"


@pytest.mark.requires_tool("docker-compose")
def test_ui_sits_behind_simple_auth_manager_login_on_loopback(services):
    api = services["airflow-apiserver"]
    env = api["environment"]
    assert env["AIRFLOW__CORE__AUTH_MANAGER"].endswith("simple_auth_manager.SimpleAuthManager")
    assert env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS"] == "admin:admin"
    assert env.get("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "false").lower() == "false"
    passwords = pathlib.PurePosixPath(env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"])
    # The login file lives on a volume only the api-server and airflow-init mount.
    with_auth = {n for n, s in services.items() if any(str(passwords).startswith(t + "/") for t in mounts(s))}
    assert with_auth == {"airflow-apiserver", "airflow-init"}
    published = {n for n, s in services.items() if s.get("ports")}
    assert published == {"airflow-apiserver"}, "only the UI is published"
    (port,) = api["ports"]
    if isinstance(port, dict):  # compose v2 prints the long form
        port = f"{port['host_ip']}:{port['published']}:{port['target']}"
    assert port.startswith("127.0.0.1:8080:8080")


def test_secrets_come_only_from_the_environment():
    # Raw file (before interpolation): every secret-looking value is a ${VAR}, never a literal.
    raw = yaml.safe_load(COMPOSE_FILE.read_text())
    secretish = re.compile(r"(PASSWORD|SECRET|SECRET_KEY|FERNET_KEY|SQL_ALCHEMY_CONN)$|^AIRFLOW_CONN_")
    checked = set()
    for name, service in raw["services"].items():
        for key, value in (service.get("environment") or {}).items():
            if secretish.search(key):
                checked.add(key)
                assert "${" in str(value), f"{name}: {key} must come from .env, got a literal"
    assert {"POSTGRES_PASSWORD", "AIRFLOW__CORE__FERNET_KEY", "AIRFLOW__API_AUTH__JWT_SECRET",
            "AIRFLOW__API__SECRET_KEY", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "AIRFLOW_CONN_VALIDATION_DB",
            "AIRFLOW_ADMIN_PASSWORD"} <= checked
    # The example env holds placeholders only, which airflow-init refuses (next tests).
    example = read_env_file(ENV_EXAMPLE)
    assert {k: example[k] for k in SECRET_VARS} == dict.fromkeys(SECRET_VARS, "change-me")


@pytest.mark.requires_tool("docker-compose")
def test_a_missing_secret_stops_compose_with_a_message(tmp_path):
    example = read_env_file(ENV_EXAMPLE)
    for missing in ("CLUSTER_DOCTOR_DB_PASSWORD", "AIRFLOW_FERNET_KEY"):
        env_file = tmp_path / f"{missing}.env"
        env_file.write_text("".join(f"{k}={v}\n" for k, v in example.items() if k != missing))
        result = docker_compose("config", "-q", env_file=env_file)
        assert result.returncode != 0
        assert f"set {missing} in .env" in result.stderr


def test_validation_service_account_in_env_example_matches_the_manifest():
    sa_docs = list(yaml.safe_load_all((REPO / "include" / "k8s" / "serviceaccounts.yaml").read_text()))
    validation = [d for d in sa_docs if d.get("automountServiceAccountToken") is False]
    expected = read_env_file(ENV_EXAMPLE)["CLUSTER_DOCTOR_SERVICE_ACCOUNT"]
    assert [d["metadata"]["name"] for d in validation] == [expected]


def test_dockerfile_builds_on_the_pinned_airflow_with_constraints():
    text = DOCKERFILE.read_text()
    pinned = re.search(r"^apache-airflow==(\S+)", (REPO / "constraints.txt").read_text(), re.M).group(1)
    assert f"ARG AIRFLOW_IMAGE=apache/airflow:{pinned}-python3.11" in text, "base follows constraints.txt"
    # the distribution itself, with its Airflow extra: plugin entry point and CLI, no PYTHONPATH
    install = r'pip install --no-cache-dir\s+\\\s*-e "/opt/cluster-doctor\[airflow\]" -c \S*constraints\.txt'
    assert re.search(install, text) and not re.search(r"^ENV PYTHONPATH", text, re.M)
    assert re.findall(r"^FROM .* AS (\w+)$", text, re.M) == ["runtime", "bundle"]
    allowed = [line[1:] for line in DOCKERIGNORE.read_text().splitlines() if line.startswith("!")]
    assert {"pyproject.toml", "README.md", "constraints.txt", "plugins/", "include/", "dags/"} <= set(allowed)
    lines = [line.strip() for line in DOCKERIGNORE.read_text().splitlines()]
    patterns = [line for line in lines if line[:1] not in ("", "#")]
    assert patterns[0] == "*", "allow-list: exclude everything first (.venv, .git, local data)"


# ------------------------------------------------------------------- real PostgreSQL, real Airflow
@pytest.fixture(scope="module")
def postgres():
    """A private PostgreSQL 16 (its roles are cluster-wide, so not the shared test server).

    Its data directory is not under pytest's basetemp: as root, pgserver runs postgres as another
    user and opens up the parent directories, which any pytest starting meanwhile closes again.
    """
    with warnings.catch_warnings():  # platformdirs' XDG_RUNTIME_DIR notice on bare CI machines
        warnings.simplefilter("ignore")
        import pgserver

        datadir = tempfile.mkdtemp(prefix="cluster-doctor-compose-pg-")
        server = pgserver.get_server(datadir, cleanup_mode="delete")
    try:
        host = urllib.parse.parse_qs(urllib.parse.urlsplit(server.get_uri()).query)["host"][0]
        psql = pathlib.Path(pgserver.__file__).parent / "pginstall" / "bin" / "psql"
        server.psql("CREATE DATABASE airflow;")  # what POSTGRES_DB=airflow makes before the init scripts
        yield {"host": host, "psql": str(psql)}
    finally:
        server.cleanup()


def run_init_sql(postgres, env_extra: dict) -> subprocess.CompletedProcess:
    """As the postgres image's docker-entrypoint.sh runs /docker-entrypoint-initdb.d/*.sql."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "POSTGRES_DB": "airflow", **env_extra}
    return subprocess.run(
        [postgres["psql"], "-v", "ON_ERROR_STOP=1", "-h", postgres["host"], "--username", "postgres",
         "--no-password", "--no-psqlrc", "--dbname", "airflow", "-f", str(INIT_SQL)],
        env=env, capture_output=True, text=True, timeout=60,
    )


@pytest.fixture(scope="module")
def results_db(postgres) -> dict:
    password, app_password = "pw" + secrets.token_hex(12), "app" + secrets.token_hex(12)
    refused = run_init_sql(postgres, {})
    assert refused.returncode != 0
    assert "CLUSTER_DOCTOR_DB_PASSWORD is not set" in refused.stdout + refused.stderr
    refused = run_init_sql(postgres, {"CLUSTER_DOCTOR_DB_PASSWORD": password})
    assert refused.returncode != 0
    assert "CLUSTER_DOCTOR_APP_DB_PASSWORD is not set" in refused.stdout + refused.stderr
    created = run_init_sql(postgres, {"CLUSTER_DOCTOR_DB_PASSWORD": password,
                                      "CLUSTER_DOCTOR_APP_DB_PASSWORD": app_password})
    assert created.returncode == 0, created.stderr
    return {"host": postgres["host"], "password": password, "app_password": app_password,
            "url": f"postgresql://cluster_doctor:{password}@/cluster_doctor?host={postgres['host']}"}


def test_results_role_owns_its_database_and_nothing_else(results_db):
    conn = psycopg2.connect(host=results_db["host"], user="postgres", dbname="postgres")
    with conn, conn.cursor() as cur:
        cur.execute("SELECT rolsuper, rolcreatedb, rolcreaterole, rolreplication, rolbypassrls, rolcanlogin "
                    "FROM pg_roles WHERE rolname = 'cluster_doctor'")
        assert cur.fetchone() == (False, False, False, False, False, True)
        cur.execute("SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'cluster_doctor'")
        assert cur.fetchone() == ("cluster_doctor",)
        cur.execute("SELECT has_database_privilege('cluster_doctor', 'airflow', 'CONNECT')")
        assert cur.fetchone() == (False,), "the results role must not reach the Airflow metadata DB"
    conn.close()
    with pytest.raises(psycopg2.OperationalError, match="permission denied for database"):
        psycopg2.connect(host=results_db["host"], user="cluster_doctor", dbname="airflow")


@pytest.fixture(scope="module")
def init_script(services) -> str:
    return unescape(services["airflow-init"]["command"][2])


def init_env(home: pathlib.Path, results_db: dict, **overrides: str) -> dict[str, str]:
    """The environment compose gives airflow-init, pointed at local stand-ins."""
    bindir = pathlib.Path(sys.executable).parent  # this venv's airflow and python: Airflow 3.3.2
    env = {
        "PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(home), "AIRFLOW_HOME": str(home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__CORE__FERNET_KEY": base64.urlsafe_b64encode(os.urandom(32)).decode(),
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(16),
        "AIRFLOW__API__SECRET_KEY": secrets.token_hex(16),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "false",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home / "auth" / "passwords.json"),
        "CLUSTER_DOCTOR_POOL_SLOTS": "3",
        "AIRFLOW_CONN_VALIDATION_DB": results_db["url"],
        "CLUSTER_DOCTOR_DB_PASSWORD": results_db["password"],
        "CLUSTER_DOCTOR_APP_DB_PASSWORD": results_db["app_password"],
        "AIRFLOW_ADMIN_USERNAME": "admin",
        "AIRFLOW_ADMIN_PASSWORD": "admin-" + secrets.token_hex(8),
        "KUBE_CONTEXT": "gpu-prod",
    }
    env.update(overrides)
    (home / "auth").mkdir(exist_ok=True)
    return env


def test_init_refuses_the_example_placeholders_before_touching_anything(init_script, results_db, tmp_path):
    env = init_env(tmp_path, results_db, AIRFLOW_ADMIN_PASSWORD="change-me")
    result = subprocess.run(["bash", "-c", init_script], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "AIRFLOW_ADMIN_PASSWORD is empty or still the .env.example placeholder" in result.stderr
    assert not (tmp_path / "airflow.db").exists()


def test_init_script_runs_and_is_idempotent(init_script, results_db, tmp_path):
    env = init_env(tmp_path, results_db)
    outputs = []
    for _ in range(2):  # `docker compose up` runs it on every start
        result = subprocess.run(["bash", "-c", init_script], env=env, capture_output=True, text=True,
                                timeout=300)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        outputs.append(result.stdout)
    assert "results schema upgraded to version" in outputs[0]
    assert "results schema is up to date" in outputs[1] and "nothing changed" in outputs[1]

    from cryptography.fernet import Fernet

    fernet = Fernet(env["AIRFLOW__CORE__FERNET_KEY"].encode())
    meta = sqlite3.connect(tmp_path / "airflow.db")
    pools = meta.execute("SELECT slots, include_deferred FROM slot_pool WHERE pool = 'gpu_validation'")
    assert pools.fetchall() == [(3, 1)]
    rows = meta.execute(
        "SELECT conn_id, conn_type, host, port, schema, login, password, extra, is_encrypted, "
        "is_extra_encrypted FROM connection WHERE conn_id IN ('validation_db', 'kubernetes_default') "
        "ORDER BY conn_id").fetchall()
    meta.close()
    assert [r[0] for r in rows] == ["kubernetes_default", "validation_db"], "one row each after two runs"
    kube, db = rows
    assert db[1:6] == ("postgres", "postgres", 5432, "cluster_doctor", "cluster_doctor_app")
    assert db[8] == 1, "password stored encrypted"
    assert fernet.decrypt(db[6].encode()).decode() == results_db["app_password"]
    assert kube[1] == "kubernetes"
    assert json.loads(fernet.decrypt(kube[7].encode())) == {
        "in_cluster": False, "kube_config_path": KUBECONFIG_TARGET, "cluster_context": "gpu-prod"}

    # The results schema exists, created by the least-privilege role itself.
    conn = psycopg2.connect(host=results_db["host"], user="cluster_doctor", dbname="cluster_doctor")
    with conn, conn.cursor() as cur:
        cur.execute("SELECT tableowner FROM pg_tables WHERE tablename = 'validation_history'")
        assert cur.fetchone() == ("cluster_doctor",)
        cur.execute("SELECT to_regclass('validation_latest') IS NOT NULL")
        assert cur.fetchone() == (True,)
    conn.close()
    # What tasks log in as: rows yes, schema no.
    app = psycopg2.connect(host=results_db["host"], user="cluster_doctor_app", dbname="cluster_doctor")
    with app, app.cursor() as cur:
        cur.execute("SELECT has_table_privilege('validation_history', 'INSERT'), "
                    "has_table_privilege('validation_claims', 'DELETE'), "
                    "has_database_privilege('cluster_doctor', 'CREATE')")
        assert cur.fetchone() == (True, True, False)
        with pytest.raises(psycopg2.errors.InsufficientPrivilege):
            cur.execute("CREATE TABLE public.x (a int)")
    app.close()

    # SimpleAuthManager's password file: {user: password}, private to the Airflow user.
    passwords = pathlib.Path(env["AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE"])
    assert json.loads(passwords.read_text()) == {"admin": env["AIRFLOW_ADMIN_PASSWORD"]}
    assert passwords.stat().st_mode & 0o077 == 0
    assert not list(passwords.parent.glob("*.tmp"))
