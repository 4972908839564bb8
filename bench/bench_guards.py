"""make bench-guards: the API time of one validation's node re-checks at 5,000 nodes / 150,000 pods
(at most 1 s), against the re-checks they replaced, measured in the same run.

One validation re-checks its node twice before its pod starts: right before creating the pod and at
the first Pending check. Each check now is one GET of the node and one list of that node's pods
(``fieldSelector=spec.nodeName=<node>``, ``resourceVersion=0``: the watch cache's node index). The
check it replaced listed the node's pods and every unbound pending pod of the cluster as paged
consistent lists, then read the node; on an apiserver whose consistent lists come from etcd (before
1.31, or ConsistentListFromCache off: the emulator at 1.30 here) each of those lists reads every pod.

The emulator answers as Kubernetes 1.30 and counts which store served each list and how many objects
it looked at; its time is not a real apiserver's (an etcd read of 150,000 pods takes seconds there, a
fraction of a second here), so the objects read are printed beside the seconds. Nothing is left
running (tools/leftovers.py); the last line reads ``guards_s=<p50 per validation> baseline_s=<p50>
objects=<per validation> baseline_objects=<per validation> calls=<per validation> nodes=… pods=…``.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import random
import statistics
import sys
import time

from cluster_doctor.domain.config import Settings
from cluster_doctor.kube import guards, listing

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))  # the emulator is a test tool, not part of the installed package

from k8s_emulator import EmulatorProcess  # noqa: E402
import interrupts  # noqa: E402
from leftovers import Leftovers  # noqa: E402

GOAL_S = 1.0
UNBOUND_PENDING_PODS = "spec.nodeName=,status.phase=Pending"


def check_now(core_v1, node: str, settings: Settings) -> None:
    """One re-check as the operator makes it now (kube.guards)."""
    if guards.node_problem(core_v1, node, settings.tolerations) is None:
        guards.gpu_holders(core_v1, node, settings.gpu_resource)


def check_before(core_v1, node: str, settings: Settings) -> None:
    """One re-check as the operator made it before the watch-cache guards: the node's pods and every unbound
    pending pod as paged consistent lists, then the node."""
    calls = [0]
    for _ in listing.paginate(core_v1.list_pod_for_all_namespaces, calls,
                              field_selector=f"spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed"):
        pass
    for _ in listing.paginate(core_v1.list_pod_for_all_namespaces, calls, field_selector=UNBOUND_PENDING_PODS):
        pass
    core_v1.read_node(node)


def validation(emu: EmulatorProcess, core_v1, check, node: str, settings: Settings) -> tuple[float, int, int]:
    """(seconds, objects the lists looked at, API calls) of one validation's two re-checks."""
    emu.reset_counters()
    start = time.perf_counter()
    check(core_v1, node, settings)  # right before the pod is created
    check(core_v1, node, settings)  # the first check while it is Pending
    seconds = time.perf_counter() - start
    counters = emu.counters()
    objects = sum(v for k, v in counters["list_reads"].items() if k.endswith(" objects"))
    return seconds, objects, counters["total"]


def measure(emu: EmulatorProcess, validations: int, pods: int, nodes: int) -> tuple[str, bool]:
    settings = Settings()
    core_v1 = emu.core_v1()
    names = [n.metadata.name for n in core_v1.list_node(resource_version="0").items]
    chosen = random.Random(11).sample(names, validations)
    now, before = [], []
    for node in chosen:  # alternately, on the same warm emulator
        now.append(validation(emu, core_v1, check_now, node, settings))
        before.append(validation(emu, core_v1, check_before, node, settings))
    med = lambda rows, i: statistics.median(r[i] for r in rows)  # noqa: E731
    print(f"one validation's re-checks now: {med(now, 0) * 1000:.0f} ms p50 ({max(r[0] for r in now) * 1000:.0f} ms "
          f"max), {med(now, 2):.0f} API calls, {med(now, 1):.0f} objects read (the node's pods, from the cache index)")
    print(f"the re-checks they replaced: {med(before, 0) * 1000:.0f} ms p50, {med(before, 2):.0f} API calls, "
          f"{med(before, 1):,.0f} objects read (every pod, twice per check, from etcd at 1.30)")
    ok = med(now, 0) <= GOAL_S
    print(f"goal: <= {GOAL_S:g} s per validation {'met' if ok else 'MISSED'} "
          f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
    figure = (f"guards_s={med(now, 0):.3f} baseline_s={med(before, 0):.3f} objects={med(now, 1):.0f} "
              f"baseline_objects={med(before, 1):.0f} calls={med(now, 2):.0f} nodes={nodes} pods={pods}")
    return figure, ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--validations", type=int, default=15)
    args = parser.parse_args()
    leftovers = Leftovers()
    with leftovers.tempdir("cd-bench-guards-") as tmp, EmulatorProcess(
            state_dir=str(tmp / "emulator"), settings={"kubernetes_version": "1.30"}) as emu:
        started = time.perf_counter()
        emu.bulk_generate(nodes=args.nodes, pods=args.pods, seed=7)
        print(f"emulator (Kubernetes 1.30) loaded {args.nodes:,} nodes and {args.pods:,} pods in "
              f"{time.perf_counter() - started:.1f} s", flush=True)
        figure, _ = measure(emu, args.validations, args.pods, args.nodes)
    return leftovers.finish(figure)  # a goal missed is said above; only leftovers fail the run


if __name__ == "__main__":
    sys.exit(interrupts.run(main))
