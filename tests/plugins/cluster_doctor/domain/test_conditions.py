"""The node condition a node's latest verdicts give (pure): the most severe failing code, stale
evidence as Unknown, never-validated and could-not-judge suites, and the policy's checks."""

from __future__ import annotations

import datetime as dt

import pytest
from cluster_doctor.domain.conditions import (
    MESSAGE_LIMIT,
    ConditionPolicy,
    InvalidConditionPolicy,
    Latest,
    condition,
)

NOW = dt.datetime(2026, 3, 10, 12, tzinfo=dt.UTC)
WEEK = dt.timedelta(days=7)
TESTS = ["gpu_health", "nvbandwidth", "ib_health"]


def ok(test: str, hours: float = 2) -> Latest:
    return Latest(test, "pass", NOW - dt.timedelta(hours=hours), action="none")


def fail(test: str, checks, hours: float = 1, action=None, reason=None) -> Latest:
    return Latest(test, "fail", NOW - dt.timedelta(hours=hours), tuple(checks), action, reason)


def test_all_fresh_passes_are_true_and_name_the_oldest_evidence():
    c = condition([ok("gpu_health", 5), ok("nvbandwidth", 30), ok("ib_health")], TESTS, NOW, WEEK)
    assert (c.status, c.reason) == ("True", "AllSuitesPassed")
    assert "oldest evidence 1 d 6 h old (nvbandwidth, 2026-03-09T06:00Z)" in c.message


def test_the_most_severe_failing_code_is_the_reason_across_checks_and_suites():
    c = condition([
        ok("gpu_health"),
        fail("nvbandwidth", [{"name": "nvbw_d2d_read_ce", "status": "fail", "code": "NVBW_D2D_LOW", "action": "reset_gpu"}]),
        fail("ib_health", [{"name": "ib_counters", "status": "warn", "code": "IB_DISCARDS_GROWING", "action": "none"},
                           {"name": "ib_port_state", "status": "fail", "code": "IB_PORT_DOWN", "action": "check_fabric"},
                           {"name": "ib_hca_count", "status": "fail", "code": "IB_HCAS_NOT_PRESENT",
                            "action": "drain_and_service"}], reason="7 of 8 present"),
    ], TESTS, NOW, WEEK)
    assert (c.status, c.reason) == ("False", "IB_HCAS_NOT_PRESENT")
    assert c.message.startswith("ib_health failed IB_HCAS_NOT_PRESENT; action: drain_and_service; evidence 1 h old")
    assert "also nvbandwidth: NVBW_D2D_LOW" in c.message and c.message.endswith("7 of 8 present")


def test_a_fail_whose_checks_name_no_code_still_turns_false():
    c = condition([fail("gpu_health", [], action="reboot"), ok("nvbandwidth"), ok("ib_health")], TESTS, NOW, WEEK)
    assert (c.status, c.reason) == ("False", "Failed") and "action: reboot" in c.message


@pytest.mark.parametrize("latest, reason, words", [
    ([ok("gpu_health"), ok("nvbandwidth")], "NotValidated", "never validated: ib_health"),
    ([ok("gpu_health"), ok("nvbandwidth"), fail("ib_health", [{"status": "fail", "code": "IB_PORT_DOWN"}], hours=24 * 8)],
     "EvidenceStale", "ib_health: last fail 8 d old, older than the 7 d target"),
    ([ok("gpu_health"), ok("nvbandwidth"),
      Latest("ib_health", "error", NOW, ({"name": "ib_hca_count", "status": "error", "code": "TOOL_MISSING"},))],
     "TOOL_MISSING", "could not judge (TOOL_MISSING)"),
], ids=["never", "stale-fail", "error"])
def test_no_fresh_verdict_is_unknown(latest, reason, words):
    c = condition(latest, TESTS, NOW, WEEK)
    assert (c.status, c.reason) == ("Unknown", reason) and words in c.message


def test_a_suite_that_is_not_enabled_does_not_count_and_the_message_fits():
    noisy = fail("storage_fio", [{"status": "fail", "code": "STORAGE_SLOW", "action": "check_storage"}], reason="x" * 5000)
    assert condition([ok(t) for t in TESTS] + [noisy], TESTS, NOW, WEEK).status == "True"
    long = condition([fail("gpu_health", [{"status": "fail", "code": "XID_UNKNOWN"}], reason="y" * 5000)], ["gpu_health"],
                     NOW, WEEK)
    assert len(long.message) == MESSAGE_LIMIT and long.message.endswith("...")


@pytest.mark.parametrize("values, message", [
    ({"enabled": "yes"}, "node_conditions.enabled: expected true or false"),
    ({"max_share": 0}, "node_conditions.max_share: must be a share in (0, 1]"),
    ({"max_nodes": 0}, "node_conditions.max_nodes: must be an integer >= 1"),
    ({"window_hours": -1}, "node_conditions.window_hours: must be a number > 0"),
    ({"taint": True}, "node_conditions: unknown key(s) taint"),
])
def test_bad_policy_is_refused_by_name(values, message):
    with pytest.raises(InvalidConditionPolicy, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        ConditionPolicy.from_mapping(values)


def test_limit_follows_the_fleet_size():
    p = ConditionPolicy(enabled=True)
    assert (p.limit(20), p.limit(1000), p.limit(5000)) == (1, 10, 10)
    assert ConditionPolicy(enabled=True, max_share=0.5, max_nodes=100).limit(40) == 20


def test_a_slow_node_is_false_with_code_slow_and_its_evidence_unless_a_failure_already_says_so():
    from cluster_doctor.domain import conditions as c
    from cluster_doctor.domain.fail_slow import SlowState
    from cluster_doctor.store.fail_slow import SlowNode

    node = SlowNode("gpu-1", SlowState.FAILING, None, ("straggler:probe_gemm_tflops_min=612 (fleet median 706)",),
                    ("GPU 2: hardware slowdown (clock event reasons 0x8, DCGM_FI_DEV_CLOCKS_EVENT_REASONS)",))
    passed = c.Condition(c.TRUE, c.REASON_PASSED, "2 suite(s) passed")
    slow = c.slow(passed, node)
    assert (slow.status, slow.reason) == (c.FALSE, "SLOW")
    assert slow.message.startswith("slow (failing, SLOW): probe straggler:probe_gemm_tflops_min=612")
    assert "signal GPU 2: hardware slowdown" in slow.message and "action: drain_and_service" in slow.message
    failed = c.Condition(c.FALSE, "XID_MEMORY_ERROR", "gpu_health failed")
    assert c.slow(failed, node) is failed
