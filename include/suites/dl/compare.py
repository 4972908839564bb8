"""Exact and relative comparisons of tensors on the host, shared by the runners (they call torch):
a content digest, the bits that differ and where first, the error against a float64 reference."""

from __future__ import annotations

import hashlib
from typing import Any


def digest(torch: Any, t: Any) -> str:
    """A hash of the tensor's bytes: equal digests mean bit-identical results."""
    flat = t.detach().contiguous().reshape(-1)
    return hashlib.sha256(flat.view(torch.uint8).cpu().numpy().tobytes()).hexdigest()[:24]


def norm_err(torch: Any, out: Any, ref: Any) -> float:
    """max|out - ref| / max|ref| against a float64 reference; inf when out is not finite."""
    out64 = out.detach().to("cpu", torch.float64)
    if not torch.isfinite(out64).all():
        return float("inf")
    scale = ref.abs().max().item()
    return (out64 - ref).abs().max().item() / max(scale, 1e-30)


def bit_differences(torch: Any, out: Any, ref: Any) -> tuple[int, str]:
    """(elements whose bits differ, where the first is): an exact comparison, NaN included."""
    if out.dtype == ref.dtype and torch.equal(out.reshape(-1).view(_int_view(torch, out)),
                                              ref.reshape(-1).view(_int_view(torch, ref))):
        return 0, ""
    a = out.reshape(-1).view(_int_view(torch, out))
    b = ref.reshape(-1).view(_int_view(torch, ref))
    bad = a != b
    n = int(bad.sum().item())
    idx = int(bad.nonzero()[0].item())
    return n, (f"element {idx} = {float(out.reshape(-1)[idx])!r} (bits {int(a[idx]) & 0xFFFFFFFF:#x}), first run "
               f"{float(ref.reshape(-1)[idx])!r} (bits {int(b[idx]) & 0xFFFFFFFF:#x})")


def _int_view(torch: Any, t: Any) -> Any:
    return {2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]


def max_abs_diff(a: Any, b: Any) -> float:
    """The largest absolute difference of two host tensors, in float64."""
    return float((a.double() - b.double()).abs().max().item())
