"""kube.signals against the Kubernetes API emulator (and a real local HTTP server answering Prometheus' query
API): one test per signal, each read through discovery's lists or its own one call."""

from __future__ import annotations

import datetime as dt

import pytest
from cluster_doctor.domain import signals
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.signals import NodeChange
from cluster_doctor.kube import discovery
from cluster_doctor.kube import signals as kube_signals
from k8s_emulator import EmulatorProcess

from tests.support.dcgm_exporter import Prometheus, serving


@pytest.fixture(scope="module")
def _emu():
    with EmulatorProcess(settings={"scheduler_interval": 0.05, "startup_delay": 0.05}) as emu:
        yield emu


@pytest.fixture
def emu(_emu):
    _emu.reset()
    for name in ("gpu-001", "gpu-002"):
        _emu.add_gpu_node(name, 8)
    return _emu


def read(emu, settings=Settings(), changes=(), **kwargs) -> kube_signals.Reading:
    found = discovery.discover(emu.core_v1(), settings)
    return kube_signals.read(emu.core_v1(), settings, found, changes, **kwargs)


def evidence(reading) -> list[tuple[str, str]]:
    return [(e.node_name, e.source) for e in reading.evidence]


def test_nothing_is_evidence_on_a_quiet_cluster(emu):
    reading = read(emu)
    assert reading.evidence == [] and reading.problems == []
    assert reading.api_calls == 2  # the events and the failed pods: one list each


def test_allocatable_below_capacity(emu):
    emu.patch_node("gpu-001", allocatable_gpus=7)
    reading = read(emu)
    assert [(e.node_name, e.source, e.text) for e in reading.evidence] == [
        ("gpu-001", signals.ALLOCATABLE, "7 of its 8 GPUs allocatable (capacity)")]
    assert read(emu, Settings(signal_gpu_allocatable=False)).evidence == []


def test_a_condition_another_tool_set(emu):
    emu.patch_node("gpu-002", conditions=[{"type": "SysLogsXIDError", "status": "True", "reason": "SysLogsXIDErrorIsNotHealthy",
                                           "message": "ErrorCode:79 GPU has fallen off the bus"}])
    emu.patch_node("gpu-001", conditions=[{"type": "ClusterDoctorHealthy", "status": "False", "reason": "XID_MEMORY_ERROR"}])
    [found] = read(emu).evidence  # our own ClusterDoctorHealthy=False on gpu-001 never feeds back
    assert (found.node_name, found.source) == ("gpu-002", signals.CONDITION) and found.at is not None
    assert "ErrorCode:79" in found.text


def test_an_event_on_the_node_with_a_configured_reason(emu):
    emu.node_event("gpu-001", "XidHardwareFailure", "NVRM: Xid (PCI:0000:b9:00): 79, pid=<unknown>")
    emu.node_event("gpu-002", "NodeHasSufficientMemory", "kubelet")
    emu.patch_node("gpu-002", reboot=True)  # the kubelet's Rebooted event is not a configured reason
    assert evidence(read(emu)) == [("gpu-001", signals.EVENT)]
    assert read(emu, Settings(signal_event_reasons=[])).api_calls == 1  # not read at all


def test_user_pods_that_failed_with_a_gpu_error(emu):
    ok = emu.add_user_pod("gpu-001", name="done-0")
    emu.complete_pod("default", ok["metadata"]["name"], 1, message="ValueError: nan loss")  # not a GPU error
    pod = emu.add_user_pod("gpu-002", name="trainer-0")
    emu.complete_pod("default", pod["metadata"]["name"], 1,
                     message="RuntimeError: CUDA error: uncorrectable ECC error encountered")
    emu.add_user_pod("gpu-001", name="trainer-1", phase="Failed")  # UnexpectedAdmissionError
    reading = read(emu)
    assert sorted(evidence(reading)) == [("gpu-001", signals.POD_FAILURE), ("gpu-002", signals.POD_FAILURE)]
    text = {e.node_name: e.text for e in reading.evidence}
    assert "default/trainer-0: Error (exit 1): RuntimeError: CUDA error: uncorrectable ECC error" in text["gpu-002"]
    assert "UnexpectedAdmissionError" in text["gpu-001"]
    assert evidence(read(emu, Settings(signal_pod_failures=2))) == []


def test_new_rebooted_and_uncordoned_nodes_come_from_the_inventory(emu):
    changes = [NodeChange("gpu-001", "reboot", "a" * 36, "b" * 36), NodeChange("gpu-002", "uncordoned"),
               NodeChange("gpu-999", "new")]  # not a GPU node discovery saw: left out
    assert evidence(read(emu, changes=changes)) == [("gpu-001", signals.REBOOT), ("gpu-002", signals.UNCORDONED)]


def test_discovery_reads_the_boot_id_and_our_quarantine_label(emu):
    emu.patch_node("gpu-002", labels={"cluster-doctor.io/health": "fail"})
    before = discovery.discover(emu.core_v1(), Settings()).facts
    emu.patch_node("gpu-001", reboot=True)
    after = discovery.discover(emu.core_v1(), Settings()).facts
    assert before["gpu-001"].boot_id != after["gpu-001"].boot_id and after["gpu-001"].boot_id
    assert (after["gpu-001"].quarantined, after["gpu-002"].quarantined) == (False, True)


@pytest.fixture
def prometheus():
    with serving() as url:
        yield url


def test_dcgm_metrics_through_prometheus(emu, prometheus):
    Prometheus.answers = {
        "DCGM_FI_DEV_XID_ERRORS": [({"gpu": "3", "UUID": "GPU-1", "Hostname": "gpu-001"}, "79")],
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": [({"gpu": "0", "Hostname": "gpu-002"}, "1")],
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": [({"gpu": "1", "Hostname": "cpu-node"}, "2")],  # not a GPU node
    }
    now = dt.datetime.now(dt.UTC)
    reading = read(emu, Settings(prometheus_url=prometheus, signal_window_minutes=10), now=now)
    assert sorted((e.node_name, e.text) for e in reading.evidence) == [
        ("gpu-001", "Xid 79 on GPU 3 (DCGM_FI_DEV_XID_ERRORS)"),
        ("gpu-002", "row remapping failed on GPU 0 (DCGM_FI_DEV_ROW_REMAP_FAILURE)")]
    asked = {a["query"] for a in Prometheus.asked}
    assert "DCGM_FI_DEV_XID_ERRORS > 0 and changes(DCGM_FI_DEV_XID_ERRORS[600s]) > 0" in asked
    # one instant query per field, and one for every speed field together
    assert len(asked - {kube_signals.speed_query()}) == len(Settings().signal_dcgm_metrics)
    assert kube_signals.speed_query() in asked


def test_a_source_that_cannot_be_read_is_named_and_the_others_count(emu, prometheus):
    emu.patch_node("gpu-001", allocatable_gpus=6)
    reading = read(emu, Settings(prometheus_url=prometheus, signal_dcgm_metrics=["BROKEN"]))
    assert evidence(reading) == [("gpu-001", signals.ALLOCATABLE)]
    assert reading.problems == ["prometheus (Prometheus answered bad_data: parse error)"]
    emu.configure(forbidden=["list events"])
    try:
        reading = read(emu)
    finally:
        emu.configure(forbidden=[])
    assert evidence(reading) == [("gpu-001", signals.ALLOCATABLE)] and reading.problems[0].startswith("events (")


def test_the_shipped_rbac_is_enough_to_read_every_kubernetes_source(emu):
    import yaml

    from tests.conftest import REPO

    docs = yaml.safe_load_all((REPO / "include" / "k8s" / "rbac-cluster.yaml").read_text())
    rules = [rule for doc in docs if doc and doc["kind"] == "ClusterRole" for rule in doc["rules"]]
    emu.node_event("gpu-001", "XidHardwareFailure", "Xid 79")
    emu.configure(rbac_rules=rules)
    try:
        reading = read(emu)
    finally:
        emu.configure(rbac_rules=None)
    assert reading.problems == [] and evidence(reading) == [("gpu-001", signals.EVENT)]
