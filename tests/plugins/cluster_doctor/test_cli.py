import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(str(REPO / p) for p in ("plugins", "include", "tools"))}
ENV.pop("AIRFLOW_CONN_VALIDATION_DB", None)


def cli(*args, stdin=None, env=None):
    return subprocess.run([sys.executable, "-m", "cluster_doctor", *args], capture_output=True, text=True,
                          input=stdin, env={**ENV, **(env or {})}, timeout=120)


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
    assert out.returncode == 0 and out.stdout.strip() == "1"
