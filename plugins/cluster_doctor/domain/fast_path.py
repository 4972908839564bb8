"""When a signal starts a run of its own (pure): the fast path's decision, which the DAG ``suspect_signals``
(``airflow.tasks.signals.tick``) and the simulator take with the same function.

Every few minutes the fast path reads the signals; for the suspects no fast-path run took yet that are free
now it triggers a ``continuous_validation`` run limited to them, unless that DAG is paused, a run of it is
queued or running (the run going on, or the one after it, plans the suspects first: no queue of runs builds
up to hold the hourly run back), or the scheduled run is due within the quiet window (it takes them first
itself, so a run started just before the hour never holds that run back for long).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable
from typing import Any

from cluster_doctor.domain.nodes import compress

TARGET_DAG = "continuous_validation"
RUN_ID_PREFIX = "suspects__"  # the fast path's runs of continuous_validation: suspects__<UTC time>


@dataclasses.dataclass(frozen=True)
class Decision:
    """One fast-path tick: the free suspects it triggers a run for (``run_id``/``conf``), or why none."""

    nodes: list[str]
    run_id: str | None = None
    why_not: str | None = None
    reserved: list[str] = dataclasses.field(default_factory=list)

    @property
    def conf(self) -> dict[str, Any]:
        return {"node_range": compress(self.nodes)} if self.nodes else {}

    def to_xcom(self) -> dict[str, Any]:
        return {"nodes": self.nodes, "run_id": self.run_id, "conf": self.conf, "why_not": self.why_not,
                "reserved": self.reserved}


def decide(fresh: Iterable[str], free: Iterable[str], *, paused: bool, active_runs: int,
           next_run: dt.datetime | None, now: dt.datetime, quiet: dt.timedelta) -> Decision:
    """Whether to trigger a ``continuous_validation`` run for the suspects no fast-path run took yet
    (``fresh``) that are free now; see the module docstring for the rules."""
    nodes = sorted(set(fresh) & set(free))
    if not nodes:
        return Decision([], why_not="no new free suspect")
    if paused:
        return Decision([], why_not=f"{TARGET_DAG} is paused")
    if active_runs:
        return Decision([], why_not=f"{active_runs} run(s) of {TARGET_DAG} queued or running: it, or the next "
                                    "one, plans the suspects first")
    if next_run is not None and next_run - now <= quiet:
        return Decision([], why_not=f"the scheduled run at {next_run.isoformat(timespec='minutes')} plans the "
                                    "suspects first")
    return Decision(nodes, run_id=f"{RUN_ID_PREFIX}{now:%Y-%m-%dT%H:%M:%S}")
