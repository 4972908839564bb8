"""What each task of the DAGs does: one module per DAG stage, named for it. continuous_validation's in graph
order: discover → reap_orphans → load_latest, reserve → prioritize → ship_suites → the validate and sweep
groups (finish_node), the peers group (``peers``: plan, test, finish) → record → summarize → verdict; beside
them after record, quarantine → handoff, node_conditions, accept (``signals.accept_after_run``). The signals
and the fast path (the suspect_signals DAG) are ``signals``; the daily_fleet_report DAG's task is
``daily_report``. The DAG files only wire these together; a task gets its context, its store and its
Kubernetes client from one handle (``cluster_doctor.airflow.runtime.TaskRun``).

Every function takes and returns the typed payloads of ``cluster_doctor.domain.payloads``; the DAG
file turns them into XComs and back (``to_xcom`` / ``from_xcom``). Each stage's function is re-exported
here under the stage's name (``tasks.discover(...)``), so the package attribute is the function; a
stage's helpers are imported from its module (``from cluster_doctor.airflow.tasks.prioritize import ...``).
Import nothing from here outside the DAG files (an import contract holds it).
"""

from cluster_doctor.airflow.tasks._common import WAIT_NOTE_S, log, waited_for, waited_line
from cluster_doctor.airflow.tasks.discover import discover
from cluster_doctor.airflow.tasks.reap_orphans import reap_orphans
from cluster_doctor.airflow.tasks.load_latest import load_latest
from cluster_doctor.airflow.tasks.reserve import reserve
from cluster_doctor.airflow.tasks.prioritize import prioritize
from cluster_doctor.airflow.tasks.ship_suites import ship_suites, shipped, sweep_bundles
from cluster_doctor.airflow.tasks.finish_node import finish_node
from cluster_doctor.airflow.tasks.record import record, reported_attempts
from cluster_doctor.airflow.tasks.summarize import recorded_or_fail, spool_state, summarize, unrecorded
from cluster_doctor.airflow.tasks.verdict import verdict
from cluster_doctor.airflow.tasks.quarantine import quarantine
from cluster_doctor.airflow.tasks.handoff import handoff
from cluster_doctor.airflow.tasks.node_conditions import node_conditions
from cluster_doctor.airflow.tasks import daily_report, peers, signals

__all__ = ["WAIT_NOTE_S", "daily_report", "discover", "finish_node", "handoff", "load_latest", "log",
           "node_conditions", "peers", "prioritize", "quarantine", "reap_orphans", "record", "recorded_or_fail",
           "reported_attempts", "reserve", "shipped", "ship_suites", "signals", "spool_state", "summarize",
           "sweep_bundles", "unrecorded", "verdict", "waited_for", "waited_line"]
