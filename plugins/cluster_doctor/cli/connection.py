"""Which results database a CLI command uses: ``--db-url``, then the Airflow connection
``validation_db`` (from ``$AIRFLOW_CONN_VALIDATION_DB`` or, with ``$AIRFLOW_HOME`` set, Airflow's own
store), then the embedded PostgreSQL."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping

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


def _airflow_available() -> bool:
    try:  # found, not imported: importing Airflow takes seconds
        return importlib.util.find_spec("airflow.providers.postgres") is not None
    except ModuleNotFoundError:
        return False


def resolve(db_url: str | None, env: Mapping[str, str] | None = None) -> tuple[Connector, str]:
    """(connector, source) for the CLI: --db-url, then the Airflow connection validation_db (from
    $AIRFLOW_CONN_VALIDATION_DB or, with $AIRFLOW_HOME set, Airflow's own store), then the embedded
    server."""
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
    server = embedded_server()
    return url_connector(server.get_uri()), f"embedded PostgreSQL in {embedded_dir()}"




def _hook_connector(conn_id: str) -> Connector:
    from cluster_doctor.airflow.runtime import hook_connector

    return hook_connector(conn_id)
