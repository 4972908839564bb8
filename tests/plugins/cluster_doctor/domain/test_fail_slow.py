"""The fail-slow rule: one sighting is suspect, two independent sightings fail the node."""

from __future__ import annotations

import datetime as dt

import pytest

from cluster_doctor.domain.fail_slow import ProbeOutcome, SlowState, probe_due, slow_state
from tests.clock import now as clock_now

NOW = clock_now()
H = dt.timedelta(hours=1)


def probes(*flags: bool) -> list[ProbeOutcome]:
    return [ProbeOutcome(NOW - (len(flags) - i) * H, flag) for i, flag in enumerate(flags)]


@pytest.mark.parametrize(("flags", "signal", "state"), [
    ((), False, SlowState.OK),
    ((), True, SlowState.SUSPECT),  # a signal alone never fails a node
    ((True,), False, SlowState.SUSPECT),
    ((True, True), False, SlowState.FAILING),
    ((True, False), False, SlowState.OK),  # the latest sweep was fine
    ((True, False), True, SlowState.SUSPECT),
    ((False, True), True, SlowState.FAILING),  # the probe and a signal agree
    ((True, False, True), False, SlowState.SUSPECT),  # not in a row
])
def test_two_sightings_fail_a_node(flags, signal, state):
    assert slow_state(probes(*flags), signal) is state


def test_the_order_is_by_time_not_by_position():
    flagged_last = [ProbeOutcome(NOW, True), ProbeOutcome(NOW - 2 * H, False), ProbeOutcome(NOW - H, True)]
    assert slow_state(flagged_last, False) is SlowState.FAILING


@pytest.mark.parametrize(("last", "busy", "suspect", "due"), [
    (None, False, False, True),  # never probed
    (NOW - 2 * H, False, False, False),  # idle, recent
    (NOW - 2 * H, True, False, False),  # loaded but probed less than min_interval ago
    (NOW - 7 * H, True, False, True),  # loaded since, min_interval passed
    (NOW - 7 * H, False, False, False),  # idle: nothing changed that the probe could see
    (NOW - 2 * H, False, True, True),  # a suspect gets its second sighting at once
    (NOW - 73 * H, False, False, True),  # max_age
])
def test_when_a_sweep_probes(last, busy, suspect, due):
    assert probe_due(NOW, last, busy_since=busy, min_interval=6 * H, max_age=72 * H, suspect=suspect) is due
