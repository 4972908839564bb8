"""The driver's own verdict (R570+): the GPU recovery action and reset-required state, as NVML field
values or `nvidia-smi -q` print them. The action the driver names is the finding's action."""

from __future__ import annotations

from dataclasses import dataclass

from ..harness.checks import Check
from . import device, where

CODES = ("GPU_RECOVERY_ACTION", "GPU_RESET_REQUIRED", "GPU_RECOVERY_STATE_UNAVAILABLE")
# nvmlGpuRecoveryAction_t (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION), named as nvidia-smi -q prints them
NVML_ACTIONS = {
    0: "None",
    1: "GPU Reset",
    2: "Node Reboot",
    3: "Drain P2P",
    4: "Drain and Reset",
    5: "Recover IMEX Domain",
    6: "Bus Reset",
    7: "System Reboot",
}
# the driver's names (open-gpu-kernel-modules gpu.c _gpuRecoveryActionName, also used in Xid 154)
# and nvidia-smi's, lowercased -> our action
DRIVER_ACTIONS = {
    "none": "none",
    "gpu reset": "reset_gpu",
    "gpu reset required": "reset_gpu",
    "reset": "reset_gpu",
    "bus reset": "reset_gpu",
    "pf flr": "reset_gpu",
    "drain and reset": "reset_gpu",
    "node reboot": "reboot",
    "node reboot required": "reboot",
    "system reboot": "reboot",
    "os reboot": "reboot",
    "reboot": "reboot",
    "drain p2p": "drain_and_service",
    "recover imex domain": "check_fabric",
}


def action_for(name: str | None) -> str:
    """Our action for a recovery action the driver names; an unknown name fails closed."""
    return DRIVER_ACTIONS.get((name or "").strip().lower(), "drain_and_service")


@dataclass(frozen=True)
class RecoveryState:
    gpu_index: int
    pci_bus_id: str | None
    action: str | None  # None: the driver exposes no recovery action (older than R570)
    reset_required: bool | None
    drain_and_reset: bool | None


def observe(g: dict) -> RecoveryState:
    return RecoveryState(g["index"], g.get("pci_bus_id"), g.get("recovery_action"), g.get("reset_required"),
                         g.get("drain_and_reset"))


def to_checks(s: RecoveryState) -> list[Check]:
    dev, at, out = device(s.gpu_index), where(s.pci_bus_id), []
    if s.action is None:
        out.append(Check("recovery_action", "skip", device=dev, code="GPU_RECOVERY_STATE_UNAVAILABLE",
                         message="driver reports no GPU recovery action (needs driver R570 or later)"))
    elif s.action.strip().lower() != "none":
        out.append(Check("recovery_action", "fail", s.action, device=dev, code="GPU_RECOVERY_ACTION",
                         action=action_for(s.action), message=f"driver requests recovery action '{s.action}'{at}"))
    else:
        out.append(Check("recovery_action", "pass", s.action, device=dev, message="no recovery action requested"))
    if s.reset_required or s.drain_and_reset:
        what = "drain and reset recommended" if s.drain_and_reset else "GPU reset required"
        out.append(Check("reset_required", "fail", True, device=dev, code="GPU_RESET_REQUIRED",
                         message=f"driver reports {what}{at}"))
    return out
