"""Migration 0004: every attempt's recommended action and whether a check could not run, in the
history, the per-pair state and validation_latest; rows from before it read as unknown / derived."""

import datetime as dt
import json

import psycopg
import pytest
from cluster_doctor.domain.attempts import Attempt
from cluster_doctor.store import migrations
from cluster_doctor.store.history import ResultStore

T0 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
SKIP = {"name": "dcgm_diag", "status": "skip", "code": "DCGM_UNAVAILABLE", "action": "none"}
XID = {"name": "xid_events", "status": "fail", "code": "XID_79", "action": "reboot"}


def attempt(status="pass", hours=0, run="r", node="gpu-001", **kw):
    return Attempt(node_name=node, test_name="gpu_health", status=status, finished_at=T0 + dt.timedelta(hours=hours),
                   dag_id="continuous_validation", run_id=run, **kw)


def latest(dsn):
    with psycopg.connect(**dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT node_name, status, action, incomplete, checks_not_run FROM validation_latest ORDER BY 1")
        return cur.fetchall()


def test_the_action_and_the_not_run_count_reach_the_history_and_the_view(store, db_dsn):
    store.record([attempt("pass", 0, "r0", checks=[SKIP, {"name": "gpu_count", "status": "pass"}]),
                  attempt("fail", 0, "r0", node="gpu-002", checks=[XID]),
                  attempt("timeout", 0, "r0", node="gpu-003")])
    assert latest(db_dsn) == [("gpu-001", "pass", "none", True, 1), ("gpu-002", "fail", "reboot", False, 0),
                              ("gpu-003", None, None, None, None)]
    rows = store.history("gpu-003")
    assert (rows[0]["action"], rows[0]["incomplete"], rows[0]["checks_not_run"]) == ("retest", None, None)
    # a timeout after the pass keeps the pass's action and completeness in the view
    store.record([attempt("timeout", 1, "r1")])
    assert latest(db_dsn)[0] == ("gpu-001", "pass", "none", True, 1)
    # the view is the same when rebuilt from the history
    before = latest(db_dsn)
    store.rebuild_latest()
    assert latest(db_dsn) == before


def test_an_out_of_order_write_recomputes_the_columns(store, db_dsn):
    store.record([attempt("fail", 2, "r2", checks=[XID])])
    store.record([attempt("pass", 1, "r1", checks=[SKIP])])  # older: the fail stays latest
    assert latest(db_dsn) == [("gpu-001", "fail", "reboot", False, 0)]
    with psycopg.connect(**db_dsn) as conn, conn.cursor() as cur:
        cur.execute("DELETE FROM validation_history WHERE run_id = 'r2'")
    assert latest(db_dsn) == [("gpu-001", "pass", "none", True, 1)]


def test_the_database_refuses_an_action_outside_the_set(db_dsn):
    with psycopg.connect(**db_dsn) as conn, conn.cursor() as cur, pytest.raises(psycopg.errors.CheckViolation):
        cur.execute("INSERT INTO validation_history (node_name, test_name, status, finished_at, action) "
                    "VALUES (%s, %s, %s, %s, %s)", ("gpu-001", "dl_unit", "fail", T0, "format_disk"))


def test_rows_from_before_0004_read_as_unknown_and_their_skips_as_incomplete(empty_db_dsn):
    """Upgrading a database with history: the action is not invented (unknown), the not-run count
    comes from the stored skip checks, and a rewrite of such an attempt is a duplicate, not a conflict."""
    before = [m for m in migrations.available() if m.version < 4]
    with psycopg.connect(**empty_db_dsn) as conn:
        migrations.upgrade(conn, before)
    with psycopg.connect(**empty_db_dsn) as conn, conn.cursor() as cur:
        for node, status, checks in (("gpu-001", "pass", [SKIP]), ("gpu-002", "pass", []),
                                     ("gpu-003", "fail", [XID]), ("gpu-004", "timeout", [])):
            cur.execute("INSERT INTO validation_history (node_name, test_name, status, finished_at, checks, "
                        "dag_id, run_id) VALUES (%s, 'gpu_health', %s, %s, %s, 'continuous_validation', 'r0')",
                        (node, status, T0, json.dumps(checks)))
    store = ResultStore(empty_db_dsn)
    store.upgrade()
    assert latest(empty_db_dsn) == [("gpu-001", "pass", None, True, 1), ("gpu-002", "pass", None, False, 0),
                                    ("gpu-003", "fail", None, False, 0), ("gpu-004", None, None, None, None)]
    old = store.history("gpu-001")[0]
    assert (old["action"], old["incomplete"], old["checks_not_run"]) == (None, True, 1)
    again = store.record([attempt("pass", 0, "r0", checks=[SKIP])])
    assert (again.inserted, again.duplicates, again.conflicts) == (0, 1, ())
    # the pair's next attempt carries its own
    store.record([attempt("fail", 1, "r1", node="gpu-003", checks=[XID])])
    assert latest(empty_db_dsn)[2] == ("gpu-003", "fail", "reboot", False, 0)
