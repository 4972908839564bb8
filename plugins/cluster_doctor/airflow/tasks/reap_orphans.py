"""reap_orphans: the pods of tasks that died hard (OOM, SIGKILL) outlive them; their results are recorded
from the pod and the pods deleted (``cluster_doctor.kube.orphans``), before load_latest reads the latest
results (step 1)."""

from __future__ import annotations

from cluster_doctor.domain.payloads import Discovered
from cluster_doctor.kube import orphans
from cluster_doctor.kube.api import CoreV1
from cluster_doctor.store.history import ResultStore


def reap_orphans(discovered: Discovered, core_v1: CoreV1, store: ResultStore, *,
                 run_state: orphans.RunState) -> orphans.Report:
    """Reap the orphaned validation pods of the run's namespace. Reports and carries on (never raises):
    its problems never block this run's planning. ``run_state``: a DagRun's state by dag and run id (a pod
    of a run still going is left to it)."""
    return orphans.reap(core_v1, store, discovered.settings, run_state=run_state)
