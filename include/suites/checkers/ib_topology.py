"""Which HCAs are a node's compute rails, read from its PCIe topology as NCCL reads it: an HCA is a
GPU's rail when both sit under the same PCIe switch (a bridge they share below the root port: what
`nvidia-smi topo -m` prints as PIX / PXB and NCCL's topology search prefers). On an HGX H100 / H200 /
B200 board every GPU has one; a storage or front-end HCA in InfiniBand mode sits on a root port of
its own, so it cannot stand in for a missing rail the way it does in a count.

Read from sysfs, no privilege: /sys/class/infiniband/<hca>/device is the kernel's link to the HCA's
PCI function, /sys/bus/pci/devices/<bus id> the GPU's (bus ids from NVML / nvidia-smi); each resolves
to /sys/devices/pciDDDD:BB/<root port>/<bridge>/.../<function>. Where that cannot be read (a link
missing, a GPU not listed, every function straight on the host bridge as in a VM, a GPU on a root
port of its own) the topology is unknown, and says why.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

PCI_DEVICES = "/sys/bus/pci/devices"
_HOST = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")
_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_BUS_ID = re.compile(r"^(?:([0-9a-f]{1,8}):)?([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$")


def bdf(bus_id: str | None) -> str | None:
    """sysfs's `0000:1b:00.0` from NVML's / nvidia-smi's `00000000:1B:00.0` (or lspci's `1b:00.0`)."""
    m = _BUS_ID.match((bus_id or "").strip().lower())
    if not m:
        return None
    return f"{int(m.group(1) or '0', 16):04x}:{m.group(2)}:{m.group(3)}.{m.group(4)}"


def pci_chain(path: str) -> tuple[str, ...] | None:
    """The PCI functions from the host bridge down to the device `path` resolves to (root port first,
    the device last); None when it does not resolve to a PCI device."""
    if not os.path.exists(path):
        return None
    parts = os.path.realpath(path).split(os.sep)
    host = max((i for i, p in enumerate(parts) if _HOST.match(p)), default=None)
    chain = parts[host + 1:] if host is not None else []
    if not chain or not all(_BDF.match(p) for p in chain):
        return None
    return (parts[host], *chain)


def shares_switch(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Both below one bridge beneath their root port (host bridge, root port, and one more in common)."""
    common = 0
    for x, y in zip(a[:-1], b[:-1]):
        if x != y:
            break
        common += 1
    return common >= 3


@dataclass
class Topology:
    known: bool
    why: str = ""  # why it is unknown
    gpus: list[tuple[int, str]] = field(default_factory=list)  # (index, bus id)
    rails: dict[str, list[int]] = field(default_factory=dict)  # HCA -> the GPUs under its switch

    def lonely(self) -> list[tuple[int, str]]:
        """The GPUs no HCA shares a PCIe switch with."""
        served = {g for gs in self.rails.values() for g in gs}
        return [(i, b) for i, b in self.gpus if i not in served]

    def as_environment(self) -> dict:
        return {"known": self.known, "why": self.why or None,
                "gpus": [{"index": i, "pci_bus_id": b} for i, b in self.gpus],
                "hcas": {d: {"gpus": g} for d, g in sorted(self.rails.items())}}


def read(sysfs_root: str, pci_root: str, gpus: list[dict], devices: list[str]) -> Topology:
    """The GPU each HCA `devices` shares a PCIe switch with. `gpus`: the inventory (index, pci_bus_id)."""
    if not gpus:
        return Topology(False, "no GPU bus ids (NVML / nvidia-smi reported no GPU)")
    chains: dict[int, tuple[str, ...]] = {}
    listed = []
    for g in gpus:
        index, bus = g.get("index"), bdf(g.get("pci_bus_id"))
        if bus is None:
            return Topology(False, f"GPU {index}'s bus id {g.get('pci_bus_id')!r} not recognised")
        listed.append((index, bus))
        chain = pci_chain(os.path.join(pci_root, bus))
        if chain is None:
            return Topology(False, f"GPU {index} ({bus}) not a PCI device under {pci_root}", listed)
        if len(chain) < 4:  # host bridge, root port, a switch bridge, the GPU: else nothing to share
            return Topology(False, f"no PCIe switch above GPU {index} ({bus}: {'/'.join(chain)}; a flat tree, "
                            "as in a VM)", listed)
        chains[index] = chain
    rails: dict[str, list[int]] = {}
    for dev in devices:
        chain = pci_chain(os.path.join(sysfs_root, dev, "device"))
        if chain is None:
            return Topology(False, f"{dev} has no PCI device link", listed)
        rails[dev] = [i for i, c in chains.items() if shares_switch(chain, c)]
    return Topology(True, "", listed, rails)
