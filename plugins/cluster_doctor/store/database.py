"""Reaching the Postgres results database: connection factories, connect errors, embedded server.

Everything that reads or writes results takes a ``Connector``: a callable that opens a new psycopg
(3) connection. Inside Airflow it is the Postgres provider's ``PostgresHook`` for the connection
``validation_db`` (``cluster_doctor.airflow.runtime.hook_connector``: ``AIRFLOW_CONN_VALIDATION_DB``
works as a URI or in Airflow's JSON form, and a secrets backend works too). The CLI takes
``--db-url``, the environment, or a real embedded PostgreSQL (pgserver) for laptops and the demo —
never SQLite (``cluster_doctor.cli.connection``). Parsing of URLs and keywords is left
to libpq (``psycopg.conninfo``).
"""

from __future__ import annotations

import atexit
import os
import pathlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import psycopg
from psycopg import conninfo

from cluster_doctor.domain.errors import one_line
from cluster_doctor.store import diagnosis

CONN_ID = "validation_db"
CONN_ENV = "AIRFLOW_CONN_VALIDATION_DB"
DEFAULT_CONNECT_TIMEOUT = 5
APPLICATION_NAME = "cluster-doctor"

# The driver's names the layers above need (a connection's type, the errors a command reports), so that
# psycopg is imported in store/ only (the import contracts in pyproject.toml).
Connection = psycopg.Connection
Error = psycopg.Error  # anything the database or the driver raised
DataError = psycopg.DataError  # a value the database refused (out of range, invalid text)
IntegrityError = psycopg.IntegrityError  # a constraint the database enforced


class DatabaseUnavailable(RuntimeError):
    """The results database cannot be reached; the message is one line naming where and why."""


class InvalidDatabaseUrl(ValueError):
    pass


def one_line_cause(exc: BaseException) -> str:
    """The first useful sentence of a driver error (libpq repeats the target and adds hints)."""
    cause = one_line(exc, 10_000)
    return cause.split(" Is the server running")[0]


def describe(params: Mapping[str, Any]) -> str:
    """Where libpq keywords point, for messages; never includes the password."""
    host = params.get("host") or "local socket"
    where = f"{host}:{params['port']}" if params.get("port") else str(host)
    return f"{where}/{params.get('dbname') or ''}".rstrip("/")


def _prepare(conn: psycopg.Connection, autocommit: bool) -> psycopg.Connection:
    # Client-side binding: queries pass parameters where the server cannot infer a type
    # (``%s IS NULL``, ``SET ... = %s``); the server still never sees unescaped input.
    conn.cursor_factory = psycopg.ClientCursor
    conn.autocommit = autocommit
    return conn


class Connector:
    """A connection factory: ``connector()`` opens a new connection, ``str(connector)`` says where."""

    def __init__(self, open_connection: Callable[[str], psycopg.Connection], description: str,
                 on_first_connect: Callable[[], None] | None = None,
                 likely_cause: Callable[[str], str | None] | None = None):
        self._open = open_connection
        self.description = description
        self._on_first_connect = on_first_connect
        self._likely_cause = likely_cause  # from the driver's message: what the user can act on

    def __call__(self, *, autocommit: bool = False, application_name: str = APPLICATION_NAME) -> psycopg.Connection:
        try:
            conn = self._open(application_name)
        except psycopg.OperationalError as exc:
            cause = one_line_cause(exc)
            hint = self._likely_cause(cause) if self._likely_cause else None
            raise DatabaseUnavailable(
                f"cannot connect to the results database at {self.description}: {cause}"
                + (f"; likely cause: {hint}" if hint else "")
            ) from None
        said, self._on_first_connect = self._on_first_connect, None
        if said is not None:
            said()
        return _prepare(conn, autocommit)

    def announcing(self, description: str, on_first_connect: Callable[[], None]) -> Connector:
        """The same database under another description, calling ``on_first_connect`` once, after the
        first connection succeeds (a command says which database it used; a failure says it instead)."""
        return Connector(self._open, description, on_first_connect, self._likely_cause)

    def __str__(self) -> str:
        return self.description

    def __repr__(self) -> str:
        return f"Connector({self.description})"


def libpq_params(url: str) -> dict[str, Any]:
    """libpq keywords of a postgresql:// URL, parsed by libpq itself; a clear error otherwise."""
    if not url.startswith(("postgresql://", "postgres://")):
        scheme = url.split("://", 1)[0] if "://" in url else "none"
        raise InvalidDatabaseUrl(f"database URL must start with postgresql:// (got scheme {scheme!r})")
    try:
        return conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise InvalidDatabaseUrl(f"database URL is invalid: {one_line_cause(exc)}") from None


def params_connector(params: Mapping[str, Any]) -> Connector:
    """A connector for libpq keywords (host, port, dbname, user, password, sslmode, ...)."""
    params = dict(params)

    def open_connection(application_name: str) -> psycopg.Connection:
        return psycopg.connect(**{"connect_timeout": DEFAULT_CONNECT_TIMEOUT,
                                  "application_name": application_name, **params})

    return Connector(open_connection, describe(params), likely_cause=lambda cause: diagnosis.connect_cause(cause, params))


def url_connector(url: str) -> Connector:
    return params_connector(libpq_params(url))


def connector(source: Connector | str | Mapping[str, Any]) -> Connector:
    """A Connector from a Connector, a postgresql:// URL or libpq keywords."""
    if isinstance(source, Connector):
        return source
    if isinstance(source, str):
        return url_connector(source)
    return params_connector(source)


def embedded_dir(env: Mapping[str, str] | None = None) -> pathlib.Path:
    env = os.environ if env is None else env
    base = env.get("CLUSTER_DOCTOR_HOME") or os.path.join(os.path.expanduser("~"), ".cluster_doctor")
    return pathlib.Path(base).expanduser().absolute() / "pgdata"  # absolute: messages name it unambiguously


def embedded_server(path: str | os.PathLike | None = None, *, cleanup_mode: str | None = "stop"):
    """Start (or reuse) a real embedded PostgreSQL 16 from the pgserver wheel.

    ``cleanup_mode`` is pgserver's: "stop" (the default) stops the server when the last process using
    it exits, "delete" also removes its data directory, None leaves it running (``make up`` only, which
    has its own stop command). Call ``server.cleanup()`` before removing a directory that holds the
    data: pgserver's own exit handler runs after every ``with`` block has ended."""
    with warnings.catch_warnings():
        # platformdirs warns at import when XDG_RUNTIME_DIR is unset (containers, su, cron), then
        # falls back to /tmp/runtime-<uid> for pgserver's lock file: noise for whoever runs a command
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
        try:
            import pgserver
        except ImportError:
            raise DatabaseUnavailable(
                "no results database configured (--db-url or AIRFLOW_CONN_VALIDATION_DB) and the embedded "
                "server is not installed: pip install pgserver"
            ) from None
    target = pathlib.Path(path) if path else embedded_dir()
    try:
        target.mkdir(parents=True, exist_ok=True)
        with pgserver.PostgresServer._lock:  # the inter-process lock pgserver guards that list with
            _forget_dead_handles(target)
        return pgserver.get_server(str(target), cleanup_mode=cleanup_mode)
    except Exception as exc:  # pgserver raises plain exceptions with the initdb/pg_ctl output
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
        raise DatabaseUnavailable(f"cannot start the embedded PostgreSQL in {target}: {first}") from None


def stop_embedded(server) -> None:
    """Stop an embedded server now (and, in "delete" mode, remove its data), and drop pgserver's exit
    handler for it: run again at exit it only logs an empty second cleanup, into whatever stream
    logging had — a closed one under pytest."""
    server.cleanup()
    atexit.unregister(server._cleanup)


def _forget_dead_handles(pgdata: pathlib.Path) -> None:
    """Drop the processes that died without pgserver's exit handler (SIGKILL, a crash) from its list of
    the server's users: pgserver stops a server only when its last listed user exits, so one dead
    entry would keep the server running after every later command."""
    import json

    import psutil  # a dependency of pgserver

    handles = pgdata / ".handle_pids.json"  # pgserver's DiskList of the processes holding the server
    try:
        pids = json.loads(handles.read_text())
    except (OSError, ValueError):
        return
    alive = [pid for pid in pids if isinstance(pid, int) and psutil.pid_exists(pid)]
    if alive != pids:
        handles.write_text(json.dumps(alive))
