"""The fault catalog's cases of the GPU classes (test_fault_catalog.py runs them): the GPU count
from what the node should have, per-GPU results matched against the GPUs, fatal events that stay
fatal until a reset is shown, a kernel log that must reach back to the boot, bits that flip on a
single GPU. Each replays genuine outputs (fixtures/SOURCES.md) or the declared derivations written
here, through fake tools on PATH with the real tools' exit codes. And thermal throttling under load
between two gpu_health runs, through the fake NVML module (fake_nvml.py) of one healthy H100."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import torch
from cluster_doctor_suites import dl_unit, gpu_health, nvbandwidth
from cluster_doctor_suites.dl.devices import current_device

from tests.support.fake_nvml import FakeNVML
from tests.support.fake_tools import shell_tool

FIXTURES = Path(__file__).resolve().parents[1] / "include" / "suites" / "fixtures"
A100_XML = FIXTURES / "smi" / "nvidia-smi-q-x_510.47.03_A100-SXM4-40GB_mig.xml"  # one GPU, PCI 0000:00:04
HOURS_72 = 72 * 3600

# the Fault fields of each case (test_fault_catalog.Fault): id, suite, status, check, code, device,
# reason, check_status, action, args
CASES = [
    # the pod was given the 1 GPU the device plugin still offers; the node has 2 (its capacity / GFD
    # label): the other fell off the bus (nolebase's Xid 79 report, moved onto the missing 0000:00:05)
    dict(id="gpu_count_below_node_count", suite="gpu_health", status="fail", check="gpu_count", code="GPU_COUNT_LOW",
         reason="expected 2 GPUs, found 1", action="reboot", args=("--expected-gpus", "1", "--node-gpus", "2")),
    # Xid 79 three days ago on the GPU the node still lists, no reset or reboot since (this boot's log)
    dict(id="xid79_three_days_no_reset", suite="gpu_health", status="fail", check="xid", code="GPU_FALLEN_OFF_BUS",
         device="cuda:0", reason="no GPU reset or driver reload since", action="reboot"),
    # RmInitAdapter failed three days ago on a GPU that is not among the GPUs found
    dict(id="rm_init_adapter_three_days_gpu_missing", suite="gpu_health", status="fail", check="driver_log",
         code="GPU_INIT_FAILED", device="pci:0000:00:05", reason="not among the GPUs found", action="reboot"),
    # journald without kernel messages (ReadKMsg=no): `journalctl -k -b` prints nothing and exits 0
    dict(id="kernel_log_empty_journal", suite="gpu_health", status="pass", check="xid", code="KERNEL_LOG_INCOMPLETE",
         reason="could not run", check_status="skip", action="none"),
    # a ring buffer that wrapped: it starts 1137 s after boot, after the driver's load line
    dict(id="kernel_log_wrapped", suite="gpu_health", status="pass", check="xid", code="KERNEL_LOG_INCOMPLETE",
         reason="could not run", check_status="skip", action="none"),
    # nvidia-smi nvlink -s prints two GPUs' blocks, nvidia-smi -q one GPU: the second block is reported
    dict(id="nvlink_block_unmapped", suite="gpu_health", status="pass", check="nvlink", code="NVLINK_GPU_UNMAPPED",
         device="nvidia-smi GPU 1 (GPU-0c512562-871f-8257-6187-b5ae1b986d5e)", check_status="warn", action="none"),
    # dcgmi diag's per-GPU results name GPUs 1-3, not the node's GPU 0: GPU 0 was not diagnosed
    dict(id="dcgm_gpu_not_covered", suite="gpu_health", status="pass", check="dcgm_gpu_coverage",
         code="DCGM_GPU_NOT_COVERED", device="cuda:0", reason="could not run", check_status="skip", action="none"),
    # a device-to-device-only run without `Device N:` lines whose matrix lacks GPU 7 of the node's 8
    dict(id="nvbw_gpu_missing_from_matrix", suite="nvbandwidth", status="fail", check="nvbw_d2d_write_ce",
         code="NVBW_NOT_MEASURED", device="cuda:7", reason="expected 8 GPUs, found 7", action="reboot"),
    # one device whose results change between two identical runs (every other matmul one bit off)
    dict(id="determinism_single_device", suite="dl_unit", status="fail", check="determinism",
         code="NONDETERMINISTIC_GPU", device="cpu:0", action="drain_and_service"),
    # two gpu_health runs an hour apart, a training job between them: the GPU's cooling fails under load
    # (cool and unthrottled while idle), its thermal violation time grows by 300 s of the 3600 (8.3 %)
    dict(id="thermal_violation_under_load", suite="gpu_health", status="fail", check="thermal_violation",
         code="THERMAL_VIOLATION_UNDER_LOAD", device="cuda:0", reason="thermal limits held the clocks down for 300 s",
         action="drain_and_service"),
    # 20 s of the 3600 (0.56 %): within gpu_health.thermal_violation_max_share (2 %), a warning
    dict(id="thermal_violation_growing", suite="gpu_health", status="pass", check="thermal_violation",
         code="THERMAL_VIOLATION_GROWING", device="cuda:0", check_status="warn", action="none"),
    # the node rebooted between the runs (another boot id): the counter started again, and its 40 s after
    # the reboot (5 s before it) are not read as growth
    dict(id="thermal_violation_after_reboot", suite="gpu_health", status="pass", check="thermal_violation",
         code="THERMAL_VIOLATION_REBOOTED", device="cuda:0", reason="could not run", check_status="skip",
         action="none"),
    # the driver answers nvmlDeviceGetViolationStatus with NOT_SUPPORTED: a visible not-run, never a pass
    dict(id="thermal_violation_not_supported", suite="gpu_health", status="pass", check="thermal_violation",
         code="THERMAL_VIOLATION_UNAVAILABLE", device="cuda:0", reason="could not run", check_status="skip",
         action="none"),
]
IDS = {c["id"] for c in CASES}
# seconds since boot the suite reads (/proc/uptime): three days after the event for the old ones
UPTIME = {"xid79_three_days_no_reset": 4254.197860 + HOURS_72, "rm_init_adapter_three_days_gpu_missing": 885.0 + HOURS_72}


def kernel_log(fid: str) -> str:
    kernel = FIXTURES / "kernel"
    if fid in ("gpu_count_below_node_count", "xid79_three_days_no_reset"):
        # nolebase's H100 report (driver 525.125.06), its bus id moved onto the missing / the listed GPU
        bus = "0000:00:05" if fid == "gpu_count_below_node_count" else "0000:00:04"
        return (kernel / "dmesg_xid79_fallen_off_bus_525.125.06_H100.txt").read_text().replace("0000:5d:00", bus)
    if fid == "rm_init_adapter_three_days_gpu_missing":
        return (kernel / "syslog_rminitadapter_failed_gpu-operator1146.txt").read_text().replace("0000:0a:00", "0000:00:05")
    if fid == "kernel_log_wrapped":
        return (kernel / "dmesg-r_wrapped_after_reload_550.144.03_gpud-pstore_derived.txt").read_text()
    return (kernel / "dmesg_clean_6.18_firecracker.txt").read_text()


def nvlink_text(fid: str) -> str:
    """nccl-tests#228's blocks of GPU 0 and GPU 1 (the catalog's other cases keep GPU 0's only)."""
    text = (FIXTURES / "smi" / "nvidia-smi-nvlink-s_2xA100-SXM4-80GB.txt").read_text()
    return text if fid == "nvlink_block_unmapped" else text.split("GPU 1:")[0]


def dcgm_table(fid: str) -> str:
    """DCGM#253's DCGM 4.2.3 table; for dcgm_gpu_not_covered without its `GPU0: Pass` row."""
    text = (FIXTURES / "dcgm" / "dcgmi-diag-r1_4.2.3_570.148.08_head.txt").read_text()
    if fid != "dcgm_gpu_not_covered":
        return text
    row = next(line for line in text.splitlines(keepends=True) if "GPU0: Pass" in line)
    return text.replace(row, "")


def run(fault, run_inproc, monkeypatch, tmp_path):
    if fault.suite == "nvbandwidth":
        return _run_nvbw(run_inproc, tmp_path)
    if fault.id.startswith("thermal_violation_"):
        return _run_thermal(run_inproc, monkeypatch, tmp_path, fault.id)
    if fault.suite == "dl_unit":
        _flip_every_other(monkeypatch, "cpu:0")
        return run_inproc(dl_unit, "--device", "cpu", "--cpu-devices", "1", "--only", "numerics,agreement")
    return _run_gpu_health(run_inproc, tmp_path, fault)


def _run_gpu_health(run_inproc, tmp_path, fault):
    bindir, fid = tmp_path / "bin", fault.id
    (tmp_path / "nvlink.txt").write_text(nvlink_text(fid))
    smi = shell_tool(bindir, "nvidia-smi", f'case "$1" in -q) cat "{A100_XML}" ;; nvlink) cat "{tmp_path / "nvlink.txt"}" ;; '
                                      f'*) exit 3 ;; esac')
    args = ["--source", "nvidia-smi", "--nvidia-smi", smi, *_log_and_dcgmi(tmp_path, fid), "--xid-window-hours", "24"]
    if fid == "kernel_log_empty_journal":
        (tmp_path / "journal").mkdir()
        args += ["--journal-dir", str(tmp_path / "journal"), "--journalctl", shell_tool(bindir, "journalctl", "exit 0")]
    return run_inproc(gpu_health, *args, *(fault.args or ("--expected-gpus", "1")))


def _log_and_dcgmi(tmp_path, fid: str) -> list[str]:
    """A dmesg printing the case's kernel log, and a dcgmi without -j (it rejects the flag) that prints
    DCGM#253's table, exit 0 as the run passed."""
    bindir = tmp_path / "bin"
    (tmp_path / "kmsg").write_text(kernel_log(fid))
    dmesg = shell_tool(bindir, "dmesg", f'cat "{tmp_path / "kmsg"}"')
    (tmp_path / "dcgm.txt").write_text(dcgm_table(fid))
    dcgmi = shell_tool(bindir, "dcgmi", f'case " $* " in *" -j "*) echo "PARSE ERROR: Argument: -j" >&2; exit 1 ;; '
                                   f'*) cat "{tmp_path / "dcgm.txt"}" ;; esac')
    return ["--dmesg", dmesg, "--dcgmi", dcgmi]


S = 10**9  # NVML's violation time is in ns


def _run_thermal(run_inproc, monkeypatch, tmp_path, fid: str):
    """One healthy H100 through the fake NVML. The first gpu_health run, an hour ago, keeps its thermal
    violation counter (5 s since the driver loaded); a training job runs; the second run judges the
    growth. The suite's clock is the only thing set: an hour between two runs of one test."""
    nv = FakeNVML(sick=False, count=1)
    nv.thermal_ns[0] = 5 * S
    monkeypatch.setattr(gpu_health, "nvml_init", lambda: nv)
    now = dt.datetime.now(dt.timezone.utc)
    clock = [now - dt.timedelta(hours=1)]
    monkeypatch.setattr(gpu_health, "utcnow", lambda: clock[0])
    boot = tmp_path / "boot_id"
    boot.write_text("5f0c2f61-0b7e-4b8e-9a43-3c1d2b0e7a10\n")
    # one H100 of an 8-GPU SKU: the node pool's override (--expect gpus=1) says this rig has one
    args = ["--source", "nvml", *_log_and_dcgmi(tmp_path, fid), "--boot-id-file", str(boot),
            "--expected-gpus", "1", "--expect", "gpus=1", "--xid-listen-seconds", "0"]
    if fid == "thermal_violation_not_supported":
        nv.thermal_unsupported.add(0)
        return run_inproc(gpu_health, *args)
    run_inproc(gpu_health, *args)
    clock[0] = now
    if fid == "thermal_violation_under_load":
        nv.thermal_ns[0] += 300 * S
    elif fid == "thermal_violation_growing":
        nv.thermal_ns[0] += 20 * S
    elif fid == "thermal_violation_after_reboot":
        boot.write_text("c2a9e0d4-7f3b-4a61-8e25-9b0f1d6c4e37\n")
        nv.thermal_ns[0] = 40 * S
    return run_inproc(gpu_health, *args)


def _run_nvbw(run_inproc, tmp_path):
    """The README's 8-GPU write matrix (v0.8, printed without a device list) with GPU 7's row and
    column left out: what a run prints when the tool sees 7 of the node's 8 GPUs."""
    lines = (FIXTURES / "nvbandwidth" / "readme_v0.8_d2d_write_ce_8gpu.txt").read_text().splitlines()
    header, rows = lines[2].split()[:-1], [line.split()[:-1] for line in lines[3:] if line.split()[0] != "7"]
    text = "\n".join(lines[:2] + ["      " + "  ".join(header)] + ["  ".join(r) for r in rows]) + "\n"
    (tmp_path / "write.txt").write_text(text)
    tool = shell_tool(tmp_path / "bin", "nvbandwidth", f'cat "{tmp_path / "write.txt"}"')
    return run_inproc(nvbandwidth, "--nvbandwidth", tool, "--testcases", "device_to_device_memcpy_write_ce",
                      "--gpu-model", "NVIDIA-A100-SXM4-80GB", "--expected-gpus", "8")


def _flip_every_other(monkeypatch, device: str):
    """Every other fp32 matmul on `device` comes back with the lowest mantissa bit of one element
    flipped: results that differ between two identical runs on the same GPU."""
    orig = torch.matmul
    calls = {"n": 0}

    def fake(a, b, *args, **kw):
        out = orig(a, b, *args, **kw)
        if current_device() != device or out.dtype != torch.float32 or "out" in kw:
            return out
        calls["n"] += 1
        if calls["n"] % 2:
            return out
        flipped = out.detach().clone()
        flipped.view(-1)[7:8].view(torch.int32).bitwise_xor_(1)
        return out + (flipped - out).detach()

    monkeypatch.setattr(torch, "matmul", fake)
