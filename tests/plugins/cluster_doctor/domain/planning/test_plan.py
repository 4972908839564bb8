"""The one planner (``domain.planning.plan``): blocked tests left out, claims through the caller's callback,
reserved nodes first, and why a plan is empty. The three callers agreeing: test_plan_agreement.py."""

from __future__ import annotations

import datetime as dt

from cluster_doctor.domain.planning import due
from cluster_doctor.domain.planning import plan as planner
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.nodes import parse_node_range
from cluster_doctor.domain.payloads import GpuNode, HeldPair
from cluster_doctor.domain.planning.params import RunParams

NOW = dt.datetime(2026, 11, 22, 12, tzinfo=dt.UTC)
TESTS = ["gpu_health", "dl_unit", "storage_fio"]


def given(free=("gpu-001", "gpu-002", "gpu-003"), *, states=None, max_pairs=16, tests=TESTS, settings=None, **kw):
    run = RunParams(parse_node_range(""), list(tests), None, max_pairs, False)
    return planner.PlanInput(settings=settings or Settings(), run=run, states=states or {},
                              free=[GpuNode(name=n, gpu_count=8, gpu_model="NVIDIA H200") for n in free], **kw)


def pairs(found: planner.RunPlan) -> list[tuple[str, str]]:
    return [(p.node_name, p.test_name) for p in found.plan.pairs]


def test_without_a_claimer_every_due_node_is_planned_up_to_max_pairs_with_its_gpus():
    found = planner.plan(given(max_pairs=4), now=NOW)
    assert pairs(found) == [("gpu-001", "gpu_health"), ("gpu-001", "dl_unit"), ("gpu-001", "storage_fio"),
                            ("gpu-002", "gpu_health")]
    assert found.pairs == list(found.plan.pairs)  # the bundles' pairs are the payload's, one type
    assert {(p.last_status, p.last_finished_at, p.last_attempt_at, p.last_attempt_status)
            for p in found.plan.pairs} == {(None, None, None, None)}
    assert {(p.gpu_count, p.gpu_model) for p in found.plan.pairs} == {(8, "NVIDIA H200")}
    assert found.plan.why_empty is None and found.plan.held_by_other_runs == []


def test_tests_blocked_by_a_volume_problem_are_planned_for_no_node():
    found = planner.plan(given(blocked_tests=["storage_fio"], blocked_problem="claim x missing"), now=NOW)
    assert {t for _, t in pairs(found)} == {"gpu_health", "dl_unit"} and found.blocked == ["storage_fio"]
    every = planner.plan(given(blocked_tests=TESTS, blocked_problem="claim x missing"), now=NOW)
    assert every.plan.pairs == [] and every.blocked == TESTS
    assert every.plan.why_empty == "nothing planned: no test can run (claim x missing)"


def test_free_reserved_nodes_go_first_and_the_plan_names_them():
    found = planner.plan(given(reserved=["gpu-003", "gpu-009"], max_pairs=3), now=NOW)
    assert found.plan.nodes() == ["gpu-003"] and found.plan.reserved == ["gpu-003"]


def test_the_claimer_sees_every_candidate_in_priority_order_and_plans_what_it_grants():
    seen = []
    held = HeldPair(node_name="gpu-001", test_name="gpu_health", dag_id="d", run_id="other", held_for="gpu_health",
                    expires_at=NOW + dt.timedelta(hours=1))

    def claim(found):
        seen.append([b.node_name for b in found])
        return planner.Claimed(granted=frozenset({"gpu-002", "gpu-003"}), held=(held,))

    found = planner.plan(given(max_pairs=4), now=NOW, claim=claim)
    assert seen == [["gpu-001", "gpu-002", "gpu-003"]]  # before the max_pairs cut: the claims keep the limit
    assert found.plan.nodes() == ["gpu-002", "gpu-003"] and len(found.plan.pairs) == 4
    assert found.plan.held_by_other_runs == [held]


def test_a_plan_left_with_nothing_says_who_holds_the_nodes():
    held = [HeldPair(node_name=n, test_name="gpu_health", dag_id="d", run_id="backfill__1", held_for="gpu_health",
                     expires_at=NOW + dt.timedelta(hours=1)) for n in ("gpu-001", "gpu-002")]
    found = planner.plan(given(("gpu-001", "gpu-002")), now=NOW,
                          claim=lambda found: planner.Claimed(granted=frozenset(), held=tuple(held)))
    assert found.plan.pairs == [] and found.plan.why_empty == (
        "nothing planned: all 2 free node(s) with a due pair are claimed by other live runs (2 by run backfill__1 "
        "until 2026-11-22T13:00+00:00)")


def test_the_claimer_is_asked_even_with_nothing_due_so_a_retried_run_gives_its_old_claims_back():
    fresh = due.PairState("pass", NOW - dt.timedelta(hours=1), NOW - dt.timedelta(hours=1), "pass")
    seen = []

    def claim(found):
        seen.append(list(found))
        return planner.Claimed(granted=frozenset())

    no_sweep = Settings(sweep_interval_hours=0)  # an hour-old health check is the sweep's otherwise
    found = planner.plan(given(("gpu-001",), states={("gpu-001", t): fresh for t in TESTS}, settings=no_sweep),
                          now=NOW, claim=claim)
    assert seen == [[]]
    assert found.plan.why_empty == ("nothing planned: all pairs of the 1 free node(s) are fresh since "
                                    "2026-11-22T11:00+00:00 (none due; tests gpu_health, dl_unit, storage_fio)")


def test_why_empty_counts_the_nodes_that_are_not_free():
    found = planner.plan(given((), ineligible=[("gpu-001", "busy"), ("gpu-002", "busy"), ("gpu-003", "cordoned")]),
                          now=NOW)
    assert found.plan.why_empty == "nothing planned: none of the 3 GPU node(s) is free (2 busy, 1 cordoned)"


def test_one_place_builds_the_policy_from_the_settings_and_the_params():
    run = RunParams(parse_node_range(""), TESTS, NOW - dt.timedelta(days=1), 5, False)
    policy = due.policy(Settings(staleness_days=3, failed_retest_hours=2, bundle_ahead_hours=12), run)
    assert policy == due.Policy(staleness=dt.timedelta(days=3), failed_retest=dt.timedelta(hours=2), max_pairs=5,
                                     stale_before=NOW - dt.timedelta(days=1), bundle_ahead=dt.timedelta(hours=12))
    assert not due.policy(Settings(), run, bundle=False).bundle


def checked(age: dt.timedelta, status: str = "pass") -> due.PairState:
    return due.PairState(status, NOW - age, NOW - age, status)


def fresh_but_health(ages: dict[str, dt.timedelta], tests=TESTS, health_status: str = "pass") -> dict:
    """Every suite of each node passed a day ago; its health suites (gpu_health, ib_health) ``ages`` ago."""
    return {(node, t): checked(age, health_status) if t in planner.SWEEP_SUITES else checked(dt.timedelta(days=1))
            for node, age in ages.items() for t in tests}


def test_the_health_sweep_takes_free_nodes_with_no_due_pair_after_every_due_bundle_oldest_check_first():
    """A free node whose suites are all fresh but whose last health check is older than
    sweep_interval_hours (1 h; runs are hourly, so 30 minutes less) runs gpu_health, marked ``health sweep``,
    after the due bundles; a younger check, a failed one (the retest rule's) or a node with a due pair is not
    swept."""
    H = dt.timedelta(hours=1)
    states = fresh_but_health({"gpu-002": 2 * H, "gpu-003": 5 * H, "gpu-004": 0.4 * H, "gpu-005": 0.6 * H})
    states |= fresh_but_health({"gpu-006": 3 * H}, health_status="fail")
    found = planner.plan(given(("gpu-001", "gpu-002", "gpu-003", "gpu-004", "gpu-005", "gpu-006"), states=states),
                          now=NOW)
    assert [(p.node_name, p.test_name, p.why) for p in found.plan.pairs] == [
        ("gpu-001", "gpu_health", due.NEVER), ("gpu-001", "dl_unit", due.NEVER),
        ("gpu-001", "storage_fio", due.NEVER),
        ("gpu-003", "gpu_health", due.SWEEP), ("gpu-002", "gpu_health", due.SWEEP),
        ("gpu-005", "gpu_health", due.SWEEP)]  # 36 minutes: within the 30-minute slack of a 1 h interval
    assert [b.node_name for b in found.sweeps] == ["gpu-003", "gpu-002", "gpu-005"]
    assert found.plan.why_empty is None
    # the setting turns it off; a longer interval sweeps only the older checks
    off = planner.plan(given(("gpu-002", "gpu-003"), states=states, settings=Settings(sweep_interval_hours=0)), now=NOW)
    assert off.plan.pairs == [] and off.plan.why_empty.startswith("nothing planned: all pairs of the 2 free node(s)")
    four = planner.plan(given(("gpu-002", "gpu-003"), states=states, settings=Settings(sweep_interval_hours=4)),
                         now=NOW)
    assert [p.node_name for p in four.plan.pairs] == ["gpu-003"]


def test_the_sweep_never_takes_a_due_pairs_place_within_max_pairs_and_is_claimed_after_the_bundles():
    H = dt.timedelta(hours=1)
    states = fresh_but_health({"gpu-002": 2 * H, "gpu-003": 3 * H})
    cut = planner.plan(given(("gpu-001", "gpu-002", "gpu-003"), states=states, max_pairs=4), now=NOW)
    assert [(p.node_name, p.why) for p in cut.plan.pairs] == [("gpu-001", due.NEVER)] * 3 + [
        ("gpu-003", due.SWEEP)]
    seen = []

    def claim(found):
        seen.append([(b.node_name, planner.is_sweep(b)) for b in found])
        return planner.Claimed(granted=frozenset({"gpu-001", "gpu-002"}))

    claimed = planner.plan(given(("gpu-001", "gpu-002", "gpu-003"), states=states), now=NOW, claim=claim)
    assert seen == [[("gpu-001", False), ("gpu-003", True), ("gpu-002", True)]]
    assert claimed.plan.nodes() == ["gpu-001", "gpu-002"]


def test_ib_health_is_swept_where_it_is_enabled_and_the_nodes_pool_has_hcas():
    H = dt.timedelta(hours=1)
    tests = ["gpu_health", "ib_health", "dl_unit"]
    states = fresh_but_health({"gpu-001": 2 * H, "gpu-002": 2 * H}, tests=tests)
    free = [GpuNode(name="gpu-001", gpu_count=8, gpu_model="NVIDIA-H100-80GB-HBM3"),
            GpuNode(name="gpu-002", gpu_count=8, gpu_model="NVIDIA-L40S")]
    settings = Settings(node_pool_expectations={"NVIDIA-L40S": "hcas=0"})
    run = RunParams(parse_node_range(""), tests, None, 16, False)
    found = planner.plan(planner.PlanInput(settings=settings, run=run, free=free, states=states,
                                             without_hcas=planner.models_without_hcas(settings)), now=NOW)
    assert [(p.node_name, p.test_name) for p in found.plan.pairs] == [
        ("gpu-001", "gpu_health"), ("gpu-001", "ib_health"), ("gpu-002", "gpu_health")]
    # not enabled (the default suites): gpu_health alone
    plain = planner.plan(given(("gpu-001",), states=fresh_but_health({"gpu-001": 2 * H})), now=NOW)
    assert [p.test_name for p in plain.plan.pairs] == ["gpu_health"]


def test_suspect_nodes_run_their_whole_bundle_first_before_reserved_ones():
    """A node a signal made suspect runs every enabled suite whatever their staleness,
    before the reserved nodes (a free suspect can take a user job any moment; a reserved one cannot). A
    suspect that is not free is not planned (its taint is the reservation's)."""
    states = fresh_but_health({"gpu-001": dt.timedelta(minutes=10), "gpu-002": dt.timedelta(minutes=10)})
    found = planner.plan(given(("gpu-001", "gpu-002", "gpu-003"), states=states, reserved=["gpu-003"],
                                suspects={"gpu-002": "a user job failed: Xid 79", "gpu-009": "busy"}), now=NOW)
    assert [(p.node_name, p.test_name, p.why) for p in found.plan.pairs] == [
        *[("gpu-002", t, due.SUSPECT) for t in TESTS], *[("gpu-003", t, due.NEVER) for t in TESTS]]
    assert found.suspects == ["gpu-002"] and found.plan.reserved == ["gpu-003"]
    # one suite per node per run (the simulator's --no-bundle): a suspect still runs them all
    single = planner.plan(given(("gpu-002",), states=states, suspects={"gpu-002": "x"}, bundle=False), now=NOW)
    assert [p.test_name for p in single.plan.pairs] == TESTS


def test_with_peer_tests_the_sweep_leaves_the_nodes_whose_peer_test_is_due_to_them():
    """Peer tests are planned after the plan, from the free nodes it leaves: a node whose peer test is due
    (never run, or older than peer_cadence_days) is not swept, so the sweep never takes a due validation's
    node; with peer tests off, nothing is left out."""
    from cluster_doctor.domain.peers import PeerResult

    H = dt.timedelta(hours=1)
    states = fresh_but_health({n: 2 * H for n in ("gpu-001", "gpu-002", "gpu-003")})
    history = [PeerResult("gpu-001", "gpu-002", "pass", NOW - dt.timedelta(days=1)),
               PeerResult("gpu-002", "gpu-001", "pass", NOW - dt.timedelta(days=1))]
    settings = Settings(peer_tests=True)
    peers_due = planner.peer_due(["gpu-001", "gpu-002", "gpu-003"], history, settings, NOW)
    assert peers_due == {"gpu-003"}  # never peer-tested
    assert planner.peer_due(["gpu-003"], history, Settings(), NOW) == frozenset()  # peer tests off
    found = planner.plan(given(states=states, settings=settings, peer_due=peers_due), now=NOW)
    assert [p.node_name for p in found.plan.pairs] == ["gpu-001", "gpu-002"]
