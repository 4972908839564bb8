import datetime as dt

import pytest

from cluster_doctor.domain import timestamps

UTC = dt.UTC


@pytest.mark.parametrize("raw, expected", [
    ("2026-11-28T10:04:00Z", dt.datetime(2026, 11, 28, 10, 4, tzinfo=UTC)),
    ("2026-11-28T10:04:00.123456Z", dt.datetime(2026, 11, 28, 10, 4, 0, 123456, tzinfo=UTC)),
    ("2026-11-28T12:04:00+02:00", dt.datetime(2026, 11, 28, 10, 4, tzinfo=UTC)),
    ("2026-11-28T10:04:00", dt.datetime(2026, 11, 28, 10, 4, tzinfo=UTC)),  # no offset: the API's UTC
    (dt.datetime(2026, 11, 28, 11, 4, tzinfo=dt.timezone(dt.timedelta(hours=1))),
     dt.datetime(2026, 11, 28, 10, 4, tzinfo=UTC)),  # the kubernetes client's datetimes
])
def test_every_form_the_api_and_our_annotations_use_reads_as_aware_utc(raw, expected):
    t = timestamps.parse(raw)
    assert t == expected and t.tzinfo == UTC


@pytest.mark.parametrize("raw", [None, "", "  ", "yesterday", "2026-13-01T00:00:00Z", 1764324240, ["2026-11-28"],
                                 "0001-01-01T00:00:00+01:00"])
def test_an_absent_or_unreadable_time_is_none_never_an_exception(raw):
    assert timestamps.parse(raw) is None


def test_written_as_the_api_server_writes_and_read_back_the_same():
    t = dt.datetime(2026, 11, 28, 11, 4, 5, 999999, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    assert timestamps.rfc3339(t) == "2026-11-28T10:04:05Z"
    assert timestamps.parse(timestamps.rfc3339(t)) == t.replace(microsecond=0)
