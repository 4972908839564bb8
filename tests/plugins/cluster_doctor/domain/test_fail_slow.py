"""The fail-slow rule: one sighting is suspect, two independent sightings fail the node."""

from __future__ import annotations

import datetime as dt

import pytest

from cluster_doctor.domain import fail_slow
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


def test_two_flagged_probes_closer_than_the_spacing_leave_the_node_suspect_and_hours_apart_fail_it():
    now = dt.datetime(2026, 1, 5, 12, tzinfo=dt.UTC)
    spacing = dt.timedelta(hours=3)
    close = [fail_slow.ProbeOutcome(now - dt.timedelta(minutes=30), True), fail_slow.ProbeOutcome(now, True)]
    apart = [fail_slow.ProbeOutcome(now - dt.timedelta(hours=4), True), fail_slow.ProbeOutcome(now, True)]
    assert fail_slow.slow_state(close, False, min_spacing=spacing) == fail_slow.SlowState.SUSPECT
    assert fail_slow.slow_state(apart, False, min_spacing=spacing) == fail_slow.SlowState.FAILING


def test_a_suspects_confirming_probe_waits_for_the_spacing():
    now = dt.datetime(2026, 1, 5, 12, tzinfo=dt.UTC)
    kw = dict(busy_since=False, min_interval=dt.timedelta(hours=6), max_age=dt.timedelta(hours=72),
              suspect=True, confirm_after=dt.timedelta(hours=3))
    assert not fail_slow.probe_due(now, now - dt.timedelta(hours=1), **kw)
    assert fail_slow.probe_due(now, now - dt.timedelta(hours=3), **kw)


def test_a_bundle_suites_fleet_verdict_is_a_sighting_alone_suspect_and_with_a_flagged_probe_failing():
    now = dt.datetime(2026, 1, 5, 12, tzinfo=dt.UTC)
    assert fail_slow.slow_state([], False, bundle_flagged=True) == fail_slow.SlowState.SUSPECT
    flagged = [fail_slow.ProbeOutcome(now, True)]
    assert fail_slow.slow_state(flagged, False, bundle_flagged=True) == fail_slow.SlowState.FAILING
    assert fail_slow.slow_state(flagged, False) == fail_slow.SlowState.SUSPECT
