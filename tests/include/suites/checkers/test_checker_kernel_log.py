"""checkers/kernel_log.py + driver_log.py: genuine kernel logs of several driver generations split
into messages and classified fail-closed (fixtures/SOURCES.md)."""

from __future__ import annotations

import pytest
from cluster_doctor_suites.checkers import driver_log, kernel_log, log_evidence


def classify(h, name):
    return driver_log.classify(kernel_log.split(h.fx("kernel", name)))


def test_raw_dmesg_keeps_the_kernel_level_and_a_healthy_driver_load_is_no_finding(h):
    """A driver load (550.144.03) in raw dmesg: the banner comes at level 4 and 3 (error!), the module
    lines at 4/5/6; none of it is a finding, the banner because it is on the sourced benign list."""
    msgs = kernel_log.split(h.fx("kernel", "dmesg-r_driver_load_550.144.03_gpud-pstore.txt"))
    banner = [m for m in msgs if "NVRM: loading" in m.text]
    assert [m.level for m in banner] == [4, 3] and banner[0].uptime_s == pytest.approx(1126.635824)
    events, reviewed = driver_log.classify(msgs)
    assert events == [] and reviewed == 4


def test_multi_line_report_is_one_message(h):
    msgs = kernel_log.split(h.fx("kernel", "dmesg_fallen_off_bus_570.158.01.txt"))
    assert msgs[0].text.endswith("fallen off the bus and is not responding to commands.")
    assert msgs[0].pci == "0000:b3:00"


@pytest.mark.parametrize(
    "fixture, kinds",
    [
        ("dmesg_clean_6.18_firecracker.txt", []),
        # R525 / H100: Xid 79, its one-line report, later the multi-line one
        ("dmesg_xid79_fallen_off_bus_525.125.06_H100.txt", ["xid", "fallen_off_bus", "fallen_off_bus"]),
        ("dmesg_fallen_off_bus_one_line.txt", ["fallen_off_bus", "fallen_off_bus"]),
        # 590 journal: Xid 45 lines only
        ("journal_xid45_after_xid149_590.48.01.txt", ["xid"] * 7),
        # R570 multi-line report without an Xid token
        ("dmesg_fallen_off_bus_570.158.01.txt", ["fallen_off_bus"]),
    ],
)
def test_kinds_of_genuine_logs(h, fixture, kinds):
    events, _ = classify(h, fixture)
    assert [e.kind for e in events] == kinds


def test_rpc_history_after_an_xid_119_is_its_detail_not_a_finding(h):
    """gpud's Xid 119 log (dmesg -T): 21 RPC-history lines at the Xid's time stamp belong to it; the
    rate-limit line later is a GSP timeout of its own (no Xid token)."""
    events, _ = classify(h, "dmesg-T_xid119_gsp_rpc_timeout_gpud.txt")
    assert [e.kind for e in events] == ["xid", "xid", "xid", "known", "xid", "xid"]
    assert len(events[0].detail) == 21 and events[3].rule["code"] == "GSP_TIMEOUT"
    assert not [e for e in events if e.kind == "unrecognised"]


@pytest.mark.parametrize(
    "fixture, code",
    [
        ("journal_gsp_heartbeat_timeout_bazzite4449.txt", "GSP_TIMEOUT"),  # 595 journal, no Xid
        ("syslog_rminitadapter_failed_gpu-operator1146.txt", "GPU_INIT_FAILED"),
        ("journal_nvlink_postrxdetlinkmask_gh100_gpud1271.txt", "NVLINK_TRAINING_FAILED"),
        ("dmesg_fbhub_poison_bad_register_read_550.90.07_ogkm688.txt", "GPU_MEMORY_ERROR"),
    ],
)
def test_driver_errors_without_an_xid_token_are_named(h, fixture, code):
    events, _ = classify(h, fixture)
    assert code in {e.rule["code"] for e in events if e.kind == "known"}


def test_a_driver_line_nobody_listed_is_a_finding_never_ignored(h):
    """550.90.07's 'Possible bad register read' is on no list: DRIVER_ERROR_UNRECOGNISED, a failure."""
    events, _ = classify(h, "dmesg_fbhub_poison_bad_register_read_550.90.07_ogkm688.txt")
    unknown = [e for e in events if e.kind == "unrecognised"]
    assert len(unknown) == 1 and "Possible bad register read" in unknown[0].text
    assert len(unknown[0].detail) == 1  # the second line at the same microsecond is the same report
    f = driver_log.judge(unknown[0], "node", 24, None)
    assert (f.status, f.code, f.action) == ("fail", "DRIVER_ERROR_UNRECOGNISED", "drain_and_service")


def test_notice_and_info_level_lines_are_not_errors():
    text = "<6>[   10.000000] NVRM: something informational\n<3>[   11.000000] NVRM: something broke\n"
    events, reviewed = driver_log.classify(kernel_log.split(text))
    assert reviewed == 1 and [e.text for e in events] == ["<3>[   11.000000] NVRM: something broke"]


def test_old_driver_error_warns_unless_it_leaves_the_gpu_broken_until_a_reset(h):
    """An error older than the window warns (memory poison); a failed init does not: it
    keeps failing until the log shows a reset of its GPU after it (log_evidence)."""
    events, _ = classify(h, "syslog_rminitadapter_failed_gpu-operator1146.txt")
    recent = driver_log.judge(events[0], "cuda:0", 24, 1000.0)
    old = driver_log.judge(events[0], "cuda:0", 24, 885.0 + 25 * 3600)
    assert (recent.status, recent.code, recent.action) == ("fail", "GPU_INIT_FAILED", "reboot")
    assert old.status == "fail" and old.age_h == pytest.approx(25, abs=0.01) and "no reset" in old.note
    reloaded = log_evidence.History([log_evidence.Reset(99, 5000.0, None, "the NVIDIA driver was loaded again")],
                                    present={"0000:0a:00"})
    cleared = driver_log.judge(events[0], "cuda:0", 24, 885.0 + 25 * 3600, reloaded)
    assert cleared.status == "warn" and "loaded again" in cleared.note
    poison, _ = classify(h, "dmesg_fbhub_poison_bad_register_read_550.90.07_ogkm688.txt")
    assert poison[0].rule["id"] == "memory_poison"
    assert driver_log.judge(poison[0], "node", 24, 134.55 + 25 * 3600).status == "warn"


def test_short_pci():
    assert kernel_log.short_pci("00000000:DB:00.0") == "0000:db:00"
    assert kernel_log.short_pci("0000:1b:00.0") == "0000:1b:00"
    assert kernel_log.short_pci(None) is None
