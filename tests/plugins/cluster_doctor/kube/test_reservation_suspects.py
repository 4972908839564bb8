"""A busy suspect is reserved (issue 28 §2): before any overdue node, within the same limit and breaker, and
kept until validated however fresh its results; the fast path's reserve_suspects does the same at once."""

from __future__ import annotations

import datetime as dt

from cluster_doctor.domain import priority
from cluster_doctor.domain.attempts import Attempt
from cluster_doctor.domain.reservation import KEY, NOT_OVERDUE, ReservationPolicy
from cluster_doctor.kube import reservation as r
from k8s_emulator import EmulatorProcess

TESTS = ["gpu_health", "dl_unit"]
NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)
DUE = priority.Policy(staleness=dt.timedelta(days=5.5))
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

        def reconcile(policy, suspects):
            return r.reconcile(emu.core_v1(), store.connect, policy, busy=["gpu-001", "gpu-002", "gpu-003"], free=[],
                               gpu_nodes=3, tests=TESTS, latest=store.pair_states(["gpu-001", "gpu-002", "gpu-003"], TESTS),
                               due_policy=DUE, run_id="scheduled__1", now=NOW, suspects=suspects)

        report = reconcile(one, ["gpu-001"])
        assert report.applied == ["gpu-001"] and report.waiting == ["gpu-002"]  # the suspect first, the limit holds
        assert reconcile(one, ["gpu-001"]).released == {}  # not overdue, but suspect: kept
        assert reconcile(one, []).released == {"gpu-001": NOT_OVERDUE}  # no longer suspect: released
        assert _taints(emu, "gpu-001") == []
        fast = r.reserve_suspects(emu.core_v1(), store.connect, POLICY, busy=["gpu-003"], gpu_nodes=3, run_id="fast")
        assert fast.applied == ["gpu-003"] and _taints(emu, "gpu-003") == [KEY]
        breaker = ReservationPolicy(**{**POLICY.__dict__, "breaker_share": 0.3})
        held = r.reserve_suspects(emu.core_v1(), store.connect, breaker, busy=["gpu-001"], gpu_nodes=3, run_id="fast")
        assert held.breaker_open and held.applied == [] and _taints(emu, "gpu-001") == []
