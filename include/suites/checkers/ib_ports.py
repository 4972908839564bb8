"""InfiniBand / RoCE ports from sysfs (/sys/class/infiniband/<device>/ports/<port>/): which HCA ports
the node has, which of them are its compute fabric, and each one's state, rate and width against
what the node's model should have (expect.hcas, expect.ib_rate_gbps, expect.ib_width).

The files are the kernel's (drivers/infiniband/core/sysfs.c): `state` "4: ACTIVE", `phys_state`
"5: LinkUp", `rate` "400 Gb/sec (4X NDR)", `link_layer` "InfiniBand" / "Ethernet". The compute
fabric is the HCAs NCCL is told to use (--ib-hca, else NCCL_IB_HCA, same syntax: prefixes, `=` for
exact names, `^` to exclude, `:port`), else every InfiniBand port: front-end Ethernet NICs (a
BlueField bond, a 100 GbE management port) are listed but not judged. A RoCE fabric is named with
--ib-hca / NCCL_IB_HCA. Whether the expected HCAs are all there is ib_hcas.py's to judge.

A device that the directory lists but whose entries cannot be read (a dangling link to a PCI
function that went away: what makes `ibstat` panic with `stat of IB device 'mlx5_8' failed`), or a
port whose state cannot be read, is kept as an unreadable entry (`device_error`), never dropped.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ..harness.checks import Check
from ..harness.text import fmt
from . import nic_selector

CODES = ("IB_PORT_DOWN", "IB_PORT_RATE_LOW", "IB_PORT_WIDTH_DEGRADED", "IB_PORT_UNREADABLE", "IB_DEVICE_UNREADABLE")
SYSFS_ROOT = "/sys/class/infiniband"
_RATE = re.compile(r"^([\d.]+) Gb/sec \((\d+)X(?: ?(\w+))?\)")
_STATE = re.compile(r"^(\d+): (.+)$")


@dataclass(frozen=True)
class IbPort:
    device: str
    port: int
    state: str | None  # "ACTIVE", "DOWN", "INIT", "ARMED", ...
    phys_state: str | None  # "LinkUp", "Polling", "Disabled", ...
    rate_gbps: float | None
    width: int | None
    speed: str | None  # "NDR", "HDR", ...
    link_layer: str | None
    hca_type: str | None = None
    fw_ver: str | None = None
    unreadable: str = ""  # the attributes that could not be read, and why
    device_error: str = ""  # the device (port 0) or the port's state could not be read at all: a failure

    @property
    def name(self) -> str:
        return f"{self.device}:{self.port}" if self.port else self.device

    @property
    def up(self) -> bool:
        return self.state == "ACTIVE" and self.phys_state == "LinkUp"


def _read(path: str) -> str | None:
    return _read_err(path)[0]


def _read_err(path: str) -> tuple[str | None, str]:
    """(text, why not): a file that cannot be read says why (ENOENT, EINVAL from the driver, EIO)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().strip(), ""
    except OSError as exc:
        return None, exc.strerror or type(exc).__name__


def _state(text: str | None) -> str | None:
    m = _STATE.match(text or "")
    return m.group(2).strip() if m else None


def scan(root: str = SYSFS_ROOT) -> list[IbPort]:
    """Every port of every RDMA device under `root`, in name order; [] when there is none. A listed
    device whose ports cannot be listed is one entry with port 0 and `device_error`."""
    try:
        devices = sorted(os.listdir(root))
    except OSError:
        return []
    ports = []
    for dev in devices:
        base = os.path.join(root, dev)
        try:
            numbers = sorted(int(p) for p in os.listdir(os.path.join(base, "ports")) if p.isdigit())
        except OSError as exc:
            why = exc.strerror or type(exc).__name__
            ports.append(IbPort(dev, 0, None, None, None, None, None, None, device_error=f"{base}/ports: {why}"))
            continue
        if not numbers:
            ports.append(IbPort(dev, 0, None, None, None, None, None, None, device_error=f"{base}/ports: no port"))
        for n in numbers:
            ports.append(_port(base, dev, n))
    return ports


def _port(base: str, dev: str, n: int) -> IbPort:
    p = os.path.join(base, "ports", str(n))
    read = {k: _read_err(os.path.join(p, k)) for k in ("state", "phys_state", "rate", "link_layer")}
    raw = {k: text for k, (text, _) in read.items()}
    rate = _RATE.match(raw["rate"] or "")
    missing = [f"{k} ({why})" for k, (text, why) in read.items() if text is None]
    # ib_core always has a port's state: one that cannot be read is a device in trouble, not a format
    dead = [f"{k}: {why}" for k, (text, why) in read.items() if text is None and k in ("state", "phys_state")]
    return IbPort(dev, n, _state(raw["state"]), _state(raw["phys_state"]),
                  float(rate.group(1)) if rate else None, int(rate.group(2)) if rate else None,
                  (rate.group(3) if rate else None), raw["link_layer"], _read(os.path.join(base, "hca_type")),
                  _read(os.path.join(base, "fw_ver")), f"unreadable: {', '.join(missing)}" if missing else "",
                  f"{p}/{'; '.join(dead)}" if dead else "")


def select(ports: list[IbPort], hca: str | None) -> tuple[list[IbPort], str]:
    """The compute-fabric ports and how they were chosen."""
    ports = [p for p in ports if not p.device_error]  # unreadable entries are judged on their own (ib_hcas)
    if hca:
        return [p for p in ports if matches(hca, p)], f"--ib-hca / NCCL_IB_HCA {hca!r}"
    ib = [p for p in ports if p.link_layer == "InfiniBand"]
    return ib, "the InfiniBand ports (Ethernet ones are front-end NICs unless --ib-hca / NCCL_IB_HCA names them)"


def matches(spec: str, p: IbPort) -> bool:
    """NCCL_IB_HCA semantics (nic_selector): `mlx5` prefix, `=mlx5_0` exact, `^...` exclusion, `name:port`."""
    sel = nic_selector.parse(spec)
    return sel is None or sel.selects(p.device, p.port)


def port_checks(p: IbPort, expect, best_rate: float | None, best_width: int | None) -> list[Check]:
    """State, then rate and width of a port that is up (a down port's rate means nothing)."""
    if p.device_error:
        return [unreadable_check(p)]
    if p.state is None or p.phys_state is None:
        return [Check("ib_port_state", "skip", device=p.name, code="IB_PORT_UNREADABLE",
                      message=f"port state in a format not recognised ({p.unreadable or 'state, phys_state'})")]
    if not p.up:
        return [Check("ib_port_state", "fail", f"{p.state}/{p.phys_state}", device=p.name, code="IB_PORT_DOWN",
                      threshold="ACTIVE/LinkUp", message=f"port {p.state} / {p.phys_state}, expected ACTIVE / LinkUp "
                      f"({p.link_layer or '?'} link layer, {p.hca_type or '?'} fw {p.fw_ver or '?'})")]
    out = [Check("ib_port_state", "pass", "ACTIVE/LinkUp", device=p.name, message="port ACTIVE / LinkUp")]
    return out + [_rate(p, expect, best_rate), _width(p, expect, best_width)]


def unreadable_check(p: IbPort) -> Check:
    """A device or port sysfs lists but cannot be read: the HCA is there and not answering."""
    what = "device" if not p.port else "port"
    return Check("ib_port_state", "fail", "unreadable", device=p.name, threshold="readable", code="IB_DEVICE_UNREADABLE",
                 message=f"{what} listed in sysfs but unreadable ({p.device_error}): the HCA or its driver is not "
                 "answering (what makes ibstat panic with `stat of IB device ... failed`)")


def _rate(p: IbPort, expect, best: float | None) -> Check:
    want = expect.get("ib_rate_gbps")
    if p.rate_gbps is None:
        return Check("ib_port_rate", "skip", device=p.name, code="IB_PORT_UNREADABLE",
                     message=f"port rate could not be read ({p.unreadable or 'unrecognised format'})")
    bar, basis = (want, expect.basis("ib_rate_gbps")) if want else (best, "no expectation: the node's fastest port")
    if bar is not None and p.rate_gbps < bar:
        return Check("ib_port_rate", "fail", p.rate_gbps, "Gb/s", f">= {fmt(bar)}", f"port at {fmt(p.rate_gbps)} Gb/s "
                     f"({p.width}X {p.speed or '?'}), expected {fmt(bar)} Gb/s ({basis})", p.name, "IB_PORT_RATE_LOW")
    return Check("ib_port_rate", "pass", p.rate_gbps, "Gb/s", f">= {fmt(bar or p.rate_gbps)}",
                 f"{fmt(p.rate_gbps)} Gb/s ({p.width}X {p.speed or '?'}; {basis})", p.name)


def _width(p: IbPort, expect, best: int | None) -> Check:
    want = expect.get("ib_width")
    if p.width is None:
        return Check("ib_port_width", "skip", device=p.name, code="IB_PORT_UNREADABLE",
                     message=f"port width could not be read ({p.unreadable or 'unrecognised format'})")
    bar, basis = (want, expect.basis("ib_width")) if want else (best, "no expectation: the node's widest port")
    if bar is not None and p.width < bar:
        return Check("ib_port_width", "fail", p.width, "lanes", f">= {bar}", f"port trained at {p.width}X, expected "
                     f"{bar}X ({basis})", p.name, "IB_PORT_WIDTH_DEGRADED")
    return Check("ib_port_width", "pass", p.width, "lanes", f">= {bar or p.width}", f"{p.width}X ({basis})", p.name)
