"""The fast path's decision (``domain.fast_path.decide``): the rule the DAG suspect_signals and the simulator
both take."""

import datetime as dt

import pytest
from cluster_doctor.domain import fast_path

NOW = dt.datetime(2026, 11, 28, 12, 10, tzinfo=dt.UTC)  # pure: every time is given
QUIET = dt.timedelta(minutes=10)


@pytest.mark.parametrize("paused, active, next_run, why", [
    (False, 0, NOW + dt.timedelta(minutes=50), None),
    (True, 0, None, "continuous_validation is paused"),
    (False, 1, None, "1 run(s) of continuous_validation queued or running: it, or the next one, plans the suspects first"),
    (False, 0, NOW + dt.timedelta(minutes=9), "the scheduled run at 2026-11-28T12:19+00:00 plans the suspects first"),
])
def test_the_fast_path_triggers_only_when_it_holds_no_run_back(paused, active, next_run, why):
    decision = fast_path.decide(["gpu-001", "gpu-003"], ["gpu-001", "gpu-002"], paused=paused,
                                active_runs=active, next_run=next_run, now=NOW, quiet=QUIET)
    assert decision.why_not == why
    if why is None:
        assert decision.nodes == ["gpu-001"] and decision.conf == {"node_range": "gpu-001"}
        assert decision.run_id == "suspects__2026-11-28T12:10:00"
    assert fast_path.decide([], ["gpu-001"], paused=False, active_runs=0, next_run=None, now=NOW,
                            quiet=QUIET).why_not == "no new free suspect"
