"""The attempt spool: an outage of the results DB longer than every retry loses nothing.

The outage is real: PostgreSQL behind tests/support/tcp_proxy.py, switched off. The DAG's record task
is exercised at the tasks level (tasks.record, as the task body calls it, once per Airflow try)."""

import datetime as dt
import json
import os

import psycopg
import pytest
from cluster_doctor.airflow import tasks
from cluster_doctor.domain.attempts import Attempt
from cluster_doctor.domain.payloads import Plan
from cluster_doctor.store import database, spool
from cluster_doctor.store.history import INDEPENDENT_LATEST_SQL, ResultStore, RetryPolicy

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


def test_when_the_spool_cannot_be_written_the_database_error_is_raised(tmp_path, caplog):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    store = ResultStore({"host": "127.0.0.1", "port": 1, "dbname": "x"},
                        retry=RetryPolicy(attempts=1), sleep=lambda s: None)
    with pytest.raises(database.DatabaseUnavailable):
        spool.record_or_spool(store, [Attempt.from_dict(attempt("gpu-001", "pass", run="r1", minutes_ago=5))],
                              spool.Spool(blocker / "spool"))
    assert "only in this run's XCom" in caplog.text


def test_default_directory(tmp_path):
    assert spool.default_dir({spool.SPOOL_ENV: "/srv/spool", "AIRFLOW_HOME": "/a"}) == spool.pathlib.Path("/srv/spool")
    assert spool.default_dir({"AIRFLOW_HOME": "/a"}) == spool.pathlib.Path("/a/cluster_doctor/spool")
    assert spool.default_dir({}).parts[-2:] == (".cluster_doctor", "spool")
    assert os.sep in str(spool.default_dir({}))
