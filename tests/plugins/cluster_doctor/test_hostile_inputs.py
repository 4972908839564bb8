"""Hostile input at every entry point: the run's params, the CLI, the web app, a pod's result.

Each must answer with one clear line naming what is wrong, and write nothing (the results database is
real and checked after each attempt); a pod's result, which must always become an attempt, becomes an
``error`` attempt, never a ``pass``."""

from __future__ import annotations

import datetime as dt
import json
import math

import psycopg
import pytest
from cluster_doctor.cli import main as cli
from cluster_doctor.domain import results
from cluster_doctor.domain.planning import params as planning
from cluster_doctor.domain.config import Settings
from cluster_doctor.web import app as webapp
from fastapi import FastAPI
from fastapi.testclient import TestClient

NOW = dt.datetime(2026, 11, 22, 10, 0, tzinfo=dt.UTC)
HOSTILE_NAME = "gpu-1<script>alert(1)</script>"


def rows(dsn: dict) -> int:
    with psycopg.connect(**dsn) as conn:
        return conn.execute("SELECT count(*) FROM validation_history").fetchone()[0]


def one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    return lines[0]


# ---------------------------------------------------------------------------- the run's params
HOSTILE_PARAMS = {
    "not a mapping (null is the empty conf, a list is not)": ([1, 2], "params: expected an object"),
    "a string": ("node_range=gpu-1", "params: expected an object"),
    "max_pairs 1e26 as a float": ({"max_pairs": 1e26}, "param max_pairs"),
    "max_pairs 10**26 as an integer": ({"max_pairs": 10**26}, "param max_pairs: expected an integer from 0 to"),
    "max_pairs negative": ({"max_pairs": -1}, "param max_pairs"),
    "max_pairs NaN": ({"max_pairs": math.nan}, "param max_pairs"),
    "max_pairs true": ({"max_pairs": True}, "param max_pairs"),
    "max_pairs a string": ({"max_pairs": "5"}, "param max_pairs"),
    "node_range a number": ({"node_range": 12}, "param node_range: expected"),
    "node_range a list": ({"node_range": ["gpu-1"]}, "param node_range: expected"),
    "node_range injection": ({"node_range": "gpu-1; rm -rf /"}, "param node_range"),
    "node_range huge": ({"node_range": "gpu-" + "1" * 5000}, "param node_range: longer than"),
    "tests a mapping": ({"tests": {"gpu_health": 1}}, "param tests: expected a list"),
    "tests with a number": ({"tests": ["gpu_health", 7]}, "param tests: expected a list"),
    "tests unknown": ({"tests": ["burn_in"]}, "param tests: unknown suite"),
    "tests too many": ({"tests": ["gpu_health"] * 100}, "param tests: more than"),
    "stale_before a number": ({"stale_before": 1e30}, "param stale_before: expected"),
    "stale_before garbage": ({"stale_before": "yesterday"}, "param stale_before"),
    "stale_before in the future": ({"stale_before": "2099-01-01T00:00:00Z"}, "is in the future"),
    "stale_before year 99999": ({"stale_before": "99999-01-01T00:00:00Z"}, "param stale_before"),
    "dry_run a string": ({"dry_run": "false"}, "param dry_run"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_PARAMS))
def test_hostile_params_are_refused_in_one_line_naming_the_param(name):
    params, expected = HOSTILE_PARAMS[name]
    with pytest.raises(planning.InvalidParams) as exc:
        planning.parse_params(params, Settings(), now=NOW)
    message = one_line(str(exc.value))
    assert expected in message and len(message) < 400, message


def test_no_params_at_all_are_the_defaults():
    assert planning.parse_params(None, Settings(), now=NOW).max_pairs == Settings().max_pairs_per_run
    assert planning.parse_params({"max_pairs": planning.MAX_PAIRS}, Settings(), now=NOW).max_pairs == planning.MAX_PAIRS


# ---------------------------------------------------------------------------- the CLI
def suite_result(**changes):
    base = {"schema_version": "1", "suite": "gpu_health", "node": "gpu-001", "status": "pass",
            "reason": "all checks passed", "started_at": "2026-11-22T09:58:00Z", "finished_at": "2026-11-22T09:59:00Z",
            "duration_s": 60.0, "metrics": {"gpus_visible": 8}, "checks": [], "gpu_count": 8,
            "suite_version": "sha256:0123456789abcdef", "gpu_model": "NVIDIA-H100-80GB-HBM3", "truncated": False,
            "check_counts": {"pass": 1, "fail": 0, "warn": 0, "error": 0, "skip": 0},
            "log_path": "/data/continuous_validation/gpu_health/gpu-001/gpu_health_gpu-001_1.log",
            "result_path": "/data/continuous_validation/gpu_health/gpu-001/gpu_health_gpu-001_1.json"}
    return {**base, **changes}


HOSTILE_RESULT_FILES = {
    "NaN duration": ('"duration_s": NaN', "duration_s"),
    "Infinity duration": ('"duration_s": Infinity', "duration_s"),
    "1e400 duration": ('"duration_s": 1e400', "duration_s"),
    "NaN metric": ('"metrics": {"busbw_gbps": NaN}', "metrics.busbw_gbps"),
    "-Infinity metric": ('"metrics": {"busbw_gbps": -Infinity}', "metrics.busbw_gbps"),
    "huge integer metric": ('"metrics": {"n": 123456789012345678901234567890}', "metrics.n"),
    "NaN in a check": ('"checks": [{"name": "gpu_count", "status": "pass", "value": NaN}]', "checks[0].value"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_RESULT_FILES))
def test_the_cli_reports_a_bad_number_as_an_error_and_records_nothing(name, db_dsn, db_url, tmp_path, capsys):
    fragment, where = HOSTILE_RESULT_FILES[name]
    key = fragment.split('"')[1]
    text = json.dumps(suite_result(**{key: "__X__"})).replace('"__X__"', fragment.split(": ", 1)[1])
    path = tmp_path / "result.json"
    path.write_text(text)
    code = cli.main(["record", "--result", str(path), "--db-url", db_url, "--dag-id", "manual", "--run-id", "r1"])
    err = one_line(capsys.readouterr().err)
    assert code == 2 and results.VALUE_INVALID in err and where in err and "nothing recorded" in err, err
    assert rows(db_dsn) == 0
    # the same numbers in an attempt file are refused the same way
    attempt = {"node_name": "gpu-001", "test_name": "gpu_health", "status": "pass",
               "finished_at": "2026-11-22T09:59:00Z", key: "__X__"}
    path.write_text(json.dumps(attempt).replace('"__X__"', fragment.split(": ", 1)[1]))
    assert cli.main(["record", "--attempts", str(path), "--db-url", db_url]) == 2
    assert results.VALUE_INVALID in one_line(capsys.readouterr().err) and rows(db_dsn) == 0


@pytest.mark.parametrize("argv, expected", [
    (["history", HOSTILE_NAME], "invalid"),
    (["history", "gpu-001", "--limit", "1e26"], "--limit"),
    (["history", "gpu-001", "--limit", "NaN"], "--limit"),
    (["status", "--node-range", "gpu-[1-99999999999]"], "node"),
    (["status", "--staleness-days", "inf"], "--staleness-days"),
    (["plan", "--nodes", "gpu-1", "--max-pairs", "100000000000000000000000000"], "--max-pairs"),
    (["record", "--attempts", "/dev/null/x"], "--attempts"),
])
def test_hostile_cli_arguments_are_one_line_errors_and_write_nothing(argv, expected, db_dsn, db_url, capsys):
    code = cli.main([*argv, "--db-url", db_url] if argv[0] != "status" or "--db-url" not in argv else argv)
    err = one_line(capsys.readouterr().err)
    assert code == 2 and expected in err, err
    assert "<script>" not in err or "invalid" in err
    assert rows(db_dsn) == 0


# ---------------------------------------------------------------------------- the web app
@pytest.fixture
def web(db_dsn):
    sub = webapp.create_app(connector_provider=lambda s: db_dsn, settings_provider=Settings, clock=lambda: NOW)
    sub.dependency_overrides[webapp.require_ui_access] = lambda: "test-user"
    root = FastAPI()
    root.mount(webapp.MOUNT_PREFIX, sub)
    return TestClient(root, follow_redirects=False, raise_server_exceptions=False)


@pytest.mark.parametrize("path", [
    "/cluster-doctor/nodes/" + HOSTILE_NAME.replace("<", "%3C").replace(">", "%3E"),
    "/cluster-doctor/nodes/gpu-001?test=%27%3B%20DROP%20TABLE%20validation_history%3B--",
    "/cluster-doctor/nodes/gpu-001?limit=100000000000000000000",
    "/cluster-doctor/nodes/gpu-001?limit=NaN",
    "/cluster-doctor/?per_page=-1",
    "/cluster-doctor/?page=1e26",
    "/cluster-doctor/nodes/" + "a" * 5000,
    "/cluster-doctor/nodes/gpu-001?q=" + "x" * 5000,
])
def test_every_api_error_is_one_line_json_with_nosniff_and_writes_nothing(web, db_dsn, path):
    r = web.get(path, headers={"Accept": "application/json"})
    assert 400 <= r.status_code < 500, (r.status_code, r.text[:200])
    assert r.headers["content-type"].startswith("application/json")
    assert r.headers["x-content-type-options"] == "nosniff"
    detail = r.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail and len(detail) <= 500
    assert "<script>" not in r.text  # JSON escapes it, and the type is not sniffed into HTML anyway
    assert rows(db_dsn) == 0


def test_an_unexpected_failure_is_a_json_500_without_internals(db_dsn):
    def broken():
        raise KeyError("secret internal detail")

    sub = webapp.create_app(connector_provider=lambda s: db_dsn, settings_provider=broken, clock=lambda: NOW)
    sub.dependency_overrides[webapp.require_ui_access] = lambda: "test-user"
    root = FastAPI()
    root.mount(webapp.MOUNT_PREFIX, sub)
    r = TestClient(root, raise_server_exceptions=False).get("/cluster-doctor/nodes/gpu-001",
                                                             headers={"Accept": "application/json"})
    assert r.status_code == 500 and r.headers["x-content-type-options"] == "nosniff"
    assert "secret" not in r.text and r.json()["detail"].startswith("internal error")


# ---------------------------------------------------------------------------- a pod's result
def pod(exit_code: int, message: str) -> dict:
    return {"metadata": {"name": "cv-x", "creationTimestamp": "2026-11-22T09:50:00Z"},
            "status": {"phase": "Succeeded" if exit_code == 0 else "Failed", "containerStatuses": [
                {"name": "base", "state": {"terminated": {
                    "exitCode": exit_code, "message": message, "startedAt": "2026-11-22T09:51:00Z",
                    "finishedAt": "2026-11-22T09:52:00Z"}}}]}}


HOSTILE_POD_RESULTS = {
    "NaN duration": json.dumps(suite_result()).replace("60.0", "NaN"),
    "Infinity duration": json.dumps(suite_result()).replace("60.0", "Infinity"),
    "1e400 metric": json.dumps(suite_result(metrics={"gpus_visible": "__X__"})).replace('"__X__"', "1e400"),
    "a huge integer gpu count": json.dumps(suite_result(gpu_count="__X__")).replace('"__X__"', "9" * 30),
    "another node's result": json.dumps(suite_result(node="gpu-002")),
    "a status that is not one": json.dumps(suite_result(status="PASS")),
    "deeply nested": '{"suite": "gpu_health", "status": "pass", "metrics": ' + "[" * 5000 + "]" * 5000 + "}",
    "not JSON": "all good, trust me",
    "control characters": json.dumps(suite_result(reason="ok\x1b[2J\x00\u202e")),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_POD_RESULTS))
def test_a_hostile_pod_result_is_an_error_attempt_never_a_pass(name):
    attempt = results.attempt_from_pod(pod(0, HOSTILE_POD_RESULTS[name]), node_name="gpu-001",
                                       test_name="gpu_health", now=NOW)
    if name == "control characters":  # cleaned, not refused: the suite judged, the text is sanitised
        assert attempt.status == "pass" and "\x1b" not in attempt.reason and "\u202e" not in attempt.reason
        return
    assert attempt.status == "error", (name, attempt.reason)
    assert "\n" not in attempt.reason and attempt.reason
    if name in ("NaN duration", "Infinity duration", "1e400 metric"):
        assert attempt.reason.startswith(results.VALUE_INVALID), attempt.reason


def test_the_same_result_without_the_hostile_part_is_a_pass():
    attempt = results.attempt_from_pod(pod(0, json.dumps(suite_result())), node_name="gpu-001",
                                       test_name="gpu_health", now=NOW)
    assert attempt.status == "pass", attempt.reason
