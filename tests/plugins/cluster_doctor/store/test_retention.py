"""cluster_doctor.store.retention: old attempts go, a day at a time; what every pair's latest state rests
on stays, so validation_latest (and a rebuild of it) does not change; plain deletes still recompute."""

from __future__ import annotations

import datetime as dt

import psycopg
import pytest
from cluster_doctor.domain.config import Settings
from cluster_doctor.store import retention

from tests.support import fleet_seed as seed

NOW = seed.NOW
DAY = dt.timedelta(days=1)
STATE = ("SELECT node_name, test_name, status, finished_at, status_since, previous_status, history_id, "
         "last_attempt_at, last_attempt_status FROM validation_pair_state ORDER BY 1, 2")


def history(store) -> None:
    """Pairs whose states rest on attempts of every age: a long pass streak, a recent status change
    after an old one, a failing streak that began long ago, a pair that never executed."""
    rows = []

    def add(node, test, status, days_ago, i):
        rows.append(seed.attempt(node, test, status, NOW - days_ago * DAY, map_index=i))

    for i, days in enumerate(range(500, 0, -10)):  # a pass every 10 days for 500 days
        add("gpu-001", "gpu_health", "pass", days, i)
        add("gpu-001", "dl_unit", "timeout" if i % 3 else "pass", days + 0.5, i)
    for i, (status, days) in enumerate([("pass", 480), ("fail", 470), ("pass", 460), ("error", 450), ("pass", 300),
                                        ("pass", 200), ("fail", 5), ("fail", 2)]):
        add("gpu-002", "nccl_loopback", status, days, i)  # previous status pass, from 200 days ago
    for i, (status, days) in enumerate([("pass", 490), ("fail", 420), ("timeout", 400), ("fail", 300), ("fail", 1)]):
        add("gpu-003", "dl_unit", status, days, i)  # failing since 420 days, pass before it
    for i, days in enumerate([450, 300, 3]):
        add("gpu-004", "storage_fio", "skipped", days, i)  # never executed
    store.record(rows)


def state(dsn: dict) -> list:
    with psycopg.connect(**dsn) as conn:
        return conn.execute(STATE).fetchall()


def attempts(dsn: dict) -> list:
    with psycopg.connect(**dsn) as conn:
        return conn.execute("SELECT node_name, test_name, status, finished_at FROM validation_history "
                            "ORDER BY 1, 2, 4").fetchall()


def test_retention_deletes_old_attempts_but_never_what_a_pairs_state_rests_on(db_dsn, store):
    history(store)
    before, every = state(db_dsn), attempts(db_dsn)
    done = retention.prune(db_dsn, Settings(history_retention_days=100), now=NOW)
    assert done.cutoff == NOW - 100 * DAY and done.deleted > 0 and "deleted" in done.describe()
    kept = attempts(db_dsn)
    assert state(db_dsn) == before  # validation_latest as it was
    with psycopg.connect(**db_dsn) as conn:
        conn.execute("SELECT cluster_doctor_rebuild_pair_state()")
    assert state(db_dsn) == before  # and what is left rebuilds to it
    gone = [a for a in every if a not in kept]
    assert gone and all(a[3] < NOW - 100 * DAY for a in gone)
    old = {(n, t, s, round((NOW - f) / DAY, 1)) for n, t, s, f in kept if f < NOW - 100 * DAY}
    assert old == {("gpu-001", "gpu_health", "pass", 500), ("gpu-001", "dl_unit", "pass", 500.5),  # streaks' starts
                   ("gpu-002", "nccl_loopback", "pass", 200),  # the pass before the failing streak
                   ("gpu-003", "dl_unit", "pass", 490), ("gpu-003", "dl_unit", "fail", 420)}  # before it, its start


def test_retention_is_never_shorter_than_the_longest_window_read_and_0_keeps_everything(db_dsn, store):
    assert retention.retention_days(Settings(history_retention_days=10)) == 90  # the node page's plots
    assert retention.retention_days(Settings(history_retention_days=10, staleness_days=70)) == 100  # SLO + staleness
    assert retention.retention_days(Settings(history_retention_days=10, peer_cadence_days=40)) == 160
    assert retention.retention_days(Settings()) == 400
    history(store)
    every = attempts(db_dsn)
    assert retention.prune(db_dsn, Settings(history_retention_days=0), now=NOW).deleted == 0
    assert retention.prune(db_dsn, Settings(history_retention_days=1000), now=NOW).deleted == 0
    assert attempts(db_dsn) == every
    done = retention.prune(db_dsn, Settings(history_retention_days=100), now=NOW, max_days=3)
    assert done.days == 3 and all(a[3] >= every[0][3] for a in attempts(db_dsn))


@pytest.mark.parametrize("where", ["finished_at > now() - interval '3 days'", "node_name = 'gpu-002'", "true"])
def test_a_plain_delete_still_recomputes_every_pair_it_touched(db_dsn, store, where):
    history(store)
    with psycopg.connect(**db_dsn) as conn:
        conn.execute(f"DELETE FROM validation_history WHERE {where}")
    after = state(db_dsn)
    with psycopg.connect(**db_dsn) as conn:
        conn.execute("SELECT cluster_doctor_rebuild_pair_state()")
    assert state(db_dsn) == after
