"""The one percentage and the one age every view prints (the fleet page, the node page, the CLI, the
daily report, the suites' check messages)."""

from __future__ import annotations

import datetime as dt

import pytest
from cluster_doctor.reports import text

from tests import clock


@pytest.mark.parametrize("ratio, shown", [
    (4 / 24, "16.7 %"),  # floored, this read 16.6 % on the page and 16.7 % in the CLI
    (33 / 96, "34.4 %"),  # 34.375: the half goes up
    (5 / 9, "55.6 %"),
    (0.0, "0.0 %"),
    (1.0, "100.0 %"),
    (1 / 3, "33.3 %"),
])
def test_percent_rounds_halves_up_to_one_decimal(ratio, shown):
    assert text.percent(ratio) == shown


def test_percent_of_nothing_says_so():
    assert text.percent(None) == "–" and text.percent(None, missing="-") == "-"


@pytest.mark.parametrize("seconds, shown", [
    (0, "0 s"), (40, "40 s"), (60.07, "1 min"), (3599, "59 min"), (3600, "1 h"), (5400, "1 h 30 min"),
    (86400 * 3 + 7200, "3 d 2 h"), (86400 * 12, "12 d"), (-5, "0 s"),
])
def test_durations_read_in_words(seconds, shown):
    assert text.duration(seconds) == shown


def test_ago_is_relative_to_the_callers_clock():
    now = clock.now()
    assert text.ago(now - dt.timedelta(seconds=60.05), now) == "1 min ago"  # not "0.01668 h ago"
    assert text.ago(None, now) == "" and text.age(None, now) == "-"


@pytest.mark.parametrize("seconds", [0, 1, 59, 60, 61, 3599, 3600, 3660, 86399, 86400, 90000, 86400 * 12 + 5])
def test_the_suites_say_an_age_as_the_library_does(seconds):
    """The suites never import the library: their copy (harness.text.ago_h) must say what text.duration says."""
    from cluster_doctor_suites.harness.text import ago_h

    assert ago_h(seconds / 3600) == f"{text.duration(seconds)} ago"
