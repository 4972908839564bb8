"""The fail-slow rule: one sighting is suspect, two independent sightings fail the node."""

from __future__ import annotations

import datetime as dt

import pytest

from cluster_doctor.domain.fail_slow import ProbeOutcome, SlowState, probe_due, probe_suspect, slow_state
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
    spacing = 3 * H
    close = [ProbeOutcome(NOW - dt.timedelta(minutes=30), True), ProbeOutcome(NOW, True)]
    apart = [ProbeOutcome(NOW - 4 * H, True), ProbeOutcome(NOW, True)]
    assert slow_state(close, False, min_spacing=spacing) is SlowState.SUSPECT
    assert slow_state(apart, False, min_spacing=spacing) is SlowState.FAILING
    assert slow_state(close, False) is SlowState.FAILING  # no spacing: any two in a row


def test_a_suspects_confirming_probe_waits_for_the_spacing():
    kw = dict(busy_since=False, min_interval=6 * H, max_age=72 * H, suspect=True, confirm_after=3 * H)
    assert not probe_due(NOW, NOW - H, **kw)
    assert probe_due(NOW, NOW - 3 * H, **kw)
    assert probe_due(NOW, None, **kw)  # never probed: at once
    # a suspect waits for the spacing even when loaded since (the min_interval rule is for healthy nodes)
    assert not probe_due(NOW, NOW - H, **(kw | {"busy_since": True, "min_interval": dt.timedelta(0)}))


def test_a_bundle_suites_fleet_verdict_is_a_sighting_alone_suspect_and_with_a_flagged_probe_failing():
    flagged = [ProbeOutcome(NOW, True)]
    assert slow_state([], False, bundle_verdicts=[NOW - H]) is SlowState.SUSPECT
    assert slow_state([ProbeOutcome(NOW, False)], False, bundle_verdicts=[NOW - H]) is SlowState.SUSPECT
    assert slow_state(flagged, False, bundle_verdicts=[NOW - H]) is SlowState.FAILING
    assert slow_state(flagged, False) is SlowState.SUSPECT


@pytest.mark.parametrize(("verdicts", "state"), [
    ([NOW - H], SlowState.SUSPECT),  # the bundle ran inside the episode that lowered the probe
    ([NOW + H], SlowState.SUSPECT),  # after the probe, as close
    ([NOW - 5 * H], SlowState.FAILING),  # hours apart: a lasting slowness
    ([NOW + 4 * H], SlowState.FAILING),
    ([NOW - H, NOW - 5 * H], SlowState.FAILING),  # one suite's verdict far enough
])
def test_a_bundle_verdict_confirms_a_flagged_probe_only_the_spacing_apart(verdicts, state):
    assert slow_state([ProbeOutcome(NOW, True)], False, bundle_verdicts=verdicts, min_spacing=3 * H) is state


def test_a_flagged_probe_short_of_failing_makes_a_suspect():
    flagged = [ProbeOutcome(NOW - 2 * H, False), ProbeOutcome(NOW, True)]
    state = slow_state(flagged, False, min_spacing=3 * H)
    assert state == SlowState.SUSPECT and probe_suspect(True, state)
    assert not probe_suspect(False, SlowState.SUSPECT)  # a clean probe after a signal adds no suspicion
    failing = slow_state([ProbeOutcome(NOW - 4 * H, True), ProbeOutcome(NOW, True)], False,
                              min_spacing=3 * H)
    assert failing == SlowState.FAILING and not probe_suspect(True, failing)  # quarantined instead
