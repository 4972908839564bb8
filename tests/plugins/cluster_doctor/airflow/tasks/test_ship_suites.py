"""ship_suites and sweep_bundles hand the mapped task groups one bundle per planned node, each node's pairs
in plan order, and a dry run hands them none: no ConfigMap is shipped and no pod can be created."""

from __future__ import annotations

import datetime as dt

import pytest
from cluster_doctor.airflow import tasks
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.payloads import Discovered, Plan, PlannedPair
from cluster_doctor.domain.planning import due


@pytest.fixture
def now():
    return dt.datetime.now(dt.UTC)


class Untouchable:
    """A Kubernetes client that fails the test on any call: a dry run must not reach the cluster."""

    def __getattr__(self, name):
        raise AssertionError(f"a dry run called the Kubernetes API: {name}")


def _found(now, free):
    return Discovered.of(settings=Settings(tests=["gpu_health", "dl_unit"]), started_at=now,
                         params={"tests": ["gpu_health", "dl_unit"], "max_pairs": 16, "dry_run": True},
                         free=[(n, 8, "NVIDIA H200") for n in free], ineligible=[])


def _plan(now, *, dry_run):
    pairs = [PlannedPair(node_name=node, test_name=test, why=why, gpu_count=8, gpu_model="NVIDIA H200")
             for node, test, why in (("gpu-002", "gpu_health", due.NEVER), ("gpu-002", "dl_unit", due.NEVER),
                                     ("gpu-001", "gpu_health", due.SWEEP))]
    return Plan(planned_at=now, dry_run=dry_run, pairs=pairs)


def test_a_dry_run_ships_nothing_and_maps_no_bundle(now):
    found, plan = _found(now, ["gpu-001", "gpu-002"]), _plan(now, dry_run=True)
    assert plan.nodes() == ["gpu-002", "gpu-001"]  # it did plan both nodes
    assert tasks.ship_suites(found, plan, Untouchable()) == []
    assert tasks.sweep_bundles(found, plan, Untouchable(), None) == []
