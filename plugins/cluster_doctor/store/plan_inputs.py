"""What the planner (``domain.planning.plan``) reads from the results DB, for the DAG and ``cluster-doctor plan`` alike.

No SQL of its own: it puts together the store's reads the way every planner caller needs them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cluster_doctor.domain.payloads import Latest, PairRow
from cluster_doctor.store import reservations, verdicts
from cluster_doctor.store.history import ResultStore


def latest(store: ResultStore, nodes: Sequence[str], tests: Sequence[str]) -> Latest:
    """The latest state of every (node, test) pair of ``nodes`` × ``tests`` that has one. A passing pair
    with a straggler/drift verdict on its latest executed attempt reads as failing, so it goes through
    the failed-retest path: the retest confirms or clears the verdict (``verdicts.mark_suspects``)."""
    if not nodes:
        return Latest()
    states = store.pair_states(nodes, tests)
    rows = [[node, test, s.status, s.finished_at, s.last_attempt_at, s.last_attempt_status]
            for (node, test), s in sorted(states.items())]
    return Latest(rows=[PairRow(*row) for row in verdicts.mark_suspects(store.connect, rows)])


def reserved(connect: Any) -> list[str]:
    """The nodes our reservation taint holds now (open rows of ``node_reservations``)."""
    return sorted(reservations.open_reservations(connect))
