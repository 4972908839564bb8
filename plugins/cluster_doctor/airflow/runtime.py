"""The few places Cluster Doctor touches Airflow's runtime: settings from the Variable, connections, a
task's handle on its run (``TaskRun``), and waiting for a service a task reads that is not up yet (``reach``).

Imported only from Airflow-facing modules (operator, tasks, plugin); the scheduling core stays pure.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable, Mapping
from functools import cached_property
from typing import Any, TypeVar

from cluster_doctor.domain.config import VARIABLE_NAME, Settings
from cluster_doctor.domain.errors import one_line
from cluster_doctor.domain.payloads import Discovered, Plan
from cluster_doctor.kube.api import CoreV1
from cluster_doctor.store.database import (
    CONN_ID,
    DEFAULT_CONNECT_TIMEOUT,
    Connection,
    Connector,
    DatabaseUnavailable,
    InvalidDatabaseUrl,
    describe,
    one_line_cause,
)
from cluster_doctor.store.history import ResultStore, RetryPolicy

log = logging.getLogger(__name__)
T = TypeVar("T")
EXECUTION_API = "the Airflow API server (execution API)"


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
    return ResultStore(hook_connector(conn_id), retry=retry)


def core_v1(conn_id: str) -> CoreV1:
    """The kubernetes CoreV1Api of the provider's hook for ``conn_id``, every call retried on
    transient failures (``cluster_doctor.kube.retry``)."""
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    from cluster_doctor.kube import retry

    return retry.core_v1(KubernetesHook(conn_id=conn_id).api_client)


def dagrun_ended(ti: Any) -> Callable[[str, str], bool]:
    """Whether a DagRun has ended (success or failed), asked through the Task SDK: tasks cannot read
    the metadata DB. Lets prioritize take over the claims of a run that ended without releasing them."""

    def ended(dag_id: str, run_id: str) -> bool:
        state = ti.get_dagrun_state(dag_id=dag_id, run_id=run_id)
        return getattr(state, "value", state) in ("success", "failed")

    return ended


@dataclasses.dataclass(frozen=True)
class TaskRun:
    """One task's handle on its DagRun, built once per task (``TaskRun.current()``): its context, the XComs of
    tasks further up, and the results store and Kubernetes client of the run's settings. The store and the
    client are opened on first use, so a task that needs neither opens neither.

    The settings are ``given`` (discover loads them; a mapped task has them in its payload) or, by default,
    those discover validated for the run; ``discovered``: discover's XCom when the task takes it as an
    argument (an edge of the graph), else it is pulled by id."""

    context: Mapping[str, Any]
    given: Settings | None = None
    discovered_xcom: Any = None

    @classmethod
    def current(cls, given: Settings | None = None, *, discovered: Any = None) -> TaskRun:
        from airflow.sdk import get_current_context

        return cls(get_current_context(), given, discovered)

    @property
    def ti(self) -> Any:
        return self.context["ti"]

    @property
    def dag_id(self) -> str:
        return self.ti.dag_id

    @property
    def run_id(self) -> str:
        return self.context["run_id"]

    def pulled(self, task_ids: str | list[str], **kwargs: Any) -> Any:
        """The XCom of a task further up by id (None when it did not succeed); ``kwargs``: ``xcom_pull``'s."""
        return self.ti.xcom_pull(task_ids=task_ids, **kwargs)

    @cached_property
    def discovered(self) -> Discovered | None:
        """What discover found, None when it did not succeed."""
        data = self.discovered_xcom if self.discovered_xcom is not None else self.pulled("discover")
        return None if data is None else Discovered.from_xcom(data)

    @property
    def found(self) -> Discovered:
        """What discover found; a task that runs only after discover succeeded reads this."""
        if self.discovered is None:
            raise RuntimeError("discover left no result: this task runs only after discover succeeded")
        return self.discovered

    def found_or_skip(self, why: str) -> Discovered:
        """What discover found, or this task skips itself saying ``why``."""
        if self.discovered is None:
            from airflow.sdk.exceptions import AirflowSkipException

            raise AirflowSkipException(why)
        return self.discovered

    def planned_or_skip(self, what: str) -> tuple[Discovered, Plan]:
        """What discover found and prioritize planned, or this task skips itself: discovery or planning failed,
        so there is ``what`` (nothing to record, no run to summarize)."""
        planned = self.pulled("prioritize")
        if self.discovered is None or planned is None:
            from airflow.sdk.exceptions import AirflowSkipException

            raise AirflowSkipException(f"discovery or planning failed: {what}")
        return self.discovered, Plan.from_xcom(planned)

    @cached_property
    def settings(self) -> Settings:
        return self.given if self.given is not None else self.found.settings

    @cached_property
    def store(self) -> ResultStore:
        return results_store(self.settings.validation_db_conn_id)

    @cached_property
    def core_v1(self) -> CoreV1:
        return core_v1(self.settings.kubernetes_conn_id)

    @property
    def run_ended(self) -> Callable[[str, str], bool]:
        return dagrun_ended(self.ti)


def hook_connector(conn_id: str = CONN_ID) -> Connector:
    """The Postgres provider's hook for an Airflow connection (metadata DB, env or secrets backend)."""
    from airflow.providers.postgres.hooks.postgres import PostgresHook

    try:
        conn = PostgresHook.get_connection(conn_id)
    except Exception as exc:  # AirflowNotFoundException and friends: one line, naming the connection
        raise DatabaseUnavailable(f"Airflow connection {conn_id!r} is not usable: {one_line_cause(exc)}") from None
    if conn.conn_type not in (None, "", "postgres", "postgresql"):
        raise InvalidDatabaseUrl(f"connection {conn_id!r} has type {conn.conn_type!r}; the results database must be postgres")
    where = describe({"host": conn.host, "port": conn.port, "dbname": conn.schema})

    def open_connection(application_name: str) -> Connection:
        # libpq reads these when the connection's extras do not set them: a dead database must
        # fail the connect within seconds, not hang a task until its execution_timeout.
        os.environ.setdefault("PGCONNECT_TIMEOUT", str(DEFAULT_CONNECT_TIMEOUT))
        os.environ.setdefault("PGAPPNAME", application_name)
        return PostgresHook(postgres_conn_id=conn_id).get_conn()

    return Connector(open_connection, f"{where} (Airflow connection {conn_id})")


# ---------------------------------------------------------------------------- services not up yet
class Unreachable(RuntimeError):
    """A service a task reads did not answer within the task's budget; ``str()`` is one line naming it,
    how long the task waited and the last cause."""


def service_not_up(exc: BaseException) -> str | None:
    """The service an error says is not answering (yet), None when the error is not of that kind (a refusal,
    a bug): a lost or refused connection, a timeout, a 5xx, the results DB unreachable."""
    from cluster_doctor.kube import retry as kube_retry
    from kubernetes.client.exceptions import ApiException

    if isinstance(exc, DatabaseUnavailable):
        return "the results DB"
    if isinstance(exc, ApiException):  # GaveUp after kube.retry's own tries included
        return "the Kubernetes API" if exc.status is None or exc.status == 429 or exc.status >= 500 else None
    if isinstance(exc, kube_retry.CONNECTION_ERRORS):
        return "the Kubernetes API"
    try:
        import httpx
        from airflow.sdk.exceptions import AirflowRuntimeError, ErrorType
    except ImportError:  # outside Airflow (the CLI): none of these can be raised
        return None
    if isinstance(exc, httpx.TransportError):
        return EXECUTION_API
    if isinstance(exc, AirflowRuntimeError) and exc.error.error == ErrorType.API_SERVER_ERROR:
        status = (exc.error.detail or {}).get("status_code")
        return EXECUTION_API if status is None or status >= 500 else None
    return None


def reach(call: Callable[[], T], *, deadline: float, clock: Callable[[], float] = time.monotonic,
          sleep: Callable[[float], None] = time.sleep) -> T:
    """``call()``, tried again while it fails because a service it reads is not up yet (``service_not_up``;
    a stack starting, an api-server restarting), backing off 1, 2, 4 ... 15 s, until the ``deadline``
    (``clock()`` seconds); then ``Unreachable``. Each wait is one WARNING line; any other error is raised
    at once."""
    started, delay, tries = clock(), 1.0, 0
    while True:
        tries += 1
        try:
            return call()
        except Exception as exc:
            service = service_not_up(exc)
            if service is None:
                raise
            cause, left = one_line(exc, 300), deadline - clock()
            if left <= 0:
                raise Unreachable(f"{service} did not answer within {clock() - started:.0f} s ({tries} tries): "
                                  f"{cause}") from None
            wait = min(delay, left)
            log.warning("%s is not answering yet (%s): trying again in %.0f s, %.0f s left", service, cause, wait,
                        left)
            sleep(wait)
            delay = min(delay * 2, 15.0)
