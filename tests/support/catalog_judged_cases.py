"""Fault-catalog cases of the "a pass is proof, round three" classes (test_fault_catalog.py runs them):
every Xid whose NVIDIA action is a GPU reset or a reboot stays fatal until the log shows the reset, a
line caused by an earlier Xid is judged as that Xid; a link-error failure carries forward to the next
runs for its window unless the port was reset or replaced; checks that vanish or read as "could not
run" (the fabric on an NVSwitch SKU, a hung dcgmi), the GPU's modes against the node pool; a key check
not judged for want of a baseline is an error, an unknown model a finding, ECC off a warning wherever
the GPU has ECC. Each replays genuine outputs (fixtures/SOURCES.md) or the declared derivations
written here, through fake tools on PATH with the real tools' exit codes."""

from __future__ import annotations

from pathlib import Path

from cluster_doctor_suites import gpu_health, ib_health, nvbandwidth

from tests.support.fake_tools import shell_tool

FIXTURES = Path(__file__).resolve().parents[1] / "include" / "suites" / "fixtures"
A100_XML = FIXTURES / "smi" / "nvidia-smi-q-x_510.47.03_A100-SXM4-40GB_mig.xml"  # one GPU, PCI 0000:00:04
RTX_XML = FIXTURES / "smi" / "nvidia-smi-q-x_590.44.01_2xRTX-A5000.xml"  # two GPUs, ECC disabled
HOURS_30 = 30 * 3600

# the Fault fields of each case (test_fault_catalog.Fault): id, suite, status, check, code, device,
# reason, check_status, action, args
CASES = [
    # gpud#46's Xid 109 (CTX SWITCH TIMEOUT, NVIDIA: RESET_GPU) 30 h ago on the GPU the node still lists,
    # no GPU reset, driver reload or reboot since: the GPU is still broken, not a historical warning
    dict(id="xid_reset_gpu_30h_no_reset", suite="gpu_health", status="fail", check="xid", code="XID_CRITICAL",
         device="cuda:0", reason="no GPU reset or driver reload since", action="reset_gpu"),
    # R590's "45, ... caused by previous Xid 149" (open-gpu-kernel-modules#1150) whose Xid 149 line is no
    # longer in the log: judged as the NVLink Xid 149, not as an application's Xid 45
    dict(id="xid45_caused_by_xid149_line_gone", suite="gpu_health", status="fail", check="xid", code="XID_NVLINK_ERROR",
         device="cuda:0", reason="Xid 45 caused by Xid 149", action="reset_gpu"),
    # Xid 137 (NVLINK_PRIV_ERR) of a Hopper / Blackwell NVLink: fails with its NVLink code
    dict(id="xid137_nvlink_priv_error", suite="gpu_health", status="fail", check="xid", code="XID_NVLINK_ERROR",
         device="cuda:0", reason="Xid 137 (NVLINK_PRIV_ERR", action="reset_gpu"),
    # gpud's HGX H100 tree: mlx5_6's symbol_error +40 under load fails a run; the next run (the drained
    # node's retest, quiet) compares with that run's own sample: still failing inside the 24 h window
    # the A100 output (510.47.03) prints no Fabric section; its node pool says the node has NVSwitches:
    # the fabric check is a visible not-run, never absent
    dict(id="fabric_not_reported_on_nvswitch_sku", suite="gpu_health", status="pass", check="fabric",
         code="FABRIC_STATE_UNKNOWN", device="cuda:0", reason="could not run", check_status="skip", action="retest",
         args=("--expect", "nvswitch=1,mig=1,persistence=0")),
    # dcgmi diag that never returns (killed at its 1 s budget): an error against the GPUs, not "unavailable"
    dict(id="dcgm_diag_hung", suite="gpu_health", status="error", check="dcgm_diag", code="DCGM_DIAG_HUNG",
         reason="", action="reset_gpu", args=("--expect", "mig=1,persistence=0", "--dcgm-timeout", "1")),
    # the genuine A100 output: MIG enabled, persistence disabled, on a pool that trains (MIG off, persistence on)
    dict(id="mig_enabled_on_training_pool", suite="gpu_health", status="fail", check="mig_mode",
         code="MIG_MODE_UNEXPECTED", device="cuda:0", reason="MIG mode enabled, expected disabled", action="reset_gpu",
         args=("--expect", "mig=0,persistence=0")),
    dict(id="persistence_off_on_training_pool", suite="gpu_health", status="fail", check="persistence_mode",
         code="PERSISTENCE_MODE_UNEXPECTED", device="cuda:0", reason="persistence mode disabled, expected enabled",
         action="retest", args=("--expect", "mig=1,persistence=1")),
    # the README's healthy 8-GPU nvbandwidth matrices on an H20 node: no baseline for the model, so no
    # floor for any testcase: a configuration finding and an error, never `pass (incomplete)`
    dict(id="nvbw_unknown_model_no_baseline", suite="nvbandwidth", status="error", check="baseline",
         code="BASELINE_MISSING", reason="no baseline for a key check", check_status="skip", action="none",
         args=("--gpu-model", "NVIDIA-H20")),
    # the genuine RTX A5000 output (590.44.01): ECC disabled; the model has no baseline, the GPU has ECC
    # memory (the driver reports the mode, not N/A): at least a warning
    dict(id="ecc_disabled_unknown_model", suite="gpu_health", status="pass", check="ecc_mode", code="ECC_DISABLED",
         device="cuda:0", check_status="warn", action="reset_gpu"),
    dict(id="ib_link_errors_carried_to_quiet_retest", suite="ib_health", status="fail", check="ib_counters",
         code="IB_LINK_ERRORS", device="mlx5_6:1", reason="inside the 24 h link-error window", action="check_fabric"),
]
IDS = {c["id"] for c in CASES}
# seconds since boot the suite reads (/proc/uptime)
UPTIME = {"xid_reset_gpu_30h_no_reset": 3125.451904 + HOURS_30}


def kernel_log(fid: str) -> str:
    kernel = FIXTURES / "kernel"
    if fid == "xid_reset_gpu_30h_no_reset":
        # the Xid 13 / 109 lines of gpud#46 (dmesg_xids_derived.txt), moved onto the A100's bus id
        lines = (kernel / "dmesg_xids_derived.txt").read_text().splitlines(keepends=True)
        return "".join(line for line in lines if "0000:81:00" in line).replace("0000:81:00", "0000:00:04")
    if fid == "xid45_caused_by_xid149_line_gone":
        first = (kernel / "journal_xid45_after_xid149_590.48.01.txt").read_text().splitlines(keepends=True)[0]
        return first.replace("0000:dc:00", "0000:00:04")
    if fid == "xid137_nvlink_priv_error":
        # derived: the driver's Xid line layout (open-gpu-kernel-modules#1150's 590.48.01 journal lines),
        # number 137 and the TLC RX PRIV error the NVIDIA forum report of 8x H200 (575.51.03) names
        return "kernel: NVRM: Xid (PCI:0000:00:04): 137, TLC RX PRIV Error Link 03\n"
    return (kernel / "dmesg_clean_6.18_firecracker.txt").read_text()


def run(fault, run_inproc, monkeypatch, tmp_path, h):
    if fault.suite == "ib_health":
        return _run_ib(fault, run_inproc, tmp_path, h)
    if fault.suite == "nvbandwidth":
        return _run_nvbw(fault, run_inproc, tmp_path)
    bindir = tmp_path / "bin"
    xml, gpus = (RTX_XML, "2") if fault.id == "ecc_disabled_unknown_model" else (A100_XML, "1")
    smi = shell_tool(bindir, "nvidia-smi", f'case "$1" in -q) cat "{xml}" ;; nvlink) exit 0 ;; *) exit 3 ;; esac')
    (tmp_path / "kmsg").write_text(kernel_log(fault.id))
    dmesg = shell_tool(bindir, "dmesg", f'cat "{tmp_path / "kmsg"}"')
    # a dcgmi that hangs prints nothing and never returns; the others: not installed (a visible not-run)
    dcgmi = shell_tool(bindir, "dcgmi", "sleep 60") if fault.id == "dcgm_diag_hung" else "dcgmi-not-installed"
    args = ["--source", "nvidia-smi", "--nvidia-smi", smi, "--dmesg", dmesg, "--dcgmi", dcgmi,
            "--xid-window-hours", "24", "--expected-gpus", gpus]
    return run_inproc(gpu_health, *args, *(fault.args or ()))


def _run_ib(fault, run_inproc, tmp_path, h):
    """Three runs, as in production: the first records, the link errors grow and fail the second, the
    third sees no growth."""
    boot = tmp_path / "boot_id"
    boot.write_text("8a1f5a0e-2f1c-4c55-9a8e-0c1f7f4a2b11\n")
    root = h.h100_ib_tree(tmp_path, cleared=True)
    args = ["--sysfs-root", str(root), "--boot-id-file", str(boot), "--gpu-model", "NVIDIA-H100-80GB-HBM3"]
    run_inproc(ib_health, *args)
    h.ib_counter(root, "mlx5_6", "symbol_error", 40)
    run_inproc(ib_health, *args)
    return run_inproc(ib_health, *args, *(fault.args or ()))


def _run_nvbw(fault, run_inproc, tmp_path):
    """The nvbandwidth README's 8-GPU write and host-to-device matrices (v0.8), a healthy node."""
    nvb = FIXTURES / "nvbandwidth"
    write, h2d = nvb / "readme_v0.8_d2d_write_ce_8gpu.txt", nvb / "readme_v0.8_h2d_ce_8gpu.txt"
    body = (f'for t in "$@"; do case "$t" in device_to_device_memcpy_write_ce) cat "{write}" ;; '
            f'host_to_device_memcpy_ce) cat "{h2d}" ;; esac; done')
    tool = shell_tool(tmp_path / "bin", "nvbandwidth", body)
    return run_inproc(nvbandwidth, "--nvbandwidth", tool, "--testcases",
                      "device_to_device_memcpy_write_ce,host_to_device_memcpy_ce", "--expected-gpus", "8", *fault.args)
