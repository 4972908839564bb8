"""The fault catalog (include/suites/FAULTS.md), proven: one parametrized case per fault
class, injected the way it happens (fake tools on PATH that print genuine or declared-derived outputs
with the real exit codes, CPU-mode fault hooks in torch), asserting status, check, code, device and
reason. FAULTS.md and this file are checked against each other."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from cluster_doctor_suites import codes, dl_unit, gpu_health, ib_health, nccl_loopback, nvbandwidth, storage_fio
from cluster_doctor_suites.dl.devices import current_device
from tests.support import catalog_gpu_cases as gpu29
from tests.support import catalog_judged_cases as judged
from tests.support.fault_hooks import rank1_wrong_value
from tests.support.fake_tools import shell_tool

FIXTURES = Path(__file__).resolve().parent / "fixtures"
FAULTS_MD = Path(__file__).resolve().parents[3] / "include" / "suites" / "FAULTS.md"
A100 = (FIXTURES / "smi" / "nvidia-smi-q-x_510.47.03_A100-SXM4-40GB_mig.xml").read_text()
A100_PCI = "PCI:0000:00:04"  # the GPU of the A100 output, as the kernel log names it


@dataclass
class Fault:
    id: str
    suite: str
    status: str  # the suite's verdict
    check: str
    code: str
    device: str | None = None
    reason: str = ""  # substring of the summary's reason
    check_status: str | None = None  # when the check's status differs from the verdict (skip / warn)
    action: str | None = None  # the recommended action the finding carries (codes.yaml, or its own)
    args: tuple = ()  # extra command-line arguments of the case


# ---------------------------------------------------------------------------------------- gpu_health
def _xml(*edits: tuple[str, str]) -> str:
    """Derived from the genuine A100 output: each edit replaces one exact fragment (asserted present)."""
    text = A100
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


REMAP = "<remapped_rows>N/A</remapped_rows>"


def _remap(pending: str, failure: str, unc: int) -> tuple[str, str]:
    return REMAP, (
        f"<remapped_rows><remapped_row_corr>0</remapped_row_corr><remapped_row_unc>{unc}</remapped_row_unc>"
        f"<remapped_row_pending>{pending}</remapped_row_pending>"
        f"<remapped_row_failure>{failure}</remapped_row_failure></remapped_rows>"
    )


# R570+ prints these two elements after gpu_virtualization_mode (layout of the 575.51.02 output)
def _recovery(action: str, reset: str = "No") -> tuple[str, str]:
    anchor = "        <ibmnpu>"
    return anchor, (
        f"        <gpu_reset_status><reset_required>{reset}</reset_required>"
        f"<drain_and_reset_recommended>No</drain_and_reset_recommended></gpu_reset_status>\n"
        f"        <gpu_recovery_action>{action}</gpu_recovery_action>\n" + anchor
    )


GPU_XML = {
    "ecc_uncorrected": (("<dram_uncorrectable>N/A</dram_uncorrectable>", "<dram_uncorrectable>2</dram_uncorrectable>"),),
    "row_remap_pending": (_remap("Yes", "No", 2),),
    "row_remap_failed": (_remap("No", "Yes", 512),),
    "retired_pages_pending": (("<pending_retirement>N/A</pending_retirement>", "<pending_retirement>Yes</pending_retirement>"),),
    "recovery_action": (_recovery("Drain and Reset"),),
    "reset_required": (_recovery("None", reset="Yes"),),
    "throttle_hw_slowdown": (
        ("<clocks_throttle_reason_hw_slowdown>Not Active</clocks_throttle_reason_hw_slowdown>",
         "<clocks_throttle_reason_hw_slowdown>Active</clocks_throttle_reason_hw_slowdown>"),
    ),
    "throttle_thermal": (
        ("<clocks_throttle_reason_hw_thermal_slowdown>Not Active</clocks_throttle_reason_hw_thermal_slowdown>",
         "<clocks_throttle_reason_hw_thermal_slowdown>Active</clocks_throttle_reason_hw_thermal_slowdown>"),
    ),
    "pcie_width_degraded": (("<current_link_width>16x</current_link_width>", "<current_link_width>8x</current_link_width>"),),
    "pcie_gen_degraded": (("<current_link_gen>4</current_link_gen>", "<current_link_gen>3</current_link_gen>"),),
}

# Xid -> (code, action) from NVIDIA's catalog (xid_catalog.yaml) and AzureHPC NHC's hardware list
CRITICAL_XIDS = {48: ("XID_MEMORY_ERROR", "reset_gpu"), 62: ("XID_CRITICAL", "reset_gpu"),
                 63: ("XID_MEMORY_ERROR", "reset_gpu"), 64: ("XID_MEMORY_ERROR", "reset_gpu"),
                 74: ("XID_NVLINK_ERROR", "reset_gpu"), 79: ("GPU_FALLEN_OFF_BUS", "reboot"),
                 92: ("XID_MEMORY_ERROR", "reset_gpu"), 94: ("XID_MEMORY_ERROR", "reset_gpu"),
                 95: ("XID_MEMORY_ERROR", "reset_gpu"), 119: ("XID_GSP_ERROR", "reset_gpu"),
                 120: ("XID_GSP_ERROR", "reset_gpu"), 158: ("XID_CRITICAL", "reset_gpu"),
                 173: ("XID_UNKNOWN", "drain_and_service")}
APPLICATION_XIDS = {13: "XID_APPLICATION", 31: "XID_APPLICATION", 43: "XID_INFORMATIONAL", 45: "XID_APPLICATION"}


def _xid_line(xid: int) -> str:
    # the driver's line layout (see fixtures/kernel/dmesg_xids_derived.txt), Xid number varied
    return f"[  120.000000] NVRM: Xid ({A100_PCI}): {xid}, pid=1234, name=python3, injected by the fault catalog\n"


FALLEN_570 = (FIXTURES / "kernel" / "dmesg_fallen_off_bus_570.158.01.txt").read_text().replace("0000:b3:00.0", "0000:00:04.0")
# kernel logs of genuine driver errors, their bus ids moved onto the A100 of the nvidia-smi output
KERNEL_LOGS = {
    "xid_144_nonfatal": ("xid144_nonfatal_xid149_fatal_gpud1160.txt", [("0000:01:00", "0000:00:04")], 1),
    "xid_149_fatal": ("xid144_nonfatal_xid149_fatal_gpud1160.txt", [("0000:00:00", "0000:00:04")], None),
    "xid_154_recovery_action": ("dmesg_xid149_xid154_gb200_gpud-kmsg-test.txt", [("0019:01:00", "0000:00:04")], None),
    "gsp_heartbeat_timeout": ("journal_gsp_heartbeat_timeout_bazzite4449.txt", [], None),
    "gsp_rpc_timeout_xid119_log": ("dmesg-T_xid119_gsp_rpc_timeout_gpud.txt", [("0000:9b:00", "0000:00:04")], None),
    "rm_init_adapter_failed": ("syslog_rminitadapter_failed_gpu-operator1146.txt", [("0000:0a:00", "0000:00:04")], None),
    "nvlink_training_failed": ("journal_nvlink_postrxdetlinkmask_gh100_gpud1271.txt", [], None),
    "memory_poison_no_xid": ("dmesg_fbhub_poison_bad_register_read_550.90.07_ogkm688.txt", [], 2),
    "driver_error_unrecognised": ("dmesg_fbhub_poison_bad_register_read_550.90.07_ogkm688.txt", [], None),
}

GPU_FAULTS = [
    Fault("ecc_uncorrected", "gpu_health", "fail", "ecc_uncorrected_volatile", "ECC_UNCORRECTED", "cuda:0", "uncorrected ECC", action="reset_gpu"),
    Fault("row_remap_pending", "gpu_health", "fail", "row_remap_pending", "ROW_REMAP_PENDING", "cuda:0", "reset the GPU", action="reset_gpu"),
    Fault("row_remap_failed", "gpu_health", "fail", "row_remap_failure", "ROW_REMAP_FAILURE", "cuda:0", "RMA", action="drain_and_service"),
    Fault("row_remap_na", "gpu_health", "pass", "row_remap", "ROW_REMAP_UNAVAILABLE", "cuda:0", "could not run", "skip", "none"),
    Fault("retired_pages_pending", "gpu_health", "fail", "retired_pages_pending", "RETIRED_PAGES_PENDING", "cuda:0", action="reset_gpu"),
    Fault("recovery_action", "gpu_health", "fail", "recovery_action", "GPU_RECOVERY_ACTION", "cuda:0", "Drain and Reset", action="reset_gpu"),
    Fault("reset_required", "gpu_health", "fail", "reset_required", "GPU_RESET_REQUIRED", "cuda:0", action="reset_gpu"),
    Fault("throttle_hw_slowdown", "gpu_health", "fail", "clock_throttle", "CLOCK_THROTTLE_HW", "cuda:0", "hw_slowdown", action="drain_and_service"),
    Fault("throttle_thermal", "gpu_health", "fail", "clock_throttle", "CLOCK_THROTTLE_HW", "cuda:0", "hw_thermal_slowdown", action="drain_and_service"),
    Fault("pcie_width_degraded", "gpu_health", "fail", "pcie_width", "PCIE_WIDTH_DEGRADED", "cuda:0", "PCIe x8", action="drain_and_service"),
    Fault("pcie_gen_degraded", "gpu_health", "fail", "pcie_gen", "PCIE_GEN_DEGRADED", "cuda:0", "PCIe Gen3 at P0", action="drain_and_service"),
    # the link itself (Gen4) below what the node pool's SKU must have (Gen5), GPU idle at P0 in this output
    Fault("pcie_gen_below_sku", "gpu_health", "fail", "pcie_gen", "PCIE_GEN_DEGRADED", "cuda:0", "expected Gen5",
          action="drain_and_service", args=("--expect", "pcie_gen=5")),
    Fault("nvlinks_below_sku", "gpu_health", "fail", "nvlink", "NVLINK_DOWN", "cuda:0", "12 active, expected 18",
          action="reset_gpu", args=("--expect", "nvlinks_per_gpu=18")),
    Fault("nvlink_all_inactive", "gpu_health", "fail", "nvlink", "NVLINK_DOWN", "cuda:0", "all NVLink links inactive",
          action="reset_gpu", args=("--expect", "nvlinks_per_gpu=12")),
    *[Fault(f"xid_{x}", "gpu_health", "fail", "xid", code, "cuda:0", f"Xid {x} (", action=act)
      for x, (code, act) in CRITICAL_XIDS.items()],
    *[Fault(f"xid_{x}", "gpu_health", "pass", "xid", code, "cuda:0", "", "warn", "none") for x, code in APPLICATION_XIDS.items()],
    Fault("xid_144_nonfatal", "gpu_health", "pass", "xid", "XID_NVLINK_ERROR", "cuda:0", "", "warn", "none"),
    Fault("xid_149_fatal", "gpu_health", "fail", "xid", "XID_NVLINK_ERROR", "cuda:0", "Xid 149 (NVLINK_NETIR_ERROR", action="reset_gpu"),
    Fault("xid_154_recovery_action", "gpu_health", "fail", "xid", "GPU_RECOVERY_ACTION", "cuda:0", "Xid 154", action="reset_gpu"),
    Fault("fallen_off_bus_xid79", "gpu_health", "fail", "xid", "GPU_FALLEN_OFF_BUS", "cuda:0", "GPU has fallen off the bus", action="reboot"),
    Fault("fallen_off_bus_no_xid", "gpu_health", "fail", "gpu_fallen_off_bus", "GPU_FALLEN_OFF_BUS", "cuda:0", "fallen off the bus", action="reboot"),
    Fault("gsp_heartbeat_timeout", "gpu_health", "fail", "driver_log", "GSP_TIMEOUT", None, "heartbeat", action="reset_gpu"),
    Fault("gsp_rpc_timeout_xid119_log", "gpu_health", "fail", "driver_log", "GSP_TIMEOUT", "cuda:0", "", action="reset_gpu"),
    Fault("rm_init_adapter_failed", "gpu_health", "fail", "driver_log", "GPU_INIT_FAILED", "cuda:0", "RmInitAdapter failed", action="reboot"),
    Fault("nvlink_training_failed", "gpu_health", "fail", "driver_log", "NVLINK_TRAINING_FAILED", None, "postRxDetLinkMask", action="reset_gpu"),
    Fault("memory_poison_no_xid", "gpu_health", "fail", "driver_log", "GPU_MEMORY_ERROR", None, "", action="reset_gpu"),
    Fault("driver_error_unrecognised", "gpu_health", "fail", "driver_log", "DRIVER_ERROR_UNRECOGNISED", None,
          "", action="drain_and_service"),
    Fault("kernel_log_unreadable", "gpu_health", "pass", "xid", "KERNEL_LOG_UNREADABLE", None, "could not run", "skip", "none"),
    Fault("gpu_count_low", "gpu_health", "fail", "gpu_count", "GPU_COUNT_LOW", None, "expected 2 GPUs, found 1", action="reboot"),
    Fault("driver_unreachable", "gpu_health", "fail", "gpu_query", "GPU_DRIVER_UNREACHABLE", None, "couldn't communicate", action="reboot"),
    Fault("smi_gpu_lost_exit_15", "gpu_health", "fail", "gpu_query", "GPU_LOST", None, "exit 15", action="reboot"),
    Fault("dcgm_diag_fail", "gpu_health", "fail", "dcgm_page_retirement_row_remap", "DCGM_DIAG_FAIL", None, "Page Retirement",
          action="drain_and_service"),
    Fault("dcgm_exit_226_no_failed_test", "gpu_health", "fail", "dcgm_diag", "DCGM_DIAG_FAIL", None, "exited 226",
          action="drain_and_service"),
    Fault("dcgm_isolate_205", "gpu_health", "fail", "dcgm_page_retirement_row_remap", "DCGM_DIAG_ISOLATE", None, "",
          action="drain_and_service"),
    Fault("dcgmi_missing", "gpu_health", "pass", "dcgm_diag", "DCGM_UNAVAILABLE", None, "could not run", "skip", "none"),
]


def _run_gpu_health(run_inproc, tmp_path, fault: Fault):
    bindir = tmp_path / "bin"
    xml = tmp_path / "smi.xml"
    xml.write_text(_xml(*GPU_XML.get(fault.id, ())))
    smi_out, smi_rc = xml, 0
    if fault.id == "driver_unreachable":  # nvidia-smi's own message and exit code 9
        smi_out, smi_rc = FIXTURES / "smi" / "nvidia-smi_driver_not_loaded.txt", 9
    elif fault.id == "smi_gpu_lost_exit_15":  # its message for a lost GPU; exit 15 (nvidia-smi(1) RETURN VALUE)
        smi_out, smi_rc = FIXTURES / "smi" / "nvidia-smi_gpu_lost_owod81.txt", 15
    nvlink = tmp_path / "nvlink.txt"
    nvlink.write_text(_nvlink(fault.id))
    smi = shell_tool(bindir, "nvidia-smi", f'case "$1" in -q) cat "{smi_out}"; exit {smi_rc} ;; nvlink) cat "{nvlink}" ;; *) exit 3 ;; esac')
    log = tmp_path / "kmsg"
    log.write_text(_kernel_log(fault.id))
    dmesg_rc = 1 if fault.id == "kernel_log_unreadable" else 0
    dmesg = shell_tool(bindir, "dmesg", f'cat "{log}" {">&2" if dmesg_rc else ""}; exit {dmesg_rc}')
    args = ["--source", "nvidia-smi", "--nvidia-smi", smi, "--dmesg", dmesg, "--xid-window-hours", "24", *fault.args]
    args += ["--expected-gpus", "2" if fault.id == "gpu_count_low" else "1"]
    return run_inproc(gpu_health, *args, *_dcgmi(tmp_path, bindir, fault.id))


def _nvlink(fid: str) -> str:
    """`nvidia-smi nvlink -s` of the A100: the first GPU block of nccl-tests#228 (12 links active);
    for `nvlink_all_inactive` the B200's wording of leptonai/gpud#1085, its GPU number set to 0."""
    if fid == "nvlink_all_inactive":
        return (FIXTURES / "smi" / "nvidia-smi-nvlink-s_B200_all_inactive_gpud1085.txt").read_text().replace("GPU 2:", "GPU 0:")
    text = (FIXTURES / "smi" / "nvidia-smi-nvlink-s_2xA100-SXM4-80GB.txt").read_text()
    return text.split("GPU 1:")[0]


def _kernel_log(fid: str) -> str:
    if fid.startswith("xid_") and fid[4:].isdigit():
        return _xid_line(int(fid[4:]))
    if fid == "fallen_off_bus_xid79":
        return f"[  120.000000] NVRM: Xid ({A100_PCI}): 79, GPU has fallen off the bus\n"
    if fid == "fallen_off_bus_no_xid":
        return FALLEN_570
    if fid == "kernel_log_unreadable":
        return (FIXTURES / "kernel" / "dmesg_restricted.stderr").read_text()
    if fid in KERNEL_LOGS:
        name, moves, lines = KERNEL_LOGS[fid]
        text = (FIXTURES / "kernel" / name).read_text()
        for old, new in moves:
            text = text.replace(old, new)
        return "".join(text.splitlines(keepends=True)[:lines]) if lines else text
    return (FIXTURES / "kernel" / "dmesg_clean_6.18_firecracker.txt").read_text()


def _dcgmi(tmp_path, bindir, fid: str) -> list[str]:
    table = (FIXTURES / "dcgm" / "dcgmi-diag-r3_3.0.4_deployment_pass.txt").read_text()
    failed = table.replace("| Page Retirement/Row Remap | Pass  ", "| Page Retirement/Row Remap | Fail  ")
    out, rc = {"dcgm_diag_fail": (failed, 226), "dcgm_isolate_205": (failed, 205),
               "dcgm_exit_226_no_failed_test": (table, 226)}.get(fid, (None, 0))
    if out is None:
        # the other cases: a dcgmi that passes (dcgmi_missing: none installed, a visible not-run)
        if fid == "dcgmi_missing":
            return ["--dcgmi", "dcgmi-not-installed"]
        out = table
    (tmp_path / "dcgm.txt").write_text(out)
    return ["--dcgmi", shell_tool(bindir, "dcgmi", f'case " $* " in *" -j "*) echo "PARSE ERROR: Argument: -j" >&2; exit 1 ;; '
                                              f'*) cat "{tmp_path / "dcgm.txt"}"; exit {rc} ;; esac')]


# ------------------------------------------------------------------------------------------- dl_unit
def _scale_forward(monkeypatch, device: str, dtype: torch.dtype):
    orig = torch.matmul

    def fake(a, b, *args, **kw):
        out = orig(a, b, *args, **kw)
        if current_device() == device and out.dtype == dtype and "out" not in kw:
            return out * 1.1
        return out

    monkeypatch.setattr(torch, "matmul", fake)


class _BadGrad(torch.autograd.Function):
    """Identity forward; the gradient flowing back is 20 % off: a kernel wrong only in backward."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g * 1.2


def _scale_backward(monkeypatch, device: str, dtype: torch.dtype):
    orig = torch.matmul

    def fake(a, b, *args, **kw):
        out = orig(a, b, *args, **kw)
        if current_device() == device and out.dtype == dtype and out.requires_grad:
            return _BadGrad.apply(out)
        return out

    monkeypatch.setattr(torch, "matmul", fake)


def _bit_flip(monkeypatch, device: str, every_other: bool = False):
    orig = torch.matmul
    calls = {"n": 0}

    def fake(a, b, *args, **kw):
        out = orig(a, b, *args, **kw)
        if current_device() != device or out.dtype != torch.float32 or "out" in kw:
            return out
        calls["n"] += 1
        if every_other and calls["n"] % 2:
            return out
        flipped = out.detach().clone()
        flipped.view(-1)[7:8].view(torch.int32).bitwise_xor_(1)  # lowest mantissa bit of one element
        return out + (flipped - out).detach()

    monkeypatch.setattr(torch, "matmul", fake)


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
DL_FAULTS = [
    *[Fault(f"numerics_fwd_{d}", "dl_unit", "fail", f"matmul_{d}_fwd", "NUMERICS_ERROR", "cpu:2") for d in DTYPES],
    *[Fault(f"numerics_bwd_{d}", "dl_unit", "fail", f"matmul_{d}_bwd", "NUMERICS_ERROR", "cpu:2") for d in DTYPES],
    Fault("bit_flip", "dl_unit", "fail", "cross_device_agreement", "SDC_SUSPECT", "cpu:2", "silent-data-corruption"),
    Fault("intermittent", "dl_unit", "fail", "determinism", "NONDETERMINISTIC_GPU", "cpu:2"),
    Fault("corruption_under_load_gemm", "dl_unit", "fail", "gemm_result", "BENCH_RESULT_CORRUPT", "cpu:1", "sustained load"),
    # the lowest mantissa bit of one element, flipped from the 4th GEMM on: far inside any tolerance
    Fault("low_bit_flip_under_load_gemm", "dl_unit", "fail", "gemm_result", "BENCH_RESULT_CORRUPT", "cpu:1", "sustained load"),
    # a device whose GEMM is self-consistent but differs in one bit from its twin with the same inputs
    Fault("gemm_disagrees_across_devices", "dl_unit", "fail", "gemm_agreement", "SDC_SUSPECT", "cpu:2", "silent-data-corruption"),
    Fault("corruption_under_load_copy", "dl_unit", "fail", "membw_result", "BENCH_RESULT_CORRUPT", "cpu:1", "sustained load"),
    Fault("slow_gpu_vs_peers", "dl_unit", "fail", "gemm_fp32_tflops_vs_node_best", "GPU_SLOW_VS_PEERS", "cpu:1"),
    Fault("hbm_bandwidth_low", "dl_unit", "fail", "mem_bw_gbps", "MEMBW_LOW", "cpu:0", "GB/s <"),
]


def _run_dl_unit(run_inproc, monkeypatch, fault: Fault):
    fid = fault.id
    if fid.startswith("numerics_fwd_"):
        _scale_forward(monkeypatch, "cpu:2", DTYPES[fid.rsplit("_", 1)[1]])
    elif fid.startswith("numerics_bwd_"):
        _scale_backward(monkeypatch, "cpu:2", DTYPES[fid.rsplit("_", 1)[1]])
    elif fid == "bit_flip":
        _bit_flip(monkeypatch, "cpu:2")
    elif fid == "intermittent":
        _bit_flip(monkeypatch, "cpu:2", every_other=True)
    if fid.startswith(("numerics", "bit_flip", "intermittent")):
        return run_inproc(dl_unit, "--device", "cpu", "--cpu-devices", "3", "--only", "numerics,agreement")
    if fid.startswith(("corruption_under_load", "low_bit_flip")):
        kind = "copy" if fid.endswith("copy") else ("lowbit" if fid.startswith("low_bit") else "gemm")
        _hot_corruption(monkeypatch, "cpu:1", kind)
        return run_inproc(dl_unit, "--device", "cpu", "--cpu-devices", "2", "--only", "membw" if kind == "copy" else "gemm")
    if fid == "gemm_disagrees_across_devices":
        _hot_corruption(monkeypatch, "cpu:2", "always")
        return run_inproc(dl_unit, "--device", "cpu", "--cpu-devices", "3", "--only", "gemm")
    if fid == "slow_gpu_vs_peers":
        _slow_device(monkeypatch, "cpu:1")
        return run_inproc(dl_unit, "--device", "cpu", "--cpu-devices", "2", "--only", "gemm")
    # HBM bandwidth below the floor: the CPU floor is raised above what any CPU copy reaches
    return run_inproc(dl_unit, "--device", "cpu", "--cpu-devices", "1", "--only", "membw", "--min-membw-gbps", "100000")


def _hot_corruption(monkeypatch, device: str, kind: str):
    calls = {"n": 0}
    if kind in ("gemm", "lowbit", "always"):
        orig = torch.matmul
        after = 0 if kind == "always" else 3  # "always": from the very first result on

        def fake(a, b, *args, **kw):
            out = orig(a, b, *args, **kw)
            if "out" in kw and current_device() == device:
                calls["n"] += 1
                if calls["n"] > after:
                    if kind == "gemm":
                        kw["out"].view(-1)[5] = kw["out"].view(-1)[5] * 2 + 1
                    else:  # the lowest mantissa bit: a relative change of ~1e-7
                        kw["out"].view(-1)[5:6].view(torch.int32).bitwise_xor_(1)
            return out

        monkeypatch.setattr(torch, "matmul", fake)
        return
    orig_copy = torch.Tensor.copy_

    def fake_copy(self, src, *args, **kw):
        out = orig_copy(self, src, *args, **kw)
        if current_device() == device and self.dtype == torch.int32 and self.numel() > 1 << 16:
            calls["n"] += 1
            if calls["n"] > 3:
                self.view(-1)[77].bitwise_xor_(1 << 20)
        return out

    monkeypatch.setattr(torch.Tensor, "copy_", fake_copy)


def _slow_device(monkeypatch, device: str):
    """A GPU that computes right but slowly (clock-throttled): every GEMM step on it takes 15 times as
    long (CPU mode's relative tolerance only catches a device 10x slower than its twin)."""
    orig = torch.matmul

    def fake(a, b, *args, **kw):
        out = orig(a, b, *args, **kw)
        if "out" in kw and current_device() == device:
            for _ in range(14):
                orig(a, b, *args, **kw)
        return out

    monkeypatch.setattr(torch, "matmul", fake)


# -------------------------------------------------------------------------------------- nccl_loopback
H100 = "NVIDIA H100 80GB HBM3"
NCCL_FAULTS = [
    Fault("nccl_socket_fallback", "nccl_loopback", "fail", "transport", "NCCL_SOCKET_FALLBACK", None, "socket"),
    Fault("nccl_wrong_values_nccl_tests", "nccl_loopback", "fail", "allreduce_values", "NCCL_WRONG_VALUES", None, "4096 FAILED"),
    Fault("nccl_wrong_values_rank1", "nccl_loopback", "fail", "allreduce_values", "NCCL_WRONG_VALUES", "cpu-rank1", "seen by cpu-rank1"),
    Fault("nccl_low_busbw", "nccl_loopback", "fail", "busbw", "NCCL_BUSBW_LOW", "8GB", "GB/s <"),
    Fault("nccl_ib_completion_error", "nccl_loopback", "fail", "ib_errors", "IB_COMPLETION_ERROR", None, "completion"),
    Fault("nccl_tests_missing", "nccl_loopback", "error", "", "TOOL_MISSING", None, "not in PATH"),
    # nccl-tests >= 2.17.3 return testNumResults (7) from main on wrong values: a fail, not an error
    Fault("nccl_wrong_values_exit_7", "nccl_loopback", "fail", "allreduce_values", "NCCL_WRONG_VALUES", None, "4096 FAILED",
          action="drain_and_service"),
    Fault("nccl_fewer_hcas", "nccl_loopback", "fail", "ib_hcas", "IB_HCAS_MISSING", None, "found 1 usable HCA port(s)",
          action="check_fabric"),
    Fault("nccl_no_ib_device", "nccl_loopback", "fail", "ib_hcas", "NCCL_IB_NO_DEVICE", None, "socket", action="check_fabric"),
    Fault("nccl_p2p_shm_used", "nccl_loopback", "fail", "transport_isolation", "NCCL_P2P_SHM_USED", None, "P2P/SHM used",
          action="retest"),
    Fault("nccl_nvlink_unavailable", "nccl_loopback", "fail", "transport", "NCCL_NVLINK_UNAVAILABLE", None, "NVLink mode",
          action="reset_gpu", args=("--transport", "nvlink")),
    # NCCL chose IB (nv_peer_memory#78's head) but printed no channel line: isolation not proven, said so
    Fault("nccl_isolation_unproven", "nccl_loopback", "pass", "transport_isolation", "NCCL_TRANSPORT_UNKNOWN", None,
          "could not run", "skip", "retest"),
]


def _run_nccl(run_inproc, monkeypatch, tmp_path, fault: Fault):
    fid = fault.id
    if fid == "nccl_wrong_values_rank1":
        hook = rank1_wrong_value(tmp_path, "cd_catalog_rank1")
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.setenv("CLUSTER_DOCTOR_CPU_FAULT_HOOK", hook)
        return run_inproc(nccl_loopback, "--device", "cpu", "--cpu-ranks", "2")
    fixture, rc = {
        # NCCL 2.16.5 without libibverbs (nccl-tests#131); that run ended with wrong values: exit 1
        "nccl_socket_fallback": ("all_reduce_perf_socket_p2p_disabled_nccl2.16.5_head.txt", 1),
        "nccl_wrong_values_nccl_tests": ("all_reduce_perf_wrong_values_derived.txt", 1),
        "nccl_wrong_values_exit_7": ("all_reduce_perf_wrong_values_derived.txt", 7),
        "nccl_low_busbw": ("all_reduce_perf_slow_8G_derived.txt", 0),
        "nccl_ib_completion_error": ("all_reduce_perf_ib_completion_status12_nccl1698.txt", 3),
        "nccl_tests_missing": (None, 0),
        "nccl_fewer_hcas": ("all_reduce_perf_one_hca_of_8_derived.txt", 0),
        # NCCL 2.21.5: NET/IB: No device found, sockets; that run hung (testTimeout would be 4)
        "nccl_no_ib_device": ("all_reduce_perf_ib_no_device_socket_nccl2.21.5.txt", 4),
        # 2 x 8 H100 with the SHARP plugin: channels via P2P/CUMEM next to NET/IBext (nccl#1357)
        "nccl_p2p_shm_used": ("nccl_ibext_sharp_and_p2p_cumem_2x8xH100_nccl1357.txt", 0),
        # every channel via NET/IB/GDRDMA (nccl#707), in a run that asked for NVLink
        "nccl_nvlink_unavailable": ("nccl_channels_net_ib_gdrdma_nccl707.txt", 0),
        # NCCL 2.7.8 on 9 RoCE HCAs up to its threadThresholds line, no channel line (nv_peer_memory#78)
        "nccl_isolation_unproven": ("all_reduce_perf_2xA100_p2p_shm_disabled_roce_nccl2.7.8_head.txt", 0),
    }[fid]
    inv = [{"index": i, "name": H100, "uuid": f"GPU-{i}", "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0"} for i in range(8)]
    monkeypatch.setattr(nccl_loopback, "visible_gpus", lambda ctx: (8, inv, "CUDA"))
    binary = "all_reduce_perf-not-installed"
    if fixture:
        # channel lines alone, or a head that stops before the table: nccl-tests#252's table follows
        needs_table = "all_reduce_perf" not in fixture or fid == "nccl_isolation_unproven"
        table = f'; cat "{FIXTURES / "nccl" / "all_reduce_perf_ok_nccl-tests252.txt"}"' if needs_table else ""
        binary = shell_tool(tmp_path / "bin", "all_reduce_perf", f'cat "{FIXTURES / "nccl" / fixture}"{table}; exit {rc}')
    return run_inproc(nccl_loopback, "--device", "cuda", "--expected-gpus", "8", "--impl", "nccl-tests",
                      "--all-reduce-perf", binary, *fault.args)


# --------------------------------------------------------------------------------------- storage_fio
STORAGE_FAULTS = [
    Fault("storage_slow", "storage_fio", "fail", "seq_read_bw", "STORAGE_SLOW", "TARGET", "MiB/s <"),
    Fault("storage_full", "storage_fio", "fail", "seq_write_result", "STORAGE_FULL", "TARGET", "No space left"),
    Fault("storage_read_only", "storage_fio", "fail", "seq_write_result", "STORAGE_READ_ONLY", "TARGET", "Read-only"),
    Fault("storage_missing", "storage_fio", "fail", "storage_writable", "STORAGE_MISSING", "TARGET", "does not exist"),
    Fault("storage_fsync_error", "storage_fio", "fail", "seq_write_result", "STORAGE_IO_ERROR", "TARGET", "Input/output error"),
    Fault("fio_missing", "storage_fio", "error", "", "TOOL_MISSING", None, "fio not found"),
    # fio exits with the number of jobs that failed: an exit no job error explains is no pass
    Fault("fio_exit_unexplained", "storage_fio", "error", "fio_exit", "FIO_EXIT_UNEXPLAINED", "TARGET", "fio exited 2"),
    # the real fio and this machine's mount table: the output directory the harness created is on the
    # root filesystem (a pod without the results volume): not benchmarked, a deployment error
    Fault("storage_not_mounted", "storage_fio", "error", "storage_mount", "STORAGE_NOT_MOUNTED", "TARGET",
          "root filesystem", action="check_storage", args=("--mount", "volume")),
]


def _run_storage(run_inproc, tmp_path, fault: Fault):
    F = FIXTURES / "fio"
    stdout, stderr, rc = {
        "storage_slow": (F / "fio-3.33_seq_read_rate45m.json", None, 0),
        "storage_full": (F / "fio-3.33_enospc.stdout", F / "fio-3.33_enospc.stderr", 3),
        "storage_read_only": (F / "fio-3.33_erofs.stdout", F / "fio-3.33_erofs.stderr", 4),
        "storage_missing": (F / "fio-3.33_4patterns_buffered_ok.json", None, 0),
        "storage_fsync_error": (None, None, 1),
        "fio_missing": (None, None, 0),
        "fio_exit_unexplained": (F / "fio-3.33_4patterns_buffered_ok.json", None, 2),
        "storage_not_mounted": (None, None, 0),
    }[fault.id]
    if fault.id == "storage_fsync_error":
        # derived from the real ENOSPC run: errno 28 -> 5 (EIO), what fio reports when fsync fails
        text = (F / "fio-3.33_enospc.stdout").read_text().replace('"error" : 28', '"error" : 5')
        stdout = tmp_path / "eio.json"
        stdout.write_text(text)
    body = f'cat "{stdout}"' + (f'; cat "{stderr}" >&2' if stderr else "") + f"; exit {rc}"
    fio = shell_tool(tmp_path / "bin", "fio", f'case "$1" in --version) echo fio-3.33 ;; --enghelp) echo psync ;; *) {body} ;; esac')
    if fault.id == "storage_not_mounted":
        fio = shutil.which("fio") or "fio"  # the real one: the mount is judged after `fio --version`
    args = ["--device", "cpu", "--fio", "fio-not-installed" if fault.id == "fio_missing" else fio, *fault.args]
    if fault.id == "storage_slow":
        args += ["--profile", "default"]
    if fault.id == "storage_missing":
        args += ["--dir", str(tmp_path / "not-mounted")]
    return run_inproc(storage_fio, *args)


# ---------------------------------------------------------------------------------------- nvbandwidth
NVB = FIXTURES / "nvbandwidth"
NVB_WRITE, NVB_H2D = "device_to_device_memcpy_write_ce", "host_to_device_memcpy_ce"
NVBW_FAULTS = [
    # the README's 8-GPU matrix with GPUs 3 -> 5 at half their value (half the NVLinks lost)
    Fault("nvbw_pair_below_floor", "nvbandwidth", "fail", "nvbw_d2d_write_ce", "NVBW_D2D_LOW", "cuda:3,cuda:5",
          "GPUs 3 and 5", action="reset_gpu"),
    # no floor for the model, but its GPUs are NVLink-joined: the node's median is the bar
    Fault("nvbw_pair_slow_vs_peers", "nvbandwidth", "fail", "nvbw_d2d_write_ce", "NVBW_SLOW_VS_PEERS", "cuda:3,cuda:5",
          "below the node's median", action="drain_and_service", args=("--expect", "nvlinks_per_gpu=12")),
    # GPU 2's host link at half (a PCIe link trained at x8)
    Fault("nvbw_host_link_low", "nvbandwidth", "fail", "nvbw_h2d_ce", "NVBW_HOST_LOW", "cuda:2", "GPU 2 host link",
          action="drain_and_service"),
    Fault("nvbw_data_mismatch", "nvbandwidth", "fail", "nvbw_data_verification", "NVBW_DATA_MISMATCH", None,
          "did not match its pattern", action="drain_and_service"),
    Fault("nvbw_no_peer_access", "nvbandwidth", "fail", "nvbw_d2d_write_ce", "NVBW_NO_PEER_ACCESS", "cuda:0,cuda:1",
          "waived", action="reset_gpu", args=("--expect", "gpus=2")),  # a 2-GPU board under the 8-GPU SKU's label
    Fault("nvbw_missing", "nvbandwidth", "error", "", "TOOL_MISSING", None, "nvbandwidth not found"),
]


def _run_nvbw(run_inproc, tmp_path, fault: Fault):
    write = (NVB / "readme_v0.8_d2d_write_ce_8gpu.txt").read_text()
    h2d = (NVB / "readme_v0.8_h2d_ce_8gpu.txt").read_text()
    model, gpus, rc = "NVIDIA-A100-SXM4-80GB", "8", 0
    if fault.id == "nvbw_pair_below_floor":
        write = write.replace("276.60", "138.30")
    elif fault.id == "nvbw_pair_slow_vs_peers":
        write, model = write.replace("276.60", "200.00"), "Some-Future-GPU"
    elif fault.id == "nvbw_host_link_low":
        h2d = h2d.replace("25.97     26.00", "12.99     26.00")
    (tmp_path / "write.txt").write_text(write)
    (tmp_path / "h2d.txt").write_text(h2d)
    body = (f'for t in "$@"; do case "$t" in {NVB_WRITE}) cat "{tmp_path / "write.txt"}" ;; '
            f'{NVB_H2D}) cat "{tmp_path / "h2d.txt"}" ;; esac; done')
    if fault.id == "nvbw_data_mismatch":  # the tool's verification ASSERT: exit 1
        body, rc = f'cat "{NVB / "issue34_8xA100-SXM4-80GB_v0.7_verification_failed.txt"}"', 1
    elif fault.id == "nvbw_no_peer_access":  # two GPUs without peer mapping: waived, exit 0
        body, gpus = f'cat "{NVB / "issue13_2xRTX2080Ti_v0.2_waiving_d2d_write_ce.txt"}"', "2"
    tool = shell_tool(tmp_path / "bin", "nvbandwidth", f"{body}\nexit {rc}")
    testcases = NVB_WRITE if fault.id == "nvbw_no_peer_access" else f"{NVB_WRITE},{NVB_H2D}"
    return run_inproc(nvbandwidth, "--nvbandwidth", "nvbandwidth-not-installed" if fault.id == "nvbw_missing" else tool,
                      "--testcases", testcases, "--gpu-model", model, "--expected-gpus", gpus, *fault.args)


# ------------------------------------------------------------------------------------------ ib_health
IB_FAULTS = [
    Fault("ib_hca_missing", "ib_health", "fail", "ib_hca_count", "IB_HCAS_NOT_PRESENT", None, "7 of 8 expected",
          action="drain_and_service"),
    # gpud's ibstat of an H100 RoCE node: mlx5_11 Down / Polling
    Fault("ib_port_down_polling", "ib_health", "fail", "ib_port_state", "IB_PORT_DOWN", "mlx5_11:1", "DOWN / Polling",
          action="check_fabric"),
    Fault("ib_port_rate_low", "ib_health", "fail", "ib_port_rate", "IB_PORT_RATE_LOW", "mlx5_5:1", "200 Gb/s",
          action="check_fabric"),
    Fault("ib_port_width_degraded", "ib_health", "fail", "ib_port_width", "IB_PORT_WIDTH_DEGRADED", "mlx5_4:1", "2X",
          action="check_fabric"),
    Fault("ib_link_flapped", "ib_health", "fail", "ib_counters", "IB_LINK_FLAPPED", "mlx5_6:1", "link_downed +2",
          action="check_fabric"),
    Fault("ib_link_errors", "ib_health", "fail", "ib_counters", "IB_LINK_ERRORS", "mlx5_6:1", "symbol_error +40",
          action="check_fabric"),
    Fault("roce_link_errors", "ib_health", "fail", "ib_counters", "IB_LINK_ERRORS", "mlx5_3:1", "", action="check_fabric"),
    Fault("ib_discards_growing", "ib_health", "pass", "ib_counters", "IB_DISCARDS_GROWING", "mlx5_6:1", "", "warn", "none"),
    # the first sample's 15 overruns failed as link errors: past their carry window the counter is judged
    Fault("ib_counter_saturated", "ib_health", "pass", "ib_counters", "IB_COUNTER_SATURATED", "mlx5_1:1", "could not run",
          "skip", "none", args=("--link-error-window-hours", "0")),
    # a first sample is judged (13 million CRC / symbol errors on a ConnectX-6 Dx port; ucx#9590's
    # LinkDownedCounter 25), a cleared counter's new errors count, a flap fails for its window
    Fault("ib_first_sample_errors", "ib_health", "fail", "ib_counters", "IB_LINK_ERRORS", "mlx5_0:1", "",
          action="check_fabric"),
    Fault("ib_first_sample_flapped", "ib_health", "fail", "ib_counters", "IB_LINK_FLAPPED", "mlx5_6:1", "link_downed=25",
          action="check_fabric"),
    Fault("ib_counter_cleared_new_errors", "ib_health", "fail", "ib_counters", "IB_LINK_ERRORS", "mlx5_0:1",
          "3 new (cleared since", action="check_fabric"),
    Fault("ib_flap_window", "ib_health", "fail", "ib_counters", "IB_LINK_FLAPPED", "mlx5_6:1", "flap window",
          action="check_fabric"),
    # the expected set by name (a fleet's baselines naming the SKU's HCAs, as NHC's check_hw_ib
    # lines do): a storage HCA in InfiniBand mode no longer hides a missing compute HCA
    Fault("ib_hcas_named_storage_hides_missing", "ib_health", "fail", "ib_hca_count", "IB_HCAS_NOT_PRESENT", None,
          "missing: mlx5_6:1 (not in sysfs)", action="drain_and_service"),
    # gpud#752: ibstat panics on mlx5_8 (`stat of IB device 'mlx5_8' failed`): listed, unreadable, never dropped
    Fault("ib_device_unreadable", "ib_health", "fail", "ib_port_state", "IB_DEVICE_UNREADABLE", "mlx5_8",
          "unreadable", action="drain_and_service"),
    # nothing names the rails: the PCIe topology does (an HCA under a GPU's switch, as NCCL pairs them), so a
    # storage HCA in InfiniBand mode no longer hides a missing compute rail by count, and the GPU is named
    Fault("ib_topology_storage_hides_missing_rail", "ib_health", "fail", "ib_hca_count", "IB_HCAS_NOT_PRESENT", None,
          "", action="drain_and_service"),
]
H100_IB_PORTS = ["mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"]
ROCE_400G = "=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11"


def _run_ib(run_inproc, tmp_path, h, fault: Fault):
    """Two runs, as in production: the first records the counters, the fault happens, the second judges
    (the GPU cases: one run, or three, as each says)."""
    boot = tmp_path / "boot_id"
    boot.write_text("8a1f5a0e-2f1c-4c55-9a8e-0c1f7f4a2b11\n")
    args = ["--boot-id-file", str(boot), "--gpu-model", "NVIDIA-H100-80GB-HBM3", *fault.args]
    if fault.id in ISSUE29_IB:
        return ISSUE29_IB[fault.id](run_inproc, tmp_path, h, args)
    if fault.id.startswith("roce") or fault.id == "ib_port_down_polling":
        root = h.roce_ib_tree(tmp_path)
        stats = tmp_path / "ethtool.txt"
        stats.write_text((FIXTURES / "ib" / "ethtool-S_mlx5_connectx4_ethq8_excerpt.txt").read_text())
        args += ["--ib-hca", ROCE_400G, "--ethtool", shell_tool(tmp_path / "bin", "ethtool", f'cat "{stats}"')]
        run_inproc(ib_health, "--sysfs-root", str(root), *args)
        stats.write_text(stats.read_text().replace("symbol_err: 0", "symbol_err: 3"))
        return run_inproc(ib_health, "--sysfs-root", str(root), *args)
    root = h.h100_ib_tree(tmp_path, cleared=True)
    if fault.id == "ib_counter_saturated":  # the published 4-bit maximum, on a first sample already
        h.ib_counter(root, "mlx5_1", "excessive_buffer_overrun_errors", 15)
    run_inproc(ib_health, "--sysfs-root", str(root), *args)
    port = root / {"ib_port_rate_low": "mlx5_5", "ib_port_width_degraded": "mlx5_4"}.get(fault.id, "mlx5_6") / "ports" / "1"
    change = {"ib_link_flapped": ("link_downed", 2), "ib_link_errors": ("symbol_error", 40),
              "ib_discards_growing": ("port_xmit_discards", 120)}.get(fault.id)
    if change:
        h.ib_counter(root, "mlx5_6", *change)
    elif fault.id == "ib_hca_missing":
        shutil.rmtree(root / "mlx5_9")
    elif fault.id == "ib_port_rate_low":
        (port / "rate").write_text("200 Gb/sec (4X HDR)\n")
    elif fault.id == "ib_port_width_degraded":
        (port / "rate").write_text("200 Gb/sec (2X NDR)\n")
    return run_inproc(ib_health, "--sysfs-root", str(root), *args)


def _ib_first_sample_errors(run_inproc, tmp_path, h, args):
    """The RoCE node's first sample: every named port's `ethtool -S` shows the 13 million CRC / symbol
    errors of a ConnectX-6 Dx port with an optic it would not drive."""
    root = h.roce_ib_tree(tmp_path)
    stats = FIXTURES / "ib" / "ethtool-S_grep_err_cx6dx_100g_crc_symbol_13M_excerpt.txt"
    tool = shell_tool(tmp_path / "bin", "ethtool", f'cat "{stats}"')
    return run_inproc(ib_health, "--sysfs-root", str(root), *args, "--ib-hca", ROCE_400G, "--ethtool", tool)


def _ib_first_sample_flapped(run_inproc, tmp_path, h, args):
    """ucx#9590's HCA port (LinkDownedCounter 25, PortRcvErrors 26, PortXmitDiscards 2846) as mlx5_6's
    sysfs counters, on the first run."""
    root = h.h100_ib_tree(tmp_path, cleared=True)
    for name, value in (("link_downed", 25), ("port_rcv_errors", 26), ("port_xmit_discards", 2846)):
        h.ib_counter(root, "mlx5_6", name, value)
    return run_inproc(ib_health, "--sysfs-root", str(root), *args)


def _ib_counter_cleared_new_errors(run_inproc, tmp_path, h, args):
    """mlx5_0's published port_rcv_errors (14), then `perfquery -R` and 3 new ones: lower than last time."""
    root = h.h100_ib_tree(tmp_path, cleared=True)
    h.ib_counter(root, "mlx5_0", "port_rcv_errors", 14)
    run_inproc(ib_health, "--sysfs-root", str(root), *args)
    h.ib_counter(root, "mlx5_0", "port_rcv_errors", 3)
    return run_inproc(ib_health, "--sysfs-root", str(root), *args)


def _ib_flap_window(run_inproc, tmp_path, h, args):
    """link_downed 0 -> 1 seen by the second run; the third sees no growth, the flap is inside 6 h."""
    root = h.h100_ib_tree(tmp_path, cleared=True)
    run_inproc(ib_health, "--sysfs-root", str(root), *args)
    h.ib_counter(root, "mlx5_6", "link_downed", 1)
    run_inproc(ib_health, "--sysfs-root", str(root), *args)
    return run_inproc(ib_health, "--sysfs-root", str(root), *args)


def _h100_with_storage_hca(tmp_path, h):
    """gpud's HGX H100 tree and a storage HCA in InfiniBand mode (mlx5_2, a copy of mlx5_0's files)."""
    root = h.h100_ib_tree(tmp_path, cleared=True)
    shutil.copytree(root / "mlx5_0", root / "mlx5_2")
    return root


def _ib_hcas_named_storage_hides_missing(run_inproc, tmp_path, h, args):
    import yaml

    root = _h100_with_storage_hca(tmp_path, h)
    shutil.rmtree(root / "mlx5_6")  # 8 InfiniBand ports still: 7 compute + 1 storage
    data = yaml.safe_load((h.SUITES_DIR / "baselines.yaml").read_text())
    data["models"]["h100-sxm"]["expect"]["hca_ports"] = [f"{d}:1" for d in H100_IB_PORTS]
    fleet = tmp_path / "fleet-baselines.yaml"
    fleet.write_text(yaml.safe_dump(data))
    return run_inproc(ib_health, "--sysfs-root", str(root), *args, "--baselines", str(fleet))


def _ib_device_unreadable(run_inproc, tmp_path, h, args):
    root = _h100_with_storage_hca(tmp_path, h)  # 8 readable InfiniBand ports with mlx5_8 gone
    shutil.rmtree(root / "mlx5_8")
    (root / "mlx5_8").symlink_to(tmp_path / "devices" / "pci0000:d0" / "0000:d1:00.0" / "infiniband" / "mlx5_8")
    return run_inproc(ib_health, "--sysfs-root", str(root), *args)


def _ib_topology_storage_hides_missing_rail(run_inproc, tmp_path, h, args):
    """gpud's tree on the DGX H100 topology (fixtures/SOURCES.md), mlx5_6 (GPU 4's rail) gone and a
    storage HCA at the DGX's storage slot: 8 InfiniBand ports, 8 expected; the GPUs from nvidia-smi."""
    from unittest import mock

    root = _h100_with_storage_hca(tmp_path, h)
    devices = h.h100_pci(root)
    h.place_hca(root, "mlx5_2", f"0000:{h.DGX_H100_STORAGE[0]}:00.0")
    shutil.rmtree(root / "mlx5_6")
    smi = h.h100_nvidia_smi(lambda name, body: Path(shell_tool(tmp_path / "bin", name, body)))
    with mock.patch.dict(os.environ, {"PATH": f"{smi}:{os.environ['PATH']}"}):
        ns = run_inproc(ib_health, "--sysfs-root", str(root), "--pci-root", str(devices), *args)
    c = next(c for c in ns.result["checks"] if c["name"] == "ib_hca_count")
    assert "GPU 4 (0000:9d:00.0) has no InfiniBand HCA under its PCIe switch" in c["message"], c["message"]
    return ns


ISSUE29_IB = {"ib_topology_storage_hides_missing_rail": _ib_topology_storage_hides_missing_rail, "ib_first_sample_errors": _ib_first_sample_errors, "ib_first_sample_flapped": _ib_first_sample_flapped,
              "ib_counter_cleared_new_errors": _ib_counter_cleared_new_errors, "ib_flap_window": _ib_flap_window,
              "ib_hcas_named_storage_hides_missing": _ib_hcas_named_storage_hides_missing,
              "ib_device_unreadable": _ib_device_unreadable}


# ---------------------------------------------- what the node should have, NIC selectors as NCCL reads them
# The GPU count bar is the SKU's whatever capacity says; NCCL_IB_HCA prefixes and exclusions are read as
# NCCL reads them (nic_selector) in ib_health and nccl_loopback, and HCAs are compared by name or by an
# exact count of rails, never `>=`.
COUNT_FAULTS = [
    # a GPU that did not enumerate after a reboot: capacity and the GFD label say 7 too, the HGX board 8
    Fault("gpu_count_seven_of_seven_on_hgx", "gpu_health", "fail", "gpu_count", "GPU_COUNT_LOW", None,
          "expected 8 GPUs, found 7", action="reboot"),
    # NCCL_IB_HCA=mlx5 takes every mlx5 HCA: the 8-NIC floor (40.05 GB/s) judges a run at 25.36 GB/s,
    # where a prefix read as one exact name made it one NIC shared by 8 GPUs (5.006 GB/s) and a pass
    Fault("nccl_prefix_selector_slow", "nccl_loopback", "fail", "busbw", "NCCL_BUSBW_LOW", "8GB", "GB/s <",
          args=("--ib-hca", "mlx5")),
    # the same prefix, NCCL found 1 HCA of the node's 8: never "1 of 1 expected"
    Fault("nccl_prefix_selector_missing_rails", "nccl_loopback", "fail", "ib_hcas", "IB_HCAS_MISSING", None,
          "found 1 usable HCA port(s)", action="check_fabric", args=("--ib-hca", "mlx5")),
    # gpud's HGX H100 tree with mlx5_6 gone, NCCL_IB_HCA=mlx5: the Ethernet bond the prefix also takes is
    # no rail, 7 of 8 (it used to read "0 of 1 ... missing: mlx5" on a healthy node too)
    Fault("ib_prefix_selector_missing_hca", "ib_health", "fail", "ib_hca_count", "IB_HCAS_NOT_PRESENT", None,
          "7 of 8 expected", action="drain_and_service"),
    # the healthy tree, NCCL_IB_HCA=mlx5: every rail there; the bond is named as not a rail, never a fail
    Fault("ib_prefix_selector_healthy", "ib_health", "pass", "ib_hca_count", "IB_HCAS_EXTRA", None, "", "warn",
          "none"),
]


def _count_gpu_health(run_inproc, monkeypatch, tmp_path, fault: Fault, h):
    """Seven healthy H100s through the fake NVML; Kubernetes sends --node-gpus 7 --expected-gpus 7."""
    from tests.support.fake_nvml import FakeNVML

    nv = FakeNVML(sick=False, count=7)
    monkeypatch.setattr(gpu_health, "nvml_init", lambda: nv)
    return run_inproc(gpu_health, "--source", "nvml", *gpu29._log_and_dcgmi(tmp_path, fault.id), "--node-gpus", "7",
                      "--expected-gpus", "7", "--xid-listen-seconds", "0")


def _count_nccl(run_inproc, monkeypatch, tmp_path, fault: Fault, h):
    fixture = {"nccl_prefix_selector_slow": "all_reduce_perf_slow_8G_derived.txt",
               "nccl_prefix_selector_missing_rails": "all_reduce_perf_one_hca_of_8_derived.txt"}[fault.id]
    inv = [{"index": i, "name": H100, "uuid": f"GPU-{i}", "pci_bus_id": f"00000000:{0x18 + i:02X}:00.0"} for i in range(8)]
    monkeypatch.setattr(nccl_loopback, "visible_gpus", lambda ctx: (8, inv, "CUDA"))
    binary = shell_tool(tmp_path / "bin", "all_reduce_perf", f'cat "{FIXTURES / "nccl" / fixture}"; exit 0')
    return run_inproc(nccl_loopback, "--device", "cuda", "--expected-gpus", "8", "--impl", "nccl-tests",
                      "--all-reduce-perf", binary, "--sysfs-root", str(tmp_path / "no-sysfs"), *fault.args)


def _count_ib(run_inproc, monkeypatch, tmp_path, fault: Fault, h):
    boot = tmp_path / "boot_id"
    boot.write_text("8a1f5a0e-2f1c-4c55-9a8e-0c1f7f4a2b11\n")
    root = h.h100_ib_tree(tmp_path, cleared=True)
    if fault.id == "ib_prefix_selector_missing_hca":
        shutil.rmtree(root / "mlx5_6")
    return run_inproc(ib_health, "--sysfs-root", str(root), "--boot-id-file", str(boot), "--gpu-model",
                      "NVIDIA-H100-80GB-HBM3", "--ib-hca", "mlx5")


COUNT_RUNNERS = {"gpu_count_seven_of_seven_on_hgx": _count_gpu_health, "nccl_prefix_selector_slow": _count_nccl,
                 "nccl_prefix_selector_missing_rails": _count_nccl,
                 "ib_prefix_selector_missing_hca": _count_ib, "ib_prefix_selector_healthy": _count_ib}


# the GPU classes, run by tests/support/catalog_gpu_cases.py
GPU29_FAULTS = [Fault(**case) for case in gpu29.CASES]
# fatal Xids until a reset, failures carried forward, key checks judged: catalog_judged_cases.py
JUDGED_FAULTS = [Fault(**case) for case in judged.CASES]
ALL = GPU_FAULTS + DL_FAULTS + NCCL_FAULTS + STORAGE_FAULTS + NVBW_FAULTS + IB_FAULTS + GPU29_FAULTS
ALL = ALL + COUNT_FAULTS + JUDGED_FAULTS


@pytest.mark.parametrize("fault", ALL, ids=[f.id for f in ALL])
def test_fault_is_caught(fault, run_inproc, monkeypatch, tmp_path, h):
    # the node booted an hour ago: the kernel-log lines (uptime stamps 120 s .. 1 h) are recent
    uptime = judged.UPTIME.get(fault.id, gpu29.UPTIME.get(fault.id, 3600.0))
    monkeypatch.setattr(gpu_health.kernel_log, "uptime_seconds", lambda: uptime)
    if fault.id in COUNT_RUNNERS:
        ns = COUNT_RUNNERS[fault.id](run_inproc, monkeypatch, tmp_path, fault, h)
    elif fault.id in judged.IDS:
        ns = judged.run(fault, run_inproc, monkeypatch, tmp_path, h)
    elif fault.id in gpu29.IDS:
        ns = gpu29.run(fault, run_inproc, monkeypatch, tmp_path)
    elif fault.suite == "gpu_health":
        ns = _run_gpu_health(run_inproc, tmp_path, fault)
    elif fault.suite == "dl_unit":
        ns = _run_dl_unit(run_inproc, monkeypatch, fault)
    elif fault.suite == "nccl_loopback":
        ns = _run_nccl(run_inproc, monkeypatch, tmp_path, fault)
    elif fault.suite == "nvbandwidth":
        ns = _run_nvbw(run_inproc, tmp_path, fault)
    elif fault.suite == "ib_health":
        ns = _run_ib(run_inproc, tmp_path, h, fault)
    else:
        ns = _run_storage(run_inproc, tmp_path, fault)
    h.check_artifacts(ns, status=fault.status, suite=fault.suite)
    assert fault.reason in ns.summary["reason"], ns.summary["reason"]
    if not fault.check:  # suite-level error: the verdict's code says why
        assert ns.summary["code"] == fault.code
        return
    want = fault.check_status or fault.status
    if fault.device == "TARGET":  # storage checks name the directory they tested
        target = tmp_path / ("not-mounted" if fault.id == "storage_missing" else "out")
        fault = dataclasses.replace(fault, device=str(target))
    hits = [c for c in ns.result["checks"] if c["name"] == fault.check and c["status"] == want]
    assert hits, [(c["name"], c["status"]) for c in ns.result["checks"] if c["status"] != "pass"]
    assert fault.device in {c["device"] for c in hits}, [c["device"] for c in hits]
    mine = [c for c in hits if c["device"] == fault.device and c["code"] == fault.code]
    assert mine, {c["code"] for c in hits if c["device"] == fault.device}
    if fault.action:
        assert {c["action"] for c in mine} == {fault.action}, [c["action"] for c in mine]
    if fault.status == "fail":
        assert ns.summary["code"] == fault.code or any(c.get("code") == fault.code for c in ns.summary["checks"])
        assert ns.summary["action"] == codes.most_severe(c["action"] for c in ns.result["checks"] if c["status"] == "fail")
    if fault.status == "pass":
        assert ns.summary["action"] == "none"
    if want == "skip":
        assert ns.summary["incomplete"] is True


# ------------------------------------------------------------------------------------- the documents
# The fault classes and the catalog cases that prove each one is caught: remove a behaviour
# and its cases fail. FAULTS.md carries the same table (checked below).
CLASSES = {
    "counts against what the node should have": [
        "gpu_count_low", "nccl_fewer_hcas", "nccl_no_ib_device", "nvlinks_below_sku", "pcie_gen_below_sku",
        "ib_hca_missing", "ib_port_width_degraded", "nvbw_no_peer_access"],
    "tool exit codes read as the tool defines them": [
        "nccl_wrong_values_nccl_tests", "nccl_wrong_values_exit_7", "nccl_ib_completion_error", "dcgm_exit_226_no_failed_test",
        "dcgm_isolate_205", "driver_unreachable", "smi_gpu_lost_exit_15", "fio_exit_unexplained", "nvbw_data_mismatch"],
    "driver errors fail closed": [
        "xid_158", "xid_173", "xid_149_fatal", "xid_154_recovery_action", "gsp_heartbeat_timeout", "gsp_rpc_timeout_xid119_log",
        "rm_init_adapter_failed", "nvlink_training_failed", "memory_poison_no_xid", "driver_error_unrecognised",
        "fallen_off_bus_no_xid"],
    "checks never vanish": ["dcgmi_missing", "row_remap_na", "nvlink_all_inactive", "kernel_log_unreadable",
                            "ib_counter_saturated", "thermal_violation_not_supported"],
    "counters judged by their growth since the previous run, not by old values": [
        "ib_link_flapped", "ib_link_errors", "roce_link_errors", "ib_discards_growing",
        "thermal_violation_under_load", "thermal_violation_growing", "thermal_violation_after_reboot"],
    "a slow link named by its GPUs, against the SKU and the node's own median": [
        "nvbw_pair_below_floor", "nvbw_pair_slow_vs_peers", "nvbw_host_link_low"],
    "bit-exact silent-data-corruption checks": [
        "low_bit_flip_under_load_gemm", "gemm_disagrees_across_devices", "bit_flip", "intermittent"],
    "each code one condition, the most specific": [
        "nccl_p2p_shm_used", "nccl_nvlink_unavailable", "nccl_socket_fallback", "xid_74", "fallen_off_bus_xid79"],
    "an action with every finding": ["recovery_action", "xid_154_recovery_action", "dcgm_isolate_205", "storage_full"],
    "the GPU count from what the node should have (its capacity, label or SKU), never from what is left of it": [
        "gpu_count_below_node_count"],
    "per-GPU results of every tool matched against the GPUs the node should have": [
        "nvlink_block_unmapped", "dcgm_gpu_not_covered", "nvbw_gpu_missing_from_matrix"],
    "fatal events stay fatal until a reset is shown": [
        "xid79_three_days_no_reset", "rm_init_adapter_three_days_gpu_missing"],
    "a kernel log that does not reach back to the boot is not clean": [
        "kernel_log_empty_journal", "kernel_log_wrapped"],
    "bits that flip between two identical runs on a single GPU are a finding": ["determinism_single_device"],
    # fabric and storage
    "HCAs: the expected set by name (a storage HCA no longer hides a missing compute one); a listed HCA that cannot "
    "be read fails": ["ib_hcas_named_storage_hides_missing", "ib_device_unreadable"],
    "IB counters: a first sample against absolute thresholds, a cleared counter's new errors, a flap failing for its "
    "window": ["ib_first_sample_errors", "ib_first_sample_flapped", "ib_counter_cleared_new_errors",
                          "ib_flap_window"],
    "storage: fio measures the volume, never the container's own disk": ["storage_not_mounted"],
    "a check that could not prove its point is not run, always present": ["nccl_isolation_unproven"],
    "floors per link type: link layer, rate and NIC, each with its source": [],
    "the bar is what the node should have: the SKU's GPUs whatever capacity says, NCCL_IB_HCA read as NCCL "
    "reads it, HCAs compared by name or an exact count of rails": [
        "gpu_count_seven_of_seven_on_hgx", "nccl_prefix_selector_slow", "nccl_prefix_selector_missing_rails",
        "ib_prefix_selector_missing_hca", "ib_prefix_selector_healthy", "ib_topology_storage_hides_missing_rail"],
    # fatal Xids until a reset, failures carried forward, key checks judged
    "every Xid whose NVIDIA action is a GPU reset or a reboot stays fatal until the log shows the reset; a line "
    "caused by an earlier Xid is judged as that Xid": [
        "xid_reset_gpu_30h_no_reset", "xid45_caused_by_xid149_line_gone", "xid137_nvlink_priv_error"],
    "a failure carries forward: a port that failed with link errors fails the quiet retest for its window "
    "unless it was reset or replaced": ["ib_link_errors_carried_to_quiet_retest"],
    "checks that vanish or read as could not run: the fabric on an NVSwitch SKU is a visible not-run, a hung "
    "diagnostic an error; the GPU's modes judged against the node pool": [
        "fabric_not_reported_on_nvswitch_sku", "dcgm_diag_hung", "mig_enabled_on_training_pool",
        "persistence_off_on_training_pool"],
    "a key measurement that could not be judged is never a pass: an unknown model is a no-baseline finding "
    "and an error; ECC off is a warning wherever the GPU has ECC": [
        "nvbw_unknown_model_no_baseline", "ecc_disabled_unknown_model"],
}


def _table(heading: str) -> list[list[str]]:
    text = FAULTS_MD.read_text().split(heading, 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in text.splitlines() if line.startswith("| ")]
    return rows[1:]  # without the header


def test_faults_md_lists_every_catalog_case_and_nothing_else():
    documented = {}
    tests_dir = Path(__file__).resolve().parent
    for row in _table("## Faults"):
        fault, suite, check, status, code, action, test = row
        code = code.strip("`")
        assert code in codes.registry(), f"FAULTS.md: unknown code {code}"
        assert action.strip("`") in codes.ACTIONS, f"FAULTS.md: {fault}: action {action}"
        for ref in re.findall(r"`([^`]+)`", test):
            if ref.startswith("catalog:"):
                documented[ref.split(":", 1)[1]] = (status.split()[0], code, action.strip("`"))
            else:  # file::function of another suite test
                file, _, func = ref.partition("::")
                assert f"def {func}(" in (tests_dir / file).read_text(), ref
    assert set(documented) == {f.id for f in ALL}
    for f in ALL:  # the table says what the case asserts
        want = f.check_status or f.status
        assert documented[f.id][:2] == (want, f.code), (f.id, documented[f.id])
        if f.action:
            assert documented[f.id][2] == f.action, (f.id, documented[f.id])


def test_faults_md_names_the_classes_and_their_cases():
    got = {row[0]: set(re.findall(r"`catalog:([^`]+)`", row[1])) for row in _table("## Classes")}
    assert got == {k: set(v) for k, v in CLASSES.items()}
    ids = {f.id for f in ALL}
    assert set().union(*got.values()) <= ids


def test_faults_md_states_the_principle():
    head = FAULTS_MD.read_text().split("## ", 1)[0]
    for words in ("positive evidence", "unrecognised", "could not run"):
        assert words in head, words


def test_codes_table_in_faults_md_is_generated_from_codes_yaml():
    text = FAULTS_MD.read_text()
    assert codes.markdown_table() in text, "regenerate: python -m cluster_doctor_suites.codes"


def test_every_code_used_in_the_suites_is_documented():
    src = "".join(p.read_text() for p in FAULTS_MD.parent.rglob("*.py"))
    used = set(re.findall(r'code="([A-Z][A-Z0-9_]+)"', src)) | set(re.findall(r'"([A-Z][A-Z0-9]*_[A-Z0-9_]+)"', src)) & set(codes.registry())
    data = "".join(p.read_text() for p in FAULTS_MD.parent.rglob("*.yaml") if p.name != "codes.yaml")
    used |= set(re.findall(r"code: ([A-Z_]+)", data))
    from cluster_doctor_suites.checkers import xid

    used |= set(xid.CATEGORY_CODES.values())
    assert used and used <= set(codes.registry()), used - set(codes.registry())
    for spec in codes.registry().values():
        assert spec["meaning"] and spec["advice"] and set(spec["status"]) <= set(codes.STATUSES)
        assert spec["action"] in codes.ACTIONS
