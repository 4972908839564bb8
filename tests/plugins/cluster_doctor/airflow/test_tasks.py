"""Task bodies that need only the results DB: recording (with gaps) and the run summary/verdict."""

import datetime as dt
import logging

import pytest

from cluster_doctor.airflow import tasks
from cluster_doctor.airflow.tasks.prioritize import _with_probes
from cluster_doctor.airflow.tasks.ship_suites import _bundles
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.payloads import Discovered, Latest, Plan, Recorded, RunConfig, RunSummary
from cluster_doctor.reports import summary as report
from cluster_doctor.store import inventory

NOW = dt.datetime(2026, 11, 22, 12, tzinfo=dt.UTC)


def planned(*pairs, dry_run=False):
    # the version-less dict of the releases before typed payloads: what a run started then hands record
    return Plan.from_xcom({
        "planned_at": NOW.isoformat(), "dry_run": dry_run,
        "pairs": [{"node_name": n, "test_name": t, "why": "never executed", "last_status": None,
                   "last_finished_at": None, "gpu_count": 8, "gpu_model": "NVIDIA H200"} for n, t in pairs]})


def attempt(node, status, test="gpu_health", reason=None):
    return {"node_name": node, "test_name": test, "status": status, "finished_at": NOW.isoformat(),
            "reason": reason, "dag_id": "continuous_validation", "run_id": "r1", "map_index": 0, "try_number": 1}


def test_a_planned_pair_that_never_reported_still_gets_a_row(store):
    plan = planned(("gpu-001", "gpu_health"), ("gpu-002", "gpu_health"))
    recorded = tasks.record(plan, [attempt("gpu-001", "pass"), None], store, dag_id="continuous_validation",
                            run_id="r1", now=NOW)
    by_node = {r.node_name: r for r in recorded.attempts}
    assert by_node["gpu-001"].status == "pass"
    assert by_node["gpu-002"].status == "skipped" and "did not report" in by_node["gpu-002"].reason
    assert {(r["node_name"], r["status"]) for r in store.latest()} == {("gpu-001", "pass"), ("gpu-002", None)}
    # the record task retried: nothing doubles
    tasks.record(plan, [attempt("gpu-001", "pass")], store, dag_id="continuous_validation", run_id="r1", now=NOW)
    assert len(store.history("gpu-002")) == 1 and len(store.history("gpu-001")) == 1


def test_a_run_started_before_the_upgrade_still_records_and_summarizes(store):
    """The XComs of a run started by the release before typed payloads: version-less dicts and lists,
    read as the DAG reads them (from_xcom), recorded and summarized by this release's task bodies."""
    from cluster_doctor.domain.payloads import Recorded

    old_discovered = {"settings": {**Settings().to_dict(), "a_setting_since_removed": 1},
                      "params": {"node_range": "", "tests": ["gpu_health"], "stale_before": None, "max_pairs": 16,
                                 "dry_run": False},
                      "started_at": NOW.isoformat(), "free": [{"name": "gpu-001", "gpu_count": 8, "gpu_model": None}],
                      "ineligible": [], "api_calls": 2, "nodes_seen": 1, "pods_seen": 0}  # before volumes existed
    found = Discovered.from_xcom(old_discovered)
    recorded = tasks.record(planned(("gpu-001", "gpu_health")), [attempt("gpu-001", "pass")], store,
                            dag_id="continuous_validation", run_id="r1", now=NOW, settings=found.settings)
    old_recorded = [a.to_dict() for a in recorded.attempts]  # record's XCom was the bare list
    summary = tasks.summarize(found, planned(("gpu-001", "gpu_health")), Recorded.from_xcom(old_recorded), store,
                              now=NOW)
    assert summary.counts["pass"] == 1 and summary.blocked is None and report.verdict(summary) is None
    assert [(r["node_name"], r["status"]) for r in store.latest()] == [("gpu-001", "pass")]


def test_a_dry_run_records_nothing(store):
    assert tasks.record(planned(("gpu-001", "gpu_health"), dry_run=True), [], store, dag_id="d", run_id="r",
                        now=NOW).attempts == []
    assert store.latest() == []


def discovered(free, ineligible=(), max_pairs=16, dry_run=False, settings=None):
    return Discovered.from_xcom({
        "settings": (settings or Settings()).to_dict(), "started_at": NOW.isoformat(),
        "params": {"node_range": "", "tests": ["gpu_health"], "stale_before": None, "max_pairs": max_pairs,
                   "dry_run": dry_run},
        "free": [{"name": n, "gpu_count": 8, "gpu_model": "NVIDIA H200"} for n in free],
        "ineligible": [{"name": n, "reason": r, "detail": "", "gpu_count": 8, "gpu_model": None}
                       for n, r in ineligible]})


def test_summary_newly_failing_coverage_and_verdict(store):
    earlier = NOW - dt.timedelta(days=1)
    store.record([{**attempt("gpu-001", "pass"), "finished_at": earlier.isoformat(), "run_id": "r0"},
                  {**attempt("gpu-002", "fail", reason="old"), "finished_at": earlier.isoformat(), "run_id": "r0"}])
    recorded = tasks.record(planned(("gpu-001", "gpu_health"), ("gpu-002", "gpu_health"), ("gpu-003", "gpu_health")),
                            [attempt("gpu-001", "fail", reason="xid 79 on GPU 2"),
                             attempt("gpu-002", "fail", reason="still bad"), attempt("gpu-003", "pass")],
                            store, dag_id="continuous_validation", run_id="r1", now=NOW)
    found = discovered(["gpu-001", "gpu-002", "gpu-003"], [("gpu-004", "busy"), ("gpu-005", "cordoned")])
    found = found.model_copy(update={"settings": Settings(tests=["gpu_health"])})  # the enabled suites
    # what discover wrote: the coverage counts the GPU node inventory, as every view of the fleet does
    inventory.record_discovery(store.connect, [
        *(inventory.SeenNode(n, 8, None, inventory.FREE) for n in ("gpu-001", "gpu-002", "gpu-003")),
        inventory.SeenNode("gpu-004", 8, None, "busy", "ml/a requests 8 nvidia.com/gpu"),
        inventory.SeenNode("gpu-005", 8, None, "cordoned")], seen_at=NOW - dt.timedelta(hours=2), complete=True)
    summary = tasks.summarize(found, planned(), recorded, store, now=NOW)
    assert summary.counts["fail"] == 2 and summary.counts["pass"] == 1
    assert [n.node_name for n in summary.newly_failing] == ["gpu-001"]  # gpu-002 was already failing
    assert summary.not_eligible == {"busy": ["gpu-004"], "cordoned": ["gpu-005"]}
    cov = summary.coverage
    assert cov.gpu_nodes == 5 and cov.covered_nodes == 3 and cov.never_validated == ["gpu-004", "gpu-005"]
    assert cov.failing_nodes == ["gpu-001", "gpu-002"]
    assert "gpu-001 · gpu_health: fail" in report.verdict(summary)
    text = report.render(summary)
    assert "NEWLY FAILING: gpu-001" in text and "not eligible (busy): gpu-004" in text
    assert [(n.name, n.detail) for n in summary.not_eligible_detail] == [
        ("gpu-004", "busy since 2026-11-22 10:00 UTC: ml/a requests 8 nvidia.com/gpu"),
        ("gpu-005", "cordoned since 2026-11-22 10:00 UTC")]


def test_timeouts_and_preemptions_never_fail_the_run():
    summary = RunSummary(attempts=[{"node_name": "gpu-1", "test_name": "dl_unit", "status": s, "reason": ""}
                                   for s in ("pass", "timeout", "preempted", "skipped")])
    assert report.verdict(summary) is None


def test_a_failed_peer_test_makes_both_sides_suspect_and_blames_neither():
    """One failed peer test cannot say which side is bad; the verdict names the pair, once,
    as suspect (the run still fails: something between them is broken), never a node as failing."""
    line = lambda node, peer, status: {"node_name": node, "test_name": "fabric_peer", "status": status,  # noqa: E731
                                       "reason": "PEER_IB_BW_LOW", "peer": peer}
    summary = RunSummary(attempts=[line("gpu-002", "gpu-001", "fail"), line("gpu-001", "gpu-002", "error"),
                                   line("gpu-003", "gpu-004", "pass"), line("gpu-004", "gpu-003", "pass")],
                         newly_failing=[line("gpu-002", "gpu-001", "fail")])
    text = report.verdict(summary)
    assert text == ("1 peer test(s) failed between gpu-001 ↔ gpu-002: both sides suspect until a third node "
                    "is tried with each (the fleet page's peer column)")
    assert "validation(s) failed" not in text
    assert "NEWLY SUSPECT: gpu-002 (peer test with gpu-001): PEER_IB_BW_LOW" in report.render(summary)
    assert "NEWLY FAILING" not in report.render(summary)


def test_planned_validations_that_never_reported_fail_the_run(store):
    recorded = tasks.record(planned(("gpu-001", "gpu_health")), [], store, dag_id="d", run_id="r", now=NOW)
    summary = tasks.summarize(discovered(["gpu-001"]), planned(("gpu-001", "gpu_health")), recorded, store, now=NOW)
    assert "never reported" in report.verdict(summary)


# ---------------------------------------------------------------------------- run-to-run claims
from cluster_doctor.store import claims  # noqa: E402

DAG = "continuous_validation"


def live(store):
    return [(c.node_name, c.run_id) for c in claims.live(store.connect)]


def test_prioritize_leaves_a_node_another_run_holds_and_plans_the_next_one(store, caplog):
    claims.claim(store.connect, [("gpu-001", "gpu_health", 600)], dag_id=DAG, run_id="backfill__1", limit=1)
    found = discovered(["gpu-001", "gpu-002", "gpu-003", "gpu-004"], max_pairs=2)
    plan = tasks.prioritize(found, Latest(), now=NOW, store=store, dag_id=DAG, run_id="scheduled__1")
    # gpu-001 comes first by priority, but it is another live run's: the next two are taken instead
    assert [p.node_name for p in plan.pairs] == ["gpu-002", "gpu-003"]
    [held] = plan.held_by_other_runs
    assert (held.node_name, held.test_name, held.run_id) == ("gpu-001", "gpu_health", "backfill__1")
    assert "deferred 1 node(s), held by another live run: gpu-001 (run backfill__1" in caplog.text
    assert live(store) == [("gpu-001", "backfill__1"), ("gpu-002", "scheduled__1"), ("gpu-003", "scheduled__1")]
    # a retried prioritize of the same run plans (and holds) the same pairs, nothing more
    again = tasks.prioritize(found, Latest(), now=NOW, store=store, dag_id=DAG, run_id="scheduled__1")
    assert again.pairs == plan.pairs and len(live(store)) == 3
    # the run summary counts the deferred pairs
    summary = tasks.summarize(found, plan, None, store, now=NOW)
    assert summary.to_xcom()["deferred"] == [{"node_name": "gpu-001", "test_name": "gpu_health",
                                               "run_id": "backfill__1"}]
    assert "deferred: 1 pair(s), their node held by another live run: gpu-001" in report.render(summary)
    assert "attempts: none" in report.render(summary)  # nothing recorded: said, not a bare "attempts: "


def test_prioritize_of_a_second_run_takes_what_the_first_left(store):
    found = discovered(["gpu-001", "gpu-002", "gpu-003"])
    first = tasks.prioritize(found, Latest(), now=NOW, store=store, dag_id=DAG, run_id="r1")
    second = tasks.prioritize(found, Latest(), now=NOW, store=store, dag_id=DAG, run_id="r2")
    assert [p.node_name for p in first.pairs] == ["gpu-001", "gpu-002", "gpu-003"]
    assert second.pairs == [] and [h.node_name for h in second.held_by_other_runs] == \
        ["gpu-001", "gpu-002", "gpu-003"]


def test_a_dry_run_claims_nothing_but_shows_what_is_held(store):
    claims.claim(store.connect, [("gpu-001", "gpu_health", 600)], dag_id=DAG, run_id="other", limit=1)
    found = discovered(["gpu-001", "gpu-002"], dry_run=True)
    plan = tasks.prioritize(found, Latest(), now=NOW, store=store, dag_id=DAG, run_id="dry")
    assert [p.node_name for p in plan.pairs] == ["gpu-002"]
    assert [h.node_name for h in plan.held_by_other_runs] == ["gpu-001"]
    assert live(store) == [("gpu-001", "other")]


def test_record_releases_the_runs_claims_whatever_the_outcome(store):
    found = discovered(["gpu-001", "gpu-002", "gpu-003"])
    plan = tasks.prioritize(found, Latest(), now=NOW, store=store, dag_id=DAG, run_id="r1")
    claims.claim(store.connect, [("gpu-009", "gpu_health", 600)], dag_id=DAG, run_id="r2", limit=1)
    reported = [{**attempt("gpu-001", "pass"), "run_id": "r1"}, {**attempt("gpu-002", "fail"), "run_id": "r1"}]
    recorded = tasks.record(plan, reported, store, dag_id=DAG, run_id="r1", now=NOW)
    assert sorted((r.node_name, r.status) for r in recorded.attempts) == \
        [("gpu-001", "pass"), ("gpu-002", "fail"), ("gpu-003", "skipped")]
    assert live(store) == [("gpu-009", "r2")]  # another run's claim stays


def test_a_failed_release_loses_no_row_and_fails_nothing(store, db_dsn, caplog):
    import psycopg

    plan = tasks.prioritize(discovered(["gpu-001"]), Latest(), now=NOW, store=store, dag_id=DAG, run_id="r1")
    with psycopg.connect(**db_dsn) as conn, conn.cursor() as cur:  # the release will fail for real
        cur.execute("ALTER TABLE validation_claims RENAME TO validation_claims_gone")
    recorded = tasks.record(plan, [{**attempt("gpu-001", "pass"), "run_id": "r1"}], store, dag_id=DAG, run_id="r1",
                            now=NOW)
    assert [r.status for r in recorded.attempts] == ["pass"]
    assert [r["status"] for r in store.history("gpu-001")] == ["pass"]
    assert "could not release this run's claims on 1 node(s)" in caplog.text


def test_prioritize_with_a_store_needs_the_run_identity(store):
    import pytest

    with pytest.raises(ValueError, match="dag_id and run_id"):
        tasks.prioritize(discovered(["gpu-001"]), Latest(), now=NOW, store=store, dag_id=DAG, run_id=None)


# ---------------------------------------------------------------------------- bundles and shared ranges
def discovered_with(free, tests, max_pairs=16, ineligible=()):
    found = discovered(free, ineligible, max_pairs=max_pairs)
    return found.model_copy(update={"params": found.params.model_copy(update={"tests": tests})})


def test_a_chosen_node_runs_all_its_due_suites_and_its_claim_holds_it_for_the_bundle(store):
    found = discovered_with(["gpu-001", "gpu-002"], ["dl_unit", "gpu_health"], max_pairs=3)
    plan = tasks.prioritize(found, Latest(), now=NOW, store=store, dag_id=DAG, run_id="r1", reserved=["gpu-002"])
    # the reserved node first; within a node health first; the cap cuts the second node's bundle
    assert [(p.node_name, p.test_name) for p in plan.pairs] == [
        ("gpu-002", "gpu_health"), ("gpu-002", "dl_unit"), ("gpu-001", "gpu_health")]
    assert plan.nodes() == ["gpu-002", "gpu-001"] and plan.reserved == ["gpu-002"]
    [claim] = [c for c in claims.live(store.connect) if c.node_name == "gpu-002"]
    settings = found.settings
    assert claim.expires_at - claim.claimed_at == dt.timedelta(
        seconds=claims.ttl_s(settings, ["gpu_health", "dl_unit"]))
    # finish_node gives the node back to other runs at once
    from cluster_doctor.domain.payloads import Bundle, BundleStep, RunConfig

    bundle = Bundle(node_name="gpu-002", gpu_count=8, planned_at=NOW, steps=[BundleStep(test_name="gpu_health")],
                    run_config=RunConfig(settings=settings, configmap="cm", suite_version="v"))
    said = tasks.finish_node(bundle, [attempt("gpu-002", "pass")], store, None, dag_id=DAG, run_id="r1")
    assert said == "gpu-002: gpu_health pass"
    assert [c.node_name for c in claims.live(store.connect)] == ["gpu-001"]


def test_concurrent_runs_share_a_range_and_a_run_left_with_nothing_says_who_holds_it(store, caplog):
    """A backfill's runs at once (--max-active-runs 10): each takes what the others do not hold."""
    caplog.set_level(logging.INFO, logger="cluster_doctor")
    found = discovered_with(["gpu-001", "gpu-002", "gpu-003", "gpu-004"], ["gpu_health", "dl_unit"], max_pairs=4)
    runs = {run: tasks.prioritize(found, Latest(), now=NOW, store=store, dag_id=DAG, run_id=run)
            for run in ("backfill__1", "backfill__2", "backfill__3")}
    assert runs["backfill__1"].nodes() == ["gpu-001", "gpu-002"] and runs["backfill__2"].nodes() == ["gpu-003", "gpu-004"]
    third = runs["backfill__3"]
    assert third.pairs == [] and third.why_empty.startswith(
        "nothing planned: all 4 free node(s) with a due pair are claimed by other live runs (2 by run backfill__1 "
        "until ")
    assert "; 2 by run backfill__2 until " in third.why_empty
    assert third.why_empty in caplog.text
    summary = tasks.summarize(found, third, None, store, now=NOW)
    assert summary.why_empty == third.why_empty and third.why_empty in report.render(summary)
    assert report.note(summary).startswith("Cluster Doctor: nothing planned: all 4 free node(s)")


def test_a_run_with_nothing_to_do_says_all_fresh_since_or_none_free(store):
    latest = Latest.from_xcom({"rows": [["gpu-001", "gpu_health", "pass", (NOW - dt.timedelta(days=2)).isoformat(),
                                         (NOW - dt.timedelta(days=2)).isoformat(), "pass"]]})
    fresh = tasks.prioritize(discovered(["gpu-001"], settings=Settings(sweep_interval_hours=0)), latest, now=NOW)
    assert fresh.why_empty == ("nothing planned: all pairs of the 1 free node(s) are fresh since "
                               "2026-11-20T12:00+00:00 (none due; tests gpu_health)")
    # with the health sweep (on by default) the same free node's 2-day-old health check is swept
    swept = tasks.prioritize(discovered(["gpu-001"]), latest, now=NOW)
    assert [(p.node_name, p.test_name, p.why) for p in swept.pairs] == [("gpu-001", "gpu_health", "health sweep")]
    busy = tasks.prioritize(discovered([], [("gpu-001", "busy"), ("gpu-002", "cordoned")]), Latest(), now=NOW)
    assert busy.why_empty == "nothing planned: none of the 2 GPU node(s) is free (1 busy, 1 cordoned)"


def test_a_run_asking_for_a_suite_the_dag_has_no_step_for_is_refused_before_any_call():
    """The validate group has a step per suite enabled at parse time (CLUSTER_DOCTOR_TESTS)."""
    import pytest
    from cluster_doctor.domain.planning.params import InvalidParams

    with pytest.raises(InvalidParams) as refused:
        tasks.discover({"tests": ["gpu_health", "ib_health"]}, Settings(), None, now=NOW, parsed=Settings())
    assert str(refused.value) == (
        "tests: ib_health not enabled in this deployment (the DAG runs gpu_health, dl_unit, nccl_loopback, "
        "storage_fio); enable it with CLUSTER_DOCTOR_TESTS in the deployment environment")


def test_a_setting_the_dag_was_parsed_with_changed_at_run_time_is_refused_before_any_call():
    """The pool is the DAG's at parse time: a Variable changing it would not move the pods; discover says so
    and makes no API call (no client to call)."""
    import pytest
    from cluster_doctor.domain.config import InvalidSettings

    with pytest.raises(InvalidSettings) as refused:
        tasks.discover({}, Settings(pool="elsewhere"), None, now=NOW, parsed=Settings())
    assert "setting pool: 'elsewhere' from the Airflow Variable cannot take effect" in str(refused.value)
    assert "CLUSTER_DOCTOR_POOL" in str(refused.value)


def test_the_speed_probe_rides_on_the_gpu_health_pairs_whose_probe_is_due(store):
    from cluster_doctor.domain.attempts import Attempt
    from cluster_doctor.domain.payloads import Bundle, BundleStep, RunConfig
    from cluster_doctor.kube import podspec

    # gpu-002 was probed an hour ago and stayed idle: not due; gpu-001 never was
    store.record([Attempt(node_name="gpu-002", test_name="gpu_health", status="pass",
                          finished_at=NOW - dt.timedelta(hours=1), gpu_model="NVIDIA H200", gpu_count=8,
                          metrics={"probe_gemm_tflops_min": 700.0, "probe_hbm_gbps_min": 4000.0},
                          dag_id="continuous_validation", run_id="r0")])
    plan = planned(("gpu-001", "gpu_health"), ("gpu-001", "dl_unit"), ("gpu-002", "gpu_health"))
    gpu = _with_probes(plan, store, Settings(suite_device="cuda"), NOW)
    assert [(p.node_name, p.test_name, p.probe_seconds) for p in gpu.pairs] == [
        ("gpu-001", "gpu_health", 3.0), ("gpu-001", "dl_unit", None), ("gpu-002", "gpu_health", None)]
    assert _with_probes(plan, store, Settings(suite_device="cpu"), NOW).pairs[0].probe_seconds == 0.2  # short
    assert _with_probes(plan, store, Settings(slow_probe_seconds=0), NOW) == plan  # switched off
    # the pair's seconds reach the pod as the suite's environment, through the bundle step
    config = RunConfig(settings=Settings(), configmap="cm", suite_version="v", suite_files=[])
    [bundle] = _bundles(gpu, ["gpu-001"], config)
    step = Bundle.from_xcom(bundle.to_xcom()).validation("gpu_health")
    assert step.probe_seconds == 3.0 and step.to_xcom()["probe_seconds"] == 3.0
    assert "probe_seconds" not in Bundle.from_xcom(bundle.to_xcom()).validation("dl_unit").to_xcom()
    assert BundleStep(test_name="gpu_health").probe_seconds is None
    pod = podspec.build_pod(Settings(), node_name="gpu-001", test_name="gpu_health", gpu_count=8, gpu_model=None,
                            run_id="r", configmap="cm", suite_version="v", probe_seconds=step.probe_seconds)
    env = {e["name"]: e.get("value") for c in pod["spec"]["containers"] if c["name"] == "base" for e in c["env"]}
    assert env["CLUSTER_DOCTOR_PROBE_SECONDS"] == "3"
    plain = podspec.build_pod(Settings(), node_name="gpu-001", test_name="gpu_health", gpu_count=8, gpu_model=None,
                              run_id="r", configmap="cm", suite_version="v")
    assert "CLUSTER_DOCTOR_PROBE_SECONDS" not in {e["name"] for c in plain["spec"]["containers"] for e in c["env"]}


# ---------------------------------------------------------------------------- what the DAG's glue hands on
def test_record_takes_every_steps_attempt_and_a_skipped_row_for_a_peer_side_that_never_reported():
    from cluster_doctor.domain import payloads
    from cluster_doctor.domain.peers import PeerMatch

    one = attempt("gpu-001", "pass")
    # a single step's XCom comes back as the dict itself, several as a list (a step that pushed nothing: None)
    assert tasks.reported_attempts(one, None, None, dag_id=DAG, run_id="r1") == [one]
    assert tasks.reported_attempts([one, None], None, None, dag_id=DAG, run_id="r1") == [one, None]
    assert tasks.reported_attempts(None, None, None, dag_id=DAG, run_id="r1") == []
    peer_tests = payloads.PeerTests(tests=[payloads.PeerTest(
        match=PeerMatch(server="gpu-002", client="gpu-003", model="H100", reason="never peer-tested"),
        gpus={"gpu-002": (8, "H100"), "gpu-003": (8, "H100")}, planned_at=NOW,
        run_config=payloads.RunConfig(settings=Settings(), configmap="cm", suite_version="sha256:0"))])
    sides = [[{**attempt("gpu-002", "pass", test="fabric_peer"), "peer": "gpu-003"}]]

    rows = tasks.reported_attempts(one, sides, peer_tests, dag_id=DAG, run_id="r1")

    assert [(r["node_name"], r["status"]) for r in rows] == [("gpu-001", "pass"), ("gpu-002", "pass"),
                                                            ("gpu-003", "skipped")]


def test_summarize_fails_a_run_whose_pods_left_no_record_and_passes_one_that_created_none():
    from airflow.sdk.exceptions import AirflowFailException

    found, plan = discovered(["gpu-001"]), planned(("gpu-001", "gpu_health"))
    with pytest.raises(AirflowFailException, match="could not be recorded: see the record task"):
        tasks.recorded_or_fail(found, plan, None)
    assert tasks.recorded_or_fail(found, planned(("gpu-001", "gpu_health"), dry_run=True), None) is None
    recorded = Recorded(attempts=[])
    assert tasks.recorded_or_fail(found, plan, recorded) is recorded


def test_a_run_that_left_no_summary_fails_its_verdict():
    from airflow.sdk.exceptions import AirflowFailException

    with pytest.raises(AirflowFailException, match="the run did not complete"):
        tasks.verdict(None)
    # a passing run's verdict passes
    tasks.verdict(RunSummary(attempts=[{"node_name": "gpu-001", "test_name": "gpu_health", "status": "pass",
                                        "reason": ""}]))


def test_the_sweep_and_the_peer_tests_reuse_the_suite_code_ship_suites_shipped():
    run_config = RunConfig(settings=Settings(), configmap="cm-1", suite_version="sha256:1")
    bundles = [b.to_xcom() for b in _bundles(planned(("gpu-001", "gpu_health")), ["gpu-001"], run_config)]
    assert tasks.shipped(bundles) == run_config
    assert tasks.shipped([]) is None and tasks.shipped(None) is None
