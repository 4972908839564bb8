"""The speed probe of the health sweep: per GPU a few seconds of GEMM and of HBM bandwidth, all GPUs at
once, every result verified as dl_unit's benchmarks verify theirs (they are the same code, shorter and
under their own names). Its two figures, ``probe_gemm_tflops_min`` and ``probe_hbm_gbps_min``, are judged
three ways: against the model's floor (baselines.yaml ``probe_*``: 8 % under the model's sustained figure,
so a GPU 10 % slow fails), against the best GPU of the node, and, by the orchestrator after the result is
stored, against the fleet of the model and the node's own past (its straggler and drift verdicts): a GPU
that passes every floor yet paces every job it joins is found at the next sweep, not at dl_unit's
staleness.

bf16 on a GPU; fp32 on one CPU thread in CPU mode (tests, laptops), where the figures prove the code path.
"""

from __future__ import annotations

import os
from typing import Any

from ..baselines import Baselines
from ..harness.context import Context
from ..harness.text import fmt, one_line
from . import devices, gemm, membw
from .devices import Dev

GEMM_METRIC = "probe_gemm_tflops"
HBM_METRIC = "probe_hbm_gbps"
METRICS = (f"{GEMM_METRIC}_min", f"{HBM_METRIC}_min")  # the summary figures the fleet verdicts judge
PREFIX = "probe_"


def _devices(ctx: Context, torch: Any, indices: list[int]) -> list[Dev]:
    """The GPUs the health checks found alive (CUDA index = NVML index: PCI bus order), or one CPU device."""
    if ctx.cpu:
        torch.set_num_threads(1)  # as dl_unit in CPU mode: a busy shared machine makes threads noise
        return [Dev("cpu:0", torch.device("cpu"), {"name": "cpu"})]
    n = torch.cuda.device_count()
    return [Dev(f"cuda:{i}", torch.device("cuda", i), {"index": i}) for i in indices if i < n]


def run(ctx: Context, baselines: Baselines, key: str | None, gpu_indices: list[int], *, seconds: float,
        gemm_size: int | None = None, membw_mib: int | None = None) -> None:
    """GEMM then HBM copy, ``seconds`` each, on every live GPU at once; a probe that cannot run is an
    ``error`` check named ``speed_probe`` (the health checks' verdicts stand)."""
    ctx.set_phase(f"speed probe: GEMM and HBM bandwidth, {fmt(seconds)} s each")
    if not ctx.cpu:
        os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # bit-for-bit agreement of the GEMMs
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - an image without torch: said so, never a silent pass
        ctx.check("speed_probe", "error", code="PROBE_UNAVAILABLE", message=f"torch not importable: {one_line(exc, 200)}")
        return
    devs = _devices(ctx, torch, gpu_indices)
    if not devs:
        ctx.check("speed_probe", "skip", code="PROBE_UNAVAILABLE", message="no live GPU to probe")
        return
    ctx.environment["speed_probe"] = {"seconds": seconds, "dtype": "fp32" if ctx.cpu else "bf16",
                                      "devices": [d.name for d in devs], "torch": torch.__version__}
    for label, fn in (
        ("GEMM", lambda: gemm.run(ctx, torch, devs, gemm_size or (128 if ctx.cpu else 8192), seconds, baselines,
                                  key, None, metric=GEMM_METRIC, prefix=PREFIX, agreement_check=False)),
        ("HBM", lambda: membw.run(ctx, torch, devs, membw_mib or (16 if ctx.cpu else 1024), seconds, baselines,
                                  key, None, metric=HBM_METRIC, prefix=PREFIX)),
    ):
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - one broken benchmark never hides the other
            status = devices.classify(exc)  # a hardware error fails the GPU, anything else is the probe's own
            ctx.check("speed_probe", status, code="PROBE_HW_ERROR" if status == "fail" else "PROBE_UNAVAILABLE",
                      message=f"{label}: {type(exc).__name__}: {one_line(exc, 200)}")
        if not ctx.cpu:
            torch.cuda.empty_cache()
