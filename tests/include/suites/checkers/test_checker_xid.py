"""checkers/xid.py: Xids judged against NVIDIA's catalog (xid_catalog.yaml), fail closed."""

from __future__ import annotations

import pytest
from cluster_doctor_suites.checkers import driver_log, kernel_log, log_evidence, xid

NHC = {48, 56, 57, 58, 62, 63, 64, 65, 68, 69, 73, 74, 79, 80, 81, 92, 94, 95, 119, 120, 140}


def test_catalog_covers_nvidias_xids_with_their_actions():
    cat = xid.catalog()
    assert set(range(1, 173)) <= set(cat), "NVIDIA's catalog lists Xid 1..172"
    assert cat[79]["nvidia_immediate"] == "RESTART_BM" and cat[154]["mnemonic"] == "GPU_RECOVERY_ACTION_CHANGED"
    for n, entry in cat.items():
        assert entry["category"] in xid.CATEGORY_CODES, n
        if not entry.get("nvidia_immediate"):
            assert entry.get("status") and entry.get("action") and entry.get("why"), f"Xid {n}: no NVIDIA action, ours needs a why"


@pytest.mark.parametrize(
    "n, text, status, code, action",
    [
        (79, "GPU has fallen off the bus.", "fail", "GPU_FALLEN_OFF_BUS", "reboot"),
        (48, "DBE", "fail", "XID_MEMORY_ERROR", "reset_gpu"),
        (119, "Timeout after 6s of waiting for RPC response from GPU4 GSP!", "fail", "XID_GSP_ERROR", "reset_gpu"),
        (13, "Graphics SM Warp Exception", "warn", "XID_APPLICATION", "none"),
        (94, "Contained ECC error", "fail", "XID_MEMORY_ERROR", "reset_gpu"),  # NVIDIA: RESTART_APP; NHC: hardware
        (158, "GPU fatal timeout", "fail", "XID_CRITICAL", "reset_gpu"),  # above 140: NVIDIA RESET_GPU
        (167, "PCIE_FATAL_TIMEOUT", "fail", "XID_CRITICAL", "reboot"),  # no NVIDIA action: ours, with a why
        (173, "something new", "fail", "XID_UNKNOWN", "drain_and_service"),  # not in the catalog: fail closed
        (144, "SAW_MVB Nonfatal XC0 i0 Link 0 (0x00000001 0x00000008", "warn", "XID_NVLINK_ERROR", "none"),
        (149, "NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x026001c6", "fail", "XID_NVLINK_ERROR", "reset_gpu"),
        (154, "GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)", "fail", "GPU_RECOVERY_ACTION", "reset_gpu"),
        (154, "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", "fail", "GPU_RECOVERY_ACTION", "reboot"),
    ],
)
def test_judge(n, text, status, code, action):
    v = xid.judge(n, text, NHC)
    assert (v.status, v.code, v.action) == (status, code, action)


def _checks(h, fixture, by_pci=None, now=None, window=24.0, text=None):
    messages = kernel_log.split(text if text is not None else h.fx("kernel", fixture))
    events, _ = driver_log.classify(messages)
    by_pci = by_pci or {}
    hist = log_evidence.history(messages, set(by_pci))
    return xid.to_checks(events, lambda p: by_pci.get(p, f"pci:{p}" if p else "node"), NHC, window, now, "log", hist)


def test_gb200_nvlink_and_recovery_action_xids(h):
    """GB200 kernel log (gpud's kmsg test input): Xid 149 Fatal and Xid 154 on several GPUs."""
    checks = _checks(h, "dmesg_xid149_xid154_gb200_gpud-kmsg-test.txt", {"0009:01:00": "cuda:0", "0008:01:00": "cuda:1"})
    got = {(c.device, c.code): c for c in checks}
    assert got[("cuda:0", "XID_NVLINK_ERROR")].status == "fail" and got[("cuda:0", "XID_NVLINK_ERROR")].value == 149
    assert got[("cuda:0", "GPU_RECOVERY_ACTION")].action == "reset_gpu"
    assert got[("cuda:1", "GPU_RECOVERY_ACTION")].status == "fail"
    assert "driver hint: WORKFLOW_NVLINK5_ERR" in got[("cuda:0", "XID_NVLINK_ERROR")].message


def test_nonfatal_and_fatal_nvlink_xids_from_their_lines(h):
    checks = _checks(h, "xid144_nonfatal_xid149_fatal_gpud1160.txt")
    got = {(c.device, c.code): c.status for c in checks}
    assert got == {("pci:0000:01:00", "XID_NVLINK_ERROR"): "warn", ("pci:0000:00:00", "XID_NVLINK_ERROR"): "fail"}


def test_old_failing_xid_is_reported_as_historical(h):
    """Xid 94 30 h ago: a warning. Xid 79 (fallen off the bus) stays a failure until the log shows a
    reset after it: here none, then the driver loaded again an hour later."""
    checks = _checks(h, "dmesg_xids_derived.txt", {"0000:c1:00": "cuda:1"}, now=86400.0 + 30 * 3600)
    old = {c.code: c for c in checks if c.device == "cuda:1"}
    assert old["XID_HISTORICAL"].status == "warn" and "Xid 94" in old["XID_HISTORICAL"].message
    assert old["GPU_FALLEN_OFF_BUS"].status == "fail" and "no GPU reset or driver reload since" in old["GPU_FALLEN_OFF_BUS"].message
    reloaded = h.fx("kernel", "dmesg_xids_derived.txt") + (
        "[90000.000000] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.144.03  Mon Dec 30 17:44:08 UTC 2024\n")
    checks = _checks(h, None, {"0000:c1:00": "cuda:1"}, now=86400.0 + 30 * 3600, text=reloaded)
    old = [c for c in checks if c.device == "cuda:1"]
    assert {c.code for c in old} == {"XID_HISTORICAL"} and {c.status for c in old} == {"warn"}
    assert "reset since: the NVIDIA driver was loaded again at 90000 s" in old[0].message
    # the same reload does not bring back a GPU that is not there
    checks = _checks(h, None, {}, now=86400.0 + 30 * 3600, text=reloaded)
    gone = {c.code: c for c in checks if c.device == "pci:0000:c1:00"}
    assert gone["GPU_FALLEN_OFF_BUS"].status == "fail" and "not among the GPUs found" in gone["GPU_FALLEN_OFF_BUS"].message


def test_no_xid_is_a_pass_with_evidence(h):
    [c] = _checks(h, "dmesg_clean_6.18_firecracker.txt")
    assert c.status == "pass" and c.name == "xid"


@pytest.mark.parametrize("n", [46, 48, 62, 64, 79, 95, 109, 110, 119, 120, 136, 140, 143, 151, 155, 156, 158])
def test_every_xid_nvidia_resolves_by_reset_or_reboot_fails_until_the_reset(n):
    """NVIDIA's RESET_GPU / RESTART_BM / RESTART_VM (and the Xid 48 workflow): the GPU is broken until
    that reset, so the failure does not age into a warning."""
    v = xid.judge(n, "", NHC)
    assert v.status == "fail" and v.action in ("reset_gpu", "reboot") and v.until_reset, (n, v)


@pytest.mark.parametrize("n", [13, 31, 43, 45, 94, 137])
def test_xids_of_the_application_or_ours_age_into_a_warning(n):
    """RESTART_APP / IGNORE (94 is failed by the AzureHPC list, 137 by us within the window): not
    fatal until a reset."""
    assert not xid.judge(n, "", NHC).until_reset


def test_a_reset_gpu_xid_30h_old_fails_until_the_log_shows_a_reset(h):
    """gpud#46's Xid 109 (CTX SWITCH TIMEOUT, NVIDIA: RESET_GPU) 30 h before now: still failing; once
    the driver is loaded again after it, a historical warning."""
    now = 3125.451904 + 30 * 3600
    [c] = [c for c in _checks(h, "dmesg_xids_derived.txt", {"0000:81:00": "cuda:0"}, now=now) if c.value == 109]
    assert c.status == "fail" and c.code == "XID_CRITICAL" and "no GPU reset or driver reload since" in c.message
    reloaded = h.fx("kernel", "dmesg_xids_derived.txt") + (
        "[90000.000000] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.144.03  Mon Dec 30 17:44:08 UTC 2024\n")
    old = {c.code: c for c in _checks(h, None, {"0000:81:00": "cuda:0"}, now=now, text=reloaded) if c.device == "cuda:0"}
    assert old["XID_HISTORICAL"].status == "warn" and old["XID_HISTORICAL"].value == 109
    assert {c.status for c in old.values()} == {"warn"}  # and Xid 13, the application's


def test_a_line_caused_by_an_earlier_xid_is_judged_as_that_xid(h):
    """open-gpu-kernel-modules#1150: Xid 45 lines "caused by previous Xid 149 / 145", the earlier lines
    gone: judged as the NVLink Xid (fail closed without its severity), named as both."""
    checks = _checks(h, "journal_xid45_after_xid149_590.48.01.txt", {"0000:dc:00": "cuda:0", "0000:ed:00": "cuda:1"})
    got = {(c.device, c.code): c for c in checks}
    assert got[("cuda:0", "XID_NVLINK_ERROR")].status == "fail" and got[("cuda:0", "XID_NVLINK_ERROR")].value == 149
    assert "Xid 45 caused by Xid 149 (NVLINK_NETIR_ERROR" in got[("cuda:0", "XID_NVLINK_ERROR")].message
    assert got[("cuda:1", "XID_NVLINK_ERROR")].value == 145
    assert not any(c.code == "XID_APPLICATION" for c in checks)


def test_a_line_caused_by_an_earlier_nonfatal_xid_still_in_the_log_takes_its_severity(h):
    """gpud#1160's Xid 144 `SAW_MVB Nonfatal` line, then an Xid 45 the driver says it caused (the
    layout of open-gpu-kernel-modules#1150): a warning like the Xid 144 itself."""
    first = h.fx("kernel", "xid144_nonfatal_xid149_fatal_gpud1160.txt").splitlines()[0]
    follow = "NVRM: Xid (PCI:0000:01:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 144"
    checks = _checks(h, None, {"0000:01:00": "cuda:0"}, text=f"{first}\n{follow}\n")
    assert {(c.code, c.status) for c in checks} == {("XID_NVLINK_ERROR", "warn")}


def test_an_xid_says_how_long_ago_in_words_and_marks_nvidias_hint_as_the_drivers(h):
    """Xid 94 a minute before the check: '1 min ago', never '0.01668 h ago'; NVIDIA's immediate action
    (RESTART_APP) is the driver's hint, not a second action beside ours (the check's action)."""
    checks = _checks(h, "dmesg_xids_derived.txt", {"0000:c1:00": "cuda:1"}, now=86002.774910 + 60.05)
    ecc = next(c for c in checks if c.device == "cuda:1" and c.code == "XID_MEMORY_ERROR")
    assert "Xid 94 (ROBUST_CHANNEL_CONTAINED_ERROR, driver hint: RESTART_APP), 1 min ago: " in ecc.message, ecc.message
    assert " h ago" not in ecc.message and "NVIDIA:" not in ecc.message
    assert ecc.action == "reset_gpu"
