"""PCIe link of each GPU against what the node's SKU should have (expect.pcie_gen / pcie_width):
width below the expected lanes fails; a link whose generation is below the expected one fails at P0
and, since idle GPUs retrain to a lower generation to save power, by its link capability when idle."""

from __future__ import annotations

from dataclasses import dataclass

from ..harness.checks import Check
from . import device, where

CODES = ("PCIE_WIDTH_DEGRADED", "PCIE_GEN_DEGRADED", "PCIE_GEN_LIMITED_BY_SLOT", "PCIE_STATE_UNAVAILABLE",
         "PCIE_REPLAYS")


@dataclass(frozen=True)
class PcieLink:
    gpu_index: int
    pci_bus_id: str | None
    gen: int | None
    gen_max: int | None  # what the link can train to (GPU and slot together)
    gen_gpu_max: int | None  # what the GPU alone supports
    width: int | None
    width_max: int | None
    replays: int | None
    pstate: int | None


def observe(g: dict) -> PcieLink:
    return PcieLink(g["index"], g.get("pci_bus_id"), g.get("pcie_gen"), g.get("pcie_gen_max"),
                    g.get("pcie_gen_gpu_max"), g.get("pcie_width"), g.get("pcie_width_max"), g.get("pcie_replays"),
                    g.get("pstate"))


def to_checks(s: PcieLink, expect, replay_warn: int = 100) -> list[Check]:
    """`expect`: baselines.Expectations (pcie_gen, pcie_width); without them the GPU's own maxima are
    the bar, which the message says."""
    return [_width(s, expect), *_gen(s, expect), *_replays(s, replay_warn)]


def _width(s: PcieLink, expect) -> Check:
    dev, at = device(s.gpu_index), where(s.pci_bus_id)
    want = expect.get("pcie_width")
    basis = expect.basis("pcie_width") if want else "no SKU expectation: the link's reported maximum"
    want = want or s.width_max
    if s.width is None or want is None:
        return Check("pcie_width", "skip", device=dev, message="PCIe link width not reported",
                     code="PCIE_STATE_UNAVAILABLE")
    ok = s.width >= want
    return Check("pcie_width", "pass" if ok else "fail", s.width, "lanes", f">= {want}",
                 f"PCIe x{s.width}, expected x{want} ({basis}; link max x{s.width_max}){at}", dev,
                 None if ok else "PCIE_WIDTH_DEGRADED")


def _gen(s: PcieLink, expect) -> list[Check]:
    dev, at = device(s.gpu_index), where(s.pci_bus_id)
    want = expect.get("pcie_gen")
    if s.gen is None or (s.gen_max is None and want is None):
        return [Check("pcie_gen", "skip", device=dev, message="PCIe link generation not reported",
                      code="PCIE_STATE_UNAVAILABLE")]
    basis = expect.basis("pcie_gen") if want else "no SKU expectation: the link's reported maximum"
    want = want or s.gen_max
    if s.pstate == 0 or s.gen >= want:
        ok = s.gen >= want
        return [Check("pcie_gen", "pass" if ok else "fail", s.gen, None, f">= {want}",
                      f"PCIe Gen{s.gen}{' at P0 (full clocks)' if s.pstate == 0 else ''}, expected Gen{want} "
                      f"({basis}){at}", dev, None if ok else "PCIE_GEN_DEGRADED")]
    # idle: the current generation says nothing, the link's capability does
    if s.gen_max is None:
        return [Check("pcie_gen", "skip", s.gen, device=dev, code="PCIE_STATE_UNAVAILABLE",
                      message=f"PCIe Gen{s.gen} at idle (P{s.pstate}) and no link maximum reported: "
                      f"Gen{want} not proven")]
    if s.gen_max < want:
        code = "PCIE_GEN_LIMITED_BY_SLOT" if s.gen_gpu_max and s.gen_gpu_max >= want else "PCIE_GEN_DEGRADED"
        return [Check("pcie_gen", "fail", s.gen_max, None, f">= {want}", f"PCIe link capable of Gen{s.gen_max} "
                      f"only, expected Gen{want} ({basis}); GPU supports Gen{s.gen_gpu_max}{at}", dev, code)]
    return [Check("pcie_gen", "pass", s.gen_max, None, f">= {want}",
                  f"PCIe Gen{s.gen} at idle (P{s.pstate}), link capable of Gen{s.gen_max}, expected Gen{want}", dev)]


def _replays(s: PcieLink, limit: int) -> list[Check]:
    if s.replays is None or s.replays <= limit:
        return []
    return [Check("pcie_replays", "warn", s.replays, None, f"<= {limit}",
                  f"{s.replays} PCIe replays (link retransmissions){where(s.pci_bus_id)}", device(s.gpu_index),
                  "PCIE_REPLAYS")]
