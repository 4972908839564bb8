"""The signals in Airflow's task bodies: prioritize plans a suspect's whole bundle first, the
fast path's tick reads the signals against the emulator and triggers a run only when it does not hold the
hourly one back, and a suspect, busy or free, is reserved at once; a free one's taint goes when the run that
validates it is done with it, pass or fail."""

from __future__ import annotations

import datetime as dt

import pytest
from cluster_doctor.airflow import tasks
from cluster_doctor.airflow.tasks import signals
from cluster_doctor.domain.planning import due
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.payloads import Bundle, BundleStep, Discovered, RunConfig
from cluster_doctor.domain.reservation import KEY, VALIDATED
from cluster_doctor.domain.signals import Evidence
from cluster_doctor.store import reservations, suspects
from k8s_emulator import EmulatorProcess

from tests.support.retries import FakeTime, api_server_timed_out

NOW = dt.datetime(2026, 11, 28, 12, 10, tzinfo=dt.UTC)  # when the test's discoveries started
TESTS = ["gpu_health", "dl_unit"]


def discovered(free, *, settings=None, node_range="", busy=(), started_at=NOW):
    return Discovered.from_xcom({
        "settings": (settings or Settings(tests=TESTS)).to_dict(), "started_at": started_at.isoformat(),
        "params": {"node_range": node_range, "tests": TESTS, "stale_before": None, "max_pairs": 2, "dry_run": False},
        "free": [{"name": n, "gpu_count": 8, "gpu_model": "NVIDIA H200"} for n in free],
        "ineligible": [{"name": n, "reason": "busy", "detail": "", "gpu_count": 8, "gpu_model": None} for n in busy]})


def _taints(emu, name):
    return [t.key for t in emu.core_v1().read_node(name).spec.taints or []]


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
        ("gpu-002", "gpu_health", due.SUSPECT), ("gpu-002", "dl_unit", due.SUSPECT)]


@pytest.fixture
def emu():
    with EmulatorProcess(settings={"scheduler_interval": 0.05, "startup_delay": 0.05}) as emu:
        for name in ("gpu-001", "gpu-002", "gpu-003"):
            emu.add_gpu_node(name, 8)
        yield emu


RESERVE = {"enabled": True, "max_share": 1.0, "breaker_share": 1.0}  # 3 nodes: the default shares allow 1


def test_a_tick_records_the_signals_triggers_for_free_suspects_and_reserves_them_all(emu, store):
    settings = Settings(tests=TESTS, reservation=RESERVE)
    first = dt.datetime.now(dt.UTC)
    signals.tick(settings, emu.core_v1(), store, paused=False, active_runs=0, next_run=None, now=first)
    emu.add_user_pod("gpu-003", name="trainer-0")
    emu.node_event("gpu-001", "XidHardwareFailure", "NVRM: Xid (PCI:0000:b9:00): 79")
    emu.node_event("gpu-003", "XidHardwareFailure", "NVRM: Xid (PCI:0000:1b:00): 48")
    emu.patch_node("gpu-002", reboot=True)
    later = dt.datetime.now(dt.UTC)  # the events' own time: they count within the window before a read
    decision = signals.tick(settings, emu.core_v1(), store, paused=False, active_runs=0, next_run=None,
                                 now=later)
    # free or busy, every suspect is tainted: no new user job lands before its validation
    assert decision.nodes == ["gpu-001", "gpu-002"] and decision.reserved == ["gpu-001", "gpu-002", "gpu-003"]
    for name in ("gpu-001", "gpu-002", "gpu-003"):
        assert _taints(emu, name) == [KEY]
    assert signals.triggered(store, decision.to_xcom()).startswith(f"run {decision.run_id} of continuous_validation")
    again = signals.tick(settings, emu.core_v1(), store, paused=False, active_runs=0, next_run=None,
                              now=later + dt.timedelta(minutes=5))
    assert again.nodes == [] and again.why_not == "no new free suspect"  # triggered once per evidence
    with store.connect() as conn, conn.cursor() as cur:
        assert sorted(suspects.current(cur, TESTS)) == ["gpu-001", "gpu-002", "gpu-003"]


@pytest.mark.parametrize("status", ["pass", "fail"])
def test_a_free_suspect_is_tainted_while_no_run_can_start_and_the_run_that_validates_it_frees_it(emu, store, status):
    """A user job crashed with an Xid on gpu-001, now free: tainted at the read even though a run is going
    (no run triggered), so no new user job lands meanwhile. The fast path's run (limited to it) keeps the
    busy suspect's taint, plans gpu-001 first as reserved, and its finish_node removes the taint once the
    bundle is done — pass or fail (a fail is the quarantine policy's business, as for any reserved node:
    the failure is its verdict, no longer a suspicion, so no later run taints it again); the idle GPU-hours
    from the taint to then are counted."""
    settings = Settings(tests=TESTS, reservation=RESERVE)
    core = emu.core_v1()
    signals.tick(settings, core, store, paused=False, active_runs=0, next_run=None, now=dt.datetime.now(dt.UTC))
    emu.add_user_pod("gpu-003", name="trainer-0")
    emu.node_event("gpu-001", "XidHardwareFailure", "NVRM: Xid (PCI:0000:b9:00): 79")
    emu.node_event("gpu-003", "XidHardwareFailure", "NVRM: Xid (PCI:0000:1b:00): 48")
    seen = dt.datetime.now(dt.UTC)
    held = signals.tick(settings, core, store, paused=False, active_runs=1, next_run=None, now=seen)
    assert held.nodes == [] and held.why_not.startswith("1 run(s) of continuous_validation queued or running")
    assert held.reserved == ["gpu-001", "gpu-003"] and _taints(emu, "gpu-001") == [KEY]
    # the run ends: the next tick triggers one for it (the real clock from here: results are never in the future)
    go = signals.tick(settings, core, store, paused=False, active_runs=0, next_run=None,
                           now=dt.datetime.now(dt.UTC))
    assert go.nodes == ["gpu-001"] and go.reserved == []  # already ours

    run_at = dt.datetime.now(dt.UTC)
    found = discovered(["gpu-001"], settings=settings, node_range="gpu-001", started_at=run_at)
    reserved = tasks.reserve(found, store, core, run_id=go.run_id, now=run_at)
    assert reserved.free == ["gpu-001"] and reserved.released == {}  # gpu-003 is outside its range: kept
    assert _taints(emu, "gpu-003") == [KEY]
    plan = tasks.prioritize(found, tasks.load_latest(found, store), run_at, store=store,
                            dag_id="continuous_validation", run_id=go.run_id, reserved=reserved.free)
    assert plan.reserved == ["gpu-001"] and [(p.node_name, p.why) for p in plan.pairs] == [
        ("gpu-001", due.SUSPECT), ("gpu-001", due.SUSPECT)]

    done = dt.datetime.now(dt.UTC)
    ran = [{"node_name": "gpu-001", "test_name": t, "status": status if t == "gpu_health" else "pass",
            "started_at": run_at.isoformat(), "finished_at": done.isoformat(),
            "dag_id": "continuous_validation", "run_id": go.run_id, "map_index": 0, "try_number": 1}
           for t in (TESTS if status == "pass" else ["gpu_health"])]
    bundle = Bundle(node_name="gpu-001", gpu_count=8, planned_at=run_at, reserved=True,
                    steps=[BundleStep(test_name=t) for t in TESTS],
                    run_config=RunConfig(settings=settings, configmap="cm", suite_version="v"))
    said = tasks.finish_node(bundle, ran, store, core, dag_id="continuous_validation", run_id=go.run_id)
    assert said.endswith("; reservation released") and _taints(emu, "gpu-001") == []
    with store.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT release_reason, idle_gpu_hours FROM node_reservations WHERE node_name = 'gpu-001'")
        [(why, idle)] = cur.fetchall()
    assert why == VALIDATED and idle > 0  # from the taint (seen) to the release, 8 GPUs: counted
    assert reservations.open_reservations(store.connect).keys() == {"gpu-003"}

    store.record(ran)  # the run's record task: the suspicion is answered, cleared or confirmed
    later = dt.datetime.now(dt.UTC)
    hourly = discovered(["gpu-001", "gpu-002"], settings=settings, busy=["gpu-003"], started_at=later)
    assert "gpu-001" not in tasks.reserve(hourly, store, core, run_id="scheduled__1", now=later).applied
    assert _taints(emu, "gpu-001") == []


class SlowApiServer:
    """The task instance as the Task SDK gives it, while the api-server is still starting: its first
    ``timeouts`` calls to the execution API time out (the supervisor's own retries spent)."""

    def __init__(self, timeouts: int):
        self.timeouts, self.calls = timeouts, 0

    def _answer(self, value):
        self.calls += 1
        if self.calls <= self.timeouts:
            raise api_server_timed_out()
        return value

    def get_dag(self, dag_id):
        import types

        return self._answer(types.SimpleNamespace(dag_id=dag_id, is_paused=False, next_dagrun=None))

    def get_dr_count(self, dag_id, states):
        return self._answer(0)


def _connections(monkeypatch, emu, store):
    from cluster_doctor.airflow import runtime

    monkeypatch.setattr(runtime, "core_v1", lambda conn_id: emu.core_v1())
    monkeypatch.setattr(runtime, "results_store", lambda conn_id: store)


def test_the_fast_path_waits_for_an_api_server_still_starting_within_one_interval(emu, store, monkeypatch,
                                                                                  capsys, caplog):
    _connections(monkeypatch, emu, store)
    emu.node_event("gpu-001", "XidHardwareFailure", "NVRM: Xid (PCI:0000:b9:00): 79")
    fake = FakeTime()
    capsys.readouterr()
    decision = signals.fast_path_tick(SlowApiServer(timeouts=3), Settings(tests=TESTS), clock=fake.clock,
                                           sleep=fake.sleep)
    assert decision.nodes == ["gpu-001"]  # the tick ran once the api-server answered
    assert fake.sleeps == [1.0, 2.0, 4.0]
    # one line per wait: in pytest's records, or on stdout where Airflow's logging (set up by an earlier import)
    # writes them
    said = "the Airflow API server (execution API) is not answering yet"
    assert max(capsys.readouterr().out.count(said), sum(said in r.getMessage() for r in caplog.records)) == 3


def test_the_fast_path_fails_on_one_line_when_the_api_server_never_answers(emu, store, monkeypatch, caplog,
                                                                           capsys):
    import logging

    from airflow.sdk.exceptions import AirflowFailException

    _connections(monkeypatch, emu, store)
    fake = FakeTime()
    caplog.set_level(logging.ERROR, logger=signals.__name__)
    with pytest.raises(AirflowFailException) as err:
        signals.fast_path_tick(SlowApiServer(timeouts=10**6), Settings(tests=TESTS, fast_path_minutes=1),
                                    clock=fake.clock, sleep=fake.sleep)
    line = str(err.value)
    assert line.startswith("fast path not run: the Airflow API server (execution API) did not answer within 60 s")
    assert "ReadTimeout" in line and line.endswith("; the next tick tries again") and "\n" not in line
    # the ERROR line: in pytest's records, or on stdout where Airflow's logging (set up by an earlier import)
    # writes it
    errors = [r.getMessage() for r in caplog.records] or [
        text for text in capsys.readouterr().out.splitlines() if "[error" in text]
    assert len(errors) == 1 and line in errors[0], errors
    assert err.value.__cause__ is None and err.value.__suppress_context__  # no chain of tracebacks under it
    assert sum(fake.sleeps) == 60  # one interval: the next tick tries again


def test_the_fast_path_reads_nothing_while_its_target_dag_is_not_parsed_yet(emu, store, monkeypatch):
    """A stack starting: the dag-processor parsed suspect_signals before continuous_validation, whose
    pause the tick asks the API server for (404, as the Task SDK reports it)."""
    from airflow.sdk.exceptions import AirflowRuntimeError, ErrorType
    from airflow.sdk.execution_time.comms import ErrorResponse

    class NotParsedYet(SlowApiServer):
        def get_dag(self, dag_id):
            raise AirflowRuntimeError(ErrorResponse(error=ErrorType.API_SERVER_ERROR, detail={
                "status_code": 404, "message": "Server returned error", "detail": {"detail": {
                    "reason": "not_found", "message": f"The Dag with dag_id: `{dag_id}` was not found"}}}))

    _connections(monkeypatch, emu, store)
    emu.node_event("gpu-001", "XidHardwareFailure", "NVRM: Xid (PCI:0000:b9:00): 79")
    fake = FakeTime()
    decision = signals.fast_path_tick(NotParsedYet(timeouts=0), Settings(tests=TESTS), clock=fake.clock,
                                           sleep=fake.sleep)
    assert decision.nodes == [] and decision.why_not == "continuous_validation is not parsed yet: signals not read"
    assert fake.sleeps == []
    with store.connect() as conn, conn.cursor() as cur:
        assert suspects.current(cur, TESTS) == {}  # nothing read: the next tick reads it


def test_a_throttled_gpu_read_by_the_fast_path_makes_its_node_suspect_of_being_slow(emu, store):
    """The exporter's answer (fixtures/dcgm_exporter, a node at HW thermal slowdown) through a Prometheus,
    recorded by the signals task: suspect, with the speed evidence, and slow-suspect by fail_slow's rule."""
    from cluster_doctor.domain.fail_slow import SlowState
    from cluster_doctor.domain.signals import SPEED
    from cluster_doctor.kube import discovery
    from cluster_doctor.store import fail_slow

    from tests.support import dcgm_exporter as exporter

    fixture = exporter.FIXTURES / "metrics_v100x4_gpu2_hw_thermal_slowdown.prom"
    exporter.Prometheus.scraped = exporter.exposition(fixture.read_text())
    with exporter.serving() as url:
        emu.add_gpu_node(exporter.NODE, 4)
        settings = Settings(tests=TESTS, prometheus_url=url)
        found = discovery.discover(emu.core_v1(), settings)
        recorded = signals.read_signals(emu.core_v1(), settings, found, None, store, NOW)
    assert {(e.node_name, e.source) for e in recorded.new} == {(exporter.NODE, SPEED)}
    assert "hardware thermal slowdown" in signals.current_suspects(
        store, TESTS, [exporter.NODE], NOW)[exporter.NODE].describe()
    slow = fail_slow.read_slow_nodes(store.connect, now=NOW, window=dt.timedelta(hours=24),
                                     spacing=fail_slow.SLOW_SPACING)[exporter.NODE]
    assert slow.state == SlowState.SUSPECT and not slow.failing  # a signal alone never fails a node
