"""Why the results database a command looked at cannot serve it, in words: the database it looked at and
the likely cause, for the errors of a failed connection and of a missing or old schema."""

from __future__ import annotations

import pathlib
from collections.abc import Mapping
from typing import Any

import psycopg

from cluster_doctor.store import migrations

# a server's other databases looked into for a results schema, at most (an error path, never a scan)
MAX_OTHER_DATABASES = 8
OTHER_CONNECT_TIMEOUT_S = 3


def connect_cause(message: str, params: Mapping[str, Any]) -> str | None:
    """The likely cause of a failed connection, from libpq's message and where it pointed; None when
    the message says it plainly enough."""
    host = str(params.get("host") or "")
    text = message.lower()
    if host.startswith("/") and "no such file or directory" in text:
        if (pathlib.Path(host) / "PG_VERSION").exists():
            return (f"no PostgreSQL server is running on the data directory {host} (its socket is not there); "
                    "start it (a `make up` stack's: `make up`)")
        return f"no PostgreSQL server has its socket in {host}"
    if "connection refused" in text:
        return f"no PostgreSQL server listens on {host or 'localhost'}:{params.get('port') or 5432}"
    if "does not exist" in text and "database" in text:
        return f"the server runs, but has no database {params.get('dbname')!r}"
    if "password authentication failed" in text or "no password supplied" in text:
        return f"the server refused user {params.get('user')!r} (wrong or missing password)"
    if "timeout expired" in text:
        return "the host did not answer in time: down, unreachable, or a firewall in between"
    return None


def schema_problem(conn: psycopg.Connection, where: str, have: int, wanted: int) -> str:
    """The error of a database whose results schema is missing (``have`` 0) or older than ``wanted``:
    which database, and the likely cause with what to do."""
    name = conn.info.dbname
    if have:
        return (f"the results schema in database {name!r} at {where} is version {have}, this code needs "
                f"{wanted}: run `cluster-doctor db upgrade`")
    found = _other_results_databases(conn)
    if len(found) == 1:
        other, version = found[0]
        return (f"no results schema in database {name!r} at {where}; the same server's database {other!r} "
                f"holds one (version {version}){_made_by_make_up(other)}: use --db-url '{_url(conn, other)}' "
                "while that server runs")
    others = ""
    if found:
        names = ", ".join(repr(n) for n, _ in found[:3]) + (" ..." if len(found) > 3 else "")
        others = f"; the same server's databases {names} hold one"
    return (f"no results schema in database {name!r} at {where} (it holds no Cluster Doctor results): "
            "if this is the results database you meant, `cluster-doctor db upgrade` creates the schema; "
            f"otherwise pass --db-url{others}")


def _made_by_make_up(dbname: str) -> str:
    return (" — where `make up` keeps its results (after `make down`, `make up` starts its server again)"
            if dbname == "cluster_doctor" else "")


def _url(conn: psycopg.Connection, dbname: str) -> str:
    info = conn.info
    if (info.host or "").startswith("/"):
        return f"postgresql://{info.user}@/{dbname}?host={info.host}"
    return f"postgresql://{info.user}@{info.host}:{info.port}/{dbname}"


def _other_results_databases(conn: psycopg.Connection) -> list[tuple[str, int]]:
    """(database, schema version) of the server's other databases that hold a results schema."""
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT datname FROM pg_database WHERE datallowconn AND NOT datistemplate "
                        "AND datname <> current_database() ORDER BY datname LIMIT %s", (MAX_OTHER_DATABASES,))
            names = [row[0] for row in cur.fetchall()]
    except psycopg.Error:
        return []
    params = conn.info.get_parameters()
    found = []
    for name in names:
        try:
            with psycopg.connect(**{**params, "dbname": name, "password": conn.info.password,
                                    "connect_timeout": OTHER_CONNECT_TIMEOUT_S}, autocommit=True) as other:
                version = migrations.current_version(other)
        except psycopg.Error:
            continue  # not ours to read: not the one
        if version:
            found.append((name, version))
    return found
