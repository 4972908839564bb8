"""A run that plans nothing says why: in its log, its verdict and its note."""

import datetime as dt

from cluster_doctor.domain.planning import plan as planner
from cluster_doctor.domain.planning.params import parse_params
from cluster_doctor.domain.config import Settings

NOW = dt.datetime(2026, 11, 22, 12, tzinfo=dt.UTC)


def run(**params):
    return parse_params(params, Settings(), now=NOW)


def why(params=None, **kw):
    args = {"params": params or run(), "gpu_nodes": 8, "free": 4, "not_free": {}, "tests": ["gpu_health"],
            "oldest_fresh": None, "due_nodes": 0, "held": []}
    return planner.why_empty(**{**args, **kw})


def test_each_reason_in_one_line():
    assert why(gpu_nodes=0, params=run(node_range="rack7-[01-04]")) == \
        "nothing planned: no GPU node in node_range rack7-[01-04]"
    assert why(free=0, not_free={"busy": 6, "cordoned": 2}) == \
        "nothing planned: none of the 8 GPU node(s) is free (6 busy, 2 cordoned)"
    assert why(oldest_fresh=NOW - dt.timedelta(days=2)) == (
        "nothing planned: all pairs of the 4 free node(s) are fresh since 2026-11-20T12:00+00:00 "
        "(none due; tests gpu_health)")
    stale_before = run(stale_before="2026-11-22T10:00:00Z")
    assert "(none older than stale_before 2026-11-22T10:00:00+00:00; tests gpu_health)" in why(params=stale_before)
    held = [planner.HeldBy("backfill__2026-11-20T01", 3, NOW), planner.HeldBy("scheduled__x", 1, NOW)]
    assert why(due_nodes=4, held=held) == (
        "nothing planned: all 4 free node(s) with a due pair are claimed by other live runs (3 by run "
        "backfill__2026-11-20T01 until 2026-11-22T12:00+00:00; 1 by run scheduled__x until 2026-11-22T12:00+00:00)")
    assert why(params=run(max_pairs=0)) == "nothing planned: max_pairs is 0"
