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


# ---------------------------------------------------------------------------- speed (fail-slow)
def _gpu(node, gpu, **fields):
    names = {"util": signals.GPU_UTIL, "clock": signals.SM_CLOCK, "max_clock": signals.MAX_SM_CLOCK,
             "reasons": signals.CLOCK_EVENT_FIELDS[0], "old_reasons": signals.CLOCK_EVENT_FIELDS[1]}
    return [signals.Sample(node, names[k], str(gpu), float(v), "NVIDIA H100 80GB HBM3") for k, v in fields.items()]


def test_a_slowing_clock_event_is_suspect_once_whichever_names_the_exporter_uses():
    both = _gpu("n1", 0, util=100, clock=1980, reasons=0x88, old_reasons=0x88)
    found = signals.speed(both, signals.SpeedPolicy(), NOW)
    assert [e.text for e in found] == [
        "GPU 0: hardware slowdown (clock event reasons 0x88, DCGM_FI_DEV_CLOCKS_EVENT_REASONS)",
        "GPU 0: hardware power brake (clock event reasons 0x88, DCGM_FI_DEV_CLOCKS_EVENT_REASONS)"]
    assert {e.source for e in found} == {signals.SPEED} and signals.speed_flagged(found) == {"n1"}
    # idle, application clocks, the software power cap, sync boost, display clocks: never evidence
    assert signals.speed(_gpu("n1", 0, util=100, old_reasons=0x1 | 0x2 | 0x4 | 0x10 | 0x100),
                         signals.SpeedPolicy(), NOW) == []


def test_a_lasting_slowdown_is_raised_again_each_hour_not_each_read():
    seen = _gpu("n1", 0, util=100, reasons=0x40)
    first = signals.speed(seen, signals.SpeedPolicy(), NOW)
    again = signals.speed(seen, signals.SpeedPolicy(), NOW + dt.timedelta(minutes=20))
    later = signals.speed(seen, signals.SpeedPolicy(), NOW + dt.timedelta(hours=1))
    assert [e.key for e in first] == [e.key for e in again] != [e.key for e in later]


def test_an_sm_clock_under_load_against_the_sku_and_the_nodes_other_gpus():
    policy = signals.SpeedPolicy(sku_sm_clock_mhz={"NVIDIA H100 80GB HBM3": 1980})
    seen = [s for g, c in enumerate((1980, 1975, 1700, 1500)) for s in _gpu("n1", g, util=95, clock=c)]
    texts = [e.text for e in signals.speed(seen, policy, NOW)]
    # 1500 < 0.8 x 1980 (the SKU's, from the setting: this exporter has no max clock field) and 24 % below
    # its peers' median; 1700 is 14 % below its peers' 1975
    assert texts == ["GPU 3: SM clock 1500 MHz under load (95 % busy), below 80% of the SKU's 1980 MHz",
                     "GPU 2: SM clock 1700 MHz under load, 14 % below the median 1975 MHz of this node's other loaded GPUs",
                     "GPU 3: SM clock 1500 MHz under load, 24 % below the median 1975 MHz of this node's other loaded GPUs"]
    # a GPU not under load is judged neither against the SKU nor its peers
    idle = [s for g, c in enumerate((1980, 1975, 300)) for s in _gpu("n1", g, util=95 if c > 1000 else 3, clock=c)]
    assert signals.speed(idle, policy, NOW) == []


def test_speed_signals_follow_the_settings():
    policy = SignalPolicy.of(Settings(signal_speed=False, signal_speed_load_util=50))
    assert policy.speed is False and policy.speed_policy.load_util == 50
    with pytest.raises(InvalidSettings):
        Settings(signal_speed_load_util=0)


def test_a_hardware_slowdown_on_an_idle_gpu_is_a_clock_change_not_evidence():
    idle = _gpu("n1", 0, util=0, reasons=0x08 | 0x01)
    assert signals.speed(idle, signals.SpeedPolicy(), NOW) == []
    hot = _gpu("n1", 0, util=0, reasons=0x40)  # a thermal slowdown is the GPU's, busy or not
    assert [e.text for e in signals.speed(hot, signals.SpeedPolicy(), NOW)] == [
        "GPU 0: hardware thermal slowdown (clock event reasons 0x40, DCGM_FI_DEV_CLOCKS_EVENT_REASONS)"]
