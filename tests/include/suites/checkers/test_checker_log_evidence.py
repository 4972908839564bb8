"""checkers/log_evidence.py: whether a kernel log reaches back to the boot, and the resets it shows
after an event, on genuine logs (fixtures/SOURCES.md)."""

from __future__ import annotations

import pytest
from cluster_doctor_suites.checkers import kernel_log, log_evidence


def msgs(h, name):
    return kernel_log.split(h.fx("kernel", name))


@pytest.mark.parametrize("fixture, covered, why", [
    ("dmesg_clean_6.18_firecracker.txt", True, "starts 0 s after boot"),  # the kernel's own first lines
    ("dmesg-r_driver_load_550.144.03_gpud-pstore.txt", True, "driver's load at 1127 s"),  # starts late, has the load
    ("dmesg-r_wrapped_after_reload_550.144.03_gpud-pstore_derived.txt", False, "starts 1137 s after boot"),
    ("journal_xid45_after_xid149_590.48.01.txt", False, "carries no time since boot"),  # a journal excerpt
])
def test_a_log_proves_the_boot_by_its_first_record_or_the_drivers_load(h, fixture, covered, why):
    c = log_evidence.coverage(msgs(h, fixture))
    assert c.covered is covered and why in c.why, c.why


def test_an_empty_log_proves_nothing():
    c = log_evidence.coverage(kernel_log.split(""))
    assert not c.covered and "ReadKMsg=no" in c.why


def test_resets_after_an_event(h):
    """The 570 open module prints its "fallen off the bus" report while probing, then its load banner:
    that banner is the same load, no reset. A later load, or Xid 154 back to None on the same GPU, is."""
    m = msgs(h, "dmesg_fallen_off_bus_570.158.01.txt")
    hist = log_evidence.history(m, {"0000:b3:00"})
    assert hist.reset_after(0, m[0].uptime_s, "0000:b3:00") is None  # banner 0.13 s after the report
    later = m + kernel_log.split(
        "[ 5000.000000] NVRM: Xid (PCI:0000:b3:00): 154, GPU recovery action changed from 0x1 (GPU Reset Required) "
        "to 0x0 (None)\n")
    hist = log_evidence.history(later, {"0000:b3:00", "0000:c1:00"})
    assert "recovery action returned to None at 5000 s (Xid 154)" in hist.reset_after(0, m[0].uptime_s, "0000:b3:00")
    assert hist.reset_after(0, m[0].uptime_s, "0000:c1:00") is None  # another GPU's reset
    assert log_evidence.history(later, set()).reset_after(0, m[0].uptime_s, "0000:b3:00") is None  # GPU gone
    reload = m + kernel_log.split("[ 9000.000000] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  570.158.01\n")
    assert "loaded again at 9000 s" in log_evidence.history(reload, {"0000:b3:00"}).reset_after(0, m[0].uptime_s, "0000:b3:00")
