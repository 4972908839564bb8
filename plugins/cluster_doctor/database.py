"""Reaching the Postgres results database: connection settings, connect errors, embedded server.

Production: any PostgreSQL >= 13 behind the Airflow Connection ``validation_db`` (so the environment
variable ``AIRFLOW_CONN_VALIDATION_DB`` works, as a URI or Airflow's JSON form). The CLI also takes
``--db-url``. Laptops and the demo get a real embedded PostgreSQL (pgserver), never SQLite.
"""

from __future__ import annotations

import json
import os
import pathlib
import urllib.parse
from collections.abc import Mapping
from typing import Any

import psycopg2

CONN_ENV = "AIRFLOW_CONN_VALIDATION_DB"
# libpq keywords that may ride in a connection's extras; Airflow-only extras are dropped.
_LIBPQ_EXTRAS = {
    "sslmode", "sslrootcert", "sslcert", "sslkey", "sslpassword", "connect_timeout", "application_name",
    "options", "target_session_attrs", "keepalives", "keepalives_idle", "gssencmode", "sslcrl",
    "channel_binding", "krbsrvname", "service",
}
DEFAULT_CONNECT_TIMEOUT = 5


class DatabaseUnavailable(RuntimeError):
    """The results database cannot be reached; the message is one line naming where and why."""


class InvalidDatabaseUrl(ValueError):
    pass


def dsn_from_url(url: str) -> dict[str, Any]:
    """libpq connection keywords from a postgres:// / postgresql:// URL (socket dirs via ?host=)."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("postgres", "postgresql"):
        raise InvalidDatabaseUrl(
            f"database URL must start with postgresql:// (got scheme {parsed.scheme or 'none'!r})"
        )
    try:
        port = parsed.port
    except ValueError:
        raise InvalidDatabaseUrl(f"database URL has an invalid port: {url!r}") from None
    dsn: dict[str, Any] = {
        "host": urllib.parse.unquote(parsed.hostname) if parsed.hostname else None,
        "port": port,
        "user": urllib.parse.unquote(parsed.username) if parsed.username else None,
        "password": urllib.parse.unquote(parsed.password) if parsed.password else None,
        "dbname": urllib.parse.unquote(parsed.path.lstrip("/")) or None,
    }
    for key, values in urllib.parse.parse_qs(parsed.query).items():
        if key in _LIBPQ_EXTRAS or key in ("host", "port", "user", "password", "dbname"):
            dsn[key] = values[-1]
    return {k: v for k, v in dsn.items() if v not in (None, "")}


def dsn_from_airflow_connection(
    *, host: str | None, port: int | None, login: str | None, password: str | None, schema: str | None,
    extra: Mapping[str, Any] | str | None = None,
) -> dict[str, Any]:
    """libpq keywords from the fields of an Airflow Connection (``schema`` is the database)."""
    if isinstance(extra, str):
        extra = json.loads(extra) if extra.strip() else {}
    extra = dict(extra or {})
    # postgresql://user@/db?host=/socket/dir parses into an empty host and a "host" extra
    host = host or extra.get("host")
    port = port or extra.get("port")
    dsn: dict[str, Any] = {"host": host, "port": port, "user": login, "password": password, "dbname": schema}
    for key, value in extra.items():
        if key in _LIBPQ_EXTRAS:
            dsn[key] = value
    return {k: v for k, v in dsn.items() if v not in (None, "")}


def dsn_from_conn_env(value: str) -> dict[str, Any]:
    """Parse an ``AIRFLOW_CONN_*`` value: a URI, or Airflow's JSON connection form."""
    text = value.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidDatabaseUrl(f"{CONN_ENV} is not valid JSON: {exc}") from None
        return dsn_from_airflow_connection(
            host=data.get("host"), port=data.get("port"), login=data.get("login"),
            password=data.get("password"), schema=data.get("schema"), extra=data.get("extra"),
        )
    return dsn_from_url(text)


def _airflow_connection_dsn(conn_id: str) -> dict[str, Any] | None:
    """The connection as stored in Airflow's metadata DB or secrets backend, when Airflow is here."""
    try:
        from airflow.models.connection import Connection

        conn = Connection.get_connection_from_secrets(conn_id)
    except Exception:  # not installed, not configured, or no such connection: fall through
        return None
    return dsn_from_airflow_connection(host=conn.host, port=conn.port, login=conn.login, password=conn.password,
                                       schema=conn.schema, extra=conn.extra_dejson)


def describe(dsn: Mapping[str, Any]) -> str:
    """Where a DSN points, for messages; never includes the password."""
    host = dsn.get("host") or "local socket"
    where = f"{host}:{dsn['port']}" if dsn.get("port") else str(host)
    return f"{where}/{dsn.get('dbname', '')}".rstrip("/")


def connect(dsn: Mapping[str, Any], *, autocommit: bool = False, application_name: str = "cluster-doctor"):
    """Open a psycopg2 connection, turning connect failures into a one-line DatabaseUnavailable."""
    params = {"connect_timeout": DEFAULT_CONNECT_TIMEOUT, "application_name": application_name, **dsn}
    try:
        conn = psycopg2.connect(**params)
    except psycopg2.OperationalError as exc:
        cause = " ".join(str(exc).split()) or exc.__class__.__name__
        # libpq repeats the target in its message; keep the first useful sentence
        cause = cause.split(" Is the server running")[0]
        raise DatabaseUnavailable(f"cannot connect to the results database at {describe(dsn)}: {cause}") from None
    conn.autocommit = autocommit
    return conn


def resolve_cli_dsn(db_url: str | None, env: Mapping[str, str] | None = None) -> tuple[dict[str, Any], str]:
    """(dsn, source) for the CLI: --db-url, then $AIRFLOW_CONN_VALIDATION_DB, then (inside an Airflow
    deployment, $AIRFLOW_HOME set) the Airflow connection validation_db, then the embedded server."""
    env = os.environ if env is None else env
    if db_url:
        return dsn_from_url(db_url), "--db-url"
    if env.get(CONN_ENV):
        return dsn_from_conn_env(env[CONN_ENV]), CONN_ENV
    if env.get("AIRFLOW_HOME"):
        dsn = _airflow_connection_dsn("validation_db")
        if dsn is not None:
            return dsn, "Airflow connection validation_db"
    server = embedded_server()
    return dsn_from_url(server.get_uri()), f"embedded PostgreSQL in {embedded_dir()}"


def embedded_dir(env: Mapping[str, str] | None = None) -> pathlib.Path:
    env = os.environ if env is None else env
    base = env.get("CLUSTER_DOCTOR_HOME") or os.path.join(os.path.expanduser("~"), ".cluster_doctor")
    return pathlib.Path(base) / "pgdata"


def embedded_server(path: str | os.PathLike | None = None, *, cleanup_mode: str | None = None):
    """Start (or reuse) a real embedded PostgreSQL 16 from the pgserver wheel."""
    try:
        import pgserver
    except ImportError:
        raise DatabaseUnavailable(
            "no results database configured (--db-url or AIRFLOW_CONN_VALIDATION_DB) and the embedded "
            "server is not installed: pip install pgserver"
        ) from None
    target = pathlib.Path(path) if path else embedded_dir()
    target.mkdir(parents=True, exist_ok=True)
    try:
        return pgserver.get_server(str(target), cleanup_mode=cleanup_mode)
    except Exception as exc:  # pgserver raises plain exceptions with the initdb/pg_ctl output
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
        raise DatabaseUnavailable(f"cannot start the embedded PostgreSQL in {target}: {first}") from None
