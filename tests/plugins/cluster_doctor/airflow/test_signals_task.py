"""The signals in Airflow's task bodies (issue 28 §2): prioritize plans a suspect's whole bundle first, the
fast path's tick reads the signals against the emulator and triggers a run only when it does not hold the
hourly one back, and a busy suspect is reserved at once."""

from __future__ import annotations

import datetime as dt

import pytest
from cluster_doctor.airflow import signals_task, tasks
from cluster_doctor.domain import priority
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.payloads import Discovered, Latest
from cluster_doctor.domain.signals import Evidence
from cluster_doctor.store import suspects
from k8s_emulator import EmulatorProcess

NOW = dt.datetime(2026, 11, 28, 12, 10, tzinfo=dt.UTC)  # the pure decisions'
QUIET = dt.timedelta(minutes=10)
TESTS = ["gpu_health", "dl_unit"]


def discovered(free):
    return Discovered.from_xcom({
        "settings": Settings(tests=TESTS).to_dict(), "started_at": NOW.isoformat(),
        "params": {"node_range": "", "tests": TESTS, "stale_before": None, "max_pairs": 2, "dry_run": False},
        "free": [{"name": n, "gpu_count": 8, "gpu_model": "NVIDIA H200"} for n in free], "ineligible": []})


def test_prioritize_plans_a_suspects_whole_bundle_first_whatever_its_staleness(store):
    now = dt.datetime.now(dt.UTC)
    fresh = now - dt.timedelta(hours=2)
    store.record([{"node_name": "gpu-002", "test_name": t, "status": "pass", "run_id": "before",
                   "started_at": fresh, "finished_at": fresh} for t in TESTS])
    suspects.record(store.connect, [Evidence("gpu-002", "reboot", "b2", "rebooted")], seen_at=now)
    found = discovered(["gpu-001", "gpu-002"])  # gpu-001 never validated: due, but not suspect
    plan = tasks.prioritize(found, tasks.load_latest(found, store), now, store=store, dag_id="continuous_validation",
                            run_id="r1")
    assert [(p.node_name, p.test_name, p.why) for p in plan.pairs] == [
        ("gpu-002", "gpu_health", priority.SUSPECT), ("gpu-002", "dl_unit", priority.SUSPECT)]


@pytest.mark.parametrize("paused, active, next_run, why", [
    (False, 0, NOW + dt.timedelta(minutes=50), None),
    (True, 0, None, "continuous_validation is paused"),
    (False, 1, None, "1 run(s) of continuous_validation queued or running: it, or the next one, plans the suspects first"),
    (False, 0, NOW + dt.timedelta(minutes=9), "the scheduled run at 2026-11-28T12:19+00:00 plans the suspects first"),
])
def test_the_fast_path_triggers_only_when_it_holds_no_run_back(paused, active, next_run, why):
    decision = signals_task.decide(["gpu-001", "gpu-003"], ["gpu-001", "gpu-002"], paused=paused,
                                   active_runs=active, next_run=next_run, now=NOW, quiet=QUIET)
    assert decision.why_not == why
    if why is None:
        assert decision.nodes == ["gpu-001"] and decision.conf == {"node_range": "gpu-001"}
        assert decision.run_id == "suspects__2026-11-28T12:10:00"
    assert signals_task.decide([], ["gpu-001"], paused=False, active_runs=0, next_run=None, now=NOW,
                               quiet=QUIET).why_not == "no new free suspect"


@pytest.fixture
def emu():
    with EmulatorProcess(settings={"scheduler_interval": 0.05, "startup_delay": 0.05}) as emu:
        for name in ("gpu-001", "gpu-002", "gpu-003"):
            emu.add_gpu_node(name, 8)
        yield emu


def test_a_tick_records_the_signals_triggers_for_free_suspects_and_reserves_busy_ones(emu, store):
    settings = Settings(tests=TESTS, reservation={"enabled": True})
    first = dt.datetime.now(dt.UTC)
    signals_task.tick(settings, emu.core_v1(), store, paused=False, active_runs=0, next_run=None, now=first)
    emu.add_user_pod("gpu-003", name="trainer-0")
    emu.node_event("gpu-001", "XidHardwareFailure", "NVRM: Xid (PCI:0000:b9:00): 79")
    emu.node_event("gpu-003", "XidHardwareFailure", "NVRM: Xid (PCI:0000:1b:00): 48")
    emu.patch_node("gpu-002", reboot=True)
    later = dt.datetime.now(dt.UTC)  # the events' own time: they count within the window before a read
    decision = signals_task.tick(settings, emu.core_v1(), store, paused=False, active_runs=0, next_run=None,
                                 now=later)
    assert decision.nodes == ["gpu-001", "gpu-002"] and decision.reserved == ["gpu-003"]
    node = emu.core_v1().read_node("gpu-003")
    assert [t.key for t in node.spec.taints or []] == ["cluster-doctor.io/reserved"]
    assert signals_task.triggered(store, decision.to_xcom()).startswith(f"run {decision.run_id} of continuous_validation")
    again = signals_task.tick(settings, emu.core_v1(), store, paused=False, active_runs=0, next_run=None,
                              now=later + dt.timedelta(minutes=5))
    assert again.nodes == [] and again.why_not == "no new free suspect"  # triggered once per evidence
    with store.connect() as conn, conn.cursor() as cur:
        assert sorted(suspects.current(cur, TESTS)) == ["gpu-001", "gpu-002", "gpu-003"]
