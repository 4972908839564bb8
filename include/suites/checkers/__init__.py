"""One checker per file for the GPU health checks, the shape of NVSentinel's and AzureHPC NHC's:

* a dataclass of what the checker observed for one GPU (or the node), built by `observe(...)` from
  the normalised GPU state (NVML or nvidia-smi, see gpu_state.py) or from a tool's output;
* `to_checks(observation, ...)`: pure, maps observations to Check results that carry the GPU
  (`cuda:N`), a stable code (codes.yaml), the recommended action and a message with both numbers;
* a value the driver does not report becomes a `skip` with the reason, never a silent pass; what a
  parser does not understand becomes an `error` or a finding, never "no data".

Checkers import the harness and the parsers, never a suite module; gpu_health runs them.
"""

from __future__ import annotations


def device(index: int | None) -> str | None:
    return f"cuda:{index}" if index is not None else None


def where(pci_bus_id: str | None) -> str:
    return f" ({pci_bus_id})" if pci_bus_id else ""
