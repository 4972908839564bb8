"""The XCom payloads: one to/from-JSON pair each, versioned; what releases before typed payloads
wrote (version-less dicts and lists) is still read, so a run started before an upgrade still records."""

import datetime as dt
import json

import pytest
from cluster_doctor.domain.attempts import Attempt
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.payloads import (
    Discovered,
    InvalidPayload,
    Latest,
    OrphanReport,
    Plan,
    Recorded,
    RunConfig,
    RunSummary,
    Validation,
)
from cluster_doctor.domain.planning.params import RunParams

NOW = dt.datetime(2026, 11, 22, 12, tzinfo=dt.UTC)
PARAMS = {"node_range": "gpu-[001-002]", "tests": ["gpu_health"], "stale_before": None, "max_pairs": 16,
          "dry_run": False}

# The shapes the tasks handed each other before payloads were typed (no "version" key), copied from
# what tasks.discover / prioritize / ship_suites / record / summarize returned then.
OLD_DISCOVERED = {
    "settings": Settings().to_dict(), "params": PARAMS, "started_at": NOW.isoformat(),
    "free": [{"name": "gpu-001", "gpu_count": 8, "gpu_model": "NVIDIA H200"}],
    "ineligible": [{"name": "gpu-002", "reason": "busy", "detail": "ml/train-0 requests 8 nvidia.com/gpu",
                    "gpu_count": 8, "gpu_model": None}],
    "api_calls": 2, "nodes_seen": 2, "pods_seen": 1, "decode_seconds": 0.001, "read_mode": "watch-cache",
    "volumes": {"claims": [{"namespace": "cluster-doctor", "name": "cluster-doctor-results", "usable": True,
                            "detail": "is Bound to pv-1", "certain": True, "code": None}],
                "blocked_tests": [], "problem": None, "codes": []},
}
OLD_LATEST = [["gpu-001", "gpu_health", "pass", "2026-11-20T12:00:00+00:00", "2026-11-20T12:00:00+00:00", "pass"]]
OLD_PLANNED = {
    "planned_at": NOW.isoformat(), "dry_run": False,
    "pairs": [{"node_name": "gpu-001", "test_name": "gpu_health", "why": "stale", "last_status": "pass",
               "last_finished_at": "2026-11-20T12:00:00+00:00", "last_attempt_at": "2026-11-20T12:00:00+00:00",
               "last_attempt_status": "pass", "gpu_count": 8, "gpu_model": "NVIDIA H200"}],
    "held_by_other_runs": [{"node_name": "gpu-003", "test_name": "gpu_health", "dag_id": "continuous_validation",
                            "run_id": "backfill__1", "held_for": "dl_unit", "expires_at": NOW.isoformat()}],
}
OLD_RUN_CONFIG = {"settings": Settings().to_dict(), "configmap": "cluster-doctor-suites-0123", "suite_version": "sha256:0",
                  "suite_files": ["__init__.py", "gpu_health.py"]}
OLD_VALIDATION = {"node_name": "gpu-001", "test_name": "gpu_health", "gpu_count": 8, "gpu_model": "NVIDIA H200",
                  "planned_at": NOW.isoformat(), "why": "stale", "run_config": OLD_RUN_CONFIG}
OLD_RECORDED = [Attempt(node_name="gpu-001", test_name="gpu_health", status="pass", finished_at=NOW, dag_id="d",
                        run_id="r", map_index=0).to_dict()]
OLD_SUMMARY = {
    "run_started_at": NOW.isoformat(), "params": PARAMS, "dry_run": False, "gpu_nodes": 2, "free_nodes": 1,
    "planned": 1, "deferred": [{"node_name": "gpu-003", "test_name": "gpu_health", "run_id": "backfill__1"}],
    "counts": {"pass": 1, "fail": 0, "error": 0, "timeout": 0, "preempted": 0, "skipped": 0},
    "attempts": [{"node_name": "gpu-001", "test_name": "gpu_health", "status": "pass", "reason": None}],
    "newly_failing": [], "not_eligible": {"busy": ["gpu-002"]}, "not_eligible_detail": OLD_DISCOVERED["ineligible"],
    "blocked": None, "coverage": {"gpu_nodes": 2, "covered_nodes": 1, "coverage": 0.5, "never_validated": ["gpu-002"],
                                  "failing_nodes": [], "pair_coverage": 0.5}, "ctrf_path": "/reports/ctrf.json",
}
OLD_ORPHANS = {"examined": 1, "recorded": [], "deleted": ["cd-x: ended"], "kept": [], "errors": [], "freed_nodes": []}

OLD = [(Discovered, OLD_DISCOVERED), (Latest, OLD_LATEST), (Plan, OLD_PLANNED), (RunConfig, OLD_RUN_CONFIG),
       (Recorded, OLD_RECORDED), (RunSummary, OLD_SUMMARY), (OrphanReport, OLD_ORPHANS)]


def _as_old(wire, old, nested=False):
    """``wire`` cut to the keys ``old`` has, at every depth; a key added inside a nested item (e.g. an
    attempt line's peer) must hold its empty default (the top level's are checked below)."""
    if isinstance(old, dict) and isinstance(wire, dict):
        extra = {k: v for k, v in wire.items() if k not in old}
        assert not nested or all(v in ([], None, 0, {}) for v in extra.values()), extra
        return {k: _as_old(v, old[k], True) for k, v in wire.items() if k in old}
    if isinstance(old, list) and isinstance(wire, list) and len(old) == len(wire):
        return [_as_old(w, o, True) for w, o in zip(wire, old)]
    return wire


@pytest.mark.parametrize("cls, old", OLD, ids=[c.__name__ for c, _ in OLD])
def test_a_version_less_payload_of_the_previous_release_is_read_and_round_trips(cls, old):
    payload = cls.from_xcom(json.loads(json.dumps(old)))  # as XCom hands it over: plain JSON
    assert payload.version == cls.VERSION
    wire = payload.to_xcom()
    assert wire["version"] == cls.VERSION
    assert cls.from_xcom(json.loads(json.dumps(wire))) == payload
    # the keys stay what they were (dag_runner, demo and e2e read the summary); Discovered's node lists
    # became node ranges in version 2 (test_discovered_version_1_is_read_as_node_ranges)
    if isinstance(old, dict) and cls is not Discovered:
        assert _as_old(wire, old) == json.loads(json.dumps(old))
        # keys added since then only with their defaults (e.g. warnings, spool)
        added = {k: v for k, v in wire.items() if k not in old and k != "version"}
        assert added == {k: v for k, v in cls().to_xcom().items() if k in added} if cls is RunSummary else \
            all(v in ([], None, 0, {}) for v in added.values()), added
    assert cls.from_xcom(payload) is payload


def test_discovered_version_1_is_read_as_node_ranges():
    """A run started before the upgrade hands its version-1 Discovered (a JSON object per node) to the
    tasks the new code runs: the same nodes, kept as ranges; the per-node detail is the inventory's."""
    old = {**OLD_DISCOVERED, "version": 1,
           "free": [{"name": f"gpu-{i:03d}", "gpu_count": 8, "gpu_model": "H100"} for i in range(1, 41)]
           + [{"name": "gpu-100", "gpu_count": 4, "gpu_model": None}],
           "ineligible": [{"name": "gpu-050", "reason": "busy", "detail": "ml/a requests 8"},
                          {"name": "gpu-051", "reason": "busy", "detail": "ml/b requests 8"},
                          {"name": "gpu-060", "reason": "cordoned", "detail": "spec.unschedulable is set"}]}
    found = Discovered.from_xcom(json.loads(json.dumps(old)))
    assert found.version == 2 and "free" not in found.to_xcom()
    assert [g.nodes for g in found.free_groups] == ["gpu-100", "gpu-[001-040]"]
    assert found.not_eligible == {"busy": "gpu-[050-051]", "cordoned": "gpu-060"}
    assert [n.name for n in found.free] == [f"gpu-{i:03d}" for i in range(1, 41)] + ["gpu-100"]
    assert found.free[0].gpu_count == 8 and found.free[-1].gpu_model is None
    assert [(n.name, n.reason) for n in found.ineligible] == [("gpu-050", "busy"), ("gpu-051", "busy"),
                                                              ("gpu-060", "cordoned")]
    with pytest.raises(InvalidPayload, match="Discovered: free and ineligible must list objects"):
        Discovered.from_xcom({**old, "free": ["gpu-001"]})
    with pytest.raises(InvalidPayload, match="lacks a name"):
        Discovered.from_xcom({**old, "free": [{"gpu_count": 8}]})


def test_discovered_stays_small_at_5000_nodes():
    """The discover XCom at most 50 KB, even with free and busy nodes interleaved."""
    found = Discovered.of(settings=Settings(), params={"tests": ["gpu_health"], "max_pairs": 16}, started_at=NOW,
                          free=[(f"gpu-{i:04d}", 8, "H100") for i in range(1, 5001) if i % 3],
                          ineligible=[(f"gpu-{i:04d}", "busy") for i in range(1, 5001) if i % 3 == 0])
    wire = json.dumps(found.to_xcom())
    assert len(wire) < 50_000
    again = Discovered.from_xcom(json.loads(wire))
    assert len(again.free) == 3334 and len(again.ineligible) == 1666 and len(again.gpu_nodes) == 5000


def test_the_typed_payload_carries_typed_values():
    found = Discovered.from_xcom(OLD_DISCOVERED)
    assert isinstance(found.settings, Settings) and found.started_at == NOW
    assert found.gpu_nodes == ["gpu-001", "gpu-002"] and found.volumes.claims[0].usable
    assert RunParams.of(found.params).node_range.expression == "gpu-[001-002]"
    [row] = Latest.from_xcom(OLD_LATEST).rows
    assert row.finished_at == dt.datetime(2026, 11, 20, 12, tzinfo=dt.UTC) and row.status == "pass"
    plan = Plan.from_xcom(OLD_PLANNED)
    assert plan.creates_pods and plan.pairs[0].gpu_count == 8 and plan.held_by_other_runs[0].expires_at == NOW
    assert not Plan(planned_at=NOW, dry_run=True, pairs=plan.pairs).creates_pods
    [attempt] = Recorded.from_xcom(OLD_RECORDED).attempts
    assert isinstance(attempt, Attempt) and attempt.status == "pass"


def test_the_mapped_validate_kwargs_keep_their_shape():
    validation = Validation.from_xcom(OLD_VALIDATION)
    kwargs = validation.to_xcom()
    # expand_kwargs passes each key to NodeValidationPodOperator; map_index_template reads node_name, test_name
    assert set(kwargs) == set(OLD_VALIDATION)
    assert kwargs["run_config"]["version"] == 1 and kwargs["planned_at"] == NOW.isoformat()
    assert Validation.from_xcom(json.loads(json.dumps(kwargs))) == validation
    assert validation.run_config.settings == Settings()


def test_a_setting_an_upgrade_removed_is_dropped_and_one_it_added_takes_its_default():
    settings = {k: v for k, v in Settings(staleness_days=3).to_dict().items() if k != "reports_dir"}
    found = Discovered.from_xcom({**OLD_DISCOVERED, "settings": {**settings, "retired_setting": 1}})
    assert found.settings.staleness_days == 3 and found.settings.reports_dir == ""


@pytest.mark.parametrize("data, message", [
    ({**OLD_PLANNED, "version": 3}, r"Plan: version 3 is not one this Cluster Doctor reads \(0 to 2\)"),
    ({**OLD_PLANNED, "version": "1"}, "Plan: version '1' is not one"),
    ([OLD_PLANNED], "Plan: expected a JSON object, got list"),
    ({**OLD_PLANNED, "planned_at": "yesterday"}, "Plan: field planned_at: timestamp: not an ISO-8601 timestamp"),
    ({**OLD_PLANNED, "planned_at": "2026-11-22T12:00:00"}, "has no time zone"),
    ({**OLD_PLANNED, "pairs": [{"node_name": "gpu-001"}]}, r"Plan: field pairs\[0\].test_name: Field required"),
    ({**OLD_PLANNED, "pairs": [{**OLD_PLANNED["pairs"][0], "gpu_count": "eight"}]},
     r"field pairs\[0\].gpu_count: Input should be a valid integer.*, got 'eight'"),
    ({**OLD_PLANNED, "surprise": 1}, "Plan: unknown field surprise"),
])
def test_a_malformed_payload_is_refused_on_one_line_naming_the_field(data, message):
    with pytest.raises(InvalidPayload, match=message) as raised:
        Plan.from_xcom(data)
    assert "\n" not in str(raised.value)


def test_bad_settings_inside_a_payload_name_the_setting():
    with pytest.raises(InvalidPayload, match="Discovered: field settings: setting namespace: 'Bad_NS' is not a"):
        Discovered.from_xcom({**OLD_DISCOVERED, "settings": {**Settings().to_dict(), "namespace": "Bad_NS"}})
    with pytest.raises(InvalidPayload, match=r"Recorded: field attempts\[0\]: missing attempt field\(s\): status"):
        Recorded.from_xcom([{"node_name": "gpu-001", "test_name": "gpu_health", "finished_at": NOW.isoformat()}])
    with pytest.raises(InvalidPayload, match="RunConfig: field configmap: Field required"):
        Validation.from_xcom({**OLD_VALIDATION, "run_config": {"settings": {}}})


def test_payloads_are_immutable_except_the_report_filled_in_as_it_goes():
    plan = Plan.from_xcom(OLD_PLANNED)
    with pytest.raises(ValueError, match="frozen"):
        plan.dry_run = True
    report = OrphanReport()
    report.examined += 1
    report.deleted.append("cd-x: ended")
    with pytest.raises(ValueError, match="valid integer"):
        report.examined = "many"
    assert "1 examined, 0 recorded, 1 deleted" in report.describe()
