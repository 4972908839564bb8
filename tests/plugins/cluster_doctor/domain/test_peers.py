"""Peer tests: triangulation and matching, pure."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from cluster_doctor.domain.config import InvalidSettings, Settings
from cluster_doctor.domain.payloads import InvalidPayload, PeerTest, PeerTests, RunConfig
from cluster_doctor.domain.peers import (
    PEER_SUITE,
    PeerCandidate,
    PeerMatch,
    PeerResult,
    match_peers,
    triangulate,
)

T0 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
H100 = "NVIDIA-H100-80GB-HBM3"
LEAF = "network.topology.nvidia.com/leaf"


def ran(a: str, b: str, status: str, hours: float, *, b_status: str | None = None) -> list[PeerResult]:
    """Both rows of one peer test of a and b (b's status may differ), ``hours`` after T0."""
    at = T0 + dt.timedelta(hours=hours)
    return [PeerResult(a, b, status, at, H100), PeerResult(b, a, b_status or status, at + dt.timedelta(seconds=5), H100)]


def verdicts(*runs: list[PeerResult], **kw) -> dict[str, str]:
    return {n: v.verdict for n, v in triangulate([r for t in runs for r in t], **kw).items()}


# ---------------------------------------------------------------------------- triangulate
def test_a_failed_pair_makes_both_suspect():
    found = triangulate(ran("a", "b", "fail", 0))
    assert {n: v.verdict for n, v in found.items()} == {"a": "suspect", "b": "suspect"}
    assert found["a"].peer == "b" and found["a"].failed_with == ("b",)
    assert "failed with b" in found["a"].reason


def test_one_side_failing_fails_the_pair():
    # the client judged the bandwidth low, the server saw nothing: still one failed test of two nodes
    assert verdicts(ran("a", "b", "pass", 0, b_status="fail")) == {"a": "suspect", "b": "suspect"}


def test_error_counts_as_a_failed_pair_and_non_executed_rows_are_ignored():
    rows = ran("a", "b", "error", 0) + [PeerResult("a", "c", "timeout", T0 + dt.timedelta(hours=1))]
    assert verdicts(rows) == {"a": "suspect", "b": "suspect"}


def test_the_other_side_passing_elsewhere_is_not_yet_blame():
    # a-b failed; b passed with c: b is fine, a failed with only one exonerated peer -> still suspect
    v = verdicts(ran("a", "b", "fail", 0), ran("b", "c", "pass", 1))
    assert v == {"a": "suspect", "b": "pass", "c": "pass"}


def test_triangle_blames_the_common_node():
    # a-b fail, a-c fail, b-c pass: b and c each passed with a third node, both failed with a
    found = triangulate(ran("a", "b", "fail", 0) + ran("a", "c", "fail", 1) + ran("b", "c", "pass", 2))
    assert {n: v.verdict for n, v in found.items()} == {"a": "fail", "b": "pass", "c": "pass"}
    assert found["a"].failed_with == ("b", "c")
    assert "b and c passed with other nodes" in found["a"].reason


def test_blame_needs_two_exonerated_peers():
    # A-B fail; A-C pass; B-D fail: B failed with A (exonerated by C) and D (not yet tried elsewhere)
    base = [ran("a", "b", "fail", 0), ran("a", "c", "pass", 1), ran("b", "d", "fail", 2)]
    assert verdicts(*base) == {"a": "pass", "b": "suspect", "c": "pass", "d": "suspect"}
    # once D passes with E, B has two exonerated failing peers: blamed; D's only failure is B's
    assert verdicts(*base, ran("d", "e", "pass", 3)) == {"a": "pass", "b": "fail", "c": "pass", "d": "pass",
                                                          "e": "pass"}


def test_a_node_failing_only_with_blamed_nodes_is_exonerated():
    # x is blamed (failed with a and b, who pass elsewhere); y failed only with x
    found = triangulate(ran("x", "a", "fail", 0) + ran("x", "b", "fail", 1) + ran("a", "b", "pass", 2)
                        + ran("x", "y", "fail", 3))
    assert found["x"].verdict == "fail"
    assert found["y"].verdict == "pass" and "blamed" in found["y"].reason


def test_a_pass_after_failures_clears_them():
    # a failed twice with nodes that pass elsewhere, then was repaired and passed: pass, nothing held against it
    found = triangulate(ran("a", "b", "fail", 0) + ran("a", "c", "fail", 1) + ran("b", "c", "pass", 2)
                        + ran("a", "d", "pass", 30))
    assert found["a"].verdict == "pass" and found["a"].failed_with == () and found["a"].peer == "d"


def test_the_latest_test_of_two_nodes_counts():
    # a-b failed, later passed together: neither is suspect
    assert verdicts(ran("a", "b", "fail", 0), ran("a", "b", "pass", 5)) == {"a": "pass", "b": "pass"}


def test_only_two_nodes_of_a_model_stay_suspect_with_a_reason():
    found = triangulate(ran("a", "b", "fail", 0) + ran("a", "b", "fail", 200), model_sizes={H100: 2})
    assert {v.verdict for v in found.values()} == {"suspect"}
    assert "no third node of this model (2 nodes)" in found["a"].reason


def test_self_peer_rows_and_empty_history():
    assert triangulate([]) == {}
    assert triangulate([PeerResult("a", "a", "fail", T0)]) == {}


# ---------------------------------------------------------------------------- match_peers
ON = Settings(peer_tests=True)


def cand(name: str, leaf: str | None = None, model: str | None = H100) -> PeerCandidate:
    return PeerCandidate.of(name, model, {LEAF: leaf} if leaf else {}, ON.peer_topology_labels)


def test_matching_is_off_unless_enabled():
    assert match_peers([cand("a"), cand("b")], [], Settings(), T0) == []


def test_never_tested_nodes_pair_within_their_model_and_the_odd_one_waits():
    nodes = [cand("a"), cand("b"), cand("c"), cand("x", model="NVIDIA-A100-SXM4-80GB"), cand("n", model=None)]
    matches = match_peers(nodes, [], ON, T0)
    assert [(m.server, m.client, m.model) for m in matches] == [("a", "b", H100)]
    assert all(isinstance(m, PeerMatch) for m in matches)


def test_pairs_cross_leaves():
    nodes = [cand("a", "s1"), cand("b", "s1"), cand("c", "s2"), cand("d", "s2")]
    matches = match_peers(nodes, [], ON, T0)
    assert {frozenset(m.nodes) for m in matches} == {frozenset({"a", "c"}), frozenset({"b", "d"})}
    assert "across leaf s1 / s2" in matches[0].reason


def test_fresh_nodes_are_not_due_and_stale_ones_are():
    history = ran("a", "b", "pass", 0)
    nodes = [cand("a"), cand("b")]
    assert match_peers(nodes, history, ON, T0 + dt.timedelta(days=6)) == []
    assert len(match_peers(nodes, history, ON, T0 + dt.timedelta(days=7, hours=1))) == 1
    assert match_peers(nodes, history, ON.replace(peer_cadence_days=14), T0 + dt.timedelta(days=7)) == []


def test_a_suspect_goes_first_with_an_untested_known_good_node():
    # a-b failed (both suspect); c and d passed together recently (known-good, not due); e never tested
    history = ran("a", "b", "fail", 0) + ran("c", "d", "pass", 1)
    nodes = [cand(n) for n in "abcde"]
    matches = match_peers(nodes, history, ON.replace(peer_max_per_run=1), T0 + dt.timedelta(hours=2))
    assert len(matches) == 1
    assert matches[0].server == "a" and matches[0].client == "c"  # known-good first, never b again
    assert "suspect" in matches[0].reason
    everything = match_peers(nodes, history, ON, T0 + dt.timedelta(hours=2))
    assert [m.nodes for m in everything] == [("a", "c"), ("b", "d")]  # e waits: odd one out


def test_a_suspect_with_no_untested_partner_waits():
    history = ran("a", "b", "fail", 0)
    assert match_peers([cand("a"), cand("b")], history, ON, T0 + dt.timedelta(hours=1)) == []


def test_at_most_peer_max_per_run():
    nodes = [cand(f"gpu-{i:02d}") for i in range(20)]
    assert len(match_peers(nodes, [], ON, T0)) == 4
    assert len(match_peers(nodes, [], ON.replace(peer_max_per_run=2), T0)) == 2


def test_now_must_be_aware():
    with pytest.raises(ValueError, match="aware"):
        match_peers([], [], ON, dt.datetime(2026, 1, 1))


# ---------------------------------------------------------------------------- settings and payload
def test_the_peer_suite_is_not_a_node_suite():
    with pytest.raises(InvalidSettings, match="fabric_peer runs between two nodes"):
        Settings(tests=["gpu_health", PEER_SUITE])
    assert Settings().peer_tests is False and Settings().peer_max_per_run == 4


def test_peer_tests_round_trip_item_by_item_and_refuse_newer_versions():
    test = PeerTest(match=PeerMatch(server="a", client="b", model=H100, reason="r"), gpus={"a": (8, H100), "b": (8, H100)},
                    planned_at=T0, run_config=RunConfig(settings=ON, configmap="cm", suite_version="sha256:0"))
    wire = PeerTests(tests=[test]).to_xcom()
    back = PeerTests.from_xcom(json.loads(json.dumps(wire)))
    assert back.tests == [test] and back.nodes() == ["a", "b"] and wire[0]["version"] == PeerTest.VERSION
    old = {k: v for k, v in wire[0].items() if k != "version"}  # written before the payload was versioned
    assert PeerTest.from_xcom(old) == test
    with pytest.raises(InvalidPayload, match="version 9"):
        PeerTests.from_xcom([{**wire[0], "version": 9}])
    with pytest.raises(InvalidPayload, match="expected a list"):
        PeerTests.from_xcom({"tests": wire})


def test_a_run_cannot_ask_for_the_peer_suite_as_a_node_suite():
    from cluster_doctor.domain.planning.params import InvalidParams, parse_params

    with pytest.raises(InvalidParams, match="fabric_peer runs between two nodes"):
        parse_params({"tests": ["fabric_peer"]}, Settings(), now=T0)


def test_the_attempt_names_its_peer_from_the_report_or_the_orchestrator():
    from cluster_doctor.domain.attempts import from_suite_result
    from cluster_doctor.domain.results import PodOutcome, to_attempt

    report = {"node": "gpu-001", "suite": PEER_SUITE, "status": "fail", "finished_at": T0.isoformat(), "peer": "gpu-002"}
    assert from_suite_result(report).peer == "gpu-002"
    outcome = PodOutcome(status="fail", reason="low bandwidth", summary={"peer": "gpu-002"}, finished_at=T0)
    assert to_attempt(outcome, node_name="gpu-001", test_name=PEER_SUITE, now=T0).peer == "gpu-002"
    assert to_attempt(outcome, node_name="gpu-001", test_name=PEER_SUITE, peer="gpu-009", now=T0).peer == "gpu-009"
    # the orchestrator knows the peer it paired: its name wins over whatever the report says
    bad = PodOutcome(status="fail", reason="x", summary={"peer": "Not A Node"}, finished_at=T0)
    kept = to_attempt(bad, node_name="gpu-001", test_name=PEER_SUITE, peer="gpu-003", now=T0)
    assert kept.status == "fail" and kept.peer == "gpu-003"


# ---------------------------------------------------------------------------- the simulator
def test_the_simulator_runs_peer_tests_on_two_slots_and_reports_their_staleness(capsys):
    import dataclasses
    import json

    from cluster_doctor.cli import main as cli
    from cluster_doctor.cli import simulate as simulate_cli
    from cluster_doctor.simulator import simulate

    base = simulate.SimConfig(nodes=40, days=10, slots=2, seed=3, occupancy=0.5, max_job_hours=8)
    without, with_peers = simulate.run(base), simulate.run(dataclasses.replace(base, peer_tests=True))
    assert without.peer_worst_staleness_h is None and with_peers.peer_executed > 0
    # every node was peer-tested within about one cadence, on the slots the bundles left: the bundles'
    # coverage is what it was without them (how many pods ran is no invariant: the health sweep fills
    # whatever slots and free nodes are left, so that count moves either way with the seed)
    assert with_peers.peer_never == 0 and with_peers.peer_worst_staleness_h <= 9 * 24
    assert with_peers.never_validated == without.never_validated == 0
    assert with_peers.within_target_share >= without.within_target_share - 0.005
    assert "peer staleness per node: worst over the period" in simulate_cli.render(with_peers)
    assert cli.main(["simulate", "--nodes", "30", "--days", "3", "--peer-tests", "--peer-cadence", "2d",
                     "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config"]["peer_cadence_days"] == 2 and out["peer_executed"] > 0
