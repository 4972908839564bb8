"""The per-run CTRF report: valid against the official CTRF schema (vendored, see fixtures/ctrf/README.md),
statuses mapped as documented in cluster_doctor.reports.ctrf, written atomically to a path-safe location."""

import datetime as dt
import json
import os
import pathlib
import uuid

import jsonschema
import pytest
from cluster_doctor.domain.attempts import Attempt
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.payloads import Discovered, Plan, RunSummary
from cluster_doctor.reports import ctrf
from cluster_doctor.reports import summary as report

SCHEMA = json.loads((pathlib.Path(__file__).parent / "fixtures" / "ctrf" / "ctrf-schema-0.0.json").read_text())
T0 = dt.datetime(2026, 11, 10, 12, tzinfo=dt.UTC)
DAG, RUN = "continuous_validation", "scheduled__2026-11-10T12:00:00+00:00"
GEMM_FAIL = {"name": "gemm_bf16_tflops", "status": "fail", "value": 100.5, "unit": "TFLOPS",
             "threshold": ">= 620.5", "message": "84% below baseline", "device": "cuda:3"}
OK = {"name": "matmul_fp32", "status": "pass", "value": 0.0, "unit": None, "threshold": "<= 1e-5", "message": "",
      "device": "cuda:0"}
WARN = {"name": "memory_bandwidth", "status": "warn", "value": 2900, "unit": "GB/s", "threshold": ">= 2800",
        "message": "", "device": "cuda:2"}


# jsonschema checks "uuid" and "date-time" only with optional extras; these two make the schema's formats bite
FORMATS = jsonschema.FormatChecker()
FORMATS.checks("uuid", raises=ValueError)(lambda value: not isinstance(value, str) or bool(uuid.UUID(value)))
FORMATS.checks("date-time", raises=ValueError)(
    lambda value: not isinstance(value, str) or dt.datetime.fromisoformat(value).tzinfo is not None)


def validate(doc):
    jsonschema.Draft7Validator(SCHEMA, format_checker=FORMATS).validate(doc)


def attempt(node, test, status, minutes=0, **kw):
    finished = T0 + dt.timedelta(minutes=minutes)
    executed = status in ("pass", "fail", "error")
    fields = dict(node_name=node, test_name=test, status=status, finished_at=finished, gpu_model="H100", gpu_count=8,
                  dag_id=DAG, run_id=RUN, map_index=minutes, try_number=1)
    if executed:
        fields.update(started_at=finished - dt.timedelta(seconds=90.25), duration_s=90.25)
    fields.update(kw)
    return Attempt(**fields).to_dict()  # exactly what tasks.record returns


def run_attempts():
    return [
        attempt("gpu-001", "dl_unit", "pass", 1, metrics={"gemm_bf16_tflops_min": 701.5}, checks=[OK, WARN],
                log_path="/data/continuous_validation/dl_unit/gpu-001/dl_unit_gpu-001_1794312060.log",
                pod_name="cd-dl-unit-gpu-001-x1", suite_version="sha256:0123456789abcdef"),
        attempt("gpu-002", "dl_unit", "fail", 2, reason="gemm_bf16_tflops on cuda:3: 100.5 < 620.5",
                metrics={"gemm_bf16_tflops_min": 100.5}, checks=[OK, GEMM_FAIL, WARN]),
        attempt("gpu-003", "nccl_loopback", "error", 3, reason="the suite was OOM-killed", checks=[]),
        attempt("gpu-004", "gpu_health", "timeout", 4, reason="the pod was still Pending after 1200 s; pod deleted"),
        attempt("gpu-005", "storage_fio", "preempted", 5, reason="user pod ml/train-0 claimed the node"),
        attempt("gpu-006", "gpu_health", "skipped", 6, reason="node busy at submit time", try_number=0),
    ]


def summary(**kw):
    base = {
        "run_started_at": (T0 - dt.timedelta(minutes=10)).isoformat(),
        "params": {"tests": ["dl_unit"], "max_pairs": 16},
        "dry_run": False, "gpu_nodes": 9, "free_nodes": 6, "planned": 6,
        "newly_failing": [{"node_name": "gpu-002", "test_name": "dl_unit", "status": "fail", "reason": "slow"}],
        "not_eligible": {"busy": ["gpu-007", "gpu-008"], "cordoned": ["gpu-009"]},
        "coverage": {"gpu_nodes": 9, "covered_nodes": 3, "coverage": 0.3333, "never_validated": ["gpu-006"],
                     "failing_nodes": ["gpu-002", "gpu-003"]},
    }
    base.update(kw)
    return RunSummary.from_xcom(base)


SETTINGS = Settings(kubernetes_conn_id="kubernetes_default", namespace="cluster-doctor", staleness_days=7.0,
                    reports_dir="")


def build(attempts=None, **kw):
    return ctrf.build_report(run_attempts() if attempts is None else attempts, kw.pop("summary", summary()),
                             dag_id=DAG, run_id=RUN, now=T0 + dt.timedelta(minutes=7), settings=SETTINGS, **kw)


def test_report_is_valid_ctrf():
    doc = build()
    validate(doc)
    assert doc["reportFormat"] == "CTRF" and doc["specVersion"] == ctrf.SPEC_VERSION and doc["runId"] == RUN
    assert doc["results"]["tool"] == {"name": "cluster-doctor", "version": ctrf.__version__}


def test_the_schema_fixture_is_strict_enough_to_catch_mistakes():
    doc = build()
    doc["results"]["tests"][0]["status"] = "pass"  # our vocabulary, not CTRF's
    with pytest.raises(jsonschema.ValidationError):
        validate(doc)
    doc = build()
    doc["results"]["tests"][0]["node"] = "gpu-001"  # unknown keys belong under extra
    with pytest.raises(jsonschema.ValidationError):
        validate(doc)
    for key, bad in (("reportId", "run-1"), ("timestamp", "yesterday")):
        with pytest.raises(jsonschema.ValidationError):
            validate({**build(), key: bad})


def test_status_mapping_and_summary_counts():
    doc = build()
    tests = {t["name"]: t for t in doc["results"]["tests"]}
    assert [(t["rawStatus"], t["status"]) for t in doc["results"]["tests"]] == [
        ("pass", "passed"), ("fail", "failed"), ("error", "other"), ("timeout", "skipped"),
        ("preempted", "skipped"), ("skipped", "skipped")]
    assert set(tests) == {"gpu-001 · dl_unit", "gpu-002 · dl_unit", "gpu-003 · nccl_loopback",
                          "gpu-004 · gpu_health", "gpu-005 · storage_fio", "gpu-006 · gpu_health"}
    s = doc["results"]["summary"]
    assert (s["tests"], s["passed"], s["failed"], s["skipped"], s["pending"], s["other"], s["suites"]) == \
        (6, 1, 1, 3, 0, 1, 4)
    assert s["extra"]["blocking"] == 2 and s["extra"]["statuses"]["timeout"] == 1
    # the run started 10 min before T0; the report was built at T0 + 7 min
    assert s["start"] == int((T0 - dt.timedelta(minutes=10)).timestamp() * 1000)
    assert s["stop"] == int((T0 + dt.timedelta(minutes=7)).timestamp() * 1000)
    assert s["duration"] == 17 * 60 * 1000
    assert doc["results"]["environment"]["healthy"] is False


def test_a_failed_entry_carries_reason_checks_and_identity():
    doc = build()
    fail = next(t for t in doc["results"]["tests"] if t["rawStatus"] == "fail")
    assert fail["message"] == "gemm_bf16_tflops on cuda:3: 100.5 < 620.5"
    assert fail["trace"] == "FAIL gemm_bf16_tflops [cuda:3]: 100.5 TFLOPS (needs >= 620.5) — 84% below baseline"
    assert fail["duration"] == 90250 and fail["stop"] - fail["start"] == 90250
    assert fail["stop"] == int((T0 + dt.timedelta(minutes=2)).timestamp() * 1000)
    assert fail["suite"] == ["dl_unit"] and fail["tags"] == ["newly-failing"]
    assert fail["labels"] == {"node": "gpu-002", "test": "dl_unit", "status": "fail", "gpu_model": "H100",
                              "gpu_count": 8, "recommended_action": "unknown"}
    extra = fail["extra"]
    assert extra["failing_checks"] == [GEMM_FAIL] and extra["failing_checks_total"] == 1
    assert extra["warnings"] == [WARN] and extra["checks_total"] == 3
    assert extra["metrics"] == {"gemm_bf16_tflops_min": 100.5} and extra["newly_failing"] is True
    assert extra["airflow"] == {"dag_id": DAG, "run_id": RUN, "map_index": 2, "try_number": 1}
    assert extra["node_name"] == "gpu-002" and extra["gpu_model"] == "H100"


def test_passed_and_not_executed_entries():
    tests = {t["rawStatus"]: t for t in build()["results"]["tests"]}
    passed = tests["pass"]
    assert "message" not in passed and "trace" not in passed and "tags" not in passed
    assert passed["attachments"] == [
        {"name": "log", "contentType": "text/plain",
         "path": "/data/continuous_validation/dl_unit/gpu-001/dl_unit_gpu-001_1794312060.log"},
        {"name": "result", "contentType": "application/json",
         "path": "/data/continuous_validation/dl_unit/gpu-001/dl_unit_gpu-001_1794312060.json"}]
    assert passed["extra"]["pod_name"] == "cd-dl-unit-gpu-001-x1" and passed["extra"]["executed"] is True
    timeout = tests["timeout"]
    assert timeout["status"] == "skipped" and timeout["message"].startswith("the pod was still Pending")
    assert timeout["duration"] == 0 and "start" not in timeout and timeout["extra"]["executed"] is False
    assert tests["error"]["status"] == "other" and tests["error"]["message"] == "the suite was OOM-killed"
    assert "tags" not in tests["error"]  # newly failing only for the pairs the summary names


def test_environment_and_not_eligible_nodes():
    doc = build()
    env = doc["results"]["environment"]
    assert env["buildName"] == DAG and env["buildId"] == RUN and env["testEnvironment"] == "kubernetes_default"
    extra = env["extra"]
    assert (extra["gpu_nodes"], extra["free_nodes"], extra["planned"], extra["dry_run"]) == (9, 6, 6, False)
    assert extra["coverage"]["failing_nodes"] == {"count": 2, "nodes": "gpu-[002-003]"}
    assert doc["results"]["extra"]["not_eligible"] == {"busy": {"count": 2, "nodes": "gpu-[007-008]"},
                                                       "cordoned": {"count": 1, "nodes": "gpu-009"}}


def test_healthy_when_nothing_failed_or_errored():
    attempts = [a for a in run_attempts() if a["status"] not in ("fail", "error")]
    doc = build(attempts, summary=summary(newly_failing=[]))
    validate(doc)
    assert doc["results"]["environment"]["healthy"] is True and doc["results"]["summary"]["extra"]["blocking"] == 0


def test_a_dry_run_without_attempts_is_a_valid_empty_report():
    doc = ctrf.build_report([], RunSummary(dry_run=True, planned=3), dag_id=DAG, run_id=RUN, now=T0)
    validate(doc)
    s = doc["results"]["summary"]
    assert s["tests"] == 0 and s["start"] == s["stop"] == int(T0.timestamp() * 1000)
    assert doc["results"]["environment"]["extra"]["dry_run"] is True


def test_with_the_real_run_summary_from_the_database(store):
    """The wiring the summarize task gets: recorded attempts + report.run_summary over validation_latest."""
    previous = attempt("gpu-002", "dl_unit", "pass", -600)
    store.record([{**previous, "run_id": "earlier"}])
    recorded = run_attempts()
    store.record(recorded)
    discovered = Discovered.from_xcom({
        "started_at": T0.isoformat(), "settings": SETTINGS.to_dict(),
        "params": {"tests": ["dl_unit", "nccl_loopback", "gpu_health", "storage_fio"], "max_pairs": 16},
        "free": [{"name": f"gpu-00{i}", "gpu_count": 8} for i in range(1, 7)],
        "ineligible": [{"name": "gpu-007", "reason": "busy", "detail": "ml/train-1 requests 8"}]})
    planned = Plan.from_xcom({"planned_at": T0.isoformat(), "dry_run": False, "pairs": [
        {"node_name": a["node_name"], "test_name": a["test_name"], "why": "stale", "gpu_count": 8}
        for a in recorded]})
    run = report.run_summary(discovered, planned, [Attempt.from_dict(a) for a in recorded], store.latest(),
                             now=T0 + dt.timedelta(minutes=7))
    doc = ctrf.build_report(recorded, run, dag_id=DAG, run_id=RUN, settings=discovered.settings)
    validate(doc)
    tags = {t["name"]: t.get("tags") for t in doc["results"]["tests"]}
    assert tags["gpu-002 · dl_unit"] == ["newly-failing"] and tags["gpu-003 · nccl_loopback"] == ["newly-failing"]
    assert doc["results"]["extra"]["not_eligible"] == {"busy": {"count": 1, "nodes": "gpu-007"}}
    assert json.loads(json.dumps(doc)) == doc


# ---------------------------------------------------------------------------- writing
def test_write_ctrf_path_and_content(tmp_path):
    doc = build()
    path = ctrf.write_ctrf(doc, tmp_path, DAG, RUN)
    assert path.parent.parent == tmp_path / DAG and path.name == "ctrf.json"
    assert path.parent.name.startswith("scheduled__2026-11-10T12_00_00_00_00-")  # ':' and '+' replaced, hashed
    assert json.loads(path.read_text()) == doc
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"
    assert ctrf.write_ctrf(doc, tmp_path, DAG, RUN) == path  # a rerun replaces the same file
    assert [p.name for p in path.parent.iterdir()] == ["ctrf.json"]


@pytest.mark.parametrize("run_id", ["../../etc", "..", ".", "/abs/path", "a/../../b", "", "x\x00y", "日本"])
def test_run_ids_never_escape_the_reports_dir(tmp_path, run_id):
    path = ctrf.write_ctrf({"ok": 1}, tmp_path / "reports", DAG, run_id)
    assert path.resolve().is_relative_to((tmp_path / "reports" / DAG).resolve())
    assert path.parent.parent == tmp_path / "reports" / DAG
    assert path.parent.name not in ("", ".", "..") and not path.parent.name.startswith(".")


def test_distinct_run_ids_get_distinct_folders():
    ids = ["manual__2026-01-01T00:00:00+00:00", "manual__2026-01-01T00_00_00_00_00", "manual__2026-01-01T00:00:00-00:00",
           "a/b", "a_b", "a b"]
    names = [ctrf.safe_component(i) for i in ids]
    assert len(set(names)) == len(ids)
    assert ctrf.safe_component("scheduled__2026-11-10") == "scheduled__2026-11-10"  # already safe: unchanged


def test_write_is_atomic(tmp_path, monkeypatch):
    path = ctrf.write_ctrf(build(), tmp_path, DAG, RUN)
    before = path.read_bytes()
    # a value JSON cannot hold fails before anything is written
    with pytest.raises(ValueError):
        ctrf.write_ctrf({"results": {"x": float("nan")}}, tmp_path, DAG, RUN)

    def broken_replace(src, dst):
        raise OSError("no space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        ctrf.write_ctrf({"other": "content"}, tmp_path, DAG, RUN)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert [p.name for p in path.parent.iterdir()] == ["ctrf.json"]  # no temporary file left


def test_reports_dir_resolution(tmp_path):
    assert ctrf.resolve_reports_dir("", env={"AIRFLOW_HOME": str(tmp_path)}) == tmp_path / "cluster_doctor_reports"
    assert ctrf.resolve_reports_dir(None, env={}) == pathlib.Path.home() / "airflow" / "cluster_doctor_reports"
    assert ctrf.resolve_reports_dir(str(tmp_path / "r"), env={"AIRFLOW_HOME": "/x"}) == tmp_path / "r"


def test_write_run_report_never_raises_on_io(tmp_path, caplog):
    settings = SETTINGS.replace(reports_dir=str(tmp_path / "reports"))
    path = ctrf.write_run_report(run_attempts(), summary(), settings=settings, dag_id=DAG, run_id=RUN, now=T0)
    assert path and json.loads(pathlib.Path(path).read_text())["results"]["summary"]["tests"] == 6
    (tmp_path / "blocked").write_text("a file where the reports dir should be")
    blocked = SETTINGS.replace(reports_dir=str(tmp_path / "blocked"))
    assert ctrf.write_run_report(run_attempts(), summary(), settings=blocked, dag_id=DAG, run_id=RUN, now=T0) is None
    assert "CTRF report not written" in caplog.text



def test_check_codes_and_recommended_actions_reach_the_report():
    """A suite's stable code travels into the trace and `extra`, with the action codes.yaml recommends."""
    remap = {"name": "row_remap_pending", "status": "fail", "value": True, "unit": None, "threshold": None,
             "message": "row remapping pending (2 uncorrectable rows): reset the GPU", "device": "cuda:2",
             "code": "ROW_REMAP_PENDING"}
    warn = dict(WARN, code="CLOCK_THROTTLE_SW")
    doc = build([attempt("gpu-010", "gpu_health", "fail", 1, reason="row_remap_pending[cuda:2]: pending",
                         checks=[OK, remap, warn])])
    validate(doc)
    test = doc["results"]["tests"][0]
    assert test["trace"].endswith("[ROW_REMAP_PENDING: reset_gpu]")
    extra = test["extra"]
    assert extra["code"] == "ROW_REMAP_PENDING" and extra["codes"] == ["ROW_REMAP_PENDING", "CLOCK_THROTTLE_SW"]
    # the token of the fixed set, and the words beside it
    assert extra["recommended_actions"]["ROW_REMAP_PENDING"] == "reset_gpu"
    assert extra["advice"]["ROW_REMAP_PENDING"] == "drain and reset the GPU"
    assert extra["failing_checks"][0]["recommended_action"] == "reset_gpu"
    assert extra["failing_checks"][0]["advice"] == "drain and reset the GPU"
    assert extra["warnings"][0]["code"] == "CLOCK_THROTTLE_SW" and extra["warnings"][0]["recommended_action"] == "none"
    # the attempt's own action, in extra and the labels: unknown here, as recorded (its checks, as an older
    # suite wrote them, name no action of their own), never "none"
    assert extra["recommended_action"] == "unknown" and test["labels"]["recommended_action"] == "unknown"


def test_a_findings_own_action_wins_over_its_codes():
    """An Xid's recovery action comes from NVIDIA's catalog, not from the code's default."""
    xid = {"name": "xid_events", "status": "fail", "value": 79, "unit": None, "threshold": None,
           "message": "Xid 79: GPU has fallen off the bus", "device": "cuda:4", "code": "ROW_REMAP_PENDING",
           "action": "drain_and_service"}
    test = build([attempt("gpu-010", "gpu_health", "fail", 1, checks=[xid], action="drain_and_service")])[
        "results"]["tests"][0]
    assert test["extra"]["failing_checks"][0]["recommended_action"] == "drain_and_service"
    assert test["extra"]["recommended_action"] == "drain_and_service"
    assert test["trace"].endswith("[ROW_REMAP_PENDING: drain_and_service]")


def test_an_incomplete_pass_is_not_a_clean_pass():
    skip = {"name": "dcgm_diag", "status": "skip", "value": None, "unit": None, "threshold": None,
            "message": "no DCGM host engine", "device": None, "code": "DCGM_UNAVAILABLE", "action": "none"}
    doc = build([attempt("gpu-011", "gpu_health", "pass", 1, reason="pass, 2 check(s) could not run: dcgm_diag",
                         checks=[OK, skip, dict(skip, name="kernel_log")]),
                 attempt("gpu-012", "gpu_health", "pass", 2, checks=[OK])])
    validate(doc)
    partial, clean = doc["results"]["tests"]
    assert partial["status"] == "passed" and partial["tags"] == ["incomplete"]
    assert partial["message"].startswith("pass (incomplete: 2 checks not run): pass, 2 check(s)")
    assert "SKIP dcgm_diag" in partial["trace"]
    assert (partial["extra"]["incomplete"], partial["extra"]["checks_not_run"]) == (True, 2)
    assert [c["name"] for c in partial["extra"]["not_run_checks"]] == ["dcgm_diag", "kernel_log"]
    assert "tags" not in clean and clean["extra"]["incomplete"] is False and "trace" not in clean
    assert doc["results"]["summary"]["extra"]["incomplete_passes"] == 1


def test_checks_without_codes_keep_the_old_shape():
    fail = next(t for t in build()["results"]["tests"] if t["rawStatus"] == "fail")
    assert fail["extra"]["code"] is None and fail["extra"]["codes"] == []
    assert fail["extra"]["recommended_actions"] == {} and "recommended_action" not in fail["extra"]["failing_checks"][0]
