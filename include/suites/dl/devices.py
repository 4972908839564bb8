"""The devices dl_unit tests (every CUDA GPU, or virtual devices on the CPU), which one is computing
right now, and whether an error it raised puts the hardware at fault."""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ..harness.checks import Check, SuiteError
from ..harness.context import Context
from ..harness.inventory import gpu_inventory
from ..harness.text import one_line

# CUDA error texts that mean the hardware is at fault, not the software (-> fail, not error)
HW_ERRORS = (
    "uncorrectable ecc",
    "ecc error",
    "fallen off the bus",
    "gpu is lost",
    "nvlink",
    "xid",
    "unspecified launch failure",
    "illegal instruction",
    "hardware stack error",
)

_current: str | None = None


def current_device() -> str | None:
    """Name of the device the suite is computing on right now (for logs and fault-injection tests)."""
    return _current


@contextmanager
def on_device(name: str | None):
    global _current
    prev, _current = _current, name
    try:
        yield
    finally:
        _current = prev


@dataclass
class Dev:
    name: str  # cuda:3 / cpu:1
    tdev: Any  # torch.device
    info: dict = field(default_factory=dict)
    broken: str | None = None  # set after a hardware-class error: later tests skip the device

    @property
    def where(self) -> str:
        pci = self.info.get("pci_bus_id")
        return f" ({pci})" if pci else ""


def classify(exc: BaseException | str) -> str:
    """'fail' when the error text names a hardware fault, else 'error' (the software or the setup)."""
    text = str(exc).lower()
    return "fail" if any(h in text for h in HW_ERRORS) else "error"


def sync(torch: Any, devs: list[Dev]) -> None:
    for d in devs:
        if d.tdev.type == "cuda":
            torch.cuda.synchronize(d.tdev)


def setup(ctx: Context) -> tuple[Any, list[Dev]]:
    """Import torch, set it up for bitwise-reproducible kernels and list the devices to test (none
    when the GPU count check says the suite cannot go on)."""
    if not ctx.cpu:
        # cuda:N == nvidia-smi index N; deterministic cuBLAS (required for bitwise agreement)
        os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch

    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    ctx.environment.update(torch=torch.__version__, cuda=torch.version.cuda)
    return torch, (_cpu_devices(ctx, torch) if ctx.cpu else _cuda_devices(ctx, torch))


def _cpu_devices(ctx: Context, torch: Any) -> list[Dev]:
    a = ctx.args
    if a.cpu_devices < 1:
        raise SuiteError("--cpu-devices must be >= 1")
    if a.expected_gpus:
        inv, _, src = gpu_inventory()
        ctx.check_gpu_count(len(inv), source=src)
    else:
        ctx.check_gpu_count(0, source="CPU mode")
    devs = [Dev(f"cpu:{i}", torch.device("cpu"), {"name": "cpu"}) for i in range(a.cpu_devices)]
    ctx.environment.update(gpu_model=a.gpu_model, gpu_count=0, baseline="cpu", cpu_devices=a.cpu_devices)
    # one thread: CPU mode proves the code paths; OpenMP threads spinning against a busy CI machine
    # make timings 100x worse instead of 2x better
    torch.set_num_threads(1)
    return devs


def _cuda_devices(ctx: Context, torch: Any) -> list[Dev]:
    why = ""
    try:
        torch.cuda.init()
    except Exception as exc:  # e.g. "system not yet initialized" (fabric manager), driver mismatch
        why = f"; CUDA init failed: {one_line(exc, 150)}"
    n = torch.cuda.device_count() if not why else 0
    inv, driver, inv_source = gpu_inventory()
    ctx.environment.update(driver=driver, gpu_count=n)
    if not ctx.check_gpu_count(n, source="CUDA" + why):
        return []
    if not os.environ.get("CUDA_VISIBLE_DEVICES"):
        missing = cuda_devices_check(n, len(inv), inv_source)
        if missing:
            ctx.record(missing)
    devs = [Dev(f"cuda:{i}", torch.device("cuda", i), _cuda_info(torch, i)) for i in range(n)]
    ctx.environment["gpus"] = [d.info for d in devs]
    try:
        v = torch.cuda.nccl.version()
        ctx.environment["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:
        pass
    return devs


def cuda_devices_check(cuda: int, driver: int, source: str) -> Check | None:
    """A fail when the driver sees a GPU that CUDA cannot open (lost, fabric not ready, ...)."""
    if driver <= cuda:
        return None
    return Check("cuda_devices", "fail", value=cuda, unit="GPUs", threshold=f"== {driver}",
                 message=f"{source} sees {driver} GPUs but CUDA can use only {cuda}")


def _cuda_info(torch: Any, i: int) -> dict:
    p = torch.cuda.get_device_properties(i)
    pci = None
    if getattr(p, "pci_bus_id", None) is not None:
        dom, dev_no = getattr(p, "pci_domain_id", 0), getattr(p, "pci_device_id", 0)
        pci = f"{dom:08X}:{p.pci_bus_id:02X}:{dev_no:02X}.0"  # nvidia-smi's format
    return {
        "index": i,
        "name": p.name,
        "memory_gib": round(p.total_memory / 2**30, 1),
        "sms": p.multi_processor_count,
        "uuid": str(getattr(p, "uuid", "")) or None,
        "pci_bus_id": pci,
    }
