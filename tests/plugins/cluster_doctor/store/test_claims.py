"""Run-to-run claims on a real PostgreSQL: one live claim per node, expiry and takeover, release,
idempotent retries, and no node granted to two runs however their transactions interleave."""

import datetime as dt
import random
import threading
import time

import psycopg
import pytest
from cluster_doctor.domain.config import Settings
from cluster_doctor.store import claims, database
from cluster_doctor.store.history import SchemaMissing

from tests.conftest import NO_SCHEMA

DAG = "continuous_validation"
TTL = 600.0


@pytest.fixture
def connect(db_dsn):
    return database.params_connector(db_dsn)


def rows(dsn):
    with psycopg.connect(**dsn) as conn, conn.cursor() as cur:
        cur.execute("SELECT node_name, test_name, run_id FROM validation_claims ORDER BY node_name")
        return cur.fetchall()


def expire(dsn, run_id):
    """Time passes for one run's claims (the table keeps the database's clock; move the claims instead)."""
    with psycopg.connect(**dsn) as conn, conn.cursor() as cur:
        cur.execute("UPDATE validation_claims SET claimed_at = claimed_at - interval '2 hours', "
                    "expires_at = claimed_at - interval '1 hour' WHERE run_id = %s", (run_id,))


def cands(*nodes, test="gpu_health", ttl=TTL):
    return [(n, test, ttl) for n in nodes]


def granted(result):
    return [c.node_name for c in result.granted]


def test_a_claim_takes_free_nodes_in_order_up_to_the_limit(connect, db_dsn):
    result = claims.claim(connect, cands("gpu-003", "gpu-001", "gpu-002"), dag_id=DAG, run_id="r1", limit=2)
    assert granted(result) == ["gpu-003", "gpu-001"] and result.held == []
    c = result.granted[0]
    assert c.dag_id == DAG and c.run_id == "r1" and c.test_name == "gpu_health"
    assert c.expires_at - c.claimed_at == dt.timedelta(seconds=TTL)
    assert rows(db_dsn) == [("gpu-001", "gpu_health", "r1"), ("gpu-003", "gpu_health", "r1")]
    assert [x.node_name for x in claims.live(connect)] == ["gpu-001", "gpu-003"]


def test_a_node_held_by_another_run_is_skipped_and_the_next_one_taken(connect, db_dsn):
    claims.claim(connect, cands("gpu-002"), dag_id=DAG, run_id="r1", limit=5)
    result = claims.claim(connect, cands("gpu-001", "gpu-002", "gpu-003", test="dl_unit"), dag_id=DAG, run_id="r2",
                          limit=2)
    assert granted(result) == ["gpu-001", "gpu-003"]
    [held] = result.held
    assert (held.node_name, held.test_name, held.holder.run_id, held.holder.test_name) == \
        ("gpu-002", "dl_unit", "r1", "gpu_health")
    assert held.to_dict()["run_id"] == "r1" and held.to_dict()["held_for"] == "gpu_health"
    # the holder's claim is untouched
    assert ("gpu-002", "gpu_health", "r1") in rows(db_dsn)


def test_only_the_first_candidate_of_a_node_counts(connect):
    result = claims.claim(connect, [("gpu-001", "dl_unit", TTL), ("gpu-001", "gpu_health", TTL), ("gpu-002", "dl_unit", TTL)],
                          dag_id=DAG, run_id="r1", limit=5)
    assert [(c.node_name, c.test_name) for c in result.granted] == [("gpu-001", "dl_unit"), ("gpu-002", "dl_unit")]


def test_a_bundle_counts_its_pairs_against_the_limit(connect, db_dsn):
    """A node's bundle of suites is one claim; the limit counts pairs, the last bundle may overrun it
    (prioritize cuts it)."""
    claims.claim(connect, cands("gpu-002"), dag_id=DAG, run_id="r1", limit=5)
    result = claims.claim(connect, [("gpu-001", "gpu_health", TTL, 4), ("gpu-002", "gpu_health", TTL, 4),
                                    ("gpu-003", "dl_unit", TTL, 3), ("gpu-004", "gpu_health", TTL, 1)],
                          dag_id=DAG, run_id="r2", limit=6)
    assert granted(result) == ["gpu-001", "gpu-003"]  # 4 + 3 pairs: gpu-003 is cut to 2 by the caller
    assert [h.node_name for h in result.held] == ["gpu-002"]
    assert ("gpu-003", "dl_unit", "r2") in rows(db_dsn)
    with pytest.raises(claims.InvalidClaim, match="claim pairs of 'gpu-009': expected an integer >= 1, got 0"):
        claims.claim(connect, [("gpu-009", "dl_unit", TTL, 0)], dag_id=DAG, run_id="r3", limit=1)


def test_held_nodes_past_the_limit_are_not_reported(connect):
    claims.claim(connect, cands("gpu-003"), dag_id=DAG, run_id="r1", limit=1)
    result = claims.claim(connect, cands("gpu-001", "gpu-002", "gpu-003"), dag_id=DAG, run_id="r2", limit=2)
    assert granted(result) == ["gpu-001", "gpu-002"] and result.held == []


def test_an_expired_claim_is_taken_over(connect, db_dsn, caplog):
    claims.claim(connect, cands("gpu-001", "gpu-002"), dag_id=DAG, run_id="dead", limit=2)
    expire(db_dsn, "dead")
    assert claims.live(connect) == []
    result = claims.claim(connect, cands("gpu-002"), dag_id=DAG, run_id="r2", limit=1)
    assert granted(result) == ["gpu-002"] and result.held == []
    assert sorted(c.node_name for c in result.expired) == ["gpu-001", "gpu-002"]
    assert "by run dead expired" in caplog.text
    # dead rows are cleared, not kept: only the new claim remains
    assert rows(db_dsn) == [("gpu-002", "gpu_health", "r2")]


def test_the_claims_of_a_run_that_ended_are_taken_over_at_once(connect, db_dsn, caplog):
    claims.claim(connect, cands("gpu-001"), dag_id=DAG, run_id="failed_run", limit=1)
    claims.claim(connect, cands("gpu-002"), dag_id=DAG, run_id="running_run", limit=1)
    claims.claim(connect, cands("gpu-003"), dag_id=DAG, run_id="unknown_run", limit=1)
    asked = []

    def run_ended(dag_id, run_id):
        asked.append(run_id)
        if run_id == "unknown_run":
            raise LookupError("no such DagRun")  # another Airflow, or the API failed: counts as live
        return run_id == "failed_run"

    result = claims.claim(connect, cands("gpu-001", "gpu-002", "gpu-003", "gpu-004"), dag_id=DAG, run_id="r2",
                          limit=4, run_ended=run_ended)
    assert granted(result) == ["gpu-001", "gpu-004"]
    assert [(h.node_name, h.holder.run_id) for h in result.held] == [("gpu-002", "running_run"), ("gpu-003", "unknown_run")]
    assert [c.run_id for c in result.expired] == ["failed_run"]
    assert "run failed_run ended without releasing its claim of gpu-001" in caplog.text
    assert sorted(asked) == ["failed_run", "running_run", "unknown_run"]  # never its own run
    assert ("gpu-001", "gpu_health", "r2") in rows(db_dsn)


def test_a_retry_of_the_same_run_gets_its_claims_again(connect, db_dsn):
    first = claims.claim(connect, cands("gpu-001", "gpu-002"), dag_id=DAG, run_id="r1", limit=2)
    again = claims.claim(connect, cands("gpu-001", "gpu-002"), dag_id=DAG, run_id="r1", limit=2)
    assert granted(again) == ["gpu-001", "gpu-002"] and again.held == [] and again.dropped == 0
    assert again.granted[0].expires_at >= first.granted[0].expires_at
    assert len(rows(db_dsn)) == 2
    # a retry that now plans other nodes gives up the ones it no longer plans
    moved = claims.claim(connect, cands("gpu-002", "gpu-003"), dag_id=DAG, run_id="r1", limit=2)
    assert granted(moved) == ["gpu-002", "gpu-003"] and moved.dropped == 1
    assert [r[0] for r in rows(db_dsn)] == ["gpu-002", "gpu-003"]


def test_the_same_run_id_of_another_dag_is_another_run(connect):
    claims.claim(connect, cands("gpu-001"), dag_id="other_dag", run_id="r1", limit=1)
    result = claims.claim(connect, cands("gpu-001"), dag_id=DAG, run_id="r1", limit=1)
    assert granted(result) == [] and result.held[0].holder.dag_id == "other_dag"


def test_a_dry_run_answers_the_same_and_keeps_nothing(connect, db_dsn):
    claims.claim(connect, cands("gpu-001"), dag_id=DAG, run_id="r1", limit=1)
    result = claims.claim(connect, cands("gpu-001", "gpu-002"), dag_id=DAG, run_id="r2", limit=1, dry_run=True)
    assert granted(result) == ["gpu-002"] and [h.node_name for h in result.held] == ["gpu-001"]
    assert rows(db_dsn) == [("gpu-001", "gpu_health", "r1")]


def test_release_gives_up_only_this_runs_claims(connect, db_dsn):
    claims.claim(connect, cands("gpu-001", "gpu-002", "gpu-003"), dag_id=DAG, run_id="r1", limit=3)
    claims.claim(connect, cands("gpu-004"), dag_id=DAG, run_id="r2", limit=1)
    assert claims.release(connect, dag_id=DAG, run_id="r1", nodes=["gpu-001", "gpu-004"]) == 1
    assert [r[0] for r in rows(db_dsn)] == ["gpu-002", "gpu-003", "gpu-004"]
    assert claims.release(connect, dag_id=DAG, run_id="r1", nodes=["gpu-001"]) == 0  # idempotent
    assert claims.release(connect, dag_id=DAG, run_id="r1", nodes=[]) == 0
    assert claims.release_run(connect, dag_id=DAG, run_id="r1") == 2
    assert rows(db_dsn) == [("gpu-004", "gpu_health", "r2")]
    # a released node is free for the next run at once
    assert granted(claims.claim(connect, cands("gpu-001"), dag_id=DAG, run_id="r3", limit=1)) == ["gpu-001"]


@pytest.mark.parametrize("kwargs, message", [
    ({"candidates": [("GPU 1", "gpu_health", TTL)]}, "invalid Kubernetes node name"),
    ({"candidates": [("gpu-001", "gpu-health", TTL)]}, "invalid test name"),
    ({"candidates": [("gpu-001", "gpu_health", 0)]}, "ttl_s of gpu-001"),
    ({"candidates": [("gpu-001", "gpu_health", float("inf"))]}, "ttl_s of gpu-001"),
    ({"candidates": [("gpu-001", "gpu_health")]}, "expected (node, test, ttl_s"),
    ({"run_id": ""}, "claim run_id"),
    ({"dag_id": "d" * 251}, "claim dag_id"),
    ({"limit": -1}, "claim limit"),
    ({"limit": True}, "claim limit"),
])
def test_bad_input_is_refused_in_one_line_and_writes_nothing(connect, db_dsn, kwargs, message):
    args = {"candidates": cands("gpu-009"), "dag_id": DAG, "run_id": "r1", "limit": 1, **kwargs}
    candidates = args.pop("candidates")
    # the good candidate first: nothing may be claimed before the bad one is seen
    with pytest.raises(claims.InvalidClaim, match=message.replace("(", r"\(").replace(")", r"\)")) as err:
        claims.claim(connect, [("gpu-000", "gpu_health", TTL), *candidates], **args)
    assert "\n" not in str(err.value)
    assert rows(db_dsn) == []


def test_an_old_schema_is_refused_clearly(empty_db_dsn):
    with pytest.raises(SchemaMissing, match=NO_SCHEMA.format(empty_db_dsn["dbname"])):
        claims.claim(database.params_connector(empty_db_dsn), cands("gpu-001"), dag_id=DAG, run_id="r", limit=1)


def test_ttl_covers_the_queue_and_the_task_timeout_within_the_dagrun():
    s = Settings(max_queue_s=60, pending_timeout_s=30, task_margin_s=10, suite_timeouts_s={"gpu_health": 20})
    assert claims.ttl_s(s, "gpu_health") == 60 + 30 + 20 + 10 + claims.SLACK_S
    # defaults: a run is stopped at its DagRun timeout, so no claim outlives it by more than the slack
    d = Settings()
    for test in d.tests:
        assert claims.ttl_s(d, test) == min(d.max_queue_s + d.task_timeout_s(test), d.dagrun_timeout_s) + claims.SLACK_S
        assert claims.ttl_s(d, test) <= d.dagrun_timeout_s + claims.SLACK_S
    # a bundle holds its node for all of its steps, one after another
    assert claims.ttl_s(s, ["gpu_health", "gpu_health"]) == 2 * (60 + 30 + 20 + 10) + claims.SLACK_S
    assert claims.ttl_s(d, d.tests) == d.dagrun_timeout_s + claims.SLACK_S


# ---------------------------------------------------------------------------- concurrency
def test_concurrent_runs_never_get_the_same_node(connect, db_dsn):
    """Four runs claim overlapping node sets in different orders at the same instant (a barrier),
    over many rounds: every node goes to at most one run, and what a run was refused is what another got."""
    nodes = [f"gpu-{i:03d}" for i in range(1, 13)]
    workers, rounds = 4, 40
    rng = random.Random(11)
    barrier = threading.Barrier(workers)
    errors: list[BaseException] = []

    for rnd in range(rounds):
        results: dict[str, claims.ClaimResult] = {}
        wanted = {f"run-{rnd}-{w}": rng.sample(nodes, 8) for w in range(workers)}

        def worker(run_id):
            try:
                barrier.wait(timeout=30)
                results[run_id] = claims.claim(connect, cands(*wanted[run_id]), dag_id=DAG, run_id=run_id, limit=5)
            except BaseException as exc:  # noqa: BLE001 - reported by the main thread
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(r,)) for r in wanted]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not errors, errors
        owner: dict[str, str] = {}
        for run_id, result in results.items():
            for node in granted(result):
                assert node not in owner, f"round {rnd}: {node} granted to {owner[node]} and {run_id}"
                owner[node] = run_id
            assert set(granted(result)) <= set(wanted[run_id])
        # the table is exactly what was granted; every refusal names the run that holds the node
        assert {(n, r) for n, _, r in rows(db_dsn)} == set(owner.items())
        for run_id, result in results.items():
            for held in result.held:
                assert owner[held.node_name] == held.holder.run_id != run_id
            # greedy: a run got fewer than its limit only when the rest of its nodes were held
            assert len(granted(result)) == 5 or len(granted(result)) + len(result.held) == len(wanted[run_id])
        for run_id in results:
            claims.release_run(connect, dag_id=DAG, run_id=run_id)
        assert rows(db_dsn) == []


def test_a_writer_that_skips_the_lock_still_cannot_be_overwritten(connect, db_dsn):
    """The lock serializes claimers; the INSERT's ON CONFLICT ... WHERE is the last guard: a claim
    committed by a transaction that never took the lock, while ours waits on it, stays its owner's."""
    intruder = psycopg.connect(**db_dsn)
    with intruder.cursor() as cur:
        cur.execute("INSERT INTO validation_claims VALUES ('gpu-001', 'dl_unit', 'other', 'intruder', now(), "
                    "now() + interval '1 hour')")
    result: dict[str, claims.ClaimResult] = {}
    thread = threading.Thread(target=lambda: result.setdefault("r", claims.claim(
        connect, cands("gpu-001", "gpu-002"), dag_id=DAG, run_id="r1", limit=2)))
    thread.start()
    try:
        # ours does not see the uncommitted row, so it inserts gpu-001 and waits for the intruder
        with psycopg.connect(**db_dsn, autocommit=True) as watch, watch.cursor() as cur:
            for _ in range(600):
                cur.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                            "AND wait_event = 'transactionid' AND datname = current_database()")
                if cur.fetchone()[0]:
                    break
                time.sleep(0.05)
            else:
                pytest.fail("the claim never waited for the intruder's row")
    finally:
        intruder.commit()
        intruder.close()
        thread.join(timeout=30)
    r = result["r"]
    assert granted(r) == ["gpu-002"]
    assert [(h.node_name, h.holder.run_id) for h in r.held] == [("gpu-001", "intruder")]
    assert ("gpu-001", "dl_unit", "intruder") in rows(db_dsn)
