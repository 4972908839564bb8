"""domain.signals: what each source's observation counts as evidence."""

from __future__ import annotations

import datetime as dt

import pytest
from cluster_doctor.domain import signals
from cluster_doctor.domain.config import InvalidSettings, Settings
from cluster_doctor.domain.signals import ConditionSeen, EventSeen, NodeChange, PodFailure, SignalPolicy

NOW = dt.datetime(2026, 11, 28, 12, 0, tzinfo=dt.UTC)
POLICY = SignalPolicy.of(Settings())


def test_a_watched_condition_at_its_unhealthy_status_is_evidence_keyed_by_its_transition():
    since = NOW - dt.timedelta(minutes=3)
    seen = [ConditionSeen("SysLogsXIDError", "True", "XidError", "Xid 79 on GPU 3", since),
            ConditionSeen("GpuMemWatch", "False", "Healthy", "", since),  # healthy status
            ConditionSeen("Ready", "True"),  # not watched
            ConditionSeen("ClusterDoctorHealthy", "False", "XID_MEMORY_ERROR")]  # ours never feeds back
    found = signals.conditions("gpu-001", seen, POLICY)
    assert [(e.source, e.key, e.at) for e in found] == [
        (signals.CONDITION, f"SysLogsXIDError=True@{since.isoformat(timespec='seconds')}", since)]
    assert found[0].text == "SysLogsXIDError=True (XidError): Xid 79 on GPU 3"


def test_our_own_condition_cannot_be_configured_as_a_signal():
    with pytest.raises(InvalidSettings, match="ClusterDoctorHealthy is the condition Cluster Doctor writes"):
        Settings(signal_node_conditions={"ClusterDoctorHealthy": "False"})


def test_an_event_counts_only_with_a_configured_reason_within_the_window():
    seen = [EventSeen("gpu-001", "u1", "XidHardwareFailure", "NVRM: Xid (PCI:0000:b9:00): 79", NOW, 2, "kernel-monitor"),
            EventSeen("gpu-002", "u2", "XidHardwareFailure", "old", NOW - dt.timedelta(hours=1)),
            EventSeen("gpu-003", "u3", "NodeReady", "kubelet", NOW)]
    found = signals.events(seen, POLICY, NOW)
    assert [e.node_name for e in found] == ["gpu-001"]
    assert found[0].text == "XidHardwareFailure from kernel-monitor: NVRM: Xid (PCI:0000:b9:00): 79 (×2)"


def test_pod_failures_count_per_node_within_the_window_and_need_a_gpu_error():
    def failure(node, uid, reason, message, minutes):
        return PodFailure(node, f"ml/{uid}", uid, reason, message, NOW - dt.timedelta(minutes=minutes), 1)

    seen = [failure("gpu-001", "a", "Error", "RuntimeError: CUDA error: uncorrectable ECC error encountered", 2),
            failure("gpu-002", "b", "Error", "ValueError: bad batch", 2),  # not a GPU error
            failure("gpu-003", "c", "UnexpectedAdmissionError", "Allocate failed", 40)]  # outside the window
    assert [e.node_name for e in signals.pod_failures(seen, POLICY, NOW)] == ["gpu-001"]
    two = SignalPolicy.of(Settings(signal_pod_failures=2))
    assert signals.pod_failures(seen, two, NOW) == []
    both = seen + [failure("gpu-001", "d", "Error", "Xid 94", 1)]
    found = signals.pod_failures(both, two, NOW)
    assert [(e.node_name, e.key) for e in found] == [("gpu-001", "d")]  # the newest names it
    assert found[0].text.startswith("2 user pod(s) failed with a GPU error in 15 min, last ml/d: Error (exit 1)")


def test_a_dcgm_field_is_keyed_by_its_value_so_it_is_raised_again_only_when_it_moves():
    found = signals.dcgm([signals.Sample("gpu-001", "DCGM_FI_DEV_XID_ERRORS", "3", 79.0)])
    assert [(e.key, e.text) for e in found] == [
        ("DCGM_FI_DEV_XID_ERRORS/gpu3=79", "Xid 79 on GPU 3 (DCGM_FI_DEV_XID_ERRORS)")]


def test_node_changes_follow_the_setting():
    changes = [NodeChange("gpu-001", "new"), NodeChange("gpu-002", "reboot", "aaaaaaaaaa", "bbbbbbbbbb"),
               NodeChange("gpu-003", "uncordoned")]
    assert [(e.node_name, e.source, e.key) for e in signals.node_changes(changes, POLICY, NOW)] == [
        ("gpu-001", signals.NEW_NODE, "new"), ("gpu-002", signals.REBOOT, "bbbbbbbbbb"),
        ("gpu-003", signals.UNCORDONED, NOW.isoformat(timespec="seconds"))]
    only_reboots = SignalPolicy.of(Settings(signal_node_changes=["reboot"]))
    assert [e.source for e in signals.node_changes(changes, only_reboots, NOW)] == [signals.REBOOT]


def test_a_suspect_and_a_failing_node_say_since_when():
    suspect = signals.Suspect("gpu-001", NOW, ("event: XidHardwareFailure", "reboot: rebooted"))
    assert suspect.describe() == "suspect since 2026-11-28 12:00 UTC: event: XidHardwareFailure; reboot: rebooted"
    failing = signals.FailingSince("gpu-001", NOW, "event: XidHardwareFailure", NOW - dt.timedelta(days=1))
    assert failing.describe() == ("failing since 2026-11-28 12:00 UTC (event: XidHardwareFailure); "
                                  "last pass 2026-11-27 12:00 UTC")


def test_settings_refuse_a_bad_pattern_or_url():
    with pytest.raises(InvalidSettings, match="not a regular expression"):
        Settings(signal_pod_failure_patterns=["CUDA error: ("])
    with pytest.raises(InvalidSettings, match="not an http"):
        Settings(prometheus_url="prometheus:9090")
    assert Settings(prometheus_url="http://prom:9090/").prometheus_url == "http://prom:9090"
