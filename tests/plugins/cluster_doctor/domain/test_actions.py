import json

import pytest
from cluster_doctor.domain import actions, results, suites
from cluster_doctor.domain.attempts import Attempt, InvalidAttempt, from_suite_result
from cluster_doctor_suites import codes

T = "2026-11-22T12:00:00Z"


def test_the_action_set_is_the_suites_and_the_schemas():
    assert actions.ACTIONS == codes.ACTIONS
    schema = json.loads((suites.DEFAULT_SUITES_DIR / results.SCHEMA_FILE).read_text())
    assert tuple(schema["$defs"]["action"]["enum"]) == actions.ACTIONS


def test_every_code_has_an_action_of_the_set():
    registry = codes.registry()
    assert registry
    assert {code: spec["action"] for code, spec in registry.items() if spec["action"] not in actions.ACTIONS} == {}


@pytest.mark.parametrize(("status", "summary", "expected"), [
    ("pass", {"status": "pass", "action": "none"}, "none"),
    ("pass", None, "none"),
    ("fail", {"status": "fail", "action": "reboot"}, "reboot"),
    # the verdict is not the suite's own (exit code said fail, the suite said pass): its failing checks say
    ("fail", {"status": "pass", "action": "none",
              "checks": [{"name": "a", "status": "fail", "action": "reset_gpu"},
                         {"name": "b", "status": "fail", "action": "check_fabric"}]}, "reset_gpu"),
    ("fail", {"status": "fail", "checks": [{"name": "a", "status": "fail"}]}, None),  # nothing says: unknown
    ("error", {"status": "error", "action": "check_storage"}, "check_storage"),
    ("error", {"status": "pass", "action": "none"}, "retest"),  # an OOM / a bad number: the orchestrator's error
    ("error", None, "retest"),
    ("timeout", None, "retest"), ("preempted", None, "retest"), ("skipped", None, "retest"),
])
def test_an_attempts_action(status, summary, expected):
    assert actions.for_attempt(status, summary) == expected


def test_an_unknown_token_is_never_taken():
    assert actions.for_attempt("fail", {"status": "fail", "action": "format_disk"}) is None
    with pytest.raises(InvalidAttempt, match="action: 'format_disk' is not one of none, retest"):
        Attempt(node_name="gpu-1", test_name="dl_unit", status="fail", finished_at=T, action="format_disk")


def test_status_text_never_shows_an_incomplete_pass_as_a_pass():
    assert actions.status_text("pass", True, 2) == "pass (incomplete: 2 checks not run)"
    assert actions.status_text("pass", True, 1) == "pass (incomplete: 1 check not run)"
    assert actions.status_text("pass", True, None) == "pass (incomplete)"
    assert actions.status_text("pass", False, 0) == "pass"
    assert actions.status_text("fail", True, 3) == "fail"
    assert actions.status_text(None) == "never"


def test_attempt_defaults_derive_from_the_status_and_the_checks():
    skip = {"name": "dcgm_diag", "status": "skip", "code": "DCGM_UNAVAILABLE", "action": "none"}
    clean = Attempt(node_name="gpu-1", test_name="gpu_health", status="pass", finished_at=T)
    assert (clean.action, clean.incomplete, clean.checks_not_run) == ("none", False, 0)
    partial = Attempt(node_name="gpu-1", test_name="gpu_health", status="pass", finished_at=T, checks=[skip])
    assert (partial.incomplete, partial.checks_not_run) == (True, 1)
    # a claim of completeness never hides a skip check
    assert Attempt(node_name="gpu-1", test_name="gpu_health", status="pass", finished_at=T, checks=[skip],
                   incomplete=False).incomplete is True
    timeout = Attempt(node_name="gpu-1", test_name="gpu_health", status="timeout", finished_at=T, checks=[skip])
    assert (timeout.action, timeout.incomplete, timeout.checks_not_run) == ("retest", None, None)
    failed = Attempt(node_name="gpu-1", test_name="gpu_health", status="fail", finished_at=T,
                     checks=[{"name": "xid", "status": "fail", "action": "reboot"}])
    assert failed.action == "reboot"


def test_a_suite_result_keeps_its_action_and_its_not_run_count():
    result = {"suite": "gpu_health", "node": "gpu-1", "status": "pass", "finished_at": T, "action": "none",
              "incomplete": True, "checks": [{"name": "dcgm_diag", "status": "skip"},
                                             {"name": "kernel_log", "status": "skip"},
                                             {"name": "gpu_count", "status": "pass"}]}
    attempt = from_suite_result(result)
    assert (attempt.action, attempt.incomplete, attempt.checks_not_run) == ("none", True, 2)
    failed = from_suite_result({**result, "status": "fail", "action": "drain_and_service", "incomplete": False})
    assert failed.action == "drain_and_service" and failed.incomplete is True  # the skips say so
