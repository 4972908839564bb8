"""A suspect is reserved, busy or free: before any overdue node, within the same limit and
breaker, never a quarantined node, and kept until validated however fresh its results; the fast path's
reserve_suspects does the same at once. A free one's taint goes when its validation is done, its idle time
counted; a run limited to a node range leaves the taints outside it alone."""

from __future__ import annotations

import datetime as dt

import pytest
from cluster_doctor.domain.planning import due
from cluster_doctor.domain.attempts import Attempt
from cluster_doctor.domain import quarantine as q
from cluster_doctor.domain.nodes import parse_node_range
from cluster_doctor.domain.reservation import KEY, NOT_ELIGIBLE, NOT_OVERDUE, VALIDATED, ReservationPolicy
from cluster_doctor.kube import reservation as r
from cluster_doctor.store import reservations as rows
from k8s_emulator import EmulatorProcess

TESTS = ["gpu_health", "dl_unit"]
NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)
DUE = due.Policy(staleness=dt.timedelta(days=5.5))
POLICY = ReservationPolicy(enabled=True, target_days=7, lead_hours=30, max_share=1.0, breaker_share=1.0)


def _validated(store, node, days):
    store.record([Attempt(node_name=node, test_name=t, status="pass", finished_at=NOW - dt.timedelta(days=days),
                          dag_id="continuous_validation", run_id=f"old-{node}-{t}") for t in TESTS])


def _taints(emu, node):
    return [t.key for t in emu.core_v1().read_node(node).spec.taints or []]


def test_a_busy_suspect_is_reserved_first_and_kept_while_suspect(store):
    with EmulatorProcess(settings={"scheduler_interval": 0.05}) as emu:
        for i in (1, 2, 3):
            emu.add_gpu_node(f"gpu-00{i}")
            emu.add_user_pod(f"gpu-00{i}", name=f"job-{i}")
        _validated(store, "gpu-001", 1)  # fresh, but suspect
        _validated(store, "gpu-002", 6)  # overdue
        _validated(store, "gpu-003", 1)
        one = ReservationPolicy(**{**POLICY.__dict__, "max_nodes": 1})

        def reserve(policy, suspects):
            return r.reserve_and_release(emu.core_v1(), store.connect, policy, busy=["gpu-001", "gpu-002", "gpu-003"], free=[],
                               gpu_nodes=3, tests=TESTS, latest=store.pair_states(["gpu-001", "gpu-002", "gpu-003"], TESTS),
                               due_policy=DUE, run_id="scheduled__1", now=NOW, suspects=suspects)

        report = reserve(one, ["gpu-001"])
        assert report.applied == ["gpu-001"] and report.waiting == ["gpu-002"]  # the suspect first, the limit holds
        assert reserve(one, ["gpu-001"]).released == {}  # not overdue, but suspect: kept
        assert reserve(one, []).released == {"gpu-001": NOT_OVERDUE}  # no longer suspect: released
        assert _taints(emu, "gpu-001") == []
        fast = r.reserve_suspects(emu.core_v1(), store.connect, POLICY, suspects=["gpu-003"], gpu_nodes=3,
                                  run_id="fast")
        assert fast.applied == ["gpu-003"] and _taints(emu, "gpu-003") == [KEY]
        breaker = ReservationPolicy(**{**POLICY.__dict__, "breaker_share": 0.3})
        held = r.reserve_suspects(emu.core_v1(), store.connect, breaker, suspects=["gpu-001"], gpu_nodes=3,
                                  run_id="fast")
        assert held.breaker_open and held.applied == [] and _taints(emu, "gpu-001") == []


def test_a_free_suspect_is_tainted_at_once_never_a_quarantined_one_and_its_validation_frees_it(store):
    """The fast path taints a free suspect (a user job could land on it any moment before our pod) within the
    limit; the run that validates it finds it free and reserved (planned first), and its validation's end
    removes the taint, the idle GPU-hours from the taint to then counted."""
    with EmulatorProcess(settings={"scheduler_interval": 0.05}) as emu:
        for i in (1, 2, 3, 4):
            emu.add_gpu_node(f"gpu-00{i}")
        emu.add_user_pod("gpu-002", name="job-2")
        emu.patch_node("gpu-004", labels={q.LABEL: q.LABEL_VALUE})  # quarantined: never ours
        two = ReservationPolicy(**{**POLICY.__dict__, "max_nodes": 2})
        fast = r.reserve_suspects(emu.core_v1(), store.connect, two, suspects=["gpu-001", "gpu-002", "gpu-003",
                                  "gpu-004"], gpu_nodes=4, run_id="suspect_signals", now=NOW)
        assert fast.applied == ["gpu-001", "gpu-002"] and fast.waiting == ["gpu-003"]  # free and busy alike
        assert _taints(emu, "gpu-001") == [KEY] and _taints(emu, "gpu-003") == [] and KEY not in _taints(emu, "gpu-004")
        dry = ReservationPolicy(**{**POLICY.__dict__, "dry_run": True})
        assert r.reserve_suspects(emu.core_v1(), store.connect, dry, suspects=["gpu-003"], gpu_nodes=4,
                                  run_id="suspect_signals", now=NOW).applied == ["gpu-003"]
        assert _taints(emu, "gpu-003") == [] and sorted(rows.open_reservations(store.connect)) == ["gpu-001", "gpu-002"]

        later = NOW + dt.timedelta(minutes=10)  # the triggered run: free, ours, suspect: kept, planned first
        report = r.reserve_and_release(emu.core_v1(), store.connect, two, busy=["gpu-002"], free=["gpu-001", "gpu-003"],
                             gpu_nodes=4, tests=TESTS, latest={}, due_policy=DUE, run_id="suspects__1", now=later,
                             suspects=["gpu-001", "gpu-002", "gpu-003"])
        assert report.released == {} and report.free == ["gpu-001"] and report.waiting == ["gpu-003"]
        done = later + dt.timedelta(minutes=30)
        assert r.release_after_validation(emu.core_v1(), store.connect, "gpu-001", policy=two, run_id="suspects__1",
                                          now=done)
        assert _taints(emu, "gpu-001") == []
        totals = rows.totals(store.connect, NOW - dt.timedelta(hours=1), done + dt.timedelta(hours=1))
        assert totals.released == {VALIDATED: 1} and totals.idle_gpu_hours == pytest.approx(8 * 40 / 60)


def test_the_hourly_run_reserves_a_free_suspect_first_and_plans_it_as_reserved(store):
    with EmulatorProcess(settings={"scheduler_interval": 0.05}) as emu:
        for i in (1, 2, 3):
            emu.add_gpu_node(f"gpu-00{i}")
        emu.add_user_pod("gpu-002", name="job-2")
        _validated(store, "gpu-001", 1)  # fresh, but suspect
        _validated(store, "gpu-002", 6)  # busy and overdue
        _validated(store, "gpu-003", 6)  # free and overdue: the plan takes it, no taint needed
        one = ReservationPolicy(**{**POLICY.__dict__, "max_nodes": 1})
        nodes = ["gpu-001", "gpu-002", "gpu-003"]
        report = r.reserve_and_release(emu.core_v1(), store.connect, one, busy=["gpu-002"], free=["gpu-001", "gpu-003"],
                             gpu_nodes=3, tests=TESTS, latest=store.pair_states(nodes, TESTS), due_policy=DUE,
                             run_id="scheduled__1", now=NOW, suspects=["gpu-001"])
        assert report.applied == ["gpu-001"] and report.free == ["gpu-001"] and report.waiting == ["gpu-002"]
        assert _taints(emu, "gpu-001") == [KEY] and _taints(emu, "gpu-003") == []


def test_a_run_limited_to_a_node_range_leaves_the_taints_outside_it_alone(store):
    """The fast path's run is limited to its free suspects (node_range): the busy suspect it tainted is not
    in that run's discovery, which must not read as 'gone' and release it."""
    with EmulatorProcess(settings={"scheduler_interval": 0.05}) as emu:
        for i in (1, 2, 3):
            emu.add_gpu_node(f"gpu-00{i}")
        emu.add_user_pod("gpu-002", name="job-2")
        two = ReservationPolicy(**{**POLICY.__dict__, "max_nodes": 2})
        r.reserve_suspects(emu.core_v1(), store.connect, two, suspects=["gpu-001", "gpu-002"], gpu_nodes=3,
                           run_id="suspect_signals", now=NOW)

        def ranged(node_range):
            return r.reserve_and_release(emu.core_v1(), store.connect, two, busy=[], free=["gpu-001", "gpu-003"], gpu_nodes=3,
                               tests=TESTS, latest={}, due_policy=DUE, run_id="suspects__1", now=NOW,
                               suspects=["gpu-001", "gpu-003"], node_range=node_range)

        report = ranged(parse_node_range("gpu-001,gpu-003"))
        assert report.released == {} and report.reserved == ["gpu-001"] and report.free == ["gpu-001"]
        assert _taints(emu, "gpu-002") == [KEY]
        assert report.applied == [] and report.waiting == ["gpu-003"]  # gpu-002's taint still counts: no room
        everywhere = ranged(None)  # a run of every node that does not see gpu-002 free or busy: gone
        assert everywhere.released == {"gpu-002": NOT_ELIGIBLE} and everywhere.applied == ["gpu-003"]
