"""The attempt spool: an outage of the results DB longer than every retry, or any other failure to write,
loses nothing; one spool shared by every worker is drained exactly once.

The outage is real: PostgreSQL behind tests/support/tcp_proxy.py, switched off; a permission error is
a real role without INSERT; concurrent drainers are two processes. The DAG's record task
is exercised at the tasks level (tasks.record, as the task body calls it, once per Airflow try)."""

import concurrent.futures
import datetime as dt
import json
import multiprocessing
import os
import uuid

import psycopg
import pytest
from cluster_doctor.airflow import tasks
from cluster_doctor.domain.attempts import Attempt
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.payloads import Plan
from cluster_doctor.store import database, spool
from cluster_doctor.store.history import INDEPENDENT_LATEST_SQL, ResultStore, RetryPolicy
from psycopg import sql

from tests.support.tcp_proxy import TcpProxy

DAG = "continuous_validation"
NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)
TRIES = 4  # the record task: 1 try + 3 retries


def attempt(node, status, *, run, minutes_ago, test="gpu_health", map_index=0, reason=None):
    finished = NOW - dt.timedelta(minutes=minutes_ago)
    return {"node_name": node, "test_name": test, "status": status, "finished_at": finished.isoformat(),
            "started_at": (finished - dt.timedelta(seconds=90)).isoformat(), "duration_s": 90.0,
            "reason": reason, "dag_id": DAG, "run_id": run, "map_index": map_index, "try_number": 1,
            "metrics": {"gpus_visible": 8}, "checks": [{"name": "gpu_count", "status": "pass"}]}


def planned(*pairs):
    return Plan.from_xcom({
        "planned_at": NOW.isoformat(), "dry_run": False,
        "pairs": [{"node_name": n, "test_name": t, "why": "never executed", "last_status": None,
                   "last_finished_at": None, "gpu_count": 8, "gpu_model": "NVIDIA H200"} for n, t in pairs]})


def history(dsn, where="TRUE", params=()):
    with psycopg.connect(**dsn) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT run_id, node_name, test_name, status, try_number FROM validation_history "
                    f"WHERE {where} ORDER BY run_id, node_name, test_name", params)
        return cur.fetchall()


@pytest.fixture
def proxied(db_dsn):
    if str(db_dsn.get("host", "")).startswith("/"):
        pytest.skip("the embedded server listens on a socket; the proxy needs TCP")  # CI uses TCP
    proxy = TcpProxy(db_dsn.get("host", "127.0.0.1"), int(db_dsn.get("port", 5432)))
    yield proxy, {**db_dsn, "host": "127.0.0.1", "port": proxy.port}
    proxy.close()


def test_an_outage_longer_than_every_retry_across_two_runs_loses_nothing(proxied, db_dsn):
    proxy, dsn = proxied
    retries = []
    store = ResultStore(dsn, retry=RetryPolicy(attempts=3, initial_delay_s=0.01), sleep=retries.append)
    box = spool.Spool()  # the default one, as the record task uses it (private to each test)
    # an earlier pass of gpu-002 is already recorded: run 2 will turn it into a fail
    store.record([attempt("gpu-002", "pass", run="r0", minutes_ago=300)])

    run1 = planned(("gpu-001", "gpu_health"), ("gpu-002", "gpu_health"), ("gpu-003", "gpu_health"))
    reported1 = [attempt("gpu-001", "pass", run="r1", minutes_ago=120),
                 attempt("gpu-002", "pass", run="r1", minutes_ago=119, map_index=1)]  # gpu-003 never reported
    run2 = planned(("gpu-002", "gpu_health"), ("gpu-003", "gpu_health"))
    reported2 = [attempt("gpu-002", "fail", run="r2", minutes_ago=60, reason="ecc_uncorrected: 2 errors"),
                 attempt("gpu-003", "pass", run="r2", minutes_ago=59, map_index=1)]

    proxy.down()
    for run_id, plan, reported in (("r1", run1, reported1), ("r2", run2, reported2)):
        for _ in range(TRIES):  # every Airflow try of the record task gives up: the run fails loudly
            with pytest.raises(database.DatabaseUnavailable):
                tasks.record(plan, reported, store, dag_id=DAG, run_id=run_id)
    assert len(retries) == 2 * TRIES * 2  # the store retried each time before giving up
    assert history(db_dsn, "run_id <> 'r0'") == []
    assert len(box) >= 5

    proxy.up()
    # the next run reaches the database: a quiet one (nothing planned) still records the spool
    tasks.record(planned(), [], store, dag_id=DAG, run_id="r3")
    assert len(box) == 0

    assert history(db_dsn) == [
        ("r0", "gpu-002", "gpu_health", "pass", 1),
        ("r1", "gpu-001", "gpu_health", "pass", 1),
        ("r1", "gpu-002", "gpu_health", "pass", 1),
        ("r1", "gpu-003", "gpu_health", "skipped", 0),
        ("r2", "gpu-002", "gpu_health", "fail", 1),
        ("r2", "gpu-003", "gpu_health", "pass", 1),
    ]
    latest = {r["node_name"]: r for r in ResultStore(db_dsn).latest()}
    assert {n: (r["status"], r["previous_status"], r["reason"]) for n, r in latest.items()} == {
        "gpu-001": ("pass", None, None), "gpu-002": ("fail", "pass", "ecc_uncorrected: 2 errors"),
        "gpu-003": ("pass", None, None)}
    assert ResultStore(db_dsn).check_latest() == []
    # and the view agrees with the history computed independently
    with psycopg.connect(**db_dsn) as conn, conn.cursor() as cur:
        cur.execute(INDEPENDENT_LATEST_SQL.format(table="validation_history"))
        assert {(r[0], r[2]) for r in cur.fetchall()} == {("gpu-001", "pass"), ("gpu-002", "fail"), ("gpu-003", "pass")}


def test_the_record_task_spools_to_the_default_directory(proxied, db_dsn, tmp_path, monkeypatch):
    proxy, dsn = proxied
    monkeypatch.setenv(spool.SPOOL_ENV, str(tmp_path / "default"))
    store = ResultStore(dsn, retry=RetryPolicy(attempts=2, initial_delay_s=0.0), sleep=lambda s: None)
    plan = planned(("gpu-001", "gpu_health"))
    proxy.down()
    with pytest.raises(database.DatabaseUnavailable):
        tasks.record(plan, [attempt("gpu-001", "fail", run="r1", minutes_ago=5)], store, dag_id=DAG, run_id="r1")
    (path,) = spool.Spool().files()
    assert path.parent == tmp_path / "default"
    proxy.up()
    tasks.record(planned(), [], store, dag_id=DAG, run_id="r2")
    assert history(db_dsn) == [("r1", "gpu-001", "gpu_health", "fail", 1)]
    assert spool.Spool().files() == []


def test_spool_files_are_complete_content_named_and_written_once(tmp_path):
    box = spool.Spool(tmp_path)
    a = Attempt.from_dict(attempt("gpu-001", "pass", run="r1", minutes_ago=3))
    b = Attempt.from_dict(attempt("gpu-001", "fail", run="r1", minutes_ago=3))  # same identity, other content
    first = box.put([a])
    assert box.put([a]) == first and len(box) == 1
    box.put([b])
    assert len(box) == 2  # two different attempts are never one file
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    body = json.loads(first[0].read_text())
    assert body["format"] == spool.FORMAT and Attempt.from_dict(body["attempt"]) == a
    assert first[0].name.startswith(a.finished_at.strftime("%Y%m%dT%H%M%S"))
    assert oct(first[0].stat().st_mode & 0o777) == "0o600"


def test_replay_is_in_finish_order_and_idempotent(store, db_dsn, tmp_path):
    box = spool.Spool(tmp_path)
    older = Attempt.from_dict(attempt("gpu-001", "fail", run="r1", minutes_ago=90, reason="xid 79"))
    newer = Attempt.from_dict(attempt("gpu-001", "pass", run="r2", minutes_ago=10))
    box.put([newer, older])
    assert [p.name for p in box.files()] == [spool.file_name(older), spool.file_name(newer)]
    result = box.replay(store)
    assert (result.replayed, result.inserted) == (2, 2) and len(box) == 0
    # a crash after the commit but before the files were removed: the next replay finds duplicates
    box.put([older, newer])
    result = box.replay(store)
    assert (result.replayed, result.inserted) == (2, 0) and len(box) == 0
    assert history(db_dsn) == [("r1", "gpu-001", "gpu_health", "fail", 1), ("r2", "gpu-001", "gpu_health", "pass", 1)]
    (row,) = store.latest()
    assert (row["status"], row["previous_status"]) == ("pass", "fail")


def test_a_file_that_cannot_be_recorded_is_set_aside_and_the_rest_recorded(store, db_dsn, tmp_path):
    box = spool.Spool(tmp_path)
    good = Attempt.from_dict(attempt("gpu-001", "pass", run="r1", minutes_ago=5))
    box.put([good])
    (tmp_path / "20261101T000000000000Z-garbage.json").write_bytes(b"\xff\xfe not json")
    future = attempt("gpu-002", "pass", run="r1", minutes_ago=-600)  # a node clock 10 h ahead
    (tmp_path / "20991231T000000000000Z-future.json").write_text(json.dumps({"format": 1, "attempt": future}))
    result = box.replay(store)
    assert result.inserted == 1 and len(result.rejected) == 2
    assert any("future" in why for why in result.rejected)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "20261101T000000000000Z-garbage.json.rejected", "20991231T000000000000Z-future.json.rejected"]
    assert history(db_dsn) == [("r1", "gpu-001", "gpu_health", "pass", 1)]


def test_a_database_still_down_leaves_the_spool_untouched(tmp_path):
    box = spool.Spool(tmp_path)
    box.put([Attempt.from_dict(attempt("gpu-001", "pass", run="r1", minutes_ago=5))])
    store = ResultStore({"host": "127.0.0.1", "port": 1, "dbname": "x"},
                        retry=RetryPolicy(attempts=2, initial_delay_s=0.0), sleep=lambda s: None)
    with pytest.raises(database.DatabaseUnavailable):
        box.replay(store)
    assert len(box) == 1


def test_when_the_spool_cannot_be_written_either_the_task_fails_loudly_with_every_attempt_in_its_log(tmp_path, caplog):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    store = ResultStore({"host": "127.0.0.1", "port": 1, "dbname": "x"},
                        retry=RetryPolicy(attempts=1), sleep=lambda s: None)
    lost = [Attempt.from_dict(attempt(f"gpu-00{i}", "fail", run="r1", minutes_ago=5, map_index=i)) for i in (1, 2)]
    with pytest.raises(spool.SpoolUnwritable, match=r"2 attempt\(s\) could not be recorded .* nor spooled to .*not-a-dir") as exc:
        spool.record_or_spool(store, lost, spool.Spool(blocker / "spool"))
    assert isinstance(exc.value.__cause__, database.DatabaseUnavailable)
    logged = [json.loads(r.getMessage().removeprefix("UNRECORDED ATTEMPT ")) for r in caplog.records
              if r.getMessage().startswith("UNRECORDED ATTEMPT ")]
    assert [Attempt.from_dict(a) for a in logged] == lost  # each one, whole, re-recordable from the log


def test_default_directory(tmp_path):
    assert spool.default_dir({spool.SPOOL_ENV: "/srv/spool", "AIRFLOW_HOME": "/a"}) == spool.pathlib.Path("/srv/spool")
    assert spool.default_dir({"AIRFLOW_HOME": "/a"}) == spool.pathlib.Path("/a/cluster_doctor/spool")
    assert spool.default_dir({}).parts[-2:] == (".cluster_doctor", "spool")
    assert os.sep in str(spool.default_dir({}))
    with pytest.raises(ValueError, match="URL"):
        spool.default_dir({spool.SPOOL_ENV: "s3://bucket/spool"})


# ---------------------------------------------------------------------------- any failure to write spools
@pytest.fixture
def insert_denied(pg_admin_dsn, db_dsn):
    """A role that may read the results but not write them: a permission error, not an outage."""
    role = f"cd_ro_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(**db_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        conn.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA public TO {}").format(sql.Identifier(role)))
    try:
        yield {**db_dsn, "user": role}
    finally:
        with psycopg.connect(**db_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_a_permission_error_spools_the_attempts_and_the_next_record_drains_them(insert_denied, db_dsn, tmp_path):
    box = spool.Spool(tmp_path / "shared")
    denied = ResultStore(insert_denied, retry=RetryPolicy(attempts=1))
    plan = planned(("gpu-001", "gpu_health"), ("gpu-002", "gpu_health"))
    reported = [attempt("gpu-001", "pass", run="r1", minutes_ago=5),
                attempt("gpu-002", "fail", run="r1", minutes_ago=4, map_index=1)]
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        tasks.record(plan, reported, denied, dag_id=DAG, run_id="r1", settings=Settings(spool_dir=str(box.directory)))
    assert len(box) == 2 and history(db_dsn) == []
    status = box.status()
    assert (status.waiting, status.rejected) == (2, 0)
    assert status.oldest_at == NOW - dt.timedelta(minutes=5)
    assert "2 attempt(s) wait in the spool" in status.describe(NOW)
    # the grant is fixed; the next run's record (another worker: same shared location) drains it
    tasks.record(planned(), [], ResultStore(db_dsn), dag_id=DAG, run_id="r2",
                 settings=Settings(spool_dir=str(box.directory)))
    assert len(box) == 0 and box.status().describe(NOW) is None
    assert history(db_dsn) == [("r1", "gpu-001", "gpu_health", "pass", 1), ("r1", "gpu-002", "gpu_health", "fail", 1)]


def test_a_drain_the_database_forbids_keeps_every_file(insert_denied, tmp_path):
    box = spool.Spool(tmp_path)
    box.put([Attempt.from_dict(attempt("gpu-001", "pass", run="r1", minutes_ago=5))])
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        box.replay(ResultStore(insert_denied, retry=RetryPolicy(attempts=1)))
    assert len(box) == 1 and not list(tmp_path.glob("*.rejected"))  # the access is wrong, not the attempt


def test_an_undrainable_spool_never_holds_a_runs_own_attempts_back(store, db_dsn, tmp_path, monkeypatch, caplog):
    box = spool.Spool(tmp_path)
    box.put([Attempt.from_dict(attempt("gpu-009", "pass", run="r0", minutes_ago=50))])
    monkeypatch.setattr(spool.Spool, "_drain", lambda self, store: 1 / 0)  # a bug in draining, not the database
    result = spool.record_or_spool(store, [Attempt.from_dict(attempt("gpu-001", "pass", run="r1", minutes_ago=5))], box)
    assert result.inserted == 1 and len(box) == 1
    assert "this run's attempts are recorded regardless" in caplog.text


# ---------------------------------------------------------------------------- one shared spool, many drainers
def _drain(location: str, dsn: dict, barrier) -> tuple[int, int, bool]:
    """One worker's record task draining the shared spool (a process of its own, like a Celery worker)."""
    from cluster_doctor.airflow import storage

    box = spool.Spool(storage.location(location))
    barrier.wait(timeout=60)
    result = box.replay(ResultStore(dsn))
    return result.replayed, result.inserted, result.busy


def test_two_workers_draining_one_shared_spool_record_each_attempt_exactly_once(db_dsn, tmp_path):
    shared = tmp_path / "shared-volume" / "spool"
    many = [Attempt.from_dict(attempt(f"gpu-{i:03d}", "pass", run=f"r{i % 7}", minutes_ago=600 - i,
                                      map_index=i)) for i in range(400)]
    spool.Spool(shared).put(many)
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Manager().Barrier(2)
    # one worker sees the volume as a path, the other through an ObjectStoragePath URL: one spool
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx) as pool:
        outcomes = list(pool.map(_drain, [str(shared), f"file://{shared}"], [db_dsn, db_dsn], [barrier, barrier]))
    assert sum(replayed for replayed, _, _ in outcomes) == len(many)  # no file recorded by both
    assert sum(inserted for _, inserted, _ in outcomes) == len(many)
    assert not any(busy for _, _, busy in outcomes)  # the second waited for the first, then found it empty
    assert spool.Spool(shared).files() == []
    assert len(history(db_dsn)) == len(many) == len(set(history(db_dsn)))


def test_a_drainer_that_waits_too_long_leaves_the_spool_to_the_holder(store, tmp_path):
    box = spool.Spool(tmp_path)
    box.put([Attempt.from_dict(attempt("gpu-001", "pass", run="r1", minutes_ago=5))])
    with store.exclusive(spool.LOCK, wait_s=1) as held:  # another worker is draining
        assert held
        result = box.replay(store, wait_s=0.2)
    assert result.busy and len(box) == 1
    assert "being drained by another task" in result.describe(box.directory)
    assert box.replay(store).inserted == 1 and len(box) == 0


def test_an_object_store_spool_holds_complete_files_and_drains(store, db_dsn, tmp_path):
    from airflow.sdk import ObjectStoragePath

    box = spool.Spool(ObjectStoragePath(f"file://{tmp_path}/bucket/spool"))
    a = Attempt.from_dict(attempt("gpu-001", "fail", run="r1", minutes_ago=9, reason="ecc"))
    (path,) = box.put([a])
    assert box.put([a]) == [path] and len(box) == 1
    assert not [p for p in (tmp_path / "bucket" / "spool").iterdir() if p.name.startswith(".")]
    assert json.loads(path.read_bytes())["attempt"]["reason"] == "ecc"
    (tmp_path / "bucket" / "spool" / "20261101T000000000000Z-junk.json").write_text("{")
    result = box.replay(store)
    assert (result.inserted, len(result.rejected)) == (1, 1) and len(box) == 0
    assert box.status().rejected == 1
    assert history(db_dsn) == [("r1", "gpu-001", "gpu_health", "fail", 1)]
