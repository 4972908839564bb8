"""The node pools without a baseline (``domain.baselines``): the pairs whose latest executed attempt is
an error resting on a BASELINE_MISSING check, grouped by GPU model. Read through the partial index of
migration 0014 (error pairs only), so the fleet page pays for the errors, not for the fleet."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cluster_doctor.domain.baselines import CODE, MissingBaseline

MISSING_SQL = """
SELECT s.gpu_model, count(DISTINCT s.node_name) AS nodes, array_agg(DISTINCT s.test_name) AS tests,
       min(s.node_name) AS example, max(s.finished_at) AS latest
  FROM validation_pair_state s
 WHERE s.status = 'error' AND s.test_name = ANY(%(tests)s)
   AND s.checks::jsonb @> jsonb_build_array(jsonb_build_object('code', %(code)s::text))
 GROUP BY s.gpu_model
 ORDER BY count(DISTINCT s.node_name) DESC, s.gpu_model NULLS LAST
"""


def missing(cur: Any, tests: Sequence[str]) -> list[MissingBaseline]:
    """One finding per node pool (GPU model) whose latest results lack a baseline, the largest first."""
    cur.execute(MISSING_SQL, {"tests": list(tests), "code": CODE})
    out = []
    for r in cur.fetchall():
        model, nodes, tests_, example, latest = tuple(r.values()) if isinstance(r, dict) else r
        out.append(MissingBaseline(model, int(nodes), tuple(sorted(tests_ or ())), example, latest))
    return out
