"""make bench-discovery: free-node discovery at the Kubernetes scalability limits and twice them, against
its goals — peak memory, wall time against one raw list, and the discover
task's XCom.

The Kubernetes API emulator serves 5,000 GPU nodes and 150,000 pods, then 10,000 and 300,000; discovery
reads them through the real kubernetes client (resourceVersion=0 lists, streamed and folded into per-node
state; of the pod list only the pods that name the GPU resource are decoded), then the prioritizer plans
over the free nodes (the prioritize task's planner). Measured in this one run, per size, alternately:

- ``raw_list_s``: one raw ``resourceVersion=0`` list of every pod, read to its last byte and dropped
  (what ``kubectl get pods -A`` costs before it parses anything): the baseline;
- ``discovery_s``: the whole discovery (two lists: the nodes, and every non-terminal pod);
- ``peak_mib``: the peak resident memory of a fresh process that imports discovery, discovers once and
  exits, next to the same process reading the bound-pod list whole (the read before streaming);
- ``xcom_kb``: the discover task's XCom (``Discovered``: settings, params, node ranges).

Goals at both sizes: peak ≤ 300 MiB, discovery ≤ 1.2 × the raw list, XCom ≤ 50 KB. The ratio discovery ÷
raw list (measured in this run: a slower host slows both alike) or the peak memory more than 20 % worse
than bench/figures.toml's says REGRESSION and the run exits 1 (bench/figures.py); the seconds are printed
with the host's speed beside them (bench/host.py). Nothing is left running (tools/leftovers.py); the last
line reads ``discovery_s=… raw_list_s=… ratio=… peak_mib=… xcom_kb=… api_calls=… nodes=… pods=…
host_ms=…``, values per size comma-separated.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import pathlib
import random
import statistics
import subprocess
import sys
import time

from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.nodes import parse_node_range
from cluster_doctor.domain.payloads import Discovered, Params
from cluster_doctor.domain.planning import plan as planner
from cluster_doctor.domain.planning.due import PairState
from cluster_doctor.domain.planning.params import RunParams
from cluster_doctor.kube import discovery

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))  # the emulator is a test tool, not part of the installed package

from k8s_emulator import EmulatorProcess  # noqa: E402
import interrupts  # noqa: E402
from leftovers import Leftovers  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
import figures  # noqa: E402
import host  # noqa: E402

GOAL_PEAK_MIB, GOAL_RATIO, GOAL_XCOM_KB = 300, 1.2, 50
SETTLE_S = 0.5  # between measurements: the server done with the previous answer

# A fresh process: its peak resident memory (VmHWM: ru_maxrss would carry over the parent's peak
# across fork and exec) after the imports, then after the measured step.
MEMORY_PROBE = """
import json, re, sys
from cluster_doctor.domain.config import Settings
from cluster_doctor.kube import discovery, listing, retry
from kubernetes import config
def peak_kib():
    return int(re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1))
core = retry.core_v1(config.new_client_from_config(config_file=sys.argv[1]))
before = peak_kib()
if sys.argv[2] == "discover":
    found = discovery.discover(core, Settings())
    seen = found.pods_seen
else:  # the read before streaming: the bound-pod list whole in memory, then decoded whole
    data = core.list_pod_for_all_namespaces(field_selector=discovery.ACTIVE_PODS, resource_version="0",
                                            _preload_content=False).data
    seen = len(listing.decode("pods", data, [0])[0])
print(json.dumps({"imports_kib": before, "peak_kib": peak_kib(), "pods": seen}))
"""


def raw_list_seconds(core_v1) -> tuple[float, int]:
    """One raw resourceVersion=0 list of every pod, read and dropped: (seconds, bytes)."""
    start = time.perf_counter()
    response = core_v1.list_pod_for_all_namespaces(resource_version="0", _preload_content=False)
    size = 0
    while chunk := response.read(1 << 20):
        size += len(chunk)
    return time.perf_counter() - start, size


def peak_mib(kubeconfig: str, mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", MEMORY_PROBE, kubeconfig, mode], capture_output=True, text=True,
                         check=True, timeout=600)
    probe = json.loads(out.stdout.strip().splitlines()[-1])
    return {"imports": probe["imports_kib"] / 1024, "peak": probe["peak_kib"] / 1024, "pods": probe["pods"]}


def xcom_bytes(found: discovery.Discovery, settings: Settings) -> int:
    """The discover task's XCom for this discovery, as tasks.discover builds it."""
    payload = Discovered.of(
        settings=settings, params=Params(tests=list(settings.tests), max_pairs=settings.max_pairs_per_run),
        started_at=dt.datetime.now(dt.UTC), inventory_at=dt.datetime.now(dt.UTC),
        free=[(n.name, n.gpu_count, n.gpu_model) for n in found.free],
        ineligible=[(n.name, n.reason) for n in found.ineligible], api_calls=found.api_calls,
        nodes_seen=found.nodes_seen, pods_seen=found.pods_seen, read_mode=found.read_mode)
    return len(json.dumps(payload.to_xcom()))


def plan_ms(found: discovery.Discovery, settings: Settings, rnd: random.Random) -> float:
    """The prioritize task's planner (``planning.plan.plan``, the health sweep included) over the free nodes."""
    now = dt.datetime.now(dt.UTC)
    free = [n.name for n in found.free]
    states = {(node, test): PairState(status="pass", finished_at=when, last_attempt_at=when, last_attempt_status="pass")
              for node in free for test in settings.tests
              if rnd.random() < 0.9 and (when := now - dt.timedelta(hours=rnd.uniform(0, 24 * 14)))}
    run = RunParams(parse_node_range(""), list(settings.tests), None, settings.max_pairs_per_run, False)
    given = planner.PlanInput(settings=settings, run=run, free=found.free, states=states)
    start = time.perf_counter()
    planner.plan(given, now=now)
    return (time.perf_counter() - start) * 1000


def dag_parse_seconds() -> float:
    code = ("import time, runpy, airflow.sdk, airflow.providers.cncf.kubernetes.operators.pod\n"
            "t = time.perf_counter(); runpy.run_path('dags/continuous_validation.py'); print(time.perf_counter() - t)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def measure(emu: EmulatorProcess, runs: int, pods: int) -> dict:
    """Every figure of one size, baseline and discovery alternately on the same warm emulator.

    The order alternates (raw first, then discovery first: ABBA) and each measurement starts on a settled
    server: the emulator is one Python process that frees a 163 MB answer after sending it, work that
    would otherwise land on whichever request comes next."""
    settings = Settings()
    core_v1 = emu.core_v1()
    raw, disc, cpu, calls, decode, found, size = [], [], [], [], [], None, 0

    def settle() -> None:
        time.sleep(SETTLE_S)

    def one_raw() -> None:
        nonlocal size
        settle()
        seconds, size = raw_list_seconds(core_v1)
        raw.append(seconds)

    def one_discovery() -> None:
        nonlocal found
        settle()
        emu.reset_counters()
        start, start_cpu = time.perf_counter(), time.process_time()
        found = discovery.discover(core_v1, settings)
        disc.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
        calls.append(emu.api_calls())
        decode.append(found.decode_seconds)

    for i in range(runs):
        for measure_one in ((one_raw, one_discovery) if i % 2 == 0 else (one_discovery, one_raw)):
            measure_one()
    assert found is not None
    print(f"raw resourceVersion=0 list of every pod: {size / 1e6:.0f} MB; runs: {', '.join(f'{t:.2f}s' for t in raw)}")
    print(f"discovery: {len(found.free):,} free, {len(found.ineligible):,} not eligible, {found.pods_seen:,} pods "
          f"read in {calls[-1]} list calls ({found.read_mode}); runs: {', '.join(f'{t:.2f}s' for t in disc)}; "
          f"this process's CPU {statistics.median(cpu):.2f} s, decoding {statistics.median(decode):.2f} s of it")
    t = time.perf_counter()
    paged = discovery.discover(core_v1, settings, watch_cache=False)
    print(f"paged consistent lists for comparison: {time.perf_counter() - t:.2f} s, {paged.api_calls} calls")
    print(f"prioritization over the free nodes: {plan_ms(found, settings, random.Random(7)):.0f} ms")
    streamed = peak_mib(emu.kubeconfig_path, "discover")
    whole = peak_mib(emu.kubeconfig_path, "whole")
    print(f"peak resident memory of a fresh process: {streamed['peak']:.0f} MiB discovering "
          f"({streamed['imports']:.0f} MiB after imports); {whole['peak']:.0f} MiB holding the pod list "
          f"whole ({whole['pods']:,} pods)")
    xcom = xcom_bytes(found, settings) / 1000
    print(f"discover's XCom: {xcom:.1f} KB (settings, params, free nodes as ranges, not-eligible ranges)")
    ratio = statistics.median(disc) / statistics.median(raw)
    print(f"goals: peak <= {GOAL_PEAK_MIB} MiB {'met' if streamed['peak'] <= GOAL_PEAK_MIB else 'MISSED'}; "
          f"ratio <= {GOAL_RATIO} {'met' if ratio <= GOAL_RATIO else 'MISSED'}; "
          f"XCom <= {GOAL_XCOM_KB} KB {'met' if xcom <= GOAL_XCOM_KB else 'MISSED'} "
          f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)", flush=True)
    return {"discovery": statistics.median(disc), "raw": statistics.median(raw), "ratio": ratio,
            "peak": streamed["peak"], "xcom": xcom, "calls": int(statistics.median(calls)),
            "nodes": found.nodes_seen, "pods": pods}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="5000,10000", help="fleet sizes, comma-separated")
    parser.add_argument("--pods", default="150000,300000", help="pods at each size, comma-separated")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--kubernetes-version", default="1.33", help="what the emulator answers as")
    args = parser.parse_args()
    sizes = list(zip((int(n) for n in args.nodes.split(",")), (int(p) for p in args.pods.split(",")), strict=True))
    leftovers = Leftovers()
    results = []
    print(f"DAG file parse time: {dag_parse_seconds():.3f} s (target <= 0.5 s)", flush=True)
    for nodes, pods in sizes:
        # a current apiserver (1.33+) writes lists item by item: the raw list and discovery alike
        with leftovers.tempdir("cd-bench-discovery-") as tmp, EmulatorProcess(
                state_dir=str(tmp / "emulator"), settings={"kubernetes_version": args.kubernetes_version}) as emu:
            started = time.perf_counter()
            info = emu.bulk_generate(nodes=nodes, pods=pods, seed=7)
            print(f"emulator loaded {nodes:,} nodes and {pods:,} pods in {time.perf_counter() - started:.1f} s "
                  f"(avg {info['avg_pod_bytes']} bytes per pod)", flush=True)
            result = measure(emu, args.runs, pods)
            result["host_ms"] = host.calibration_ms()
            print(host.line(result["host_ms"]), flush=True)
            results.append(result)
    # keyed by the fleet's size, as the README's table names its columns (5,000 nodes: 150,000 pods)
    worse = figures.ratio_regressions({("discovery.ratio", figures.size_label(r["nodes"], "nodes")): r["ratio"]
                                       for r in results})
    worse += figures.regressions({("discovery.peak_mib", figures.size_label(r["nodes"], "nodes")): r["peak"]
                                  for r in results})  # memory: the host's speed does not move it
    for line in worse:
        print(line, flush=True)

    def each(key: str, fmt: str) -> str:
        return ",".join(format(r[key], fmt) for r in results)

    figure = (f"discovery_s={each('discovery', '.2f')} raw_list_s={each('raw', '.2f')} ratio={each('ratio', '.2f')} "
              f"peak_mib={each('peak', '.0f')} xcom_kb={each('xcom', '.1f')} api_calls={each('calls', 'd')} "
              f"nodes={each('nodes', 'd')} pods={each('pods', 'd')} host_ms={each('host_ms', '.1f')}")
    return leftovers.finish(figure, ok=not worse)  # a goal missed is said above; regressions and leftovers fail


if __name__ == "__main__":
    sys.exit(interrupts.run(main))
