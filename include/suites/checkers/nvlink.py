"""NVLink links of each GPU against what its model should have (expect.nvlinks_per_gpu): inactive
links, fewer active links than expected, or a driver that says all links are inactive fail. A block
of `nvidia-smi nvlink -s` that no GPU of the suite takes is judged all the same and named by what the
tool printed: never dropped."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..harness.checks import Check
from . import device, where

CODES = ("NVLINK_DOWN", "NVLINK_STATE_UNAVAILABLE", "TOOL_OUTPUT_UNPARSEABLE", "NVLINK_GPU_UNMAPPED")


@dataclass(frozen=True)
class NvlinkStatus:
    gpu_index: int
    pci_bus_id: str | None
    links: dict[int, bool] | None  # {link: active}; None: the state could not be read
    all_inactive: bool = False  # the driver said so instead of listing links
    unparsed: tuple[str, ...] = field(default_factory=tuple)
    why_unavailable: str = ""
    unmapped: str | None = None  # a block no GPU of the suite takes: how the tool named it

    @property
    def device(self) -> str:
        return self.unmapped or device(self.gpu_index)

    @property
    def active(self) -> int:
        return sum(bool(v) for v in (self.links or {}).values())


def observe(g: dict) -> NvlinkStatus:
    nv = g.get("nvlink")
    if nv is None:
        return NvlinkStatus(g["index"], g.get("pci_bus_id"), None, why_unavailable=g.get("nvlink_why") or "")
    return NvlinkStatus(g["index"], g.get("pci_bus_id"), dict(nv.get("links") or {}), bool(nv.get("all_inactive")),
                        tuple(nv.get("unparsed") or ()))


def unmapped(blocks: list[dict]) -> list[NvlinkStatus]:
    """The blocks of `nvidia-smi nvlink -s` that no GPU took (gpu_state: `nvlink_unmapped`)."""
    return [NvlinkStatus(b["index"], None, dict(b.get("links") or {}), bool(b.get("all_inactive")),
                         tuple(b.get("unparsed") or ()),
                         unmapped=f"nvidia-smi GPU {b['index']}" + (f" ({b['uuid']})" if b.get("uuid") else ""))
            for b in blocks]


def to_checks(statuses: list[NvlinkStatus], expect) -> list[Check]:
    """One check per GPU. Without an expectation the best GPU of the node is the bar (said so)."""
    want = expect.get("nvlinks_per_gpu")
    if want == 0:
        return [Check("nvlink", "pass", s.active, "links", "== 0", f"no NVLink expected ({expect.basis('nvlinks_per_gpu')})",
                      s.device) for s in statuses]
    readable = [s for s in statuses if s.links is not None and not s.unparsed]
    best = max((s.active for s in readable), default=0)
    return [_unmapped(_one(s, want, best, expect), s) for s in statuses]


def _unmapped(c: Check, s: NvlinkStatus) -> Check:
    """A block of a GPU the suite cannot map: its own finding stands; a pass or not-run is a warning
    (the tool and the suite's GPU list disagree: which GPU it is cannot be proven)."""
    if s.unmapped is None or c.status == "fail":
        return c
    return Check("nvlink", "warn", c.value, c.unit, c.threshold, f"{s.unmapped} of nvidia-smi nvlink -s is not among "
                 f"the GPUs of nvidia-smi -q (by UUID or index): {c.message}", s.device, "NVLINK_GPU_UNMAPPED")


def _one(s: NvlinkStatus, want: int | None, best: int, expect) -> Check:
    dev, at = s.device, where(s.pci_bus_id)
    if s.unparsed:
        return Check("nvlink", "error", device=dev, code="TOOL_OUTPUT_UNPARSEABLE",
                     message=f"nvidia-smi nvlink -s printed line(s) the suite does not understand: "
                     f"{'; '.join(s.unparsed[:3])}")
    if s.links is None:
        return Check("nvlink", "skip", device=dev, code="NVLINK_STATE_UNAVAILABLE",
                     message=f"NVLink state could not be read{': ' + s.why_unavailable if s.why_unavailable else ''}")
    bar, basis = (want, expect.basis("nvlinks_per_gpu")) if want else (best, "no expectation: the best GPU of this node")
    if s.all_inactive:
        return Check("nvlink", "fail", 0, "links", f">= {bar or 1}",
                     f"all NVLink links inactive (the driver cannot report any), expected {bar or 'some'} "
                     f"({basis}){at}", dev, "NVLINK_DOWN")
    down = sorted(k for k, v in s.links.items() if not v)
    if not want and not bar:
        return Check("nvlink", "skip", s.active, "links", device=dev, code="NVLINK_STATE_UNAVAILABLE",
                     message="no NVLink reported and no expectation for this model (--expect nvlinks_per_gpu=N)")
    if down or s.active < bar:
        parts = ([f"link(s) {','.join(map(str, down))} inactive"] if down else []) + [f"{s.active} active"]
        return Check("nvlink", "fail", s.active, "links", f">= {bar}",
                     f"NVLink {'; '.join(parts)}, expected {bar} ({basis}){at}", dev, "NVLINK_DOWN")
    return Check("nvlink", "pass", s.active, "links", f">= {bar}", f"{s.active} NVLink links active ({basis})", dev)
