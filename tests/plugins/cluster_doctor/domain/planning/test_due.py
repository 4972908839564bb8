import dataclasses
import datetime as dt

import pytest
from cluster_doctor.domain.payloads import GpuNode
from cluster_doctor.domain.planning import plan as planner
from cluster_doctor.domain.planning.due import (
    AHEAD,
    NEVER,
    OLDER_THAN_STALE_BEFORE,
    RETEST,
    STALE,
    PairState,
    Policy,
    why_due,
)
from cluster_doctor.domain.planning.steps import bundle_order
from hypothesis import given, settings
from hypothesis import strategies as st

NOW = dt.datetime(2026, 11, 22, 12, 0, tzinfo=dt.UTC)
TESTS = ["gpu_health", "dl_unit", "nccl_loopback", "storage_fio"]


def gpus(names):
    return [GpuNode(name=n, gpu_count=8) for n in names]


def bundles(nodes, tests, latest, **kw):
    """The planner's due bundles (``plan.bundles``) of the named nodes."""
    return planner.bundles(gpus(nodes), tests, latest, **kw)


def plan(nodes, tests, latest, *, now, policy=Policy(), first=()):
    """The due pairs the planner takes from ``bundles`` (``plan.take``, at most ``max_pairs``), node by
    node, each node's in the order they run: what ``plan.plan`` plans before the health sweep."""
    chosen = planner.take(bundles(nodes, tests, latest, now=now, policy=policy, first=first), policy.max_pairs)
    return [p for b in chosen for p in b.pairs]


def ago(**kw):
    return NOW - dt.timedelta(**kw)


def state(status, finished, attempt_at=None, attempt_status=None):
    return PairState(status=status, finished_at=finished, last_attempt_at=attempt_at or finished,
                     last_attempt_status=attempt_status or status)


def test_never_tested_first_then_oldest_first():
    latest = {
        ("n1", "dl_unit"): state("pass", ago(days=9)),
        ("n2", "dl_unit"): state("pass", ago(days=20)),
    }
    pairs = plan(["n1", "n2", "n3"], ["dl_unit"], latest, now=NOW)
    assert [(p.node_name, p.why) for p in pairs] == [("n3", NEVER), ("n2", STALE), ("n1", STALE)]


def test_fresh_pairs_are_not_due():
    latest = {("n1", t): state("pass", ago(days=1)) for t in TESTS}
    assert plan(["n1"], TESTS, latest, now=NOW) == []


def test_staleness_threshold_is_configurable():
    latest = {("n1", "dl_unit"): state("pass", ago(days=3))}
    assert plan(["n1"], ["dl_unit"], latest, now=NOW) == []
    pairs = plan(["n1"], ["dl_unit"], latest, now=NOW, policy=Policy(staleness=dt.timedelta(days=2)))
    assert [p.why for p in pairs] == [STALE]


@pytest.mark.parametrize("status", ["fail", "error"])
def test_failed_pair_is_retested_sooner(status):
    latest = {("n1", "dl_unit"): state(status, ago(hours=7))}
    assert [p.why for p in plan(["n1"], ["dl_unit"], latest, now=NOW)] == [RETEST]
    latest = {("n1", "dl_unit"): state(status, ago(hours=5))}
    assert plan(["n1"], ["dl_unit"], latest, now=NOW) == []
    # 0 disables the early retest: the pair waits for the normal staleness
    latest = {("n1", "dl_unit"): state(status, ago(hours=30))}
    assert plan(["n1"], ["dl_unit"], latest, now=NOW, policy=Policy(failed_retest=dt.timedelta(0))) == []


@pytest.mark.parametrize("status", ["timeout", "preempted", "skipped"])
def test_non_executed_attempts_never_make_a_pair_fresh(status):
    # an executed pass 8 days ago, then a non-executed attempt a minute ago: still due
    latest = {("n1", "dl_unit"): state("pass", ago(days=8), attempt_at=ago(minutes=1), attempt_status=status)}
    assert [p.why for p in plan(["n1"], ["dl_unit"], latest, now=NOW)] == [STALE]
    # only non-executed attempts: still "never executed"
    latest = {("n1", "dl_unit"): PairState(last_attempt_at=ago(minutes=1), last_attempt_status=status)}
    assert [p.why for p in plan(["n1"], ["dl_unit"], latest, now=NOW)] == [NEVER]


def test_recently_attempted_pairs_go_after_untried_ones():
    latest = {("n1", "dl_unit"): PairState(last_attempt_at=ago(minutes=50), last_attempt_status="timeout")}
    pairs = plan(["n1", "n2"], ["dl_unit"], latest, now=NOW)
    assert [p.node_name for p in pairs] == ["n2", "n1"]


def test_stale_before_makes_older_results_due():
    latest = {("n1", "dl_unit"): state("pass", ago(hours=2)), ("n2", "dl_unit"): state("pass", ago(minutes=10))}
    policy = Policy(stale_before=ago(hours=1))
    pairs = plan(["n1", "n2"], ["dl_unit"], latest, now=NOW, policy=policy)
    assert [(p.node_name, p.why) for p in pairs] == [("n1", OLDER_THAN_STALE_BEFORE)]


ONE_PER_NODE = Policy(bundle=False)


def test_one_pair_per_node_and_the_cap_without_bundles():
    pairs = plan([f"n{i}" for i in range(10)], TESTS, {}, now=NOW, policy=Policy(max_pairs=4, bundle=False))
    assert len(pairs) == 4
    assert len({p.node_name for p in pairs}) == 4
    # never tested everywhere: the tie-break is the node's natural order, then the test order
    assert [(p.node_name, p.test_name) for p in pairs] == [(f"n{i}", "gpu_health") for i in range(4)]


def test_natural_node_order_in_ties():
    pairs = plan(["gpu-10", "gpu-9", "gpu-100"], ["dl_unit"], {}, now=NOW)
    assert [p.node_name for p in pairs] == ["gpu-9", "gpu-10", "gpu-100"]


def test_the_most_stale_test_of_a_node_is_chosen_without_bundles():
    latest = {("n1", "gpu_health"): state("pass", ago(days=8)), ("n1", "dl_unit"): state("pass", ago(days=30))}
    pairs = plan(["n1"], ["gpu_health", "dl_unit"], latest, now=NOW, policy=ONE_PER_NODE)
    assert [(p.test_name, p.why) for p in pairs] == [("dl_unit", STALE)]


def test_bad_inputs():
    with pytest.raises(ValueError):
        plan(["n1"], TESTS, {}, now=dt.datetime(2026, 1, 1))
    with pytest.raises(ValueError):
        Policy(staleness=dt.timedelta(0))
    with pytest.raises(ValueError):
        PairState(status="timeout", finished_at=NOW)


# ------------------------------------------------------------------ properties
nodes_st = st.lists(st.sampled_from([f"gpu-{i:02d}" for i in range(12)]), min_size=0, max_size=15)
status_st = st.sampled_from(["pass", "fail", "error", None])


@st.composite
def scenario(draw):
    nodes = draw(nodes_st)
    tests = draw(st.lists(st.sampled_from(TESTS), min_size=1, max_size=4, unique=True))
    latest = {}
    for node in set(nodes):
        for test in tests:
            status = draw(status_st)
            if status is None:
                if draw(st.booleans()):
                    latest[(node, test)] = PairState(last_attempt_at=ago(hours=draw(st.integers(0, 100))),
                                                     last_attempt_status="timeout")
                continue
            finished = ago(hours=draw(st.integers(0, 24 * 20)))
            latest[(node, test)] = state(status, finished)
    policy = Policy(
        staleness=dt.timedelta(days=draw(st.integers(1, 10))),
        failed_retest=dt.timedelta(hours=draw(st.integers(0, 12))),
        max_pairs=draw(st.integers(0, 12)),
        stale_before=draw(st.none() | st.builds(lambda h: ago(hours=h), st.integers(0, 300))),
        bundle=False,
    )
    return nodes, tests, latest, policy


def _executed_at(latest, pair):
    s = latest.get((pair.node_name, pair.test_name))
    return s.finished_at if s and s.finished_at else None


@settings(max_examples=300, deadline=None)
@given(scenario())
def test_plan_invariants_without_bundles(sc):
    nodes, tests, latest, policy = sc
    pairs = plan(nodes, tests, latest, now=NOW, policy=policy)
    # no node twice, within the cap, only free nodes and enabled tests
    assert len({p.node_name for p in pairs}) == len(pairs)
    assert len(pairs) <= policy.max_pairs
    assert all(p.node_name in nodes and p.test_name in tests for p in pairs)
    # every chosen pair qualifies
    for p in pairs:
        assert why_due(latest.get((p.node_name, p.test_name)), NOW, policy) == p.why is not None
    # never-tested before tested, older before newer
    for a, b in zip(pairs, pairs[1:]):
        ea, eb = _executed_at(latest, a), _executed_at(latest, b)
        assert not (ea is not None and eb is None)
        if ea is not None and eb is not None:
            assert ea <= eb
    # maximal: a node with a due pair is left out only when the cap is reached
    if len(pairs) < policy.max_pairs:
        chosen = {p.node_name for p in pairs}
        for node in set(nodes) - chosen:
            assert all(why_due(latest.get((node, t)), NOW, policy) is None for t in tests)
    # deterministic, whatever the input order
    assert plan(list(reversed(nodes)), tests, latest, now=NOW, policy=policy) == pairs
    assert plan(nodes, tests, dict(reversed(list(latest.items()))), now=NOW, policy=policy) == pairs


def test_among_never_tested_pairs_never_validated_nodes_go_first():
    latest = {("n1", "gpu_health"): state("pass", ago(hours=1))}
    pairs = plan(["n1", "n2"], ["gpu_health", "dl_unit"], latest, now=NOW, policy=Policy(max_pairs=1))
    assert [(p.node_name, p.test_name) for p in pairs] == [("n2", "gpu_health")]


# ------------------------------------------------------------------ bundles
def test_a_free_node_runs_every_due_suite_health_first():
    latest = {("n1", "dl_unit"): state("pass", ago(days=9)), ("n1", "gpu_health"): state("pass", ago(days=8)),
              ("n1", "storage_fio"): state("pass", ago(days=1)), ("n2", "dl_unit"): state("pass", ago(days=1))}
    policy = Policy(bundle_ahead=dt.timedelta(0))
    pairs = plan(["n1", "n2"], TESTS, latest, now=NOW, policy=policy)
    # nccl_loopback never ran; storage_fio is fresh; n2 misses three suites but is behind n1 (never-run
    # pairs on both, n1's last validation is older)
    assert [(p.node_name, p.test_name, p.why) for p in pairs] == [
        ("n1", "gpu_health", STALE), ("n1", "dl_unit", STALE), ("n1", "nccl_loopback", NEVER),
        ("n2", "gpu_health", NEVER), ("n2", "nccl_loopback", NEVER), ("n2", "storage_fio", NEVER)]


def test_pairs_due_soon_ride_along_but_never_make_a_node_due():
    latest = {("n1", "dl_unit"): state("pass", ago(days=8)), ("n1", "gpu_health"): state("pass", ago(days=6)),
              ("n1", "storage_fio"): state("pass", ago(days=2)),
              **{("n2", t): state("pass", ago(days=6)) for t in ("gpu_health", "dl_unit", "storage_fio")}}
    pairs = plan(["n1", "n2"], ["gpu_health", "dl_unit", "storage_fio"], latest, now=NOW)
    assert [(p.node_name, p.test_name, p.why) for p in pairs] == [("n1", "gpu_health", AHEAD), ("n1", "dl_unit", STALE)]


def test_the_cap_cuts_the_last_bundle_to_its_most_urgent_pairs():
    latest = {("n2", "storage_fio"): state("pass", ago(days=30)), ("n2", "nccl_loopback"): state("pass", ago(days=20))}
    pairs = plan(["n1", "n2"], TESTS, latest, now=NOW, policy=Policy(max_pairs=6))
    # n1 (never validated) whole, then n2's health (it gates the rest) and its stalest suite
    assert [(p.node_name, p.test_name) for p in pairs] == [
        ("n1", "gpu_health"), ("n1", "dl_unit"), ("n1", "nccl_loopback"), ("n1", "storage_fio"),
        ("n2", "gpu_health"), ("n2", "dl_unit")]
    pairs = plan(["n2"], TESTS, {**latest, ("n2", "gpu_health"): state("pass", ago(hours=1)),
                                 ("n2", "dl_unit"): state("pass", ago(hours=1))}, now=NOW, policy=Policy(max_pairs=1))
    assert [(p.node_name, p.test_name) for p in pairs] == [("n2", "storage_fio")]


def test_reserved_nodes_go_first():
    latest = {("n1", t): state("pass", ago(days=8)) for t in TESTS}
    pairs = plan(["n1", "n2"], TESTS, latest, now=NOW, policy=Policy(max_pairs=4), first={"n1"})
    assert {p.node_name for p in pairs} == {"n1"}


def test_bundle_order_puts_health_first():
    assert bundle_order(["dl_unit", "storage_fio", "gpu_health"]) == ["gpu_health", "dl_unit", "storage_fio"]
    assert bundle_order(["dl_unit", "dl_unit"]) == ["dl_unit"]


@st.composite
def bundle_scenario(draw):
    nodes, tests, latest, policy = draw(scenario())
    return nodes, tests, latest, dataclasses.replace(
        policy, bundle=True, bundle_ahead=dt.timedelta(hours=draw(st.integers(0, 72))))


@settings(max_examples=300, deadline=None)
@given(bundle_scenario())
def test_bundle_invariants(sc):
    nodes, tests, latest, policy = sc
    pairs = plan(nodes, tests, latest, now=NOW, policy=policy)
    assert len(pairs) <= policy.max_pairs
    assert len(set((p.node_name, p.test_name) for p in pairs)) == len(pairs)
    assert all(p.node_name in nodes and p.test_name in tests for p in pairs)
    # a node's pairs are contiguous and run in bundle order; every node has a really due pair
    order = bundle_order(tests)
    seen: list[str] = []
    for p in pairs:
        if not seen or seen[-1] != p.node_name:
            assert p.node_name not in seen
            seen.append(p.node_name)
    for node in seen:
        mine = [p for p in pairs if p.node_name == node]
        assert [p.test_name for p in mine] == sorted((p.test_name for p in mine), key=order.index)
        assert any(p.why != AHEAD for p in mine)
        for p in mine:
            due = why_due(latest.get((p.node_name, p.test_name)), NOW, policy)
            assert p.why == due or (p.why == AHEAD and due is None)
    # below the cap, every due pair of every free node is planned
    if len(pairs) < policy.max_pairs:
        planned = {(p.node_name, p.test_name) for p in pairs}
        for node in set(nodes):
            for t in tests:
                if why_due(latest.get((node, t)), NOW, policy) is not None:
                    assert (node, t) in planned
    assert plan(list(reversed(nodes)), tests, latest, now=NOW, policy=policy) == pairs
    assert [b.node_name for b in bundles(nodes, tests, latest, now=NOW, policy=policy)][:len(seen)] == seen
