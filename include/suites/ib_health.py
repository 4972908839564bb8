"""ib_health: seconds, no load. Every compute HCA the node should have is present (the expected set by
name, else every GPU with an HCA under its PCIe switch and as many as expected, else by count), Active / LinkUp at the expected rate and width, and its error counters
(symbol errors, link downed, link error recovery, receive errors, buffer overruns, ...) below their
thresholds on a first sample and not growing since the previous run after that, with a link flap
failing for a window of hours; RoCE ports through the mlx5 ethtool statistics. Read from sysfs, no
privilege needed.

    python -m cluster_doctor_suites.ib_health [--gpu-model NVIDIA-H100-80GB-HBM3] [--expect hcas=8]

The previous counter values (and flaps still inside their window) come from the last ib_health
result of this node in the output directory (`<output-dir>/ib_health/<node>/`: in pods the shared
results volume, the same on any executor), or --previous. CPU mode (--device cpu) has no fabric to
judge: the ports are a visible not-run.
"""

from __future__ import annotations

import os
import shutil

from .baselines import Baselines, expectations, model_for_node
from .checkers import ib_counters, ib_hcas, ib_ports, ib_topology, roce_counters
from .harness.context import Context
from .harness.files import safe_name
from .harness.mounts import MOUNTINFO, mount_of
from .harness.previous import BOOT_ID, previous_sample, read_boot_id
from .harness.inventory import gpu_inventory
from .harness.checks import SuiteError
from .harness.runner import main_entry, run_suite
from .harness.text import iso, utcnow

SUITE = "ib_health"


def add_arguments(p) -> None:
    g = p.add_argument_group("ib_health")
    g.add_argument("--sysfs-root", default=os.environ.get("CLUSTER_DOCTOR_IB_SYSFS", ib_ports.SYSFS_ROOT),
                   help="the RDMA devices' sysfs directory [CLUSTER_DOCTOR_IB_SYSFS]")
    g.add_argument("--ib-hca", default=os.environ.get("CLUSTER_DOCTOR_IB_HCA") or os.environ.get("NCCL_IB_HCA") or None,
                   help="the compute-fabric HCAs, NCCL_IB_HCA syntax (default: NCCL_IB_HCA, else every InfiniBand "
                   "port) [CLUSTER_DOCTOR_IB_HCA, NCCL_IB_HCA]")
    g.add_argument("--previous", default=os.environ.get("CLUSTER_DOCTOR_IB_PREVIOUS") or None,
                   help="a previous ib_health result JSON to judge counter growth against (default: the newest in "
                   "<output-dir>/ib_health/<node>/) [CLUSTER_DOCTOR_IB_PREVIOUS]")
    g.add_argument("--flap-window-hours", type=float,
                   default=os.environ.get("CLUSTER_DOCTOR_IB_FLAP_WINDOW_HOURS") or None,
                   help="a link flap fails every run for this long (default: baselines.yaml "
                   "ib_health.flap_window_hours, 6 as AzureHPC NHC) [CLUSTER_DOCTOR_IB_FLAP_WINDOW_HOURS]")
    g.add_argument("--link-error-window-hours", type=float,
                   default=os.environ.get("CLUSTER_DOCTOR_IB_LINK_ERROR_WINDOW_HOURS") or None,
                   help="a port that failed with link errors fails every run for this long unless it was reset or "
                   "replaced (default: baselines.yaml ib_health.link_error_window_hours, 24) "
                   "[CLUSTER_DOCTOR_IB_LINK_ERROR_WINDOW_HOURS]")
    g.add_argument("--pci-root", default=os.environ.get("CLUSTER_DOCTOR_PCI_ROOT", ib_topology.PCI_DEVICES),
                   help="the PCI devices' sysfs directory: the GPUs' place in the PCIe topology, which tells the "
                   "compute rails from other HCAs [CLUSTER_DOCTOR_PCI_ROOT]")
    g.add_argument("--ethtool", default="ethtool", help="ethtool binary (RoCE port statistics)")
    g.add_argument("--boot-id-file", default=BOOT_ID, help="where the kernel's boot id is read from")
    g.add_argument("--mountinfo", default=MOUNTINFO, help="the mount table read (tests)")


def default_timeout(args) -> float:
    return 120


# --------------------------------------------------------------------------------------------------
# the checks without which the suite proves nothing: an unknown model names no HCAs, rates or widths
KEY_CHECKS = ("baseline",)


def run(ctx: Context) -> None:
    ctx.key_checks = KEY_CHECKS
    a = ctx.args
    baselines = Baselines.load(a.baselines)
    section = baselines.section("ib_health")
    try:
        rules = ib_counters.rules(section.get("counters"))
    except ValueError as exc:
        raise SuiteError(f"baselines {baselines.path}: {exc}") from None
    gpus = [] if ctx.cpu else gpu_inventory()[0]
    names = [g.get("name") for g in gpus]
    key, model = model_for_node(ctx, baselines, names)
    expect = expectations(baselines, key if not ctx.cpu else None, a)
    ctx.environment.update(gpu_model=model, baseline=key if not ctx.cpu else None,
                           expectations=expect.as_environment())
    ctx.set_phase(f"scan {a.sysfs_root}")
    ports = ib_ports.scan(a.sysfs_root)
    selected, how = ib_ports.select(ports, a.ib_hca)
    exp = ib_hcas.expected_set(a.ib_hca, baselines.model(key).get("expect", {}).get("hca_ports") if not ctx.cpu
                               else None, expect)
    # a selection mixing InfiniBand and Ethernet ports (a prefix taking a front-end bond too): the
    # InfiniBand ones are the rails judged; the others are named by ib_hca_count, not failed as slow rails
    rails = selected if exp.names else ib_hcas.rails(selected)[0]
    ctx.environment.update(ib_ports=[{"port": p.name, "link_layer": p.link_layer, "state": p.state,
                                      "rate": p.rate_gbps, "hca_type": p.hca_type, "fw": p.fw_ver,
                                      "judged": p in rails, "unreadable": p.device_error or None} for p in ports],
                           ib_selection=how, ib_expected_hcas={"names": list(exp.names), "count": exp.count,
                                                               "basis": exp.basis})
    roce = [p for p in ports if p.link_layer == "Ethernet"] if not a.ib_hca and not selected else []
    topology = None
    if not ctx.cpu and not exp.names:  # nothing names the rails: the PCIe topology tells them apart
        topology = ib_topology.read(a.sysfs_root, a.pci_root, gpus, sorted({p.device for p in rails}))
        ctx.environment["ib_topology"] = topology.as_environment()
    ctx.record(ib_hcas.judge(ports, selected, exp, how, ctx.cpu, roce, spec=a.ib_hca, topology=topology))
    ctx.metric("ib_ports_present", len(selected), summary=True)
    if ctx.cpu:  # nothing to prove without the node's fabric: visibly not run, never a fail
        ctx.check("ib_ports", "skip", value=len(selected), unit="ports", code="IB_NOT_APPLICABLE",
                  message=f"CPU mode: {len(selected)} port(s) present, state, rate and counters not judged")
        return
    _judge_ports(ctx, rails + _unreadable(ports, a.ib_hca), expect)
    window = a.flap_window_hours if a.flap_window_hours is not None else float(section.get("flap_window_hours", 6))
    errors_h = a.link_error_window_hours if a.link_error_window_hours is not None else float(
        section.get("link_error_window_hours", ib_counters.ERROR_WINDOW_H))
    _judge_counters(ctx, a, rails, rules, window, errors_h)


def _unreadable(ports: list[ib_ports.IbPort], spec: str | None) -> list[ib_ports.IbPort]:
    """Entries sysfs lists but cannot read that belong to the fabric: named by the selection, or any
    when nothing names it (their link layer cannot be read either)."""
    bad = [p for p in ports if p.device_error]
    return [p for p in bad if ib_ports.matches(spec, p)] if spec else bad


def _judge_ports(ctx: Context, selected: list[ib_ports.IbPort], expect) -> None:
    up = [p for p in selected if p.up]
    best_rate = max((p.rate_gbps for p in up if p.rate_gbps), default=None)
    best_width = max((p.width for p in up if p.width), default=None)
    for p in selected:
        for c in ib_ports.port_checks(p, expect, best_rate, best_width):
            ctx.record(c)
    ctx.metric("ib_ports_active", len(up), summary=True)


def _judge_counters(ctx: Context, a, selected: list[ib_ports.IbPort], rules: dict, window_h: float,
                    errors_h: float) -> None:
    """Sample every port's counters, judge them (first sample: thresholds; later: growth; flaps and
    link errors: a window each), and keep this sample, the flaps and the link-error failures in their
    windows in the result for the next run."""
    ctx.set_phase("error counters")
    boot = read_boot_id(a.boot_id_file)
    previous, why = previous_sample(ctx, SUITE, "ib_counters", a.previous, lambda s: bool(s.get("ports")))
    if previous is not None and boot and previous.get("boot_id") and previous["boot_id"] != boot:
        why = f"the node rebooted since the previous sample of {previous.get('taken_at', '?')}"
    ethtool = shutil.which(a.ethtool)
    at = utcnow()
    sample = {"boot_id": boot, "taken_at": iso(at), "ports": {}, "flaps": {}, "flap_window_hours": window_h,
              "link_errors": {}, "link_error_window_hours": errors_h}
    found_total = 0
    for p in selected:
        if p.link_layer == "Ethernet":
            now = roce_counters.read(ctx, ethtool, a.sysfs_root, p.device, p.port, rules)
        else:
            now = ib_counters.read_sysfs(a.sysfs_root, p.device, p.port, rules)
        if not now.unavailable:
            sample["ports"][now.port] = now.to_json()
        v = ib_counters.judge(now, previous, why, rules, window_h, at, errors_h, boot)
        ctx.record(v.check)
        if v.flap:
            sample["flaps"][now.port] = v.flap
        if v.link_errors:
            sample["link_errors"][now.port] = v.link_errors
        found_total += v.found
    ctx.environment["ib_counters"] = sample
    ctx.metric("ib_counter_growth", found_total, summary=True)
    _state_kept(ctx, a)


def _state_kept(ctx: Context, a) -> None:
    """The next run reads this sample back from the output directory: on a container's own root
    filesystem (an overlay) it is lost with the pod, and growth and the flap window go unjudged.
    Said in the result, not failed: the node is not at fault."""
    where = os.path.join(a.output_dir, SUITE, safe_name(a.node))
    m = mount_of(where, a.mountinfo)
    if not a.previous and m is not None and m.mount_point == "/" and m.fstype == "overlay":
        ctx.warn(f"{where} is on the container's own root filesystem ({m.fstype}), not a volume: the next run will "
                 "not find this sample (counter growth and the flap window need the shared results volume, or "
                 "--previous)")


DESCRIPTION = __doc__.split("\n\n")[0]


def main(argv: list[str] | None = None) -> int:
    """Run in-process (tests, embedding); returns the exit code. `python -m` owns the process instead."""
    return run_suite(SUITE, DESCRIPTION, add_arguments, run, argv, default_timeout)


if __name__ == "__main__":
    main_entry(SUITE, DESCRIPTION, add_arguments, run, default_timeout)
