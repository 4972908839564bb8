import json
import sys

import pytest

from tests.support.cli import cli


def test_upgrade_record_status_plan_history(db_url, tmp_path):
    assert "up to date" in cli("db", "upgrade", "--db-url", db_url).stdout
    attempts = [
        {"node_name": "gpu-001", "test_name": "dl_unit", "status": "fail", "finished_at": "2026-11-21T10:00:00Z",
         "reason": "cuda:3 gemm 400 TFLOPS < 657", "run_id": "r1"},
        {"node_name": "gpu-002", "test_name": "dl_unit", "status": "pass", "finished_at": "2026-11-22T10:00:00Z",
         "run_id": "r1"},
    ]
    path = tmp_path / "attempts.json"
    path.write_text(json.dumps(attempts))
    out = cli("record", "--attempts", str(path), "--db-url", db_url)
    assert out.returncode == 0 and "recorded 2" in out.stdout
    assert "2 already present" in cli("record", "--attempts", str(path), "--db-url", db_url).stdout

    table = cli("status", "--db-url", db_url).stdout
    assert "gpu-001" in table and "cuda:3 gemm" in table and "fail" in table
    rows = json.loads(cli("status", "--format", "json", "--db-url", db_url).stdout)
    assert {(r["node_name"], r["status"]) for r in rows} == {("gpu-001", "fail"), ("gpu-002", "pass")}
    csv_lines = cli("status", "--format", "csv", "--node-range", "gpu-002", "--db-url", db_url).stdout.splitlines()
    assert csv_lines[0].startswith("node_name,test_name,status") and len(csv_lines) == 2

    plan = json.loads(cli("plan", "--nodes", "gpu-[001-003]", "--tests", "dl_unit", "--format", "json",
                          "--now", "2026-11-22T12:00:00Z", "--db-url", db_url).stdout)
    assert [(p["node_name"], p["why"]) for p in plan] == [("gpu-003", "never executed"),
                                                          ("gpu-001", "retest after failure")]
    assert "cuda:3 gemm" in cli("history", "gpu-001", "--db-url", db_url).stdout


def test_record_a_suite_result_file(db_url, tmp_path):
    result = {"schema_version": "1", "suite": "storage_fio", "node": "gpu-005", "status": "pass",
              "started_at": "2026-11-22T10:00:00Z", "finished_at": "2026-11-22T10:01:00Z", "duration_s": 60,
              "checks": [], "metrics": {"fio_seq_read_mibps": 2100.0}, "environment": {"gpu_model": "NVIDIA H100"},
              "suite_version": "sha256:abc"}
    path = tmp_path / "storage_fio_gpu-005_1763805600.json"
    path.write_text(json.dumps(result))
    assert cli("record", "--result", str(path), "--db-url", db_url).returncode == 0
    rows = json.loads(cli("status", "--format", "json", "--db-url", db_url).stdout)
    assert rows[0]["metrics"] == {"fio_seq_read_mibps": 2100.0} and rows[0]["gpu_model"] == "NVIDIA H100"


def test_unreachable_database_is_one_line_and_nonzero():
    out = cli("status", "--db-url", "postgresql://postgres@127.0.0.1:1/test")
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1 and "127.0.0.1:1" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("attempt, message", [
    ({"node_name": "gpu-1", "test_name": "dl_unit", "status": "pass", "finished_at": "2026-11-22T10:00:00Z",
      "metrics": [1]}, "metrics must be a JSON object"),
    ({"node_name": "gpu-1", "test_name": "dl_unit", "status": "great", "finished_at": "2026-11-22T10:00:00Z"},
     "unknown status 'great'"),
    ({"node_name": "Gpu_1", "test_name": "dl_unit", "status": "pass", "finished_at": "2026-11-22T10:00:00Z"},
     "invalid Kubernetes node name"),
])
def test_malformed_input_is_rejected_before_writing(db_url, attempt, message):
    good = {"node_name": "gpu-2", "test_name": "dl_unit", "status": "pass", "finished_at": "2026-11-22T10:00:00Z"}
    out = cli("record", "--attempts", "-", "--db-url", db_url, stdin=json.dumps([good, attempt]))
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr
    assert json.loads(cli("status", "--format", "json", "--db-url", db_url).stdout) == []


@pytest.mark.parametrize("args, message", [
    (["plan", "--nodes", "gpu-[1-"], "unbalanced"),
    (["plan", "--nodes", "gpu-1", "--stale-before", "last week"], "--stale-before"),
    (["status", "--node-range", "GPU-1"], "GPU-1"),
    (["status", "--db-url", "mysql://x/y"], "postgresql://"),
])
def test_bad_arguments_exit_2_with_one_line(args, message, db_url):
    if "--db-url" not in args:
        args = [*args, "--db-url", db_url]
    out = cli(*args)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_airflow_connection_env_is_used(db_url):
    out = cli("db", "version", env={"AIRFLOW_CONN_VALIDATION_DB": db_url})
    assert out.returncode == 0 and out.stdout.strip() == str(len(migrations.available()))


# ---------------------------------------------------------------------------- in process (fast)
import datetime as dt  # noqa: E402
import io  # noqa: E402

import psycopg  # noqa: E402
from cluster_doctor.cli import main as cli_module
from cluster_doctor.domain.attempts import Attempt  # noqa: E402
from cluster_doctor.store import migrations, spool  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st


def run(*args, stdin=b""):
    """cli.main in this process: (exit code, stdout, stderr)."""
    import contextlib

    out, err = io.StringIO(), io.StringIO()
    real_stdin = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            code = cli_module.main(list(args), out=out)
    finally:
        sys.stdin = real_stdin
    return code, out.getvalue(), err.getvalue()


def count(db_url, where="TRUE"):
    with psycopg.connect(db_url) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM validation_history WHERE {where}")
        return cur.fetchone()[0]


def good(node="gpu-001", status="pass", minutes_ago=10, **kw):
    finished = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=minutes_ago)
    return {"node_name": node, "test_name": "dl_unit", "status": status, "finished_at": finished.isoformat(), **kw}


@pytest.mark.parametrize("args, names", [
    (["history", "gpu-001\n"], "argument node"),
    (["history", "a" * 254], "argument node"),  # a node name is at most 253 characters
    (["history", "gpu-001", "--limit", "-5"], "argument --limit"),
    (["history", "gpu-001", "--limit", "1e20"], "argument --limit"),
    (["history", "gpu-001", "--limit", "99999999999999999999999"], "argument --limit"),
    (["history", "gpu-001", "--test", "dl_unit\n"], "argument --test"),
    (["status", "--staleness-days", "nan"], "argument --staleness-days"),
    (["status", "--staleness-days", "1e300"], "argument --staleness-days"),
    (["status", "--staleness-days", "-1"], "argument --staleness-days"),
    (["status", "--node-range", "gpu-[1-99999999999999999999]"], "gpu-[1-99999999999999999999]"),
    (["plan", "--nodes", "gpu-1", "--tests", "nope"], "argument --tests: unknown suite(s) 'nope'"),
    (["plan", "--nodes", "gpu-1", "--tests", ","], "argument --tests"),
    (["plan", "--nodes", "gpu-1", "--stale-before", "2999-01-01T00:00:00Z"], "argument --stale-before"),
    (["plan", "--nodes", "gpu-1", "--stale-before", "1e20"], "argument --stale-before"),
    (["plan", "--nodes", "gpu-1", "--max-pairs", "1e20"], "argument --max-pairs"),
    (["plan", "--live", "--kubeconfig", "/etc/hostname"], "--kubeconfig"),
    (["record", "--result", "x.json", "--run-id", "r\x1b"], "argument --run-id"),
    (["status", "--li"], "unrecognized arguments: --li"),
])
def test_a_bad_argument_is_one_line_naming_it_and_exit_2(db_url, args, names):
    code, out, err = run(*args, "--db-url", db_url)
    assert code == 2 and out == ""
    assert names in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("content, problem", [
    (b"\xff\xfe\x00[", "not UTF-8"),
    (b"[" * 100_000, "nested too deeply"),
    (b'[{"gpu_count": ' + b"9" * 5000 + b"}]", "not usable JSON"),
    (b"{not json", "not valid JSON"),
])
def test_a_bad_input_file_is_one_line_and_writes_nothing(db_url, tmp_path, content, problem):
    path = tmp_path / "attempts.json"
    path.write_bytes(content)
    for args in (["record", "--attempts", str(path)], ["record", "--result", str(path)],
                 ["plan", "--nodes-file", str(path)]):
        code, _, err = run(*args, "--db-url", db_url)
        if args[0] == "plan" and not content.lstrip().startswith(b"[") and problem != "not UTF-8":
            continue  # one name per line: plan reads it as names, checked below
        assert code == 2 and problem in err and err.count("\n") == 1, (args, err)
    assert count(db_url) == 0
    code, _, err = run("record", "--attempts", str(tmp_path), "--db-url", db_url)
    assert code == 2 and "cannot read" in err


def test_a_batch_with_bad_rows_is_refused_whole_naming_every_bad_row(db_url):
    batch = [good("gpu-001"),
             good("gpu-002", finished_at=1e12),  # seconds in the year 33658
             good("gpu-003", finished_at=1e20),
             good("gpu-004\n"),
             good("gpu-005", gpu_count=2**40),
             good("gpu-006", finished_at=(dt.datetime.now(dt.UTC) + dt.timedelta(days=1)).isoformat()),
             good("gpu-007", reason="fine")]
    code, out, err = run("record", "--attempts", "-", "--db-url", db_url, stdin=json.dumps(batch).encode())
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "5 of 7 attempt(s) invalid, nothing recorded" in err
    out_of_range = "finished_at: not a Unix timestamp between the years 1 and 9999"
    for label, why in [("#2", out_of_range), ("#3", out_of_range),
                       ("#4", "invalid Kubernetes node name 'gpu-004\\n'"), ("#5", "gpu_count"),
                       ("#6", "finished_at ")]:
        assert f"attempt {label}: {why}" in err, err
    assert "is in the future" in err
    assert count(db_url) == 0
    # the good rows alone go in
    code, out, _ = run("record", "--attempts", "-", "--db-url", db_url,
                       stdin=json.dumps([batch[0], batch[-1]]).encode())
    assert code == 0 and "recorded 2" in out


def test_identity_is_derived_from_content_never_from_the_file_name(db_url, tmp_path):
    def result(status, started):
        return {"schema_version": "1", "suite": "dl_unit", "node": "gpu-001", "status": status,
                "started_at": started, "finished_at": started.replace(":00Z", ":30Z"), "duration_s": 30,
                "suite_version": "sha256:abc", "checks": [], "metrics": {}}

    # the same file name in two directories: a pass, then a later fail of the same node and test
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, second = tmp_path / "a" / "dl_unit_gpu-001.json", tmp_path / "b" / "dl_unit_gpu-001.json"
    first.write_text(json.dumps(result("pass", "2026-11-22T08:00:00Z")))
    second.write_text(json.dumps(result("fail", "2026-11-22T09:00:00Z")))
    assert run("record", "--result", str(first), "--db-url", db_url)[1].startswith("recorded 1 attempt(s); 0 already")
    code, out, _ = run("record", "--result", str(second), "--db-url", db_url)
    assert (code, out.strip()) == (0, "recorded 1 attempt(s); 0 already present")
    # a true duplicate (the same file again, under another name) is still one
    copy = tmp_path / "copy.json"
    copy.write_text(second.read_text())
    assert run("record", "--result", str(copy), "--db-url", db_url)[1].strip() == "recorded 0 attempt(s); 1 already present"
    with psycopg.connect(db_url) as conn, conn.cursor() as cur:
        cur.execute("SELECT status, run_id FROM validation_history ORDER BY finished_at")
        stored = cur.fetchall()
    assert [s for s, _ in stored] == ["pass", "fail"]
    assert all(r.startswith("content-20261122T") and "abc" in r for _, r in stored)
    code, out, _ = run("status", "--format", "json", "--db-url", db_url)
    assert json.loads(out)[0]["status"] == "fail"
    # attempts without a run id: distinct ones no longer share a key
    code, out, _ = run("record", "--attempts", "-", "--db-url", db_url,
                       stdin=json.dumps([good("gpu-002", "pass", 30), good("gpu-002", "fail", 20)]).encode())
    assert out.strip() == "recorded 2 attempt(s); 0 already present"


def test_a_different_attempt_under_a_stored_identity_is_refused(db_url):
    first = good("gpu-001", "pass", run_id="r1", dag_id="manual")
    assert run("record", "--attempts", "-", "--db-url", db_url, stdin=json.dumps([first]).encode())[0] == 0
    clash = good("gpu-001", "fail", 5, run_id="r1", dag_id="manual")
    code, _, err = run("record", "--attempts", "-", "--db-url", db_url,
                       stdin=json.dumps([good("gpu-009"), clash]).encode())
    assert code == 2 and "identity of a different stored attempt" in err and "gpu-001 · dl_unit" in err
    assert count(db_url) == 1  # the good one in that batch was not written either


def test_terminal_control_characters_never_reach_the_terminal(db_url):
    hostile = "GPU 3 \x1b[2J\x1b]0;owned\x07fell off\rthe bus \u202eevil\x9b"
    run("record", "--attempts", "-", "--db-url", db_url,
        stdin=json.dumps([good("gpu-001", "fail", reason=hostile, run_id="r\x01")]).encode())
    assert count(db_url) == 1
    for args in (["status"], ["status", "--format", "csv"], ["history", "gpu-001"],
                 ["history", "gpu-001", "--format", "csv"], ["status", "--format", "json"]):
        code, out, _ = run(*args, "--db-url", db_url)
        assert code == 0
        assert not any(c in out for c in "\x1b\x07\r\x01\u202e\x9b"), (args, out)
        if args[-1] != "json":
            assert "GPU 3 [2J]0;ownedfell offthe bus evil" in out
    assert json.loads(run("status", "--format", "json", "--db-url", db_url)[1])[0]["reason"] == hostile


def test_db_check_reports_an_attempt_that_finishes_in_the_future(db_url):
    assert run("db", "check", "--db-url", db_url)[0] == 0
    with psycopg.connect(db_url) as conn:  # written before the store refused such rows
        conn.execute("INSERT INTO validation_history (node_name, test_name, status, finished_at) "
                     "VALUES ('gpu-001', 'dl_unit', 'pass', %s)", (dt.datetime.now(dt.UTC) + dt.timedelta(days=3),))
    code, out, err = run("db", "check", "--db-url", db_url)
    assert code == 1 and "gpu-001 · dl_unit" in out and "finish in the future" in err


def test_db_claims_lists_the_live_claims(db_url):
    from cluster_doctor.store import claims, database

    connect = database.url_connector(db_url)
    claims.claim(connect, [("gpu-002", "dl_unit", 600), ("gpu-001", "gpu_health", 600)], dag_id="continuous_validation",
                 run_id="backfill__2026-11-20T03:00:00+00:00", limit=2)
    claims.claim(connect, [("gpu-003", "dl_unit", 600)], dag_id="continuous_validation", run_id="dead", limit=1)
    with psycopg.connect(db_url) as conn:  # that run died: its claim expired
        conn.execute("UPDATE validation_claims SET expires_at = claimed_at WHERE run_id = 'dead'")
    code, out, _ = run("db", "claims", "--db-url", db_url)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["NODE", "TEST", "DAG", "RUN", "CLAIMED", "EXPIRES"]
    assert [line.split()[:4] for line in lines[2:4]] == [
        ["gpu-001", "gpu_health", "continuous_validation", "backfill__2026-11-20T03:00:00+00:00"],
        ["gpu-002", "dl_unit", "continuous_validation", "backfill__2026-11-20T03:00:00+00:00"]]
    assert "gpu-003" not in out and "2 node(s) claimed by live runs" in out


def test_db_replay_records_the_spool(db_url, tmp_path, monkeypatch):
    from cluster_doctor.store import history

    # the store's real retries, without their half minute of real waiting: the waits are recorded
    waits: list[float] = []
    store = history.ResultStore
    monkeypatch.setattr(cli_module, "ResultStore", lambda conn: store(conn, sleep=waits.append))
    box = spool.Spool(tmp_path / "spool")
    box.put([Attempt.from_dict(good("gpu-001", run_id="r1", dag_id="continuous_validation")),
             Attempt.from_dict(good("gpu-002", run_id="r1", dag_id="continuous_validation"))])
    code, out, _ = run("db", "replay", "--spool-dir", str(box.directory), "--db-url", "postgresql://postgres@127.0.0.1:1/x")
    assert code == 1 and len(box) == 2  # the database is still down: the spool stays
    # after backing off as a recording task does: 1, 2, 4, 8, 16 s, each with its ±20 % jitter
    assert len(waits) == 5 and all(0.8 * 2 ** i <= w <= 1.2 * 2 ** i for i, w in enumerate(waits)), waits
    code, out, _ = run("db", "replay", "--spool-dir", str(box.directory), "--db-url", db_url)
    assert code == 0 and "2 recorded" in out and len(box) == 0 and count(db_url) == 2
    code, out, _ = run("db", "replay", "--spool-dir", str(box.directory), "--db-url", db_url)
    assert code == 0 and "replayed 0" in out


# ---------------------------------------------------------------------------- fuzz
OPTIONS = ["--node-range", "--test", "--status", "--staleness-days", "--format", "--limit", "--nodes",
           "--nodes-file", "--tests", "--max-pairs", "--stale-before", "--now", "--result", "--attempts",
           "--dag-id", "--run-id", "--spool-dir", "--help"]
COMMANDS = [["status"], ["history"], ["plan"], ["record"], ["db", "check"], ["db", "version"], ["db", "replay"],
            ["db", "rebuild-latest"], ["db", "claims"], ["db"], ["nope"], []]
INTERESTING = ["nan", "inf", "-5", "0", "1", "1e12", "1e20", "1e300", "99999999999999999999999", "gpu-001",
               "gpu-001\n", "gpu-[001-003]", "gpu-*", "GPU-1", "-", "", "dl_unit", "dl_unit,nope", "json", "csv",
               "2026-11-22T10:00:00Z", "2999-01-01T00:00:00Z", "0001-01-01T00:00:00+01:00", "\x1b[2J", "\x00",
               "pass", "[", "a" * 300]


@pytest.fixture(scope="module")
def fuzz_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzz")
    files = {"good.json": json.dumps([good("gpu-001"), good("gpu-002", "fail")]).encode(),
             "bad-utf8.json": b"\xff\xfe", "deep.json": b"[" * 5000, "nodes.txt": b"gpu-001\ngpu-002\n",
             "future.json": json.dumps(good(finished_at="2999-01-01T00:00:00Z")).encode()}
    for name, body in files.items():
        (d / name).write_bytes(body)
    return [str(d / n) for n in files] + [str(d)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_fuzz_any_arguments_exit_0_1_or_2_without_a_traceback(db_url, fuzz_files, data):
    value = st.one_of(st.sampled_from(INTERESTING), st.sampled_from(fuzz_files), st.text(max_size=40),
                      st.integers().map(str), st.floats().map(str))
    tokens = data.draw(st.lists(st.one_of(st.sampled_from(OPTIONS).flatmap(lambda o: st.tuples(st.just(o), value)),
                                          value.map(lambda v: (v,))), max_size=6))
    argv = data.draw(st.sampled_from(COMMANDS)) + [t for group in tokens for t in group]
    stdin = data.draw(st.binary(max_size=200))
    code, out, err = run(*argv, "--db-url", db_url, stdin=stdin)
    assert code in (0, 1, 2), (argv, err)
    assert "Traceback" not in err, (argv, err)
    if code == 2:  # one error line (besides the line naming the database, when it was reached)
        errors = [line for line in err.splitlines() if not line.startswith("cluster-doctor: results database: ")]
        assert len(errors) == 1, (argv, err)


def test_status_and_history_tell_an_incomplete_pass_and_show_the_action(db_url, tmp_path):
    skip = {"name": "dcgm_diag", "status": "skip", "code": "DCGM_UNAVAILABLE", "action": "none"}
    attempts = [
        {"node_name": "gpu-001", "test_name": "gpu_health", "status": "pass", "finished_at": "2026-11-22T10:00:00Z",
         "checks": [skip, {"name": "gpu_count", "status": "pass"}], "run_id": "r1"},
        {"node_name": "gpu-002", "test_name": "gpu_health", "status": "fail", "finished_at": "2026-11-22T10:00:00Z",
         "checks": [{"name": "xid_events", "status": "fail", "code": "XID_79", "action": "reboot"}], "run_id": "r1"},
        {"node_name": "gpu-003", "test_name": "gpu_health", "status": "pass", "finished_at": "2026-11-22T10:00:00Z",
         "run_id": "r1"},
    ]
    path = tmp_path / "attempts.json"
    path.write_text(json.dumps(attempts))
    assert cli("record", "--attempts", str(path), "--db-url", db_url).returncode == 0
    out = cli("status", "--db-url", db_url, "--staleness-days", "36500")
    table = out.stdout
    assert out.returncode == 0, out.stderr
    line = {row.split()[0]: row for row in table.splitlines() if row.startswith("gpu-")}
    assert "pass (incomplete: 1 check not run)" in line["gpu-001"]
    assert "fail (action: reboot)" in line["gpu-002"]
    assert "incomplete" not in line["gpu-003"]
    assert "pass (incomplete) 1" in table and "pass 1" in table  # counted apart
    rows = {r["node_name"]: r for r in json.loads(cli("status", "--format", "json", "--db-url", db_url).stdout)}
    assert (rows["gpu-001"]["incomplete"], rows["gpu-001"]["checks_not_run"], rows["gpu-001"]["action"]) == (
        True, 1, "none")
    assert rows["gpu-002"]["action"] == "reboot"
    assert "pass (incomplete: 1 check not run)" in cli("history", "gpu-001", "--db-url", db_url).stdout
    assert "fail (action: reboot)" in cli("history", "gpu-002", "--db-url", db_url).stdout
