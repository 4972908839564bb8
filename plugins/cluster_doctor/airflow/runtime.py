"""The few places Cluster Doctor touches Airflow's runtime: settings from the Variable, connections.

Imported only from Airflow-facing modules (operator, tasks, plugin); the scheduling core stays pure.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from cluster_doctor.store import database
from cluster_doctor.domain.config import VARIABLE_NAME, Settings
from cluster_doctor.store.history import ResultStore, RetryPolicy

log = logging.getLogger(__name__)


def load_settings(overrides: Mapping[str, Any] | None = None) -> Settings:
    """Defaults < CLUSTER_DOCTOR_* environment < Airflow Variable cluster_doctor_settings < overrides."""
    from airflow.sdk import Variable

    try:
        variable = Variable.get(VARIABLE_NAME, default=None)
    except Exception as exc:  # no API server (CLI use) or no such Variable: env and defaults apply
        log.debug("Variable %s not readable: %s", VARIABLE_NAME, exc)
        variable = None
    return Settings.load(variable=variable, overrides=overrides)


def results_store(conn_id: str, retry: RetryPolicy = RetryPolicy()) -> ResultStore:
    """The results store behind the Postgres provider's hook for the Airflow connection ``conn_id``."""
    return ResultStore(database.hook_connector(conn_id), retry=retry)


def core_v1(conn_id: str) -> Any:
    """The kubernetes CoreV1Api of the provider's hook for ``conn_id``."""
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    return KubernetesHook(conn_id=conn_id).core_v1_client


def dagrun_ended(ti: Any) -> Callable[[str, str], bool]:
    """Whether a DagRun has ended (success or failed), asked through the Task SDK: tasks cannot read
    the metadata DB. Lets prioritize take over the claims of a run that ended without releasing them."""

    def ended(dag_id: str, run_id: str) -> bool:
        state = ti.get_dagrun_state(dag_id=dag_id, run_id=run_id)
        return getattr(state, "value", state) in ("success", "failed")

    return ended
