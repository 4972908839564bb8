"""The environment block of a result and the GPU inventory (NVML, else nvidia-smi); cheap, no torch."""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import socket
import subprocess
from typing import Any


def _pkg_version(name: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:
        return None


def base_environment(args: argparse.Namespace) -> dict:
    env: dict[str, Any] = {
        "gpu_model": None,
        "gpu_count": 0,
        "driver": None,
        "cuda": None,
        "torch": _pkg_version("torch"),
        "nccl": None,
        "hostname": socket.gethostname(),
        "mode": args.device,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "cpu_count": os.cpu_count(),
        "gpu_model_label": args.gpu_model,
        "expected_gpus": args.expected_gpus,
        "node_gpus": getattr(args, "node_gpus", None),
        "expect_overrides": dict(getattr(args, "expect", None) or {}),
    }
    for key, var in (
        ("pod", "POD_NAME"),
        ("image", "CLUSTER_DOCTOR_IMAGE"),
        ("slurm_job_id", "SLURM_JOB_ID"),
        ("cuda_visible_devices", "CUDA_VISIBLE_DEVICES"),
    ):
        if os.environ.get(var):
            env[key] = os.environ[var]
    return env


class NvmlUnavailable(Exception):
    pass


def nvml_init():
    """Import and initialise NVML; NvmlUnavailable with the cause when that is impossible."""
    try:
        import pynvml  # nvidia-ml-py
    except ImportError as exc:
        raise NvmlUnavailable(f"nvidia-ml-py not installed ({exc})") from exc
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        raise NvmlUnavailable(f"NVML init failed: {exc}") from exc
    return pynvml


def _s(x: Any) -> str:
    return x.decode(errors="replace") if isinstance(x, bytes) else str(x)


def gpu_inventory() -> tuple[list[dict], str | None, str]:
    """(gpus, driver, source). Each gpu: index, name, uuid, pci_bus_id. Never raises."""
    try:
        nv = nvml_init()
        try:
            driver = _s(nv.nvmlSystemGetDriverVersion())
            gpus = []
            for i in range(nv.nvmlDeviceGetCount()):
                h = nv.nvmlDeviceGetHandleByIndex(i)
                gpus.append(
                    {
                        "index": i,
                        "name": _s(nv.nvmlDeviceGetName(h)),
                        "uuid": _s(nv.nvmlDeviceGetUUID(h)),
                        "pci_bus_id": _s(nv.nvmlDeviceGetPciInfo(h).busId),
                    }
                )
            return gpus, driver, "NVML"
        finally:
            try:
                nv.nvmlShutdown()
            except Exception:
                pass
    except Exception:
        pass
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            p = subprocess.run(
                [smi, "--query-gpu=index,name,uuid,pci.bus_id,driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            gpus, driver = [], None
            if p.returncode == 0:
                for line in p.stdout.splitlines():
                    parts = [x.strip() for x in line.split(",")]
                    if len(parts) >= 5 and parts[0].isdigit():
                        gpus.append(
                            {
                                "index": int(parts[0]),
                                "name": parts[1],
                                "uuid": parts[2],
                                "pci_bus_id": parts[3],
                            }
                        )
                        driver = parts[4]
                return gpus, driver, "nvidia-smi"
        except (OSError, subprocess.SubprocessError):
            pass
    return [], None, "none (no NVML, no nvidia-smi)"

