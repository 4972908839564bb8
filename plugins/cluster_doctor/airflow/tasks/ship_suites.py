"""ship_suites and ship_sweep: the suite code in the cluster, one Bundle per planned node (step 4)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cluster_doctor.airflow.tasks._common import log
from cluster_doctor.domain.planning import due
from cluster_doctor.domain.nodes import compress
from cluster_doctor.domain.payloads import Bundle, BundleStep, Discovered, Plan, RunConfig
from cluster_doctor.kube import suite_code
from cluster_doctor.kube.api import CoreV1


def ship_suites(discovered: Discovered, planned: Plan, core_v1: CoreV1) -> list[Bundle]:
    """Make sure this run's suite code is in the cluster (an immutable ConfigMap named after its
    content hash) and hand every planned node's due bundle to the mapped validate task group (the health
    sweep's bundles go to the sweep group: ``sweep_bundles``)."""
    nodes = _planned_nodes(planned, sweep=False)
    if not planned.creates_pods or not nodes:
        return []
    return _bundles(planned, nodes, _ship(discovered, core_v1))


def sweep_bundles(discovered: Discovered, planned: Plan, core_v1: CoreV1, shipped: RunConfig | None) -> list[Bundle]:
    """The health sweep's bundles, for the mapped sweep task group, whose steps take a pool
    slot after every due bundle's. ``shipped``: the suite code ship_suites already shipped (None when it
    shipped nothing: shipped here then)."""
    nodes = _planned_nodes(planned, sweep=True)
    if not planned.creates_pods or not nodes:
        return []
    bundles = _bundles(planned, nodes, shipped or _ship(discovered, core_v1))
    log.info("health sweep: %d free node(s) whose last health check is older than %g h: %s", len(bundles),
             discovered.settings.sweep_interval_hours, compress(nodes))
    return bundles


def _planned_nodes(planned: Plan, *, sweep: bool) -> list[str]:
    """The plan's nodes, in plan order: those of the health sweep (every pair of theirs is), or the others."""
    swept = {p.node_name for p in planned.pairs if p.why == due.SWEEP}
    swept -= {p.node_name for p in planned.pairs if p.why != due.SWEEP}
    return [n for n in planned.nodes() if (n in swept) == sweep]


def shipped(bundles: Sequence[Any] | None) -> RunConfig | None:
    """The suite code ship_suites shipped (from its XCom, a list of Bundles), for the sweep and the peer tests
    to reuse; None when it shipped none (they ship it themselves then)."""
    return Bundle.from_xcom(bundles[0]).run_config if bundles else None


def _ship(discovered: Discovered, core_v1: CoreV1) -> RunConfig:
    shipped = suite_code.ship(core_v1, discovered.settings)
    return RunConfig(settings=discovered.settings, configmap=shipped.configmap, suite_version=shipped.version,
                     suite_files=list(shipped.files))


def _bundles(planned: Plan, nodes: Sequence[str], run_config: RunConfig) -> list[Bundle]:
    bundles = []
    for node in nodes:
        pairs = [p for p in planned.pairs if p.node_name == node]
        bundles.append(Bundle(node_name=node, gpu_count=pairs[0].gpu_count, gpu_model=pairs[0].gpu_model,
                              node_gpus=pairs[0].node_gpus, planned_at=planned.planned_at,
                              reserved=node in planned.reserved,
                              steps=[BundleStep(test_name=p.test_name, why=p.why, probe_seconds=p.probe_seconds)
                                     for p in pairs],
                              run_config=run_config))
    return bundles
