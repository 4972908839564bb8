"""The GPU's modes a training node depends on, against what its node pool expects: MIG (a GPU split
into instances runs no full-GPU training job) and persistence mode (off: the driver tears the GPU
down between jobs, each start re-initialises it). Defaults, when the node pool says nothing: MIG off,
persistence on, a mismatch a warning; a node pool that states either (`--expect mig=0|1`,
`persistence=0|1`) makes a mismatch a failure."""

from __future__ import annotations

from dataclasses import dataclass

from ..harness.checks import Check
from . import device

CODES = ("MIG_MODE_UNEXPECTED", "PERSISTENCE_MODE_UNEXPECTED")
DEFAULTS = {"mig": 0, "persistence": 1}


@dataclass(frozen=True)
class GpuMode:
    gpu_index: int
    mig: bool | None  # None: not reported (a GPU without MIG support prints N/A)
    persistence: bool | None


def observe(g: dict) -> GpuMode:
    mig = g.get("mig_mode")
    return GpuMode(g["index"], None if mig is None else str(mig).strip().lower() == "enabled", g.get("persistence"))


def to_checks(s: GpuMode, expect) -> list[Check]:
    out = []
    for key, now, what in (("mig", s.mig, "MIG mode"), ("persistence", s.persistence, "persistence mode")):
        stated = expect.get(key)
        want = bool(stated if stated is not None else DEFAULTS[key])
        basis = expect.basis(key) if stated is not None else f"default expectation of a training node: {what} " \
                                                              f"{'enabled' if want else 'disabled'}"
        name, code = f"{key}_mode", f"{key.upper()}_MODE_UNEXPECTED"
        if now is None:
            if key == "mig" and not want:
                continue  # a GPU without MIG support cannot have it enabled
            out.append(Check(name, "skip", device=device(s.gpu_index), code=code,
                             message=f"{what} not reported by the driver: not judged ({basis})"))
        elif now == want:
            out.append(Check(name, "pass", "enabled" if now else "disabled", device=device(s.gpu_index),
                             message=f"{what} {'enabled' if now else 'disabled'} as expected ({basis})"))
        else:
            out.append(Check(name, "fail" if stated is not None else "warn", "enabled" if now else "disabled",
                             device=device(s.gpu_index), code=code,
                             message=f"{what} {'enabled' if now else 'disabled'}, expected "
                             f"{'enabled' if want else 'disabled'} ({basis})"))
    return out
