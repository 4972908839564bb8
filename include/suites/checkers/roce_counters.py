"""RoCE ports' error counters: the physical-port statistics `ethtool -S <netdev>` prints for mlx5
(`link_down_events_phy`, `rx_crc_errors_phy`, `rx_symbol_err_phy`, `rx_pcs_symbol_err_phy`,
`rx_discards_phy`, ...; kernel Documentation/networking/device_drivers/ethernet/mellanox/mlx5/
counters.rst; older mlx5 drivers print `symbol_err`, `in_range_len_errors`), the Ethernet
equivalent of the PMA counters an InfiniBand port has. The netdev of an RDMA port is the one its
GID table names (ports/<n>/gid_attrs/ndevs/0), else the device's PCI function's (device/net/).

The netdev is visible only in the pod's network namespace: without hostNetwork (or the RDMA
network attached to the pod) the counters cannot be read, and the check says so (not run).
ethtool exits 0 with the table, non-zero when the device is unknown (`Cannot get stats strings
information: No such device`) or has no statistics (`no stats available`).
"""

from __future__ import annotations

import os
import re

from ..harness.text import one_line
from .ib_counters import PortSample

_STAT = re.compile(r"^\s+([A-Za-z0-9_.\[\]: -]+?):\s+(\d+)\s*$")


def netdev(root: str, device: str, port: int) -> str | None:
    p = os.path.join(root, device, "ports", str(port), "gid_attrs", "ndevs", "0")
    try:
        with open(p, encoding="utf-8") as fh:
            name = fh.read().strip()
            if name:
                return name
    except OSError:
        pass
    try:
        names = sorted(os.listdir(os.path.join(root, device, "device", "net")))
    except OSError:
        return None
    return names[0] if len(names) == 1 else None


def parse(text: str) -> dict[str, int]:
    """`name: value` lines of `ethtool -S`; per-queue lines (`rx0_packets`) are kept as printed."""
    return {m.group(1).strip(): int(m.group(2)) for m in map(_STAT.match, text.splitlines()) if m}


def read(ctx, ethtool: str | None, root: str, device: str, port: int, names) -> PortSample:
    s = PortSample(f"{device}:{port}", "ethtool")
    dev = netdev(root, device, port)
    if dev is None:
        s.unavailable = "RoCE port without a visible netdev (gid_attrs/ndevs/0): run the pod with the RDMA network"
        return s
    if ethtool is None:
        s.unavailable = f"ethtool not found: the counters of {dev} could not be read"
        return s
    try:
        rc, out, err = ctx.run_tool([ethtool, "-S", dev], timeout=30)
    except (OSError, Exception) as exc:  # noqa: BLE001 - a hung or missing ethtool is a visible not-run
        s.unavailable = f"ethtool -S {dev} failed: {one_line(exc, 160)}"
        return s
    if rc != 0:
        s.unavailable = f"ethtool -S {dev} exited {rc}: {one_line(err or out, 160)} (netdev not in the pod's namespace?)"
        return s
    stats = parse(out)
    s.values = {k: v for k, v in stats.items() if k in names}
    s.guid = dev
    if not s.values:
        s.unavailable = f"ethtool -S {dev} printed none of the judged counters ({len(stats)} statistics)"
    return s
