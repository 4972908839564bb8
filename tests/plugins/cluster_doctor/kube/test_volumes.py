"""The once-per-run check of the claims validation pods mount, against the Kubernetes API emulator with
the real client: which claim states stop the pods (and say why, once), and which let them run."""

from __future__ import annotations

import datetime as dt
import logging

import pytest
import yaml
from airflow.sdk.exceptions import AirflowFailException
from cluster_doctor.airflow import tasks
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.payloads import Discovered, Latest
from cluster_doctor.kube import podspec, volumes
from cluster_doctor.reports import summary as report
from kubernetes import client

from tests.conftest import REPO

NS = "cluster-doctor"
PVC = "cluster-doctor-results"
TESTS = ["gpu_health", "dl_unit", "nccl_loopback", "storage_fio"]
NOW = dt.datetime(2026, 11, 22, 10, 0, tzinfo=dt.UTC)


pytestmark = pytest.mark.emulator(pvc=True)


@pytest.fixture
def cluster(validation_cluster):
    """A fresh cluster: the validation namespace, where the emulator's results claim is Bound."""
    return validation_cluster


@pytest.fixture
def v1(cluster):
    return cluster.core_v1()


@pytest.fixture
def storage(cluster):
    return client.StorageV1Api(cluster.api_client())


def replace_claim(v1, storage_class: str | None = None) -> None:
    """The example claim of include/k8s/pvc.yaml, with this class (None: as shipped, no class)."""
    v1.delete_namespaced_persistent_volume_claim(PVC, NS)
    claim = yaml.safe_load((REPO / "include" / "k8s" / "pvc.yaml").read_text())
    if storage_class is not None:
        claim["spec"]["storageClassName"] = storage_class
    v1.create_namespaced_persistent_volume_claim(NS, claim)
    assert v1.read_namespaced_persistent_volume_claim(PVC, NS).status.phase == "Pending"


def storage_class(storage, name: str, provisioner: str, mode: str | None = None) -> None:
    storage.create_storage_class({"metadata": {"name": name}, "provisioner": provisioner,
                                  **({"volumeBindingMode": mode} if mode else {})})


def run_discover(cluster, settings: Settings | None = None) -> Discovered:
    cluster.add_gpu_node("gpu-001")
    cluster.add_gpu_node("gpu-002")
    return tasks.discover({}, settings or Settings(), cluster.core_v1(), now=NOW)


# both nodes, each with every enabled suite (a chosen node runs its whole bundle)
EVERY_PAIR = 2 * len(Settings().tests)


def planned_pairs(discovered: Discovered) -> list[tuple[str, str]]:
    planned = tasks.prioritize(discovered, Latest(), now=NOW)
    return [(p.node_name, p.test_name) for p in planned.pairs]


def verdict_of(discovered: Discovered) -> str | None:
    planned = tasks.prioritize(discovered, Latest(), now=NOW)
    summary = report.run_summary(discovered, planned, [], [], now=NOW)
    return report.verdict(summary)


# ------------------------------------------------------------------------- claims that let pods run
def test_a_bound_claim_lets_every_pair_run_after_one_read(cluster):
    cluster.reset_counters()
    discovered = run_discover(cluster)
    assert discovered.volumes.problem is None and discovered.volumes.blocked_tests == []
    (claim,) = discovered.volumes.claims
    assert claim.usable and claim.certain and claim.detail.startswith("is Bound to ")
    # one read for the run, whatever the number of tests and nodes
    assert cluster.counters()["by_verb_resource"].get("get persistentvolumeclaims") == 1
    assert len(planned_pairs(discovered)) == EVERY_PAIR
    assert verdict_of(discovered) is None


def test_a_pending_claim_waiting_for_its_first_consumer_lets_pods_run(cluster, v1, storage):
    storage_class(storage, "local-nvme", "rancher.io/local-path", "WaitForFirstConsumer")
    replace_claim(v1, "local-nvme")
    discovered = run_discover(cluster)
    assert discovered.volumes.problem is None
    assert "Pending until its first pod (StorageClass local-nvme is WaitForFirstConsumer)" in \
        discovered.volumes.claims[0].detail
    assert len(planned_pairs(discovered)) == EVERY_PAIR


def test_an_unreadable_storage_class_means_cannot_tell_and_pods_run_with_a_warning(cluster, v1, storage, caplog):
    storage_class(storage, "standard", "kubernetes.io/no-provisioner")
    replace_claim(v1, "standard")
    cluster.configure(forbidden=["get storageclasses.storage.k8s.io"])
    with caplog.at_level(logging.WARNING, logger="cluster_doctor.kube.volumes"):
        discovered = run_discover(cluster)
    (claim,) = discovered.volumes.claims
    assert claim.usable and not claim.certain
    assert "StorageClass standard could not be read (Kubernetes API 403 Forbidden)" in claim.detail
    assert "cannot tell" in caplog.text and f"PVC {NS}/{PVC}" in caplog.text
    assert len(planned_pairs(discovered)) == EVERY_PAIR and verdict_of(discovered) is None


def test_pods_that_mount_no_claim_run_whatever_the_claim(cluster, v1, tmp_path):
    template = podspec.load_template(podspec.pod_template_file(Settings()))
    template["spec"]["volumes"] = [v for v in template["spec"]["volumes"] if v["name"] != "results"]
    for c in template["spec"]["containers"]:
        c["volumeMounts"] = [m for m in c["volumeMounts"] if m["name"] != "results"]
    path = tmp_path / "pod.yaml"
    path.write_text(yaml.safe_dump(template))
    v1.delete_namespaced_persistent_volume_claim(PVC, NS)
    cluster.reset_counters()
    discovered = run_discover(cluster, Settings(pod_template_file=str(path)))
    assert discovered.volumes.model_dump() == {"claims": [], "blocked_tests": [], "problem": None, "codes": []}
    assert "get persistentvolumeclaims" not in cluster.counters()["by_verb_resource"]
    assert len(planned_pairs(discovered)) == EVERY_PAIR


# ------------------------------------------------------------------------- claims that stop every pod
def assert_blocked(discovered: Discovered, detail: str, code: str) -> str:
    volumes_ = discovered.volumes
    assert volumes_.blocked_tests == TESTS
    assert volumes_.problem == f"PVC {NS}/{PVC} {detail}"
    assert volumes_.codes == [code]
    assert planned_pairs(discovered) == []  # no pod, and nothing per pair to record
    problem = verdict_of(discovered)
    assert problem == f"PVC {NS}/{PVC} {detail}: no validation pod of {', '.join(TESTS)} was created"
    assert "\n" not in problem
    return problem


def test_a_missing_claim_stops_every_pod_with_one_reason(cluster, v1, caplog):
    v1.delete_namespaced_persistent_volume_claim(PVC, NS)
    with caplog.at_level(logging.INFO):
        discovered = run_discover(cluster)
    # said once in discover's log, with what it stops
    assert [r.getMessage() for r in caplog.records if "does not exist" in r.getMessage()] == [
        f"PVC {NS}/{PVC} does not exist (create it: include/k8s/pvc.yaml, or set pvc): no validation pod of "
        f"{', '.join(TESTS)} will be created"]
    problem = assert_blocked(discovered, "does not exist (create it: include/k8s/pvc.yaml, or set pvc)",
                             volumes.MISSING)
    # and the run fails with it (the verdict task's exception)
    with pytest.raises(AirflowFailException, match="does not exist"):
        tasks.verdict(report.run_summary(discovered, tasks.prioritize(discovered, Latest(), now=NOW), [], [], now=NOW))
    summary = report.run_summary(discovered, tasks.prioritize(discovered, Latest(), now=NOW), [], [], now=NOW)
    assert summary.to_xcom()["blocked"] == {"tests": TESTS, "reason": problem.split(": no validation pod")[0],
                                            "codes": ["PVC_MISSING"]}
    assert f"NOT RUN: {problem}" in report.render(summary)


def test_a_pending_claim_of_an_immediate_class_without_provisioner_stops_every_pod(cluster, v1, storage):
    storage_class(storage, "standard", "kubernetes.io/no-provisioner")
    replace_claim(v1, "standard")
    assert_blocked(run_discover(cluster), "is not bound (phase Pending, StorageClass standard has no provisioner "
                                          "and no matching PersistentVolume)", volumes.NOT_BOUND)


def test_a_pending_claim_of_an_immediate_class_that_did_not_provision_stops_every_pod(cluster, v1, storage):
    storage_class(storage, "nfs-csi", "nfs.csi.k8s.io", "Immediate")
    replace_claim(v1, "nfs-csi")
    assert_blocked(run_discover(cluster), "is not bound (phase Pending, StorageClass nfs-csi binds immediately: "
                                          "provisioner nfs.csi.k8s.io has not provisioned a volume)", volumes.NOT_BOUND)


def test_the_example_claim_with_no_class_and_a_claim_of_a_missing_class_stop_every_pod(cluster, v1):
    replace_claim(v1)  # include/k8s/pvc.yaml as shipped, on a cluster with no default class
    assert_blocked(run_discover(cluster), "is not bound (phase Pending, no StorageClass: only a pre-created "
                                          "PersistentVolume can bind it, and none matches)", volumes.NOT_BOUND)
    replace_claim(v1, "nfs-csi")
    assert_blocked(tasks.discover({}, Settings(), v1, now=NOW),
                   "is not bound (phase Pending, StorageClass nfs-csi does not exist)", volumes.NOT_BOUND)


def test_a_lost_claim_stops_every_pod(cluster, v1):
    v1.patch_namespaced_persistent_volume_claim_status(PVC, NS, {"status": {"phase": "Lost"}})
    assert_blocked(run_discover(cluster), "is Lost (its PersistentVolume pvc-dir-cluster-doctor-results is gone): "
                                          "recreate the claim", volumes.LOST)


def test_a_forbidden_claim_read_is_a_clear_error_not_a_pass(cluster):
    cluster.configure(forbidden=["get persistentvolumeclaims"])
    assert_blocked(run_discover(cluster), "could not be read (Kubernetes API 403 Forbidden): grant get on "
                                          f"persistentvolumeclaims in namespace {NS} (include/k8s/rbac-namespace.yaml)",
                   volumes.UNREADABLE)


# ------------------------------------------------------------------------- the judgement itself (pure)
def test_a_terminating_claim_and_the_beta_class_annotation():
    terminating = {"metadata": {"deletionTimestamp": "2026-11-22T10:00:00Z"}, "status": {"phase": "Bound"}}
    assert volumes.judge(NS, PVC, terminating).code == volumes.TERMINATING
    beta = {"metadata": {"annotations": {volumes.BETA_CLASS_ANNOTATION: "wffc"}},
            "spec": {"storageClassName": "other"}, "status": {"phase": "Pending"}}
    assert volumes.storage_class_name(beta) == "wffc"
    assert volumes.judge(NS, PVC, beta, {"provisioner": "x", "volumeBindingMode": "WaitForFirstConsumer"}).usable
