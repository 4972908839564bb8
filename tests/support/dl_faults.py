"""Fault hooks in torch for the dl_unit tests on CPU virtual devices: a matmul that corrupts one
device's output (by one ulp, scaled, or every other call), a device that corrupts once it is hot."""

from __future__ import annotations

import torch
from cluster_doctor_suites.dl.devices import current_device

FAST = ("--device", "cpu", "--only", "numerics,agreement")


def statuses(ns, name):
    return {c["device"]: c["status"] for c in ns.result["checks"] if c["name"] == name}


def corrupt_matmul(monkeypatch, devices, *, scale=None, every_other=False):
    """Patch torch.matmul so that fp32 results computed on `devices` are off by one ulp in one element
    (or scaled): the kind of silent corruption a marginal GPU produces."""
    orig = torch.matmul
    calls: dict[str, int] = {}

    def fake(a, b, *args, **kw):
        out = orig(a, b, *args, **kw)
        dev = current_device()
        if dev not in devices or out.dtype != torch.float32 or "out" in kw:
            return out
        calls[dev] = calls.get(dev, 0) + 1
        if every_other and calls[dev] % 2:
            return out
        if scale is not None:
            return out * scale
        x = out.detach().reshape(-1)[7]
        delta = torch.zeros_like(out)
        delta.view(-1)[7] = torch.nextafter(x, x + 1) - x
        return out + delta  # gradients flow as before: only the forward output is wrong

    monkeypatch.setattr(torch, "matmul", fake)


def corrupt_when_hot(monkeypatch, device: str, after: int, kind: str):
    """A device that computes right while cool and corrupts its output after `after` benchmark steps
    (the fault class 'corruption under sustained load'): GEMM results or copied words go wrong."""
    calls = {"n": 0}
    if kind == "gemm":
        orig = torch.matmul

        def fake(a, b, *args, **kw):
            out = orig(a, b, *args, **kw)
            if "out" in kw and current_device() == device:
                calls["n"] += 1
                if calls["n"] > after:
                    kw["out"].view(-1)[5] = kw["out"].view(-1)[5] * 2 + 1
            return out

        monkeypatch.setattr(torch, "matmul", fake)
    else:
        orig_copy = torch.Tensor.copy_

        def fake_copy(self, src, *args, **kw):
            out = orig_copy(self, src, *args, **kw)
            if current_device() == device and self.dtype == torch.int32 and self.numel() > 1 << 16:
                calls["n"] += 1
                if calls["n"] > after:
                    self.view(-1)[77].bitwise_xor_(1 << 20)  # one flipped bit in one word
            return out

        monkeypatch.setattr(torch.Tensor, "copy_", fake_copy)
    return calls
