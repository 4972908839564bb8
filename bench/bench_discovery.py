"""make bench-discovery: free-node discovery plus prioritization at the Kubernetes scalability limits.

The Kubernetes API emulator serves 5,000 GPU nodes and 150,000 pods; discovery reads them through the
real kubernetes client with field-selected list calls served from the watch cache (resourceVersion=0,
one call per stream), then the prioritizer plans over the free nodes with a latest-result state for
every (node, test) pair. Prints the p50 of several runs, the decode time separately (and what a full
``json.loads`` of the same bytes costs), one paged run for comparison, and the DAG file's parse time;
the last line reads exactly ``discovery_s=<p50> api_calls=<n> nodes=<n> pods=<n> decode_s=<p50>``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import pathlib
import random
import statistics
import subprocess
import sys
import time

from cluster_doctor.domain import priority
from cluster_doctor.domain.config import Settings
from cluster_doctor.kube import discovery

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))  # the emulator is a test tool, not part of the installed package

from k8s_emulator import EmulatorProcess  # noqa: E402


def dag_parse_seconds() -> float:
    code = ("import time, runpy, airflow.sdk, airflow.providers.cncf.kubernetes.operators.pod\n"
            "t = time.perf_counter(); runpy.run_path('dags/continuous_validation.py'); print(time.perf_counter() - t)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    settings = Settings()
    with EmulatorProcess() as emu:
        t0 = time.perf_counter()
        info = emu.bulk_generate(nodes=args.nodes, pods=args.pods, seed=7)
        print(f"emulator loaded {args.nodes:,} nodes and {args.pods:,} pods in {time.perf_counter() - t0:.1f} s "
              f"({info})", flush=True)
        core_v1 = emu.core_v1()
        rnd = random.Random(7)
        now = dt.datetime.now(dt.UTC)
        latest = {}
        for i in range(args.nodes):
            for test in settings.tests:
                if rnd.random() < 0.9:
                    when = now - dt.timedelta(hours=rnd.uniform(0, 24 * 14))
                    latest[(f"placeholder-{i}", test)] = when
        timings, calls, plan_ms, decode, found = [], [], [], [], None
        for _ in range(args.runs):
            emu.reset_counters()
            start = time.perf_counter()
            found = discovery.discover(core_v1, settings)
            free = [n.name for n in found.free]
            states = {(node, test): priority.PairState(status="pass", finished_at=when, last_attempt_at=when,
                                                       last_attempt_status="pass")
                      for (node, test), when in zip(((n, t) for n in free for t in settings.tests), latest.values())}
            mid = time.perf_counter()
            pairs = priority.plan(free, settings.tests, states, now=now)
            end = time.perf_counter()
            timings.append(end - start)
            plan_ms.append((end - mid) * 1000)
            calls.append(emu.api_calls())
            decode.append(found.decode_seconds)
        assert found is not None
        raw = core_v1.list_pod_for_all_namespaces(field_selector=discovery.BOUND_ACTIVE_PODS, resource_version="0",
                                                  _preload_content=False).data
        t = time.perf_counter()
        json.loads(raw)
        full_json = time.perf_counter() - t
        t = time.perf_counter()
        discovery._decode("pods", raw, [0])
        typed = time.perf_counter() - t
        print(f"bound-pod list: {len(raw) / 1e6:.1f} MB of JSON; json.loads (whole objects) {full_json:.2f} s, "
              f"msgspec (needed fields only) {typed:.2f} s")
        t = time.perf_counter()
        paged = discovery.discover(core_v1, settings, watch_cache=False)
        print(f"paged consistent lists for comparison: {time.perf_counter() - t:.2f} s, {paged.api_calls} calls "
              f"(read mode of the runs above: {found.read_mode})")
        print(f"per run: {len(found.free):,} free, {len(found.ineligible):,} not eligible, {len(pairs)} pairs planned; "
              f"plan {statistics.median(plan_ms):.0f} ms; runs: {', '.join(f'{t:.2f}s' for t in timings)}")
        print(f"calls per run: {found.api_calls} list calls; none per node; decode "
              f"{statistics.median(decode):.2f} s of {statistics.median(timings):.2f} s")
    print(f"DAG file parse time: {dag_parse_seconds():.3f} s (target <= 0.5 s)")
    print(f"discovery_s={statistics.median(timings):.2f} api_calls={int(statistics.median(calls))} "
          f"nodes={found.nodes_seen} pods={args.pods} decode_s={statistics.median(decode):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
