"""cluster_doctor.store.fleet_state: the fleet kept in the process stays what a fresh read would give,
through new, late and deleted attempts, inventory changes and the passing of time, reading only what
changed."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import time

import psycopg
import pytest
from cluster_doctor.store import fleet, fleet_state, inventory

from tests.support import fleet_seed as seed

WEEK = dt.timedelta(days=7)


def settle(dsn: dict, timeout_s: float = 60.0) -> None:
    """Wait until no transaction older than now runs anywhere on the server. The horizon a read keeps is the
    server-wide snapshot xmin: while another test's transaction (in another database of the same server)
    stays open, a read rightly fetches again what it cannot prove it has seen, and the counts below would
    measure the neighbours instead of the kept fleet."""
    with psycopg.connect(**dsn, autocommit=True) as conn:
        now_xid = conn.execute("SELECT pg_current_xact_id()::text").fetchone()[0]
        deadline = time.monotonic() + timeout_s
        while not conn.execute("SELECT pg_snapshot_xmin(pg_current_snapshot()) > %s::text::xid8",
                               (now_xid,)).fetchone()[0]:
            assert time.monotonic() < deadline, "a transaction on the server stayed open for a minute"
            time.sleep(0.05)


def read(dsn: dict, now: dt.datetime, *, cold: bool = False, quiet: bool = True):
    """(assessment, summary, pairs read) of one page-or-scrape read; ``cold``: as a fresh process would;
    ``quiet``: first wait for the server's older transactions to end (``settle``)."""
    if quiet:
        settle(dsn)
    if cold:
        fleet_state.forget()
    with fleet.open_fleet(dsn, tests=seed.TESTS, staleness=WEEK, now=now) as q:
        assessed, summary = q.assessment(), q.summary(slo_days=0)
        key = fleet_state.FleetKey(q.conn.info.dsn, tuple(q.tests), q.staleness, q.gone_grace)
    return assessed, summary, fleet_state.live(key, fleet.natural_key).fetched_pairs


def view(assessed) -> tuple:
    return ([dataclasses.asdict(n) for n in assessed.nodes.values()], assessed.pairs)


def assert_kept_equals_fresh(dsn: dict, now: dt.datetime, *, quiet: bool = True) -> int:
    kept, kept_summary, fetched = read(dsn, now, quiet=quiet)
    fresh, fresh_summary, _ = read(dsn, now, cold=True, quiet=quiet)
    assert view(kept) == view(fresh)
    kept_summary.pop("now"), fresh_summary.pop("now")
    assert kept_summary == fresh_summary
    read(dsn, now, quiet=quiet)  # warm the copy again for the next step (from the cold one)
    return fetched


def test_the_kept_fleet_is_what_a_fresh_read_gives_through_every_kind_of_change(db_dsn, store):
    seed.small_fleet(store)
    now = seed.NOW
    read(db_dsn, now, cold=True)
    # a new attempt: only its pair is read
    store.record([seed.attempt("gpu-006", "gpu_health", "pass", now - dt.timedelta(minutes=3))])
    assert assert_kept_equals_fresh(db_dsn, now) == 1
    # a late attempt older than the pair's latest (recomputed by the trigger), a new node
    store.record([seed.attempt("gpu-001", "dl_unit", "fail", now - dt.timedelta(days=3), map_index=9),
                  seed.attempt("gpu-020", "nccl_loopback", "error", now - dt.timedelta(hours=2))])
    assert assert_kept_equals_fresh(db_dsn, now) == 2
    # the inventory: a discovery sees some nodes busy, and one node left the cluster
    seen = [inventory.SeenNode("gpu-001", 8, seed.H100, "busy", "ml/train-0 requests 8 nvidia.com/gpu"),
            inventory.SeenNode("gpu-002", 8, seed.A100, "free")]
    inventory.record_discovery(store.connect, seen, seen_at=now - dt.timedelta(minutes=1), complete=True)
    assert_kept_equals_fresh(db_dsn, now)
    # time passes: a fresh pair goes stale, the gone nodes' grace period ends
    for later in (now + dt.timedelta(hours=20), now + dt.timedelta(days=2), now + dt.timedelta(days=6, hours=23)):
        assert assert_kept_equals_fresh(db_dsn, later) == 0
    # the clock goes back (another reader's clock): pairs are fresh again
    assert_kept_equals_fresh(db_dsn, now)
    # attempts deleted: the pair goes (its state row is deleted) or falls back to an older attempt
    with psycopg.connect(**db_dsn) as conn:
        conn.execute("DELETE FROM validation_history WHERE node_name = 'gpu-020'")
        conn.execute("DELETE FROM validation_history WHERE node_name = 'gpu-003' AND status = 'fail'")
    assert_kept_equals_fresh(db_dsn, now)
    with psycopg.connect(**db_dsn) as conn:  # repaired by hand: every pair rewritten
        conn.execute("SELECT cluster_doctor_rebuild_pair_state()")
    assert_kept_equals_fresh(db_dsn, now)


def test_a_read_of_an_unchanged_fleet_reads_no_pair_and_keeps_its_assessment(db_dsn, store):
    seed.small_fleet(store)
    first, _, fetched = read(db_dsn, seed.NOW, cold=True)
    assert fetched == 32 - 3  # every pair row there is (gpu-010 has one test only)
    again, _, fetched = read(db_dsn, seed.NOW)
    assert fetched == 0 and again is first
    later, _, fetched = read(db_dsn, seed.NOW + dt.timedelta(seconds=15))
    assert fetched == 0 and later is not first  # a new moment: new ages ...
    assert later.nodes["gpu-001"] is first.nodes["gpu-001"]  # ... over the same coverage, nothing reassessed
    assert [p["age_s"] for p in later.pairs if p["age_s"] is not None] == \
        [p["age_s"] + 15 for p in first.pairs if p["age_s"] is not None]


def test_a_transaction_that_commits_after_a_newer_one_is_not_missed(db_dsn, store):
    """The horizon is the snapshot's xmin, not the newest change seen: a writer that took its id
    before another but commits after it is still read."""
    seed.small_fleet(store)
    read(db_dsn, seed.NOW, cold=True)
    slow = psycopg.connect(**db_dsn)
    try:
        slow.execute("SELECT pg_current_xact_id()")  # takes its transaction id now
        store.record([seed.attempt("gpu-006", "dl_unit", "pass", seed.NOW - dt.timedelta(minutes=1))])
        assert_kept_equals_fresh(db_dsn, seed.NOW, quiet=False)  # the slow transaction is open
        slow.execute("INSERT INTO validation_history (node_name, test_name, status, finished_at, dag_id, run_id) "
                     "VALUES ('gpu-006', 'nccl_loopback', 'fail', %s, 'd', 'slow')", (seed.NOW - dt.timedelta(minutes=2),))
        slow.commit()
    finally:
        slow.close()
    kept, _, _ = read(db_dsn, seed.NOW)
    assert {(p["node_name"], p["test_name"]): p["status"] for p in kept.pairs}[("gpu-006", "nccl_loopback")] == "fail"
    assert_kept_equals_fresh(db_dsn, seed.NOW)


@pytest.mark.parametrize("seconds", [None, -math.inf, math.inf, 1e20, -1e20])
def test_stored_times_outside_what_python_holds_read_as_none(seconds):
    assert fleet_state.when(seconds) is None
    assert fleet_state.when(0.0) == dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
