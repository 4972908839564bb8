"""make bench-healthy: the false-failure rate of the suites on a healthy machine.

Runs every suite in CPU mode N times (default 20), exactly as a pod does (`python -m
cluster_doctor_suites.<suite>`, a fresh process each time, the real fio and torch), and counts the
verdicts. A healthy machine must never get `fail` or `error`; a `pass` whose checks could not all run
is counted separately as incomplete. Prints one line per suite, whether anything of the run is left
(tools/leftovers.py: suite processes, its output directory, ports) and, last, exactly
``runs=<n> pass=<n> incomplete=<n> fail=<n> error=<n> false_failure_rate=<x>``; exits 1 when any run
failed or errored, or something was left behind.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))

import interrupts  # noqa: E402
from leftovers import Leftovers  # noqa: E402

PREFIX = "CLUSTER_DOCTOR_RESULT "
SUITES = {
    "gpu_health": [],
    "dl_unit": ["--cpu-devices", "2"],
    "nccl_loopback": ["--cpu-ranks", "2"],
    "storage_fio": [],
    "nvbandwidth": [],  # CPU mode: nothing to measure, every testcase a visible not-run (incomplete)
    "ib_health": [],  # CPU mode: the fabric is not judged (incomplete)
}


def run_once(suite: str, extra: list[str], out: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLUSTER_DOCTOR_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "include"), env.get("PYTHONPATH")]))
    argv = [sys.executable, "-m", f"cluster_doctor_suites.{suite}", "--device", "cpu", "--node", "bench-healthy",
            "--output-dir", out, "--termination-log", "", *extra]
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith(PREFIX)]
    if not lines:
        return {"status": "error", "reason": f"no summary (exit {p.returncode}): {p.stderr.strip()[-200:]}",
                "incomplete": False, "rc": p.returncode}
    s = json.loads(lines[-1][len(PREFIX):])
    return {"status": s["status"], "reason": s["reason"], "incomplete": s.get("incomplete", False), "rc": p.returncode}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=20, help="runs per suite")
    ap.add_argument("--suites", default=",".join(SUITES), help="comma-separated subset")
    a = ap.parse_args()
    names = [s for s in a.suites.split(",") if s]
    unknown = set(names) - set(SUITES)
    if unknown or a.runs < 1:
        ap.error(f"unknown suite(s) {sorted(unknown)}" if unknown else "--runs must be >= 1")
    total: collections.Counter = collections.Counter()
    leftovers = Leftovers()
    with leftovers.tempdir("cd-bench-healthy-") as out:
        for suite in names:
            counts: collections.Counter = collections.Counter()
            bad: list[str] = []
            t0 = time.monotonic()
            for _ in range(a.runs):
                r = run_once(suite, SUITES[suite], str(out))
                counts[r["status"]] += 1
                if r["status"] == "pass" and r["incomplete"]:
                    counts["incomplete"] += 1
                if r["status"] != "pass":
                    bad.append(f"{r['status']}: {r['reason']}")
            total.update(counts)
            print(f"{suite:14} runs={a.runs} pass={counts['pass']} (incomplete {counts['incomplete']}) "
                  f"fail={counts['fail']} error={counts['error']} {time.monotonic() - t0:.0f} s")
            for line in bad[:5]:
                print(f"    {line}")
    runs = a.runs * len(names)
    rate = (total["fail"] + total["error"]) / runs
    return leftovers.finish(f"runs={runs} pass={total['pass']} incomplete={total['incomplete']} "
                            f"fail={total['fail']} error={total['error']} false_failure_rate={rate:.4f}", ok=not rate)


if __name__ == "__main__":
    sys.exit(interrupts.run(main))
