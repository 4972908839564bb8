"""The compute-fabric HCAs a node should have and whether they are all there (`ib_hca_count`): the
expected set by name where something names it, else by count, never "at least N of whatever is up".

Where the set comes from, most specific first: an inclusive exact --ib-hca / NCCL_IB_HCA (`=mlx5_0,...`:
the node pool names the HCAs NCCL must use, each must be present; a prefix or an exclusion names no
device and is read as NCCL reads it, nic_selector); a baselines model's
`expect.hca_ports` (a fleet's own file naming every HCA of a SKU, as AzureHPC NHC's
`check_hw_ib 400 mlx5_ib0:1` lines do); else the PCIe topology (ib_topology: an InfiniBand HCA under a
GPU's PCIe switch is a compute rail; every GPU needs one and there are `expect.hcas` of them); else,
where sysfs does not show the topology, the count `expect.hcas` (model or --expect hcas=N), saying so.
By count, ports beyond the expected number are a warning: a storage HCA in InfiniBand mode cannot be
told from a compute one, and would hide a missing compute HCA, so the set should be named. A
selection that mixes link layers counts only its InfiniBand ports as rails (one fabric, one layer). An entry
sysfs lists but cannot read counts as missing, never as present and never dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..harness.checks import Check
from . import nic_selector
from .ib_ports import IbPort
from .ib_topology import Topology

CODES = ("IB_HCAS_NOT_PRESENT", "IB_HCAS_EXTRA", "IB_FABRIC_UNNAMED", "EXPECTATION_MISSING")


@dataclass(frozen=True)
class ExpectedHcas:
    """The HCA ports the node must have: `names` ("mlx5_0" any port, "mlx5_0:1" that port) when
    something names them, else only `count`; `basis` says where from."""

    names: tuple[str, ...]
    count: int | None
    basis: str

    def matches(self, name: str, p: IbPort) -> bool:
        dev, _, port = name.partition(":")
        return p.device == dev and (not port or not p.port or port == str(p.port))


def expected_set(spec: str | None, model_ports, expect) -> ExpectedHcas:
    """The expected set from an inclusive exact --ib-hca / NCCL_IB_HCA (`=mlx5_0,mlx5_3`: each item
    one device), else the model's `hca_ports` (those the selector selects, when one is set), else the
    count (expect.hcas). A prefix (`mlx5`) or an exclusion (`^mlx5_3`) names no device: it says which
    of the present ones NCCL takes (nic_selector), so the bar stays the node's count."""
    count = expect.get("hcas")
    sel = nic_selector.parse(spec) if spec else None
    if sel is not None and sel.names_each:
        names = tuple(str(i) for i in sel.items)
        return ExpectedHcas(names, count, f"--ib-hca / NCCL_IB_HCA {spec!r} names {len(names)}")
    if model_ports:
        every = tuple(str(x) for x in model_ports)
        names = tuple(x for x in every if sel is None or sel.selects(*_device_port(x)))
        taken = f", {len(names)} of them selected by NCCL_IB_HCA {spec!r}" if sel is not None else ""
        return ExpectedHcas(names, count, f"baselines.yaml expect.hca_ports names {len(every)}{taken}")
    basis = expect.basis("hcas") + (f"; {sel.describe()}" if sel is not None else "")
    return ExpectedHcas((), count, basis)


def _device_port(name: str) -> tuple[str, int | None]:
    dev, _, port = name.partition(":")
    return dev, int(port) if port.isdigit() else None


def prefix_overreach(spec: str | None, ports: list[IbPort], selected: list[IbPort]) -> list[str]:
    """Ports a prefix item takes beyond the device it spells exactly (`mlx5_1` also takes mlx5_10):
    the case NCCL's documentation warns about; empty for an exact selector or a family prefix."""
    sel = nic_selector.parse(spec) if spec else None
    if sel is None or sel.exact or sel.exclude:
        return []
    devices = {p.device for p in ports}
    return [p.name for p in selected
            if any(i.name in devices and p.device != i.name and sel.item_matches(i, p.device, p.port) for i in sel.items)]


def judge(ports: list[IbPort], selected: list[IbPort], exp: ExpectedHcas, how: str, cpu: bool,
          roce: list[IbPort] = (), spec: str | None = None, topology: Topology | None = None) -> Check:
    """`_judge`, then a prefix that takes ports beyond the device it spells is a warning at least."""
    c = _judge(ports, selected, exp, how, cpu, roce, topology)
    over = prefix_overreach(spec, ports, selected)
    if over and c.status in ("pass", "skip"):
        return Check("ib_hca_count", "warn", len(selected), "ports", c.threshold, code="IB_HCAS_EXTRA",
                     message=f"NCCL_IB_HCA {spec!r} is a prefix: it also takes {', '.join(over)} (NCCL reads "
                     f"`mlx5_1` as mlx5_1, mlx5_10, ...): name the HCAs exactly with '=' ({c.message})")
    return c


def _judge(ports: list[IbPort], selected: list[IbPort], exp: ExpectedHcas, how: str, cpu: bool,
           roce: list[IbPort] = (), topology: Topology | None = None) -> Check:
    """One `ib_hca_count` check. `ports`: everything sysfs lists (unreadable entries included);
    `selected`: the readable compute-fabric ports; `roce`: the node's Ethernet RDMA ports when nothing
    names the fabric and none is InfiniBand."""
    listed = ", ".join(p.name for p in selected) or "none"
    if cpu and not exp.count and not exp.names:
        return Check("ib_hca_count", "pass", len(selected), "ports", ">= 0",
                     f"CPU mode: no HCA required; {len(selected)} present ({listed})")
    if exp.names:
        return _by_name(ports, selected, exp)
    if not selected and roce:  # a RoCE node whose fabric nobody named: not judged, never a false fail
        return Check("ib_hca_count", "skip", 0, "ports", code="IB_FABRIC_UNNAMED",
                     message=f"every RDMA port is Ethernet ({', '.join(p.name for p in roce)}) and nothing names the "
                     "compute fabric's HCAs: set NCCL_IB_HCA (pod_env) or --ib-hca / CLUSTER_DOCTOR_IB_HCA")
    if not exp.count:
        return Check("ib_hca_count", "skip", len(selected), "ports", code="EXPECTATION_MISSING",
                     message=f"{len(selected)} HCA port(s) present ({listed}; {how}); nothing says which or how many "
                     "the node should have (NCCL_IB_HCA naming them, expect.hca_ports, expect.hcas, --expect hcas=N)")
    if topology is not None and topology.known:
        return _by_topology(ports, selected, exp, how, topology)
    c = _by_count(ports, selected, exp, how)
    if topology is not None:  # said, never a silent pass: a storage HCA would hide a missing rail here
        c.message += (f"; PCIe topology unknown ({topology.why}): compared by count, which cannot tell a storage "
                      "HCA from a compute rail")
    return c


def _by_topology(ports: list[IbPort], selected: list[IbPort], exp: ExpectedHcas, how: str, topo: Topology) -> Check:
    """The compute rails are the InfiniBand ports under a GPU's PCIe switch; every GPU needs one, and
    there are as many as the SKU expects. The GPU left without one is named, whatever else is present."""
    selected, other = rails(selected)
    compute = [p for p in selected if topo.rails.get(p.device)]
    apart = [p for p in selected if not topo.rails.get(p.device)]
    want, have = exp.count, len(compute)
    listed = ", ".join(f"{p.name} (GPU {', '.join(str(g) for g in topo.rails[p.device])})" for p in compute) or "none"
    notes = [f"{p.name} (listed, unreadable)" for p in ports if p.device_error]
    if apart:
        notes.insert(0, "not compute rails: " + ", ".join(f"{p.name} (no GPU under its PCIe switch)" for p in apart))
    if other:
        notes.append(f"{', '.join(p.name for p in other)} ({other[0].link_layer or '?'}) not counted as a rail")
    tail = "; ".join(notes)
    basis = f"{exp.basis}; compute rails by PCIe switch, as NCCL pairs GPUs and HCAs; {how}"
    lonely = topo.lonely()
    if lonely or have < want:
        named = "; ".join(f"GPU {i} ({b}) has no InfiniBand HCA under its PCIe switch" for i, b in lonely)
        return Check("ib_hca_count", "fail", have, "ports", f"== {want}",
                     (f"{named}; " if named else "") + f"{have} of {want} expected compute rail(s): {listed}"
                     + (f"; {tail}" if tail else "") + f" ({basis})", code="IB_HCAS_NOT_PRESENT")
    if have > want:
        return Check("ib_hca_count", "warn", have, "ports", f"== {want}", code="IB_HCAS_EXTRA",
                     message=f"{have} compute rail(s), {want} expected: {listed}" + (f"; {tail}" if tail else "")
                     + f" ({basis})")
    return Check("ib_hca_count", "pass", have, "ports", f"== {want}",
                 f"{have} compute rail(s), {want} expected, one under every GPU's PCIe switch: {listed}"
                 + (f"; {tail}" if tail else "") + f" ({basis})")


def _by_name(ports: list[IbPort], selected: list[IbPort], exp: ExpectedHcas) -> Check:
    readable = [p for p in ports if not p.device_error]
    missing = []
    for name in exp.names:
        if any(exp.matches(name, p) for p in readable):
            continue
        dead = [p for p in ports if p.device_error and exp.matches(name, p)]
        missing.append(f"{name} (listed, unreadable: {dead[0].device_error})" if dead else f"{name} (not in sysfs)")
    n = len(exp.names)
    note = (f"; the model's count is {exp.count}, the node pool's names win" if exp.count and exp.count != n else "")
    if missing:
        return Check("ib_hca_count", "fail", n - len(missing), "ports", f"== {n} named",
                     f"{n - len(missing)} of {n} expected HCA port(s) present; missing: {', '.join(missing)} "
                     f"({exp.basis}{note})", code="IB_HCAS_NOT_PRESENT")
    extra = [p.name for p in selected if not any(exp.matches(name, p) for name in exp.names)]
    if extra:  # NCCL_IB_HCA prefixes (`mlx5_1` matches mlx5_10) pick up ports nobody named
        return Check("ib_hca_count", "warn", len(selected), "ports", f"== {n} named", code="IB_HCAS_EXTRA",
                     message=f"all {n} named HCA port(s) present; the selection also takes {', '.join(extra)} "
                     f"(NCCL_IB_HCA prefix matching): name them exactly with '=' ({exp.basis})")
    return Check("ib_hca_count", "pass", n, "ports", f"== {n} named",
                 f"all {n} expected HCA port(s) present: {', '.join(exp.names)} ({exp.basis}{note})")


def rails(selected: list[IbPort]) -> tuple[list[IbPort], list[IbPort]]:
    """(the compute rails, the other ports) of a selection: one fabric is one link layer, so where a
    selection mixes InfiniBand ports with Ethernet ones (a prefix such as `mlx5` also takes a
    front-end RoCE bond) the InfiniBand ports are the rails and the others cannot stand in for one."""
    ib = [p for p in selected if p.link_layer == "InfiniBand"]
    if ib and len(ib) < len(selected):
        return ib, [p for p in selected if p not in ib]
    return list(selected), []


def _by_count(ports: list[IbPort], selected: list[IbPort], exp: ExpectedHcas, how: str) -> Check:
    selected, other = rails(selected)
    if other:
        how += f"; {', '.join(p.name for p in other)} ({other[0].link_layer or '?'}) not counted as a rail"
    want, have = exp.count, len(selected)
    listed = ", ".join(p.name for p in selected) or "none"
    dead = [f"{p.name} (listed, unreadable)" for p in ports if p.device_error]
    if have < want:
        return Check("ib_hca_count", "fail", have, "ports", f"== {want}", f"{have} of {want} expected HCA port(s) "
                     f"present: {listed}" + (f"; {', '.join(dead)}" if dead else "") + f" ({exp.basis}; {how})",
                     code="IB_HCAS_NOT_PRESENT")
    if have > want or other:
        return Check("ib_hca_count", "warn", have, "ports", f"== {want}", code="IB_HCAS_EXTRA",
                     message=f"{have} HCA ports ({listed}), {want} expected ({exp.basis}; {how}): a storage HCA cannot "
                     "be told from a compute one by count, so a missing compute HCA would hide; name the compute "
                     "HCAs (NCCL_IB_HCA '=mlx5_0,...', or expect.hca_ports)")
    return Check("ib_hca_count", "pass", have, "ports", f"== {want}",
                 f"{have} HCA port(s) present, {want} expected ({exp.basis}): {listed}")
