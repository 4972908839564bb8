"""The one percentage and the one age every view prints (the fleet page, the node page, the CLI, the
daily report, the suites' check messages)."""

from __future__ import annotations

import datetime as dt
import re

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


HOSTILE_SCHEMES = ["javascript:alert(1)", "see JavaScript:void(0) now", "[x](javascript:alert(1))",
                   "<javascript:alert(1)>", "data:text/html,<b>x</b>", "vbscript:msgbox", "file:///etc/passwd"]


@pytest.mark.parametrize("value", HOSTILE_SCHEMES)
def test_md_escape_breaks_a_scheme_with_a_backslash_not_an_entity(value):
    """An entity (&#58;) prints as itself wherever the markdown is read as text (a chat message, a
    terminal); a backslash escape reads as a colon once rendered and never forms a scheme."""
    escaped = text.md_escape(value)
    assert "&#58;" not in escaped
    assert not re.search(r"(?i)(javascript|data|vbscript|file):", escaped)
    assert re.search(r"(?i)(javascript|data|vbscript|file)\\:", escaped)


@pytest.mark.parametrize("value", HOSTILE_SCHEMES)
def test_md_escape_renders_as_the_literal_text_without_a_link(value):
    markdown_it = pytest.importorskip("markdown_it")
    pytest.importorskip("linkify_it")  # the gfm-like preset auto-links bare URLs with it
    html = markdown_it.MarkdownIt("gfm-like").render(text.md_escape(value))
    assert "<a " not in html and "<img" not in html
    # the reader sees the colon (and the brackets), not an escape or an entity
    shown = re.sub(r"<[^>]+>", "", html).strip()
    assert shown == value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
