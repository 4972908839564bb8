"""CPU-mode fault hooks for the suites' collective tests: a module the suite's workers import when
CLUSTER_DOCTOR_CPU_FAULT_HOOK names it (``module:install``), to corrupt what a collective hands one rank."""

from __future__ import annotations

import pathlib


def rank1_wrong_value(folder: pathlib.Path, module: str, index: int = 123) -> str:
    """Write ``module`` into ``folder``: all_reduce hands rank 1 (only) one wrong element, at ``index`` of
    every tensor over 1000 elements, as a flaky link or HCA would. The hook's spec for the variable."""
    (folder / f"{module}.py").write_text(
        "import torch.distributed as dist\n"
        "def install(rank, world):\n"
        "    if rank != 1:\n"
        "        return\n"
        "    orig = dist.all_reduce\n"
        "    def corrupt(t, *a, **kw):\n"
        "        out = orig(t, *a, **kw)\n"
        "        if t.numel() > 1000:\n"
        f"            t.view(-1)[{index}] += 1.0\n"
        "        return out\n"
        "    dist.all_reduce = corrupt\n"
    )
    return f"{module}:install"
