import datetime as dt
import random
import threading

import psycopg
import pytest
from cluster_doctor.domain.attempts import Attempt, InvalidAttempt
from cluster_doctor.domain.nodes import parse_node_range
from cluster_doctor.domain.status import EXECUTED, Status
from cluster_doctor.store import database
from cluster_doctor.store.history import ResultStore, RetryPolicy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import NO_SCHEMA
from tests.support.tcp_proxy import TcpProxy

T0 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)

# Written out here, independently of the product's SQL, from the contract in the issue.
EXPECTED_SQL = """
WITH last_exec AS (
    SELECT node_name, test_name, status, finished_at, id,
           row_number() OVER (PARTITION BY node_name, test_name ORDER BY finished_at DESC, id DESC) AS rn
      FROM validation_history WHERE status IN ('pass', 'fail', 'error')),
last_any AS (
    SELECT node_name, test_name, status, finished_at,
           row_number() OVER (PARTITION BY node_name, test_name ORDER BY finished_at DESC, id DESC) AS rn
      FROM validation_history)
SELECT a.node_name, a.test_name, e.status, e.finished_at, a.finished_at AS last_attempt_at,
       a.status AS last_attempt_status
  FROM last_any a LEFT JOIN last_exec e ON e.node_name = a.node_name AND e.test_name = a.test_name AND e.rn = 1
 WHERE a.rn = 1
"""
VIEW_SQL = ("SELECT node_name, test_name, status, finished_at, last_attempt_at, last_attempt_status "
            "FROM validation_latest")


def rows(dsn, sql):
    with psycopg.connect(**dsn) as conn, conn.cursor() as cur:
        cur.execute(sql)
        return sorted(cur.fetchall())


def attempt(node="gpu-001", test="dl_unit", status="pass", hours=0, run="r", **kw):
    return Attempt(node_name=node, test_name=test, status=status, finished_at=T0 + dt.timedelta(hours=hours),
                   started_at=T0 + dt.timedelta(hours=hours) - dt.timedelta(minutes=5), run_id=run,
                   dag_id="continuous_validation", **kw)


def test_latest_view_semantics_with_mixed_statuses(store, db_dsn):
    store.record([
        attempt(status="pass", hours=0, run="r0", metrics={"tflops": 700}),
        attempt(status="fail", hours=1, run="r1", reason="GPU 3 off", checks=[{"name": "gemm", "status": "fail"}]),
        attempt(status="timeout", hours=2, run="r2", reason="pending 20 min"),
        attempt(status="preempted", hours=3, run="r3", reason="user pod claimed the node"),
        # a pair with only non-executed attempts still appears
        attempt(node="gpu-002", status="skipped", hours=4, run="r4", reason="node busy"),
        attempt(node="gpu-002", status="timeout", hours=5, run="r5"),
        attempt(node="gpu-003", status="error", hours=1, run="r1", reason="OOM"),
        attempt(node="gpu-003", status="pass", hours=2, run="r2"),
    ])
    latest = {(r["node_name"], r["test_name"]): r for r in store.latest()}
    one = latest[("gpu-001", "dl_unit")]
    assert one["status"] == "fail" and one["reason"] == "GPU 3 off"
    assert one["finished_at"] == T0 + dt.timedelta(hours=1)  # the timeout/preempted never make it fresh
    assert one["checks"] == [{"name": "gemm", "status": "fail"}]
    assert (one["last_attempt_status"], one["last_attempt_at"]) == ("preempted", T0 + dt.timedelta(hours=3))
    assert one["status_since"] == T0 + dt.timedelta(hours=1) and one["previous_status"] == "pass"
    two = latest[("gpu-002", "dl_unit")]
    assert two["status"] is None and two["finished_at"] is None and two["last_attempt_status"] == "timeout"
    assert latest[("gpu-003", "dl_unit")]["status"] == "pass"
    assert rows(db_dsn, VIEW_SQL) == rows(db_dsn, EXPECTED_SQL)
    assert store.check_latest() == []


def test_status_enforced_by_the_database(db_dsn):
    with psycopg.connect(**db_dsn) as conn, conn.cursor() as cur:
        with pytest.raises(psycopg.errors.CheckViolation):
            cur.execute("INSERT INTO validation_history (node_name, test_name, status, finished_at) "
                        "VALUES ('gpu-1', 'dl_unit', 'passed', now())")


def test_retried_writes_never_duplicate(store, db_dsn):
    batch = [attempt(run="r1"), attempt(node="gpu-002", run="r1")]
    assert store.record(batch).inserted == 2
    result = store.record(batch + [attempt(node="gpu-003", run="r1")])
    assert (result.inserted, result.duplicates) == (1, 2)
    # a new try of the same task is a new attempt
    assert store.record([attempt(run="r1", try_number=2, hours=1)]).inserted == 1
    assert rows(db_dsn, "SELECT count(*) FROM validation_history") == [(4,)]


def test_malformed_input_writes_nothing(store, db_dsn):
    with pytest.raises(InvalidAttempt):
        store.record([attempt(), {"node_name": "gpu-9", "test_name": "dl_unit", "status": "pass",
                                  "finished_at": T0, "metrics": [1]}])
    assert rows(db_dsn, "SELECT count(*) FROM validation_history") == [(0,)]


def test_out_of_order_updates_and_deletes_keep_the_view_exact(store, db_dsn):
    store.record([attempt(status="fail", hours=5, run="late"), attempt(status="pass", hours=9, run="new")])
    store.record([attempt(status="pass", hours=1, run="old")])  # a delayed write of an older attempt
    (row,) = store.latest()
    assert (row["status"], row["previous_status"]) == ("pass", "fail")
    assert row["status_since"] == T0 + dt.timedelta(hours=9)
    with psycopg.connect(**db_dsn) as conn, conn.cursor() as cur:
        cur.execute("DELETE FROM validation_history WHERE run_id = 'new'")
    (row,) = store.latest()
    assert row["status"] == "fail" and row["status_since"] == T0 + dt.timedelta(hours=5)
    with psycopg.connect(**db_dsn) as conn, conn.cursor() as cur:
        cur.execute("UPDATE validation_history SET node_name = 'gpu-777' WHERE run_id = 'late'")
    assert {(r["node_name"], r["status"]) for r in store.latest()} == {("gpu-001", "pass"), ("gpu-777", "fail")}
    with psycopg.connect(**db_dsn) as conn, conn.cursor() as cur:
        cur.execute("TRUNCATE validation_history CASCADE")  # verdicts reference history rows
    assert store.latest() == []


def expected_state(history):
    """The contract, computed in Python: per pair the latest executed attempt, its streak start, the
    status before the streak, and the latest attempt of any status."""
    out = {}
    for (node, test) in {(a.node_name, a.test_name) for a, _ in history}:
        items = sorted(((a.finished_at, i, a) for a, i in history if (a.node_name, a.test_name) == (node, test)),
                       key=lambda x: (x[0], x[1]))
        last = items[-1][2]
        executed = [a for _, _, a in items if a.status in EXECUTED]
        status = since = previous = None
        if executed:
            status = executed[-1].status
            since = executed[-1].finished_at
            for a in reversed(executed[:-1]):
                if a.status != status:
                    previous = a.status
                    break
                since = a.finished_at
        out[(node, test)] = (status, executed[-1].finished_at if executed else None, since, previous,
                             last.status, last.finished_at)
    return out


history_st = st.lists(
    st.tuples(st.sampled_from(["gpu-001", "gpu-002", "gpu-003"]), st.sampled_from(["dl_unit", "gpu_health"]),
              st.sampled_from(list(Status)), st.integers(0, 40)),
    min_size=1, max_size=40)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(history_st, st.randoms(use_true_random=False), st.integers(1, 4))
def test_view_matches_the_contract_for_any_history_in_any_order(pg_admin_dsn, template_db, history, rnd, batches):
    from tests.conftest import _fresh_database

    with _fresh_database(pg_admin_dsn, template_db) as dsn:
        store = ResultStore(dsn)
        attempts = [attempt(node=n, test=t, status=s, hours=h, run=f"r{i}") for i, (n, t, s, h) in enumerate(history)]
        order = list(attempts)
        rnd.shuffle(order)
        chunk = max(1, len(order) // batches)
        for start in range(0, len(order), chunk):
            store.record(order[start:start + chunk])
        # ties on finished_at break on insertion id: recover the ids the database assigned
        with psycopg.connect(**dsn) as conn, conn.cursor() as cur:
            cur.execute("SELECT run_id, id FROM validation_history")
            ids = dict(cur.fetchall())
        expected = expected_state([(a, ids[a.run_id]) for a in attempts])
        actual = {(r["node_name"], r["test_name"]): (r["status"], r["finished_at"], r["status_since"],
                                                     r["previous_status"], r["last_attempt_status"],
                                                     r["last_attempt_at"]) for r in store.latest()}
        assert actual == expected
        assert rows(dsn, VIEW_SQL) == rows(dsn, EXPECTED_SQL)
        before = store.latest()
        store.rebuild_latest()
        assert store.latest() == before


def test_concurrent_writers_of_one_pair(store, db_dsn):
    def writer(k):
        s = ResultStore(db_dsn)
        for i in range(15):
            s.record([attempt(status=random.choice(list(Status)), hours=random.randint(0, 50), run=f"w{k}-{i}")])

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.check_latest() == []
    assert rows(db_dsn, VIEW_SQL) == rows(db_dsn, EXPECTED_SQL)


def test_filters_and_natural_order(store):
    store.record([attempt(node=n, test=t, status=s, run="r") for n, t, s in [
        ("gpu-10", "dl_unit", "pass"), ("gpu-9", "dl_unit", "fail"), ("gpu-9", "gpu_health", "pass"),
        ("cpu-1", "dl_unit", "pass")]])
    assert [r["node_name"] for r in store.latest()] == ["cpu-1", "gpu-9", "gpu-9", "gpu-10"]
    assert {r["node_name"] for r in store.latest(node_range=parse_node_range("gpu-*"))} == {"gpu-9", "gpu-10"}
    assert [r["node_name"] for r in store.latest(node_range=parse_node_range("gpu-[9-10]"), statuses=["fail"])] == ["gpu-9"]
    assert [r["test_name"] for r in store.latest(tests=["gpu_health"])] == ["gpu_health"]
    states = store.pair_states(["gpu-9"], ["dl_unit"])
    assert list(states) == [("gpu-9", "dl_unit")] and states[("gpu-9", "dl_unit")].status == "fail"
    assert sorted((r["test_name"], r["status"]) for r in store.history("gpu-9")) == [
        ("dl_unit", "fail"), ("gpu_health", "pass")]
    assert [r["test_name"] for r in store.history("gpu-9", "gpu_health")] == ["gpu_health"]


def test_a_briefly_unreachable_database_delays_the_write_but_loses_nothing(db_dsn):
    proxy = TcpProxy(db_dsn.get("host", "127.0.0.1"), int(db_dsn.get("port", 5432)))
    if str(db_dsn.get("host", "")).startswith("/"):
        pytest.skip("the embedded server listens on a socket; the proxy needs TCP")  # CI uses TCP
    try:
        dsn = {**db_dsn, "host": "127.0.0.1", "port": proxy.port}
        slept = []

        def sleep(seconds):
            slept.append(seconds)
            if len(slept) == 3:
                proxy.up()

        store = ResultStore(dsn, retry=RetryPolicy(attempts=6, initial_delay_s=0.01), sleep=sleep)
        proxy.down()
        result = store.record([attempt(run="r1"), attempt(node="gpu-002", run="r1")])
        assert result.inserted == 2 and len(slept) == 3
        assert store.record([attempt(run="r1")]).duplicates == 1
    finally:
        proxy.close()


def test_gives_up_after_the_retry_budget_with_a_clear_message(db_dsn):
    store = ResultStore({**db_dsn, "host": "127.0.0.1", "port": 1},
                        retry=RetryPolicy(attempts=3, initial_delay_s=0.0), sleep=lambda s: None)
    with pytest.raises(database.DatabaseUnavailable, match="127.0.0.1:1"):
        store.record([attempt()])


def test_reading_without_schema_says_how_to_fix(empty_db_dsn):
    from cluster_doctor.store.history import SchemaMissing

    with pytest.raises(SchemaMissing, match=NO_SCHEMA.format(empty_db_dsn["dbname"])):
        ResultStore(empty_db_dsn).latest()


def test_one_call_can_record_thousands_of_pairs(store):
    # per-pair locks would exhaust max_locks_per_transaction; the trigger locks one of 1,024 buckets
    batch = [attempt(node=f"gpu-{i:05d}", test=t, run="bulk") for i in range(2500) for t in ("dl_unit", "gpu_health", "storage_fio")]
    assert store.record(batch).inserted == 7500
    assert len(store.latest()) == 7500


def test_db_check_never_reports_drift_while_writers_commit(store, db_dsn):
    """Both sides of the comparison come from one snapshot: writers committing in between the two
    reads must not look like drift."""
    store.record([attempt(node=f"gpu-{i:03d}", run="seed") for i in range(40)])
    done = threading.Event()
    written = []

    def writer(k):
        s = ResultStore(db_dsn)
        i = 0
        while not done.is_set():
            i += 1
            s.record([attempt(node=f"gpu-{(i * 7 + k) % 40:03d}", status=random.choice(list(Status)),
                              hours=random.randint(0, 60), run=f"w{k}-{i}")])
            written.append(1)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    try:
        reports = [store.check_latest() for _ in range(25)]
    finally:
        done.set()
        for t in threads:
            t.join()
    assert len(written) > 25  # the checks really ran among commits
    assert all(r == [] for r in reports), next(r for r in reports if r)[:3]


def test_attempts_without_a_run_id_get_distinct_content_derived_keys(store, db_dsn):
    plain = dict(node_name="gpu-001", test_name="dl_unit", finished_at=T0)
    first = store.record([Attempt(status="pass", **plain)])
    # a later fail of the same node and test, also without a run id, is a new attempt
    second = store.record([Attempt(status="fail", reason="xid 79", **{**plain, "finished_at": T0 + dt.timedelta(hours=1)})])
    again = store.record([Attempt(status="pass", **plain)])
    assert (first.inserted, second.inserted, again.duplicates) == (1, 1, 1)
    assert [r["status"] for r in store.latest()] == ["fail"]
    run_ids = [r[0] for r in rows(db_dsn, "SELECT run_id FROM validation_history")]
    assert len(set(run_ids)) == 2 and all(r.startswith("content-20261101T") for r in run_ids)


def test_a_different_attempt_under_a_stored_identity_is_a_conflict_not_a_duplicate(store, db_dsn):
    store.record([attempt(run="r1", metrics={"tflops": 1e300, "n": 1})])
    same = store.record([attempt(run="r1", metrics={"tflops": 1e300, "n": 1})])
    assert (same.inserted, same.duplicates, same.conflicts) == (0, 1, ())  # jsonb normalisation is no conflict
    other = store.record([attempt(run="r1", status="fail"), attempt(node="gpu-002", run="r1")])
    assert (other.inserted, other.duplicates, len(other.conflicts)) == (1, 0, 1)
    assert "gpu-001 · dl_unit" in other.conflicts[0] and "; differs in status" in other.conflicts[0]
    from cluster_doctor.store.history import AttemptConflict

    with pytest.raises(AttemptConflict):
        store.record([attempt(node="gpu-003", run="r1"), attempt(run="r1", status="fail")], refuse_conflicts=True)
    assert rows(db_dsn, "SELECT node_name, status FROM validation_history") == [("gpu-001", "pass"), ("gpu-002", "pass")]


def test_values_the_database_or_the_view_cannot_take_are_refused_up_front(store, db_dsn):
    now = dt.datetime.now(dt.UTC)
    future = Attempt(node_name="gpu-001", test_name="dl_unit", status="pass", finished_at=now + dt.timedelta(hours=2),
                     run_id="r")
    with pytest.raises(InvalidAttempt, match="gpu-001 · dl_unit .* finished_at .* in the future"):
        store.record([attempt(run="ok"), future])
    for bad, field in [(dict(gpu_count=2**31), "gpu_count"), (dict(try_number=2**40), "try_number"),
                       (dict(metrics={"x": "a\x00b"}), "metrics"), (dict(checks=[{"name": "\ud800"}]), "checks"),
                       (dict(run="r" * 251), "run_id")]:
        with pytest.raises(InvalidAttempt, match=field):
            store.record([attempt(run="ok"), attempt(node="gpu-002", **{"run": "bad", **bad})])
    assert rows(db_dsn, "SELECT count(*) FROM validation_history") == [(0,)]
    # a clock a little ahead is tolerated
    assert store.record([dataclasses_replace(future, finished_at=now + dt.timedelta(minutes=2))]).inserted == 1


def dataclasses_replace(a, **changes):
    import dataclasses

    return dataclasses.replace(a, **changes)


def test_an_orphans_attempt_replaces_only_its_runs_did_not_report_placeholder(store, db_dsn):
    placeholder = "the validation task did not report (never ran, killed or lost); no result"
    store.record([
        attempt(status="pass", hours=0, run="earlier", try_number=1),
        attempt(status="skipped", hours=3, run="killed", try_number=0, reason=placeholder),
        attempt(node="gpu-002", status="skipped", hours=3, run="killed", try_number=0, reason=placeholder),
    ])
    found = attempt(status="fail", hours=2, run="killed", try_number=1, reason="GPU 3 off")

    assert store.record_over_placeholder(found, placeholder_reason=placeholder) == "superseded"
    # the same attempt again (a second reaper, a retry): nothing left to replace, and no second row
    assert store.record_over_placeholder(found, placeholder_reason=placeholder) == "duplicate"
    changed = attempt(status="pass", hours=2, run="killed", try_number=1)
    assert store.record_over_placeholder(changed, placeholder_reason=placeholder) == "conflict"

    history = {(r["node_name"], r["run_id"], r["try_number"]): r["status"] for r in store.history("gpu-001")}
    assert history == {("gpu-001", "earlier", 1): "pass", ("gpu-001", "killed", 1): "fail"}
    assert [r["status"] for r in store.history("gpu-002")] == ["skipped"]  # another pair's placeholder
    assert rows(db_dsn, VIEW_SQL) == rows(db_dsn, EXPECTED_SQL) and store.check_latest() == []
    (latest,) = store.latest(tests=["dl_unit"], node_range=parse_node_range("gpu-001"))
    assert (latest["status"], latest["last_attempt_status"]) == ("fail", "fail")


def test_a_not_judged_row_becomes_its_tries_result_and_nothing_else_does(store, db_dsn):
    """A try recorded not judged (its pod kept) becomes the pod's result, same row; a not-judged
    row of another try, another run's, or a verdict are never overwritten."""
    kept = "NOT_JUDGED: the suite's result could not be read: Kubernetes API 429; pod p kept"
    store.record([
        attempt(status="pass", hours=0, run="earlier", try_number=1),
        attempt(status="skipped", hours=3, run="blink", try_number=1, reason=kept),
        attempt(node="gpu-002", status="skipped", hours=3, run="blink", try_number=2, reason=kept),
        attempt(node="gpu-003", status="fail", hours=3, run="blink", try_number=1, reason="ECC"),
    ])
    (before,) = [r for r in store.history("gpu-001") if r["run_id"] == "blink"]

    found = attempt(status="pass", hours=2, run="blink", try_number=1)
    assert store.record_over_placeholder(found) == "superseded"
    assert store.record_over_placeholder(found) == "duplicate"  # a second reaper: no second row
    other_try = attempt(node="gpu-002", status="pass", hours=2, run="blink", try_number=1)
    assert store.record_over_placeholder(other_try) == "inserted"  # try 2's row stays as it is
    verdict = attempt(node="gpu-003", status="pass", hours=2, run="blink", try_number=1)
    assert store.record_over_placeholder(verdict) == "conflict"

    (after,) = [r for r in store.history("gpu-001") if r["run_id"] == "blink"]
    assert (after["id"], after["status"], after["reason"]) == (before["id"], "pass", None)
    assert sorted((r["try_number"], r["status"]) for r in store.history("gpu-002")) == [(1, "pass"), (2, "skipped")]
    assert [r["status"] for r in store.history("gpu-003")] == ["fail"]
    assert rows(db_dsn, VIEW_SQL) == rows(db_dsn, EXPECTED_SQL) and store.check_latest() == []
    tries = store.recorded_tries([("continuous_validation", "blink", "gpu-001", "dl_unit", 1),
                                  ("continuous_validation", "blink", "gpu-002", "dl_unit", 2),
                                  ("continuous_validation", "blink", "gpu-009", "dl_unit", 1)])
    assert tries == {("continuous_validation", "blink", "gpu-001", "dl_unit", 1): ("pass", None),
                     ("continuous_validation", "blink", "gpu-002", "dl_unit", 2): ("skipped", kept)}
    assert store.recorded_tries([]) == {}


def test_an_orphans_attempt_without_a_placeholder_is_inserted_and_bad_ones_write_nothing(store):
    assert store.record_over_placeholder(attempt(run="r9"), placeholder_reason="x") == "inserted"
    future = attempt(run="r10", hours=24 * 365 * 10)
    with pytest.raises(InvalidAttempt, match="in the future"):
        store.record_over_placeholder(future, placeholder_reason="x")
    assert [r["run_id"] for r in store.history("gpu-001")] == ["r9"]
