"""checkers/thermal_violation.py: a GPU's thermal violation time judged by its growth since the previous
gpu_health sample, against the wall time between the two; and gpu_state's NVML query behind it."""

from __future__ import annotations

import datetime as dt

import pynvml
from cluster_doctor_suites import gpu_state
from cluster_doctor_suites.checkers import thermal_violation as tv
from tests.include.suites.fake_nvml import FakeNVML

S = 10**9
THEN = dt.datetime(2026, 3, 2, 9, 0, tzinfo=dt.timezone.utc)  # any two times an hour apart
NOW = THEN + dt.timedelta(hours=1)
BOOT = "8a1f5a0e-2f1c-4c55-9a8e-0c1f7f4a2b11"


def gpu(index, uuid, ns, pci=None):
    return tv.ViolationSample(index, uuid, pci or f"00000000:{0x18 + index:02X}:00.0", ns)


def previous(*samples, boot=BOOT, at=THEN):
    return tv.to_json(list(samples), boot, at, "NVML")


def judge(now, prev, boot=BOOT, share=0.02, at=NOW):
    return tv.to_check(now, tv.baseline(prev, "" if prev else "no previous gpu_health sample (x)", boot), at, share)


def test_growth_over_the_share_of_the_elapsed_time_fails_with_both_numbers():
    c = judge(gpu(0, "GPU-a", 305 * S), previous(gpu(0, "GPU-a", 5 * S)))
    assert (c.name, c.status, c.code, c.action, c.device) == (
        "thermal_violation", "fail", "THERMAL_VIOLATION_UNDER_LOAD", "drain_and_service", "cuda:0")
    assert c.value == 300 and c.unit == "s" and c.threshold == "<= 72 s (2 % of 3600 s)"
    assert "300 s of the 3600 s" in c.message and "8.333 %" in c.message


def test_growth_within_the_share_warns_and_none_passes():
    c = judge(gpu(0, "GPU-a", 25 * S), previous(gpu(0, "GPU-a", 5 * S)))
    assert (c.status, c.code, c.action, c.value) == ("warn", "THERMAL_VIOLATION_GROWING", "none", 20)
    c = judge(gpu(0, "GPU-a", 72 * S), previous(gpu(0, "GPU-a", 0)))
    assert c.status == "warn", "exactly the share is not more than it"
    c = judge(gpu(0, "GPU-a", 5 * S), previous(gpu(0, "GPU-a", 5 * S)))
    assert (c.status, c.value) == ("pass", 0) and "no thermal throttling in the 3600 s" in c.message


def test_the_share_is_the_setting():
    c = judge(gpu(0, "GPU-a", 25 * S), previous(gpu(0, "GPU-a", 5 * S)), share=0.005)
    assert c.status == "fail"


def test_no_previous_sample_is_a_skip_with_its_code_never_a_pass():
    c = judge(gpu(0, "GPU-a", 5 * S), None)
    assert (c.status, c.code, c.action) == ("skip", "THERMAL_VIOLATION_NO_BASELINE", "none")
    assert "no previous gpu_health sample" in c.message and "5000000000 ns" in c.message


def test_a_reboot_in_between_is_no_baseline_even_when_the_counter_is_higher():
    c = judge(gpu(0, "GPU-a", 900 * S), previous(gpu(0, "GPU-a", 5 * S), boot="another-boot"))
    assert (c.status, c.code) == ("skip", "THERMAL_VIOLATION_REBOOTED")
    assert "rebooted since the previous sample of 2026-03-02T09:00:00.000Z" in c.message


def test_a_counter_lower_than_before_is_a_reset_not_a_pass():
    c = judge(gpu(0, "GPU-a", 2 * S), previous(gpu(0, "GPU-a", 5 * S)))
    assert (c.status, c.code) == ("skip", "THERMAL_VIOLATION_COUNTER_RESET")
    assert "driver was reloaded or the GPU reset" in c.message


def test_a_gpu_is_matched_by_uuid_across_a_changed_index_order():
    """GPU-b was cuda:1 and is cuda:0 now (and GPU-a the other way round): each judged by its own past."""
    before = previous(gpu(0, "GPU-a", 5 * S, "00000000:18:00.0"), gpu(1, "GPU-b", 7 * S, "00000000:19:00.0"))
    now_b = gpu(0, "GPU-b", 407 * S, "00000000:19:00.0")
    now_a = gpu(1, "GPU-a", 5 * S, "00000000:18:00.0")
    c = judge(now_b, before)
    assert (c.device, c.status, c.value) == ("cuda:0", "fail", 400)
    c = judge(now_a, before)
    assert (c.device, c.status) == ("cuda:1", "pass")


def test_a_replaced_gpu_in_the_same_slot_has_no_baseline():
    """A new UUID at the old PCI bus id is another GPU: its counter is not the old one's growth."""
    c = judge(gpu(0, "GPU-new", 1 * S, "00000000:18:00.0"), previous(gpu(0, "GPU-old", 0, "00000000:18:00.0")))
    assert (c.status, c.code) == ("skip", "THERMAL_VIOLATION_NO_BASELINE") and "GPU-new" in c.message


def test_without_uuids_the_pci_bus_id_matches_never_the_index_alone():
    before = previous(gpu(0, None, 5 * S, "00000000:18:00.0"), gpu(1, None, 5 * S, "00000000:19:00.0"))
    c = judge(gpu(0, None, 305 * S, "00000000:19:00.0"), before)
    assert (c.status, c.value) == ("fail", 300)
    c = judge(tv.ViolationSample(0, None, None, 305 * S), before)
    assert (c.status, c.code) == ("skip", "THERMAL_VIOLATION_NO_BASELINE")


def test_not_reported_is_a_skip_saying_why():
    c = tv.to_check(tv.observe({"index": 2, "uuid": "GPU-c", "thermal_violation_ns": None}, "NVML"),
                    tv.baseline(None, "none", BOOT), NOW, 0.02)
    assert (c.status, c.code, c.device) == ("skip", "THERMAL_VIOLATION_UNAVAILABLE", "cuda:2")
    assert "not supported" in c.message
    c = tv.to_check(tv.observe({"index": 0}, "nvidia-smi"), tv.baseline(None, "none", BOOT), NOW, 0.02)
    assert c.code == "THERMAL_VIOLATION_UNAVAILABLE" and "came from nvidia-smi" in c.message


def test_a_previous_sample_not_before_now_is_no_baseline():
    c = judge(gpu(0, "GPU-a", 9 * S), previous(gpu(0, "GPU-a", 5 * S), at=NOW + dt.timedelta(seconds=5)))
    assert (c.status, c.code) == ("skip", "THERMAL_VIOLATION_NO_BASELINE")


def test_a_stored_sample_is_usable_only_with_a_time_and_a_counter():
    assert tv.usable(previous(gpu(0, "GPU-a", 0)))
    assert not tv.usable(previous(tv.ViolationSample(0, "GPU-a", None, None, "not supported")))
    assert not tv.usable({"gpus": [{"uuid": "GPU-a", "ns": 1}]})


# ------------------------------------------------------------------ gpu_state: the NVML query
def test_nvidia_ml_py_names_the_policy_and_the_struct_as_the_code_uses_them():
    assert pynvml.NVML_PERF_POLICY_THERMAL == 1
    assert [f for f, _ in pynvml.c_nvmlViolationTime_t._fields_] == ["referenceTime", "violationTime"]


def test_collect_nvml_reads_the_thermal_counter_and_not_supported_is_none():
    nv = FakeNVML(sick=False, count=2)
    nv.thermal_ns = {0: 12 * S, 1: 0}
    nv.thermal_unsupported = {1}
    gpus = gpu_state.collect_nvml(nv)["gpus"]
    assert [g["thermal_violation_ns"] for g in gpus] == [12 * S, None]
    assert gpus[1]["field_errors"] == [], "NOT_SUPPORTED is no driver error"
    assert [tv.observe(g, "NVML").ns for g in gpus] == [12 * S, None]
