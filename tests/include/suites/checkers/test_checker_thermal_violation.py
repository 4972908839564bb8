"""checkers/thermal_violation.py: a GPU's thermal violation time judged by its growth since the previous
gpu_health sample, against the wall time between the two; and gpu_state's NVML query behind it."""

from __future__ import annotations

import datetime as dt

import pynvml
from cluster_doctor_suites import gpu_state
from cluster_doctor_suites.checkers import thermal_violation as tv
from tests.support.fake_nvml import FakeNVML

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


# ------------------------------------------------------------------ a failure carried forward in its window
def failed_then(*now_gpus, boot=BOOT, at=NOW):
    """The sample of a run (at NOW) that failed GPU-a (300 s of 3600 s), as the next run reads it."""
    before = gpu(0, "GPU-a", 5 * S)
    v = tv.judge(gpu(0, "GPU-a", 305 * S), tv.baseline(previous(before), "", BOOT), NOW, 0.02)
    assert (v.check.status, v.record) == ("fail", {"at": "2026-03-02T10:00:00.000Z", "throttled_s": 300,
                                                   "elapsed_s": 3600})
    return tv.to_json([gpu(0, "GPU-a", 305 * S), gpu(1, "GPU-b", 0)], BOOT, NOW, "NVML", {0: v.record, 1: None})


def rejudge(now, prev, hours, boot=BOOT, window_h=24):
    return tv.judge(now, tv.baseline(prev, "", boot), NOW + dt.timedelta(hours=hours), 0.02, window_h)


def test_the_run_after_a_failure_fails_again_inside_the_window_with_no_growth():
    """The retest of the drained node: no load, no growth; the GPU still fails and carries the record."""
    prev = failed_then()
    assert prev["gpus"][0]["under_load"]["at"] == "2026-03-02T10:00:00.000Z" and "under_load" not in prev["gpus"][1]
    v = rejudge(gpu(0, "GPU-a", 305 * S), prev, 1)
    assert (v.check.status, v.check.code, v.check.action, v.check.value) == (
        "fail", "THERMAL_VIOLATION_UNDER_LOAD", "drain_and_service", 300)
    assert ("thermal throttling under load seen at 2026-03-02T10:00:00.000Z (300 s of 3600 s), within the 24 h "
            "window") in v.check.message and "this run: no thermal throttling in the 3600 s" in v.check.message
    assert v.record == prev["gpus"][0]["under_load"], "carried forward unchanged: the window counts from the failure"
    nxt = tv.to_json([gpu(0, "GPU-a", 305 * S)], BOOT, NOW + dt.timedelta(hours=1), "NVML", {0: v.record})
    assert rejudge(gpu(0, "GPU-a", 305 * S), nxt, 23.5).check.status == "fail", "still inside, two runs on"
    v = rejudge(gpu(1, "GPU-b", 0), prev, 1)
    assert (v.check.status, v.record) == ("pass", None), "the other GPU of the node inherits nothing"


def test_past_the_window_the_gpu_is_judged_by_its_growth_again():
    prev = failed_then()
    v = rejudge(gpu(0, "GPU-a", 305 * S), prev, 24)
    assert (v.check.status, v.record) == ("pass", None)
    v = rejudge(gpu(0, "GPU-a", 305 * S), prev, 2, window_h=1)
    assert v.check.status == "pass", "the window is the setting"
    v = rejudge(gpu(0, "GPU-a", 3305 * S), prev, 25)
    assert v.check.status == "fail" and v.record["at"] != prev["gpus"][0]["under_load"]["at"], "a new failure, a new record"


def test_a_failure_is_carried_across_a_reboot_and_a_counter_reset():
    prev = failed_then()
    v = rejudge(gpu(0, "GPU-a", 0), prev, 2, boot="another-boot")
    assert (v.check.status, v.check.code) == ("fail", "THERMAL_VIOLATION_UNDER_LOAD")
    assert "rebooted since the previous sample" in v.check.message and v.record == prev["gpus"][0]["under_load"]
    v = rejudge(gpu(0, "GPU-a", 1 * S), prev, 2)
    assert (v.check.status, v.check.code) == ("fail", "THERMAL_VIOLATION_UNDER_LOAD")
    assert "driver was reloaded or the GPU reset" in v.check.message
    v = rejudge(tv.ViolationSample(0, "GPU-a", "00000000:18:00.0", None, "not supported"), prev, 2)
    assert v.check.status == "fail" and "not supported" in v.check.message, "no counter now: still failed"


def test_another_gpu_in_the_slot_does_not_inherit_the_failure():
    """The GPU was replaced: a new UUID at the old bus id starts with no record (and no baseline)."""
    v = rejudge(gpu(0, "GPU-new", 0, "00000000:18:00.0"), failed_then(), 1)
    assert (v.check.status, v.check.code, v.record) == ("skip", "THERMAL_VIOLATION_NO_BASELINE", None)
    prev = failed_then()
    for g in prev["gpus"]:
        g["uuid"] = None
    v = rejudge(tv.ViolationSample(0, None, "00000000:18:00.0", 305 * S), prev, 1)
    assert v.check.status == "fail", "without UUIDs the bus id matches"


def test_a_gpu_missing_from_a_run_keeps_its_failure_for_when_it_is_back():
    """GPU-a is lost in the run after its failure (not judged by this check): its record stays in the
    sample, and the run after that, with GPU-a back, fails it."""
    prev = failed_then()
    later = NOW + dt.timedelta(hours=1)
    kept = tv.unseen([gpu(1, "GPU-b", 0)], prev, later)
    assert [(g["uuid"], g["ns"], g["under_load"]) for g in kept] == [("GPU-a", None, prev["gpus"][0]["under_load"])]
    assert tv.unseen([gpu(0, "GPU-a", 305 * S), gpu(1, "GPU-b", 0)], prev, later) == [], "judged now: not twice"
    assert tv.unseen([gpu(1, "GPU-b", 0)], prev, NOW + dt.timedelta(hours=24)) == [], "past the window: dropped"
    nxt = tv.to_json([gpu(1, "GPU-b", 0)], BOOT, later, "NVML", {1: None}, kept)
    assert rejudge(gpu(0, "GPU-a", 305 * S), nxt, 2).check.status == "fail"


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
