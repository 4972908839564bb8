"""The peers task group's bodies: claims taken beside the run's bundles without dropping
them, a match whose node another run holds gives its other node back, a side that never reported is
recorded skipped naming its peer, a failed test blames neither node."""

import datetime as dt

import psycopg
import pytest
from cluster_doctor.airflow.tasks import peers
from cluster_doctor.domain.attempts import Attempt
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain import payloads
from cluster_doctor.domain.payloads import RunConfig
from cluster_doctor.domain.peers import PeerMatch
from cluster_doctor.store import claims, database

DAG = "continuous_validation"
NOW = dt.datetime(2026, 11, 25, 12, tzinfo=dt.UTC)


class Store:
    def __init__(self, dsn):
        self.connect = database.params_connector(dsn)


def held(dsn):
    with psycopg.connect(**dsn) as conn:
        return conn.execute("SELECT node_name, test_name, run_id FROM validation_claims ORDER BY node_name").fetchall()


def match(server, client):
    return PeerMatch(server=server, client=client, model="H100", reason="never peer-tested")


def test_peer_claims_keep_the_bundles_claims_and_a_half_held_match_gives_its_other_node_back(db_dsn):
    """The peers' nodes are claimed beside the bundles' (keep_others): the bundle claim prioritize made
    stays as it was, whether or not its validation already released it."""
    store, settings = Store(db_dsn), Settings()
    claims.claim(store.connect, [("gpu-001", "gpu_health", 600.0)], dag_id=DAG, run_id="r1", limit=1)  # prioritize
    claims.claim(store.connect, [("gpu-005", "dl_unit", 600.0)], dag_id=DAG, run_id="other", limit=1)

    kept = peers._claimed([match("gpu-002", "gpu-003"), match("gpu-004", "gpu-005")], settings, store,
                               dag_id=DAG, run_id="r1", run_ended=None)

    assert kept == [match("gpu-002", "gpu-003")]
    assert held(db_dsn) == [("gpu-001", "gpu_health", "r1"), ("gpu-002", "fabric_peer", "r1"),
                            ("gpu-003", "fabric_peer", "r1"), ("gpu-005", "dl_unit", "other")]
    tests = payloads.PeerTests(tests=[payloads.PeerTest(
        match=kept[0], gpus={"gpu-002": (8, "H100"), "gpu-003": (8, "H100")}, planned_at=NOW,
        run_config=RunConfig(settings=settings, configmap="cm", suite_version="sha256:0"))])
    assert peers.finish(tests, store, dag_id=DAG, run_id="r1") == "released gpu-002, gpu-003"
    assert [r[0] for r in held(db_dsn)] == ["gpu-001", "gpu-005"]


def test_a_side_that_never_reported_is_recorded_skipped_naming_its_peer():
    settings = Settings()
    tests = payloads.PeerTests(tests=[payloads.PeerTest(
        match=match("gpu-002", "gpu-003"), gpus={"gpu-002": (8, "H100"), "gpu-003": (8, "H100")}, planned_at=NOW,
        run_config=RunConfig(settings=settings, configmap="cm", suite_version="sha256:0"))])
    pushed = [[{"node_name": "gpu-002", "test_name": "fabric_peer", "status": "pass", "finished_at": NOW.isoformat(),
                "peer": "gpu-003", "dag_id": DAG, "run_id": "r1"}]]

    rows = peers.reported(pushed, tests, dag_id=DAG, run_id="r1", now=NOW)

    assert [(r["node_name"], r["status"], r["peer"]) for r in rows] == [("gpu-002", "pass", "gpu-003"),
                                                                        ("gpu-003", "skipped", "gpu-002")]
    assert rows[1]["reason"].startswith("the validation task did not report")
    assert peers.reported(None, None, dag_id=DAG, run_id="r1") == []


def test_a_failed_peer_test_fails_its_task_blaming_neither_node_and_a_missed_one_skips():
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    def sides(status, reason=None):
        return [Attempt.from_dict({"node_name": n, "test_name": "fabric_peer", "status": status, "peer": p,
                                   "reason": reason, "finished_at": NOW.isoformat()})
                for n, p in (("gpu-002", "gpu-003"), ("gpu-003", "gpu-002"))]

    assert peers.conclude(sides("pass")) == "gpu-002 (peer gpu-003): PASS; gpu-003 (peer gpu-002): PASS"
    with pytest.raises(AirflowFailException, match="both nodes suspect, neither blamed, until a third node"):
        peers.conclude(sides("fail", "PEER_IB_BW_LOW"))
    with pytest.raises(AirflowSkipException, match="TIMEOUT"):
        peers.conclude(sides("timeout", "the client pod was still Pending"))
