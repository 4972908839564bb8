"""cluster_doctor.store.fail_slow against a real PostgreSQL: the speed probe's figures judged against the fleet
(straggler verdicts on gpu_health), the speed signals, and what domain.fail_slow makes of them; quarantine's
confirmed failures name a slow node with code SLOW; when the probe is due."""

from __future__ import annotations

import datetime as dt
import uuid

from cluster_doctor.domain import fail_slow as rule
from cluster_doctor.domain.actions import SLOW_ACTION
from cluster_doctor.domain.attempts import Attempt
from cluster_doctor.domain import signals
from cluster_doctor.domain.signals import SPEED, Evidence
from cluster_doctor.store import fail_slow, inventory, suspects
from cluster_doctor.store import quarantine as stored_quarantine
from cluster_doctor.store import verdicts
from cluster_doctor.store.inventory import SeenNode

from tests.clock import now as clock_now

NOW = clock_now().replace(microsecond=0)
H = dt.timedelta(hours=1)
MODEL = "NVIDIA-H100-80GB-HBM3"
WINDOW = dt.timedelta(hours=24)
SPACING = 3 * H
HEALTHY = {f"gpu-{i:03d}": 700.0 + 3 * (i % 5) for i in range(1, 13)}  # a few % of spread


def probe(store, node: str, when: dt.datetime, gemm: float, *, probed: bool = True) -> list:
    """One gpu_health attempt (with the probe's figures, or without: a sweep that did not probe), judged."""
    metrics = {"gpus_visible": 8, "xid_events": 0}
    if probed:
        metrics |= {"probe_gemm_tflops_min": gemm, "probe_hbm_gbps_min": 3000.0}
    a = Attempt(node_name=node, test_name="gpu_health", status="pass", finished_at=when, metrics=metrics,
                gpu_model=MODEL, gpu_count=8, dag_id="continuous_validation", run_id=f"r-{uuid.uuid4().hex[:8]}")
    store.record([a])
    return verdicts.judge_recorded(store.connect, [a.to_dict()], now=when)


def fleet(store, start: dt.datetime) -> None:
    for day in range(3):
        for node, gemm in HEALTHY.items():
            probe(store, node, start + day * 24 * H, gemm)


def slow(store, at: dt.datetime, spacing: dt.timedelta = fail_slow.SLOW_SPACING) -> dict:
    return fail_slow.read_slow_nodes(store.connect, now=at, window=WINDOW, spacing=spacing)


def test_two_flagged_probes_in_a_row_make_a_node_failing_with_code_slow(store):
    fleet(store, NOW - 80 * H)
    assert probe(store, "gpu-100", NOW - 60 * H, 702.0) == []  # its own healthy past
    found = probe(store, "gpu-100", NOW - 7 * H, 625.0)  # 11 % slow: above the old 620 floor of dl_unit
    assert [(v.metric, v.kind) for v in found] == [("probe_gemm_tflops_min", "straggler")]
    first = slow(store, NOW - 6 * H)["gpu-100"]
    assert first.state == rule.SlowState.SUSPECT and not first.failing
    assert first.probes and first.probes[0].startswith("straggler:probe_gemm_tflops_min=625")
    assert "gpu-100" not in stored_quarantine.confirmed_failures(store.connect, ["gpu_health"], now=NOW - 6 * H)
    probe(store, "gpu-100", NOW - H, 623.0)  # the retest: flagged again
    second = slow(store, NOW)["gpu-100"]
    assert second.state == rule.SlowState.FAILING and second.describe().startswith("slow (failing, SLOW): probe ")
    [failure] = stored_quarantine.confirmed_failures(store.connect, ["gpu_health"], now=NOW)["gpu-100"]
    assert (failure.test_name, failure.code, failure.action, failure.verdict) == ("gpu_health", "SLOW", SLOW_ACTION,
                                                                                  False)
    assert set(slow(store, NOW)) == {"gpu-100"}  # the healthy fleet with its spread: nobody else


def test_a_flagged_probe_and_a_speed_signal_make_a_node_failing(store):
    fleet(store, NOW - 80 * H)
    signal = Evidence("gpu-200", SPEED, "clock_event_0x40/gpu2@x", "GPU 2: hardware thermal slowdown", NOW - 3 * H)
    suspects.record(store.connect, [signal], seen_at=NOW - 3 * H)
    only_signal = slow(store, NOW - 2 * H)["gpu-200"]
    assert only_signal.state == rule.SlowState.SUSPECT and only_signal.signals == ("GPU 2: hardware thermal slowdown",)
    probe(store, "gpu-200", NOW - H, 610.0)
    both = slow(store, NOW)["gpu-200"]
    assert both.failing and "signal GPU 2: hardware thermal slowdown" in both.describe()
    # a signal older than the window no longer counts: one flagged probe is a suspect again
    assert slow(store, NOW + 25 * H)["gpu-200"].state == rule.SlowState.SUSPECT


def test_a_sweep_that_did_not_probe_is_no_probe(store):
    fleet(store, NOW - 80 * H)
    probe(store, "gpu-300", NOW - 5 * H, 612.0)
    probe(store, "gpu-300", NOW - 2 * H, 0.0, probed=False)  # only the health checks ran
    assert slow(store, NOW)["gpu-300"].state == rule.SlowState.SUSPECT  # its last probe stays the flagged one


def test_when_the_probe_is_due(store):
    fleet(store, NOW - 80 * H)  # every healthy node last probed 32 h ago
    for at, first in ((NOW - 40 * H, "free"), (NOW - 20 * H, "busy"), (NOW - 10 * H, "free")):
        inventory.record_discovery(store.connect, [SeenNode("gpu-001", 8, MODEL, first),
                                                   SeenNode("gpu-002", 8, MODEL, "free")], seen_at=at, complete=False)
    due = fail_slow.due_probes(store.connect, ["gpu-001", "gpu-002", "gpu-999"], now=NOW, min_interval=6 * H,
                               max_age=72 * H, window=WINDOW, spacing=SPACING)
    # gpu-001 ran a job since its probe; gpu-002 stayed idle (probed again at 72 h); gpu-999 was never probed
    assert due == {"gpu-001", "gpu-999"}
    assert fail_slow.due_probes(store.connect, ["gpu-002"], now=NOW + 41 * H, min_interval=6 * H, max_age=72 * H,
                                window=WINDOW, spacing=SPACING) == {"gpu-002"}


def test_status_and_the_metrics_name_the_slow_node_with_its_evidence(store, db_dsn):
    from cluster_doctor.cli import main as cli
    from cluster_doctor.domain.config import Settings
    from cluster_doctor.reports import metrics
    from cluster_doctor.store import fleet as stored_fleet

    from tests.support.metrics import samples

    fleet(store, NOW - 80 * H)
    probe(store, "gpu-100", NOW - 7 * H, 625.0)
    probe(store, "gpu-100", NOW - H, 623.0)
    with stored_fleet.open_for(Settings(), db_dsn, now=NOW) as q:
        found = q.slow_nodes()
    lines = cli.since_lines({}, {}, cli.parse_node_range(None), {}, found)
    assert lines[0] == "slow: 1 GPU node(s)"
    assert lines[1].startswith("  gpu-100  slow (failing, SLOW): probe straggler:probe_gemm_tflops_min=623")
    registry = metrics.make_registry(metrics.ClusterDoctorCollector(
        lambda s: db_dsn, lambda: Settings(tests=["gpu_health"]), clock=lambda: NOW, cache_ttl_s=0))
    series = samples(metrics.render(registry, None)[0].decode())
    assert series[("cluster_doctor_fleet_slow_nodes", frozenset({("state", "failing")}))] == 1
    assert series[("cluster_doctor_fleet_slow_nodes", frozenset({("state", "suspect")}))] == 0
    [(labels, at)] = [(dict(k[1]), v) for k, v in series.items()
                      if k[0] == "cluster_doctor_node_slow_since_timestamp_seconds"]
    assert labels["node"] == "gpu-100" and labels["state"] == "failing" and at == (NOW - H).timestamp()
    assert labels["evidence"].startswith("probe straggler:probe_gemm_tflops_min=623")


def suite(store, node: str, when: dt.datetime, gemm: float) -> list:
    """One dl_unit attempt (a bundle suite whose GEMM and HBM minima get fleet verdicts), judged."""
    a = Attempt(node_name=node, test_name="dl_unit", status="pass", finished_at=when,
                metrics={"gemm_bf16_tflops_min": gemm, "mem_bw_gbps_min": 3000.0}, gpu_model=MODEL, gpu_count=8,
                dag_id="continuous_validation", run_id=f"r-{uuid.uuid4().hex[:8]}")
    store.record([a])
    return verdicts.judge_recorded(store.connect, [a.to_dict()], now=when)


def test_two_flagged_probes_fail_a_node_only_the_confirmation_spacing_apart(store, db_dsn):
    from cluster_doctor.domain.config import Settings
    from cluster_doctor.store import fleet as stored_fleet

    fleet(store, NOW - 80 * H)
    probe(store, "gpu-400", NOW - 2 * H, 620.0)
    assert probe(store, "gpu-400", NOW - H, 621.0)  # an hour later: a transient's length
    probe(store, "gpu-401", NOW - 5 * H, 620.0)
    assert probe(store, "gpu-401", NOW - H, 621.0)  # four hours later: a lasting slowness
    found = slow(store, NOW)
    assert (found["gpu-400"].state, found["gpu-401"].state) == (rule.SlowState.SUSPECT, rule.SlowState.FAILING)
    assert set(stored_quarantine.confirmed_failures(store.connect, ["gpu_health"], now=NOW)) == {"gpu-401"}
    with stored_fleet.open_for(Settings(), db_dsn, now=NOW) as q:  # the status command's and the metrics' read
        assert {n: s.state for n, s in q.slow_nodes().items()} == {"gpu-400": rule.SlowState.SUSPECT,
                                                                   "gpu-401": rule.SlowState.FAILING}
    # the spacing is what tells them apart: without it both fail
    assert slow(store, NOW, spacing=dt.timedelta(0))["gpu-400"].failing
    assert set(stored_quarantine.confirmed_failures(store.connect, ["gpu_health"], now=NOW,
                                                    slow_spacing=dt.timedelta(0))) == {"gpu-400", "gpu-401"}


def test_a_flagged_probe_and_a_bundle_suites_verdict_the_spacing_apart_make_a_node_failing(store):
    fleet(store, NOW - 80 * H)
    for day in range(3):
        for node, gemm in HEALTHY.items():
            suite(store, node, NOW - 80 * H + day * 24 * H, gemm)
    found = suite(store, "gpu-500", NOW - 6 * H, 615.0)
    assert [(v.metric, v.kind) for v in found] == [("gemm_bf16_tflops_min", "straggler")]
    alone = slow(store, NOW - 5 * H)["gpu-500"]  # the verdict alone: a sighting
    assert alone.state == rule.SlowState.SUSPECT and alone.since == NOW - 6 * H
    assert "verdict dl_unit straggler:gemm_bf16_tflops_min=615" in alone.describe()
    assert probe(store, "gpu-500", NOW - H, 618.0)
    both = slow(store, NOW)["gpu-500"]
    assert both.failing and both.since == NOW - H and both.bundle[0].startswith("dl_unit straggler:")
    slow_failures = [f for f in stored_quarantine.confirmed_failures(store.connect, ["gpu_health"], now=NOW)["gpu-500"]]
    assert [(f.test_name, f.code) for f in slow_failures] == [("gpu_health", "SLOW")]
    # a verdict older than the window no longer counts: the flagged probe alone is a suspect
    assert slow(store, NOW + 19 * H)["gpu-500"].state == rule.SlowState.SUSPECT
    # the suite's last attempt counts: a clean one after the verdict leaves the probe alone
    assert suite(store, "gpu-500", NOW - H / 2, 703.0) == []
    assert slow(store, NOW)["gpu-500"].state == rule.SlowState.SUSPECT and not slow(store, NOW)["gpu-500"].bundle
    # as of before that clean attempt, the flagged one was the suite's last: its verdict counts then
    assert slow(store, NOW - 2 * H)["gpu-500"].bundle[0].startswith("dl_unit straggler:")
    # the bundle ran inside the episode that lowered the probe, minutes after it: one sighting, not two
    assert probe(store, "gpu-501", NOW - 2 * H, 618.0)
    assert suite(store, "gpu-501", NOW - 2 * H + dt.timedelta(minutes=15), 615.0)
    assert slow(store, NOW)["gpu-501"].state == rule.SlowState.SUSPECT
    assert set(slow(store, NOW)) == {"gpu-500", "gpu-501"}  # the healthy fleet, its verdict-free suites: nobody


def test_a_suspects_confirming_probe_waits_for_the_spacing_on_the_prioritize_path(store):
    from cluster_doctor.airflow.tasks.prioritize import _with_probes
    from cluster_doctor.domain.config import Settings
    from cluster_doctor.domain.payloads import Plan

    fleet(store, NOW - 80 * H)
    assert probe(store, "gpu-600", NOW - H, 620.0)  # suspect since an hour

    def due(at, spacing=SPACING):
        return fail_slow.due_probes(store.connect, ["gpu-600"], now=at, min_interval=6 * H, max_age=72 * H,
                                    window=WINDOW, spacing=spacing)

    assert due(NOW) == set()  # a transient that lowered the first probe may still be going on
    assert due(NOW + 2 * H) == {"gpu-600"}  # three hours after it: the confirming probe
    assert due(NOW, dt.timedelta(0)) == {"gpu-600"}  # no spacing: at the next sweep
    plan = Plan.from_xcom({"planned_at": NOW.isoformat(), "dry_run": False, "pairs": [
        {"node_name": "gpu-600", "test_name": "gpu_health", "why": "health sweep", "last_status": "pass",
         "last_finished_at": (NOW - H).isoformat(), "gpu_count": 8, "gpu_model": MODEL}]})
    cuda = {"suite_device": "cuda"}
    assert _with_probes(plan, store, Settings(**cuda), NOW).pairs[0].probe_seconds is None
    assert _with_probes(plan, store, Settings(**cuda), NOW + 2 * H).pairs[0].probe_seconds == 3.0
    assert _with_probes(plan, store, Settings(**cuda, slow_confirm_spacing_hours=0.5), NOW).pairs[0].probe_seconds == 3.0


# The form PROBES_SQL had: a row_number() over every gpu_health attempt kept. The reference its rows must equal.
WINDOWED_PROBES_SQL = """
SELECT h.node_name, h.id, h.finished_at,
       coalesce((SELECT array_agg(v.kind || ':' || v.metric || '=' || round(v.value::numeric, 4)
                                   || coalesce(' (fleet median ' || round(v.fleet_median::numeric, 4) || ')', '')
                                   ORDER BY v.metric, v.kind)
                   FROM validation_verdicts v WHERE v.history_id = h.id AND v.metric = ANY(%(metrics)s)), '{}')
  FROM (SELECT id, node_name, finished_at,
               row_number() OVER (PARTITION BY node_name ORDER BY finished_at DESC, id DESC) AS nth
          FROM validation_history
         WHERE test_name = %(test)s AND status IN ('pass', 'fail') AND metrics ? %(probed)s
           AND finished_at <= %(as_of)s AND (%(nodes)s::text[] IS NULL OR node_name = ANY(%(nodes)s))) h
 WHERE h.nth <= 2
"""


def test_the_last_two_probes_per_node_are_the_windowed_forms_rows(store):
    from cluster_doctor.store import database

    fleet(store, NOW - 80 * H)
    for at, gemm in ((NOW - 30 * H, 702.0), (NOW - 20 * H, 704.0), (NOW - 9 * H, 610.0)):  # the oldest left out
        probe(store, "gpu-700", at, gemm)
    probe(store, "gpu-700", NOW - 5 * H, 0.0, probed=False)  # newer sweeps that did not probe are passed over
    probe(store, "gpu-700", NOW - 4 * H, 0.0, probed=False)
    probe(store, "gpu-701", NOW - 3 * H, 615.0)  # one probe only
    probe(store, "gpu-702", NOW - 2 * H, 0.0, probed=False)  # never probed
    probe(store, "gpu-703", NOW - 2 * H, 700.0)  # two attempts at the same instant: the newer id wins
    probe(store, "gpu-703", NOW - 2 * H, 612.0)
    store.record([Attempt(node_name="gpu-704", test_name="gpu_health", status="skipped", finished_at=NOW - H,
                          metrics={"probe_gemm_tflops_min": 500.0}, dag_id="continuous_validation", run_id="r-s")])
    conn = database.connector(store.connect)()
    try:
        with conn.cursor() as cur:
            for nodes in (None, ["gpu-700", "gpu-701", "gpu-702", "gpu-703", "gpu-704", "gpu-999"], ["gpu-001"]):
                params = {"metrics": list(fail_slow.PROBE_METRICS), "test": fail_slow.PROBE_TEST,
                          "probed": fail_slow.PROBED, "nodes": nodes, "as_of": NOW}
                cur.execute(fail_slow.PROBES_SQL, params)
                lateral = sorted(cur.fetchall())
                cur.execute(WINDOWED_PROBES_SQL, params)
                assert lateral == sorted(cur.fetchall()) and lateral, nodes
            cur.execute(fail_slow.PROBES_SQL, params | {"nodes": None})
            rows = cur.fetchall()
    finally:
        conn.close()
    per_node = {n: sum(r[0] == n for r in rows) for n in ("gpu-001", "gpu-700", "gpu-701", "gpu-702", "gpu-704")}
    assert per_node == {"gpu-001": 2, "gpu-700": 2, "gpu-701": 1, "gpu-702": 0, "gpu-704": 0}
    [newer] = [r for r in rows if r[0] == "gpu-703" and r[3]]
    assert len([r for r in rows if r[0] == "gpu-703"]) == 2 and newer[3][0].startswith("straggler:")
    assert sorted(r[2] for r in rows if r[0] == "gpu-700") == [NOW - 20 * H, NOW - 9 * H]


# ---------------------------------------------------------------------------- a flagged probe: a suspect
TWO = ["gpu_health", "dl_unit"]


def recorded_probe(store, node: str, when: dt.datetime, gemm: float, **kw) -> fail_slow.ProbeSuspects:
    """One probing gpu_health attempt, judged, then what the record task makes of it (a few seconds later)."""
    probe(store, node, when, gemm, **kw)
    return fail_slow.record_probe_suspects(
        store.connect, [{"node_name": node, "test_name": "gpu_health", "status": "pass",
                         "metrics": {fail_slow.PROBED: gemm} if kw.get("probed", True) else {}}],
        now=when + dt.timedelta(seconds=5), window=WINDOW, spacing=SPACING)


def open_suspects(store, tests=TWO) -> dict:
    with store.connection() as conn, conn.cursor() as cur:
        return suspects.current(cur, tests)


def rows(store, node: str) -> list[tuple]:
    with store.connection() as conn, conn.cursor() as cur:
        cur.execute("SELECT source, resolution FROM node_suspicions WHERE node_name = %s ORDER BY id", (node,))
        return [tuple(r) for r in cur.fetchall()]


def test_a_single_flagged_probe_makes_a_suspect_the_planner_reads_and_stays_suspect_not_failing(store):
    fleet(store, NOW - 80 * H)
    found = recorded_probe(store, "gpu-800", NOW - 5 * H, 620.0)
    assert found.suspect == ("gpu-800",) and found.answered == {}
    suspect = open_suspects(store)["gpu-800"]
    [line] = suspect.evidence
    assert line.startswith("speed probe: flagged straggler:probe_gemm_tflops_min=620") and suspect.since == NOW - 5 * H
    # its own source, no speed signal: the probe's flag is counted once, one sighting, suspect
    assert rows(store, "gpu-800") == [(signals.PROBE, None)]
    judged = slow(store, NOW - 4 * H)["gpu-800"]
    assert judged.state == rule.SlowState.SUSPECT and judged.signals == ()
    assert "gpu-800" not in stored_quarantine.confirmed_failures(store.connect, ["gpu_health"], now=NOW - 4 * H)
    # the record task retried: the same suspicion, nothing doubles
    again = fail_slow.record_probe_suspects(
        store.connect, [{"node_name": "gpu-800", "test_name": "gpu_health", "status": "pass",
                         "metrics": {fail_slow.PROBED: 620.0}}], now=NOW - 4 * H, window=WINDOW, spacing=SPACING)
    assert again.suspect == ("gpu-800",) and rows(store, "gpu-800") == [(signals.PROBE, None)]
    # a sweep that did not probe answers nothing; the confirming probe, clean, clears it
    assert recorded_probe(store, "gpu-800", NOW - 3 * H, 0.0, probed=False) == fail_slow.ProbeSuspects()
    assert "gpu-800" in open_suspects(store)
    clean = recorded_probe(store, "gpu-800", NOW - H, 703.0)
    assert clean.suspect == () and clean.answered == {"gpu-800": suspects.CLEARED}
    assert "gpu-800" not in open_suspects(store) and "gpu-800" not in slow(store, NOW)
    assert rows(store, "gpu-800") == [(signals.PROBE, suspects.CLEARED)]


def test_a_flagged_confirming_probe_fails_the_node_and_confirms_its_probe_suspicion(store):
    fleet(store, NOW - 80 * H)
    assert recorded_probe(store, "gpu-801", NOW - 5 * H, 620.0).suspect == ("gpu-801",)
    second = recorded_probe(store, "gpu-801", NOW - H, 621.0)  # the spacing apart: failing, quarantined
    assert second.suspect == () and second.answered == {"gpu-801": suspects.CONFIRMED}
    assert slow(store, NOW)["gpu-801"].failing and "gpu-801" not in open_suspects(store)
    # within the spacing a second flag is one sighting still: suspect, both flags its evidence
    recorded_probe(store, "gpu-802", NOW - 2 * H, 620.0)
    assert recorded_probe(store, "gpu-802", NOW - H, 619.0).suspect == ("gpu-802",)
    assert slow(store, NOW)["gpu-802"].state == rule.SlowState.SUSPECT
    assert len(open_suspects(store)["gpu-802"].evidence) == 2


def test_a_probe_suspicion_clears_as_a_signals_does_and_its_confirming_probe_waits_for_the_spacing(store):
    fleet(store, NOW - 80 * H)
    recorded_probe(store, "gpu-803", NOW - 4 * H, 620.0)
    assert "gpu-803" in open_suspects(store)
    # its bundle runs (no probe: the spacing has not passed) and passes: answered, as any suspicion
    for test in TWO:
        store.record([Attempt(node_name="gpu-803", test_name=test, status="pass", finished_at=NOW - 3 * H,
                              gpu_model=MODEL, gpu_count=8, dag_id="continuous_validation", run_id="r-b")])
    assert suspects.resolve(store.connect, TWO, now=NOW - 3 * H) == {"gpu-803": suspects.CLEARED}
    assert "gpu-803" not in open_suspects(store)
    # slow still says suspect (its last probe is the flagged one), so the confirming probe comes on time
    assert slow(store, NOW - 3 * H)["gpu-803"].state == rule.SlowState.SUSPECT

    def due(at):
        return fail_slow.due_probes(store.connect, ["gpu-803"], now=at, min_interval=6 * H, max_age=72 * H,
                                    window=WINDOW, spacing=SPACING)

    assert due(NOW - 2 * H) == set() and due(NOW - H) == {"gpu-803"}


def test_the_shared_rule_decides_whether_a_flagged_probe_makes_a_suspect(store, monkeypatch):
    fleet(store, NOW - 80 * H)
    monkeypatch.setattr(rule, "probe_suspect", lambda flagged, state: False)
    assert recorded_probe(store, "gpu-804", NOW - 5 * H, 620.0).suspect == ()
    assert "gpu-804" not in open_suspects(store)


def _discovered(free, tests):
    from cluster_doctor.domain.config import Settings
    from cluster_doctor.domain.payloads import Discovered

    return Discovered.from_xcom({
        "settings": Settings(tests=tests).to_dict(), "started_at": NOW.isoformat(),
        "params": {"node_range": "", "tests": tests, "stale_before": None, "max_pairs": 16, "dry_run": False},
        "free": [{"name": n, "gpu_count": 8, "gpu_model": MODEL} for n in free], "ineligible": []})


def test_the_record_task_makes_a_flagged_probe_a_suspect_the_planner_takes_first_and_reservation_holds(store):
    from cluster_doctor.airflow import tasks
    from cluster_doctor.airflow.tasks.signals import current_suspects
    from cluster_doctor.domain.config import Settings
    from cluster_doctor.domain.payloads import Plan
    from cluster_doctor.domain.planning import due
    from cluster_doctor.store import plan_inputs

    T = NOW - 4 * H  # the runs below end before this host's clock (no attempt from the future)
    fleet(store, NOW - 80 * H)
    for day in range(3):  # their dl_unit is fresh: only a suspect's bundle runs it again
        for node in ("gpu-001", "gpu-900"):
            store.record([Attempt(node_name=node, test_name="dl_unit", status="pass",
                                  finished_at=T - 2 * H - day * H, gpu_model=MODEL, gpu_count=8,
                                  dag_id="continuous_validation", run_id=f"r-d{day}")])
    swept_at = T - H
    plan = Plan.from_xcom({"planned_at": swept_at.isoformat(), "dry_run": False, "pairs": [
        {"node_name": "gpu-900", "test_name": "gpu_health", "why": "health sweep", "last_status": "pass",
         "last_finished_at": None, "gpu_count": 8, "gpu_model": MODEL, "probe_seconds": 3.0}]})
    reported = [{"node_name": "gpu-900", "test_name": "gpu_health", "status": "pass",
                 "finished_at": swept_at.isoformat(), "gpu_model": MODEL, "gpu_count": 8,
                 "metrics": {"probe_gemm_tflops_min": 618.0, "probe_hbm_gbps_min": 3000.0},
                 "dag_id": "continuous_validation", "run_id": "r-sweep", "map_index": 0, "try_number": 1}]
    tasks.record(plan, reported, store, dag_id="continuous_validation", run_id="r-sweep", now=swept_at,
                 settings=Settings(tests=TWO))
    assert slow(store, T)["gpu-900"].state == rule.SlowState.SUSPECT  # one flagged probe: not failing
    # what prioritize and reserve read (tasks.signals.current_suspects): the probe-suspect
    found = current_suspects(store, TWO, ["gpu-001", "gpu-900"], T)
    assert set(found) == {"gpu-900"} and "speed probe: flagged straggler:" in found["gpu-900"].describe()
    def run(at, run_id):
        nodes = ["gpu-001", "gpu-900"]
        return tasks.prioritize(_discovered(nodes, TWO), plan_inputs.latest(store, nodes, TWO), now=at,
                                store=store, dag_id="continuous_validation", run_id=run_id)

    planned = run(T, "r-next")
    first = [p for p in planned.pairs if p.node_name == "gpu-900"]
    assert planned.pairs[0].node_name == "gpu-900" and [p.test_name for p in first] == TWO
    assert {p.why for p in first} == {due.SUSPECT}
    # its bundle runs first, but the confirming probe waits for the spacing (a transient may be going on)
    assert all(p.probe_seconds is None for p in first)
    def ran(plan, run_id, at, tests):
        """The run's suites on gpu-900 passed (no probe ran), recorded by its record task."""
        tasks.record(plan, [{"node_name": "gpu-900", "test_name": t, "status": "pass", "finished_at": at.isoformat(),
                             "started_at": (at - dt.timedelta(minutes=1)).isoformat(), "gpu_model": MODEL,
                             "gpu_count": 8, "metrics": {}, "dag_id": "continuous_validation", "run_id": run_id,
                             "map_index": 0, "try_number": 1} for t in tests],
                     store, dag_id="continuous_validation", run_id=run_id, now=at, settings=Settings(tests=TWO))

    ran(planned, "r-next", T + dt.timedelta(minutes=10), TWO)
    # its bundle answered the suspicion: the next run sweeps its health check alone, not the bundle again,
    # and only the run past the spacing probes it (the sweep, hourly: neither the 6 h failed retest nor a bundle)
    swept = run(T + H, "r-2")
    later = [p for p in swept.pairs if p.node_name == "gpu-900"]
    assert [(p.test_name, p.why, p.probe_seconds) for p in later] == [("gpu_health", due.SWEEP, None)]
    ran(swept, "r-2", T + H + dt.timedelta(minutes=2), ["gpu_health"])
    confirming = [p for p in run(T + 2 * H, "r-3").pairs if p.node_name == "gpu-900"]
    assert [(p.test_name, p.why) for p in confirming] == [("gpu_health", due.SWEEP)]
    assert confirming[0].probe_seconds


def test_slow_nodes_reads_the_same_with_a_dict_row_cursor_as_with_tuples(store):
    from psycopg.rows import dict_row

    fleet(store, NOW - 80 * H)
    probe(store, "gpu-100", NOW - 7 * H, 625.0)
    probe(store, "gpu-100", NOW - H, 623.0)
    suspects.record(store.connect, [Evidence("gpu-200", SPEED, "clock_event_0x40/gpu2@x", "GPU 2: hardware thermal "
                                             "slowdown", NOW - 3 * H)], seen_at=NOW - 3 * H)
    conn = store.connect()
    try:
        with conn.cursor(row_factory=dict_row) as dicts, conn.cursor() as tuples:
            as_dicts = fail_slow.slow_nodes(dicts, now=NOW, window=WINDOW, spacing=SPACING)
            as_tuples = fail_slow.slow_nodes(tuples, now=NOW, window=WINDOW, spacing=SPACING)
            dicts.execute("SELECT 1 AS still_dicts")
            assert dicts.fetchone() == {"still_dicts": 1}  # the caller's cursor keeps its row factory
    finally:
        conn.close()
    assert as_dicts == as_tuples
    assert as_dicts["gpu-100"].failing and as_dicts["gpu-200"].state == rule.SlowState.SUSPECT


def test_slow_nodes_as_of_a_past_moment_reads_what_had_happened_by_then(store):
    fleet(store, NOW - 80 * H)
    probe(store, "gpu-100", NOW - 60 * H, 702.0)
    probe(store, "gpu-100", NOW - 7 * H, 625.0)
    probe(store, "gpu-100", NOW - H, 623.0)  # after the moment: not yet known then
    suspects.record(store.connect, [Evidence("gpu-200", SPEED, "clock_event_0x40/gpu2@x", "GPU 2: hardware thermal "
                                             "slowdown", NOW - 2 * H)], seen_at=NOW - 2 * H)
    then = slow(store, NOW - 5 * H)
    assert set(then) == {"gpu-100"}  # the signal came later
    assert then["gpu-100"].state == rule.SlowState.SUSPECT  # one flagged probe by then, not two
    assert then["gpu-100"].probes[0].startswith("straggler:probe_gemm_tflops_min=625")
    now_ = slow(store, NOW)
    assert now_["gpu-100"].failing and now_["gpu-200"].state == rule.SlowState.SUSPECT
