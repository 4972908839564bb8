"""suspect_signals: the fast path — every few minutes, read what the cluster says about its
GPU nodes and start a validation of new suspects without waiting for the hour.

Thin on purpose: the behaviour lives in ``cluster_doctor.airflow.tasks.signals``.
"""

from __future__ import annotations

import datetime as dt

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import DAG, get_current_context, task
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.fast_path import TARGET_DAG

SETTINGS = Settings.load()
# Parse time (CLUSTER_DOCTOR_FAST_PATH_MINUTES): 0 turns the schedule off (the DAG runs only when triggered).
EVERY = dt.timedelta(minutes=SETTINGS.fast_path_minutes) if SETTINGS.fast_path_minutes else None

DOC_MD = f"""
### The fast path: suspects validated in minutes, not at the next hour

Every {SETTINGS.fast_path_minutes:g} minute(s) (setting `fast_path_minutes`) **read_signals** discovers the GPU
nodes (two lists from the API server's watch cache), records the inventory and reads the signals the cluster
already has — allocatable GPUs below capacity, node conditions of node-problem-detector / NVSentinel, node
events, failed user pods, the DCGM exporter's metrics in Prometheus, new / rebooted / uncordoned nodes
(settings `signal_*`, `prometheus_url`). A signal makes a node **suspect**, never failed. A suspect, busy or
free, gets the reservation taint at once (setting `reservation`; its limit and breaker apply, never on a
quarantined node), so no new user job lands on it before its validation even while no run can be triggered;
the run that validates it removes the taint. For free suspects no earlier tick took, it
**triggers** a `{TARGET_DAG}` run with `node_range` set to them — only when no run of `{TARGET_DAG}` is queued
or running and the scheduled one is not due within `fast_path_quiet_minutes` (either plans the suspects
first anyway), so the two never starve each other. **mark_triggered** records which run took them.
Pausing `{TARGET_DAG}` stops this DAG's taints and runs too. A service it reads that is not up yet (the
API server, the Kubernetes API, the results DB) is waited for, up to one interval; if it never answers,
**read_signals** fails on one line naming it, and the next tick tries again.
"""

with DAG(
    dag_id="suspect_signals",
    description="Every few minutes: read the cluster's signals, validate new suspect nodes at once",
    schedule=EVERY,
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    max_active_runs=1,
    dagrun_timeout=dt.timedelta(minutes=10),
    is_paused_upon_creation=False,  # it follows continuous_validation's pause (read_signals checks it)
    render_template_as_native_obj=True,  # the trigger's conf as a dict
    tags=["cluster-doctor", "gpu", "signals"],
    doc_md=DOC_MD,
    default_args={"retries": 0, "owner": "cluster-doctor"},
) as dag:

    # Skips what follows when there is nothing to trigger (the decision says why in its log).
    @task.short_circuit(multiple_outputs=False)
    def read_signals():
        from cluster_doctor.airflow import runtime
        from cluster_doctor.airflow.tasks import signals

        decision = signals.fast_path_tick(get_current_context()["ti"], runtime.load_settings())
        return decision.to_xcom() if decision.nodes else False

    decided = read_signals()
    trigger = TriggerDagRunOperator(
        task_id="trigger",
        trigger_dag_id=TARGET_DAG,
        trigger_run_id="{{ ti.xcom_pull(task_ids='read_signals')['run_id'] }}",
        conf="{{ ti.xcom_pull(task_ids='read_signals')['conf'] }}",
        skip_when_already_exists=True,
        wait_for_completion=False,
    )

    @task
    def mark_triggered() -> str:
        from cluster_doctor.airflow import runtime
        from cluster_doctor.airflow.tasks import signals

        run = runtime.TaskRun.current(runtime.load_settings())
        return signals.triggered(run.store, run.pulled("read_signals"))

    decided >> trigger >> mark_triggered()
