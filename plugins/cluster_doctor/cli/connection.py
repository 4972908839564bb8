"""Which results database a CLI command uses: ``--db-url``, then the Airflow connection
``validation_db`` (from ``$AIRFLOW_CONN_VALIDATION_DB`` or, with ``$AIRFLOW_HOME`` set, Airflow's own
store), then the embedded PostgreSQL — and the one line that tells the user which it was.

The embedded server runs only while a command uses it: pgserver stops it when the last process that
started or joined it exits (``database.embedded_server``'s default), SIGTERM included."""

from __future__ import annotations

import importlib.util
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from typing import TextIO

from cluster_doctor.store.database import (
    CONN_ENV,
    CONN_ID,
    Connector,
    DatabaseUnavailable,
    InvalidDatabaseUrl,
    embedded_dir,
    embedded_server,
    url_connector,
)

EMBEDDED = "embedded PostgreSQL"  # how every embedded source starts


def _airflow_available() -> bool:
    try:  # found, not imported: importing Airflow takes seconds
        return importlib.util.find_spec("airflow.providers.postgres") is not None
    except ModuleNotFoundError:
        return False


def for_command(db_url: str | None) -> Connector:
    """The results database of a CLI command: resolve()d (SIGTERM exiting through the exit handlers,
    so an embedded server stops with the command) and announced() on its first connection."""
    connect, source = resolve(db_url, stop_on_sigterm=True)
    return announced(connect, source)


def resolve(db_url: str | None, env: Mapping[str, str] | None = None, *,
            stop_on_sigterm: bool = False) -> tuple[Connector, str]:
    """(connector, source) for the CLI: --db-url, then the Airflow connection validation_db (from
    $AIRFLOW_CONN_VALIDATION_DB or, with $AIRFLOW_HOME set, Airflow's own store), then the embedded
    server, started here and stopped when this process (and any other using it) has exited; with
    ``stop_on_sigterm`` (a command's own process, not a library caller's) SIGTERM counts as exiting."""
    env = os.environ if env is None else env
    if db_url:
        return url_connector(db_url), "--db-url"
    conn_env = env.get(CONN_ENV, "").strip()
    if conn_env and not _airflow_available():
        if conn_env.startswith("{"):
            raise InvalidDatabaseUrl(f"{CONN_ENV} in Airflow's JSON form needs the airflow extra: "
                                     "pip install 'cluster-doctor[airflow]' (or use a postgresql:// URL)")
        return url_connector(conn_env), CONN_ENV
    if conn_env or (env.get("AIRFLOW_HOME") and _airflow_available()):
        try:
            return _hook_connector(CONN_ID), CONN_ENV if conn_env else f"Airflow connection {CONN_ID}"
        except DatabaseUnavailable:
            if conn_env:
                raise
    directory = embedded_dir(env)
    if stop_on_sigterm:
        _stop_on_sigterm()
    server = embedded_server(directory)
    return url_connector(server.get_uri()), f"{EMBEDDED} in {directory}"


def where(connect: Connector, source: str) -> str:
    """Where a command's database is and why that one: ``host:port/db (from --db-url)``."""
    if source.startswith(EMBEDDED) or source in connect.description:  # the hook's names its connection
        return source if source.startswith(EMBEDDED) else connect.description
    return f"{connect.description} (from {'$' + source if source == CONN_ENV else source})"


def announced(connect: Connector, source: str, stream: Callable[[], TextIO] = lambda: sys.stderr) -> Connector:
    """The connector a command uses: its first successful connection prints one line on stderr,
    ``cluster-doctor: results database: <where> (from <source>)``; a failure to connect is one
    error line naming the same place."""
    place = where(connect, source)
    line = f"cluster-doctor: results database: {place}"
    if source.startswith(EMBEDDED):
        line += (f" (no --db-url, ${CONN_ENV} or Airflow connection {CONN_ID}; "
                 "it runs only while a command uses it)")
    return connect.announcing(place, lambda: print(line, file=stream()))


def _stop_on_sigterm() -> None:
    """SIGTERM (kill, systemd, a container stop) exits through Python's exit handlers, where pgserver
    stops the embedded server; the default action would leave it running. Only the main thread may
    set a handler, and a handler someone else installed stays."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))


def _hook_connector(conn_id: str) -> Connector:
    from cluster_doctor.airflow.runtime import hook_connector

    return hook_connector(conn_id)
