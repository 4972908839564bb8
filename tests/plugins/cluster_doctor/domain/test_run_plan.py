"""The one planner (``domain.run_plan``): blocked tests left out, claims through the caller's callback,
reserved nodes first, and why a plan is empty. The three callers agreeing: test_plan_agreement.py."""

from __future__ import annotations

import datetime as dt

from cluster_doctor.domain import priority, run_plan
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.nodes import parse_node_range
from cluster_doctor.domain.payloads import GpuNode, HeldPair
from cluster_doctor.domain.planning import RunParams

NOW = dt.datetime(2026, 11, 22, 12, tzinfo=dt.UTC)
TESTS = ["gpu_health", "dl_unit", "storage_fio"]


def given(free=("gpu-001", "gpu-002", "gpu-003"), *, states=None, max_pairs=16, tests=TESTS, **kw):
    run = RunParams(parse_node_range(""), list(tests), None, max_pairs, False)
    return run_plan.PlanInput(settings=Settings(), run=run, states=states or {},
                              free=[GpuNode(name=n, gpu_count=8, gpu_model="NVIDIA H200") for n in free], **kw)


def pairs(found: run_plan.RunPlan) -> list[tuple[str, str]]:
    return [(p.node_name, p.test_name) for p in found.plan.pairs]


def test_without_a_claimer_every_due_node_is_planned_up_to_max_pairs_with_its_gpus():
    found = run_plan.plan(given(max_pairs=4), now=NOW)
    assert pairs(found) == [("gpu-001", "gpu_health"), ("gpu-001", "dl_unit"), ("gpu-001", "storage_fio"),
                            ("gpu-002", "gpu_health")]
    assert [p.to_dict() for p in found.pairs] == [
        {"node_name": p.node_name, "test_name": p.test_name, "why": p.why, "last_status": None,
         "last_finished_at": None, "last_attempt_at": None, "last_attempt_status": None} for p in found.plan.pairs]
    assert {(p.gpu_count, p.gpu_model) for p in found.plan.pairs} == {(8, "NVIDIA H200")}
    assert found.plan.why_empty is None and found.plan.held_by_other_runs == []


def test_tests_blocked_by_a_volume_problem_are_planned_for_no_node():
    found = run_plan.plan(given(blocked_tests=["storage_fio"], blocked_problem="claim x missing"), now=NOW)
    assert {t for _, t in pairs(found)} == {"gpu_health", "dl_unit"} and found.blocked == ["storage_fio"]
    every = run_plan.plan(given(blocked_tests=TESTS, blocked_problem="claim x missing"), now=NOW)
    assert every.plan.pairs == [] and every.blocked == TESTS
    assert every.plan.why_empty == "nothing planned: no test can run (claim x missing)"


def test_free_reserved_nodes_go_first_and_the_plan_names_them():
    found = run_plan.plan(given(reserved=["gpu-003", "gpu-009"], max_pairs=3), now=NOW)
    assert found.plan.nodes() == ["gpu-003"] and found.plan.reserved == ["gpu-003"]


def test_the_claimer_sees_every_candidate_in_priority_order_and_plans_what_it_grants():
    seen = []
    held = HeldPair(node_name="gpu-001", test_name="gpu_health", dag_id="d", run_id="other", held_for="gpu_health",
                    expires_at=NOW + dt.timedelta(hours=1))

    def claim(found):
        seen.append([b.node_name for b in found])
        return run_plan.Claimed(granted=frozenset({"gpu-002", "gpu-003"}), held=(held,))

    found = run_plan.plan(given(max_pairs=4), now=NOW, claim=claim)
    assert seen == [["gpu-001", "gpu-002", "gpu-003"]]  # before the max_pairs cut: the claims keep the limit
    assert found.plan.nodes() == ["gpu-002", "gpu-003"] and len(found.plan.pairs) == 4
    assert found.plan.held_by_other_runs == [held]


def test_a_plan_left_with_nothing_says_who_holds_the_nodes():
    held = [HeldPair(node_name=n, test_name="gpu_health", dag_id="d", run_id="backfill__1", held_for="gpu_health",
                     expires_at=NOW + dt.timedelta(hours=1)) for n in ("gpu-001", "gpu-002")]
    found = run_plan.plan(given(("gpu-001", "gpu-002")), now=NOW,
                          claim=lambda found: run_plan.Claimed(granted=frozenset(), held=tuple(held)))
    assert found.plan.pairs == [] and found.plan.why_empty == (
        "nothing planned: all 2 free node(s) with a due pair are claimed by other live runs (2 by run backfill__1 "
        "until 2026-11-22T13:00+00:00)")


def test_the_claimer_is_asked_even_with_nothing_due_so_a_retried_run_gives_its_old_claims_back():
    fresh = priority.PairState("pass", NOW - dt.timedelta(hours=1), NOW - dt.timedelta(hours=1), "pass")
    seen = []

    def claim(found):
        seen.append(list(found))
        return run_plan.Claimed(granted=frozenset())

    found = run_plan.plan(given(("gpu-001",), states={("gpu-001", t): fresh for t in TESTS}), now=NOW, claim=claim)
    assert seen == [[]]
    assert found.plan.why_empty == ("nothing planned: all pairs of the 1 free node(s) are fresh since "
                                    "2026-11-22T11:00+00:00 (none due; tests gpu_health, dl_unit, storage_fio)")


def test_why_empty_counts_the_nodes_that_are_not_free():
    found = run_plan.plan(given((), ineligible=[("gpu-001", "busy"), ("gpu-002", "busy"), ("gpu-003", "cordoned")]),
                          now=NOW)
    assert found.plan.why_empty == "nothing planned: none of the 3 GPU node(s) is free (2 busy, 1 cordoned)"


def test_one_place_builds_the_policy_from_the_settings_and_the_params():
    from cluster_doctor.domain import planning

    run = RunParams(parse_node_range(""), TESTS, NOW - dt.timedelta(days=1), 5, False)
    policy = planning.policy(Settings(staleness_days=3, failed_retest_hours=2, bundle_ahead_hours=12), run)
    assert policy == priority.Policy(staleness=dt.timedelta(days=3), failed_retest=dt.timedelta(hours=2), max_pairs=5,
                                     stale_before=NOW - dt.timedelta(days=1), bundle_ahead=dt.timedelta(hours=12))
    assert not planning.policy(Settings(), run, bundle=False).bundle
