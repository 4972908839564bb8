"""A fleet with slow nodes, for the pages and the daily report: twelve healthy H100 nodes probed on three sweeps (the
fleet the straggler verdict judges by), and, when asked, gpu-100 failing slow (two flagged probes), gpu-200 suspect
(one flagged probe) and gpu-300 suspect by a speed signal only. Every node is in the inventory with 8 GPUs.
Times relative to the tests' clock (tests/clock.py)."""

from __future__ import annotations

import datetime as dt
import uuid

from cluster_doctor.domain.attempts import Attempt
from cluster_doctor.domain.signals import SPEED, Evidence
from cluster_doctor.store import inventory, suspects, verdicts
from cluster_doctor.store.inventory import SeenNode

H = dt.timedelta(hours=1)
MODEL = "NVIDIA H100 80GB HBM3"
GPUS = 8
HEALTHY = {f"gpu-{i:03d}": 700.0 + 3 * (i % 5) for i in range(1, 13)}  # a few % of spread
FAILING, SUSPECT, SIGNALLED = "gpu-100", "gpu-200", "gpu-300"
SIGNAL = "GPU 2: hardware thermal slowdown"


def probe(store, node: str, when: dt.datetime, gemm: float) -> list:
    """One gpu_health attempt that probed the node's speed, recorded and judged against the fleet."""
    metrics = {"gpus_visible": GPUS, "xid_events": 0, "probe_gemm_tflops_min": gemm, "probe_hbm_gbps_min": 3000.0}
    a = Attempt(node_name=node, test_name="gpu_health", status="pass", finished_at=when, started_at=when - 0.1 * H,
                metrics=metrics, gpu_model=MODEL, gpu_count=GPUS, dag_id="continuous_validation",
                run_id=f"r-{uuid.uuid4().hex[:8]}", checks=[{"name": "gpu_health.check", "status": "pass"}])
    store.record([a])
    return verdicts.judge_recorded(store.connect, [a.to_dict()], now=when)


def fleet(store, now: dt.datetime, *, slow: bool = True) -> list[str]:
    """Seed the fleet (with the slow nodes when ``slow``); returns every node's name."""
    names = list(HEALTHY) + ([FAILING, SUSPECT, SIGNALLED] if slow else [])
    inventory.record_discovery(store.connect, [SeenNode(n, GPUS, MODEL, inventory.FREE) for n in names],
                               seen_at=now - 90 * H, complete=True)
    for sweep in (80, 56, 32):
        for node, gemm in HEALTHY.items():
            probe(store, node, now - sweep * H, gemm)
    if not slow:
        return names
    probe(store, FAILING, now - 60 * H, 702.0)  # its own healthy past
    probe(store, FAILING, now - 7 * H, 625.0)  # ~11 % slow: above every floor
    probe(store, FAILING, now - 2 * H, 623.0)  # the retest agrees: failing, code SLOW
    probe(store, SUSPECT, now - 60 * H, 704.0)
    probe(store, SUSPECT, now - 3 * H, 610.0)  # one sighting
    probe(store, SIGNALLED, now - 60 * H, 703.0)
    probe(store, SIGNALLED, now - 30 * H, 706.0)
    suspects.record(store.connect, [Evidence(SIGNALLED, SPEED, "clock_event_0x40/gpu2@x", SIGNAL, now - 4 * H)],
                    seen_at=now - 4 * H)
    return names
