"""Validation GPU-hours from the hourly sums (migration 0009): the same figure as summing every attempt
of the window, through inserts, late inserts, updates, deletes and bulk loads, at any window edge."""

from __future__ import annotations

import datetime as dt

import psycopg
import pytest
from cluster_doctor.store import fleet

from tests.support import fleet_seed as seed

DIRECT = f"""
SELECT coalesce(sum({fleet.GPU_SECONDS}), 0) / 3600.0, count(*), count(*) FILTER (WHERE gpu_count IS NULL)
  FROM validation_history
 WHERE finished_at >= %s AND finished_at <= %s AND status = ANY(%s) AND duration_s IS NOT NULL
"""


def both(dsn: dict, now: dt.datetime, days: float) -> tuple[tuple, tuple]:
    with fleet.open_fleet(dsn, tests=seed.TESTS, staleness=dt.timedelta(days=7), now=now) as q:
        got = q.gpu_hours(days=days)
        with q.conn.cursor() as cur:
            cur.execute(DIRECT, (now - dt.timedelta(days=days), now, list(fleet.GPU_TIME_STATUSES)))
            direct = cur.fetchone()
    return (pytest.approx(float(direct[0])), direct[1], direct[2]), \
        (got["gpu_hours"], got["attempts"], got["without_gpu_count"])


@pytest.mark.parametrize("days", [7, 1, 0.01, 1 / 24])
def test_hourly_sums_give_the_window_every_attempt_gives(db_dsn, store, days):
    seed.small_fleet(store)
    seed.plot_history(store)
    store.record([seed.attempt("gpu-001", "dl_unit", "pass", seed.NOW - dt.timedelta(minutes=m), map_index=m,
                               gpu_count=None if m % 7 == 0 else 8, duration_s=60.0 + m) for m in range(1, 300, 13)])
    for now in (seed.NOW, seed.NOW.replace(minute=0, second=0, microsecond=0), seed.NOW + dt.timedelta(minutes=37)):
        expected, got = both(db_dsn, now, days)
        assert got == expected


def test_updates_deletes_and_bulk_loads_keep_the_sums(db_dsn, store):
    seed.small_fleet(store)
    seed.bulk_fleet(db_dsn, 30)  # under session_replication_role = replica: the sums' triggers fire always
    with psycopg.connect(**db_dsn) as conn:
        conn.execute("UPDATE validation_history SET duration_s = duration_s * 2 WHERE node_name = 'gpu-0003'")
        conn.execute("UPDATE validation_history SET status = 'timeout' WHERE node_name = 'gpu-0004'")
        conn.execute("DELETE FROM validation_history WHERE node_name IN ('gpu-0005', 'gpu-001')")
    expected, got = both(db_dsn, seed.NOW, 7)
    assert got == expected and got[1] > 0
    with psycopg.connect(**db_dsn) as conn:
        conn.execute("TRUNCATE validation_history CASCADE")
    assert both(db_dsn, seed.NOW, 7)[1] == (0.0, 0, 0)
