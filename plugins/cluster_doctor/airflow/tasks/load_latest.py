"""load_latest: the latest state of every (free node, enabled test) pair (step 2)."""

from __future__ import annotations

from cluster_doctor.domain.payloads import Discovered, Latest
from cluster_doctor.store import plan_inputs
from cluster_doctor.store.history import ResultStore


def load_latest(discovered: Discovered, store: ResultStore) -> Latest:
    """The latest state of every (free node, enabled test) pair, suspects marked (``store.plan_inputs``)."""
    return plan_inputs.latest(store, [n.name for n in discovered.free], discovered.params.tests)
