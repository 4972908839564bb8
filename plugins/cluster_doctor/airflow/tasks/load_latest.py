"""load_latest: the latest state of every (free node, enabled test) pair (step 2)."""

from __future__ import annotations

from typing import Any

from cluster_doctor.domain.payloads import Discovered, Latest
from cluster_doctor.store import plan_inputs


def load_latest(discovered: Discovered, store: Any) -> Latest:
    """The latest state of every (free node, enabled test) pair, suspects marked (``store.plan_inputs``)."""
    return plan_inputs.latest(store, [n.name for n in discovered.free], discovered.params.tests)
