"""The fleet page shows a missing baseline once per node pool, with its action, not as one error per node."""

from __future__ import annotations

import datetime as dt
import re

from cluster_doctor.domain.config import Settings

from tests.support import fleet_seed as seed
from tests.support.web import make_client

NOT_JUDGED = [{"name": "baseline", "status": "skip", "code": "BASELINE_MISSING"}]


def test_a_missing_baseline_is_one_line_per_node_pool_with_its_action(store, db_dsn):
    at = seed.NOW - dt.timedelta(hours=1)
    store.record([{"node_name": n, "test_name": "nvbandwidth", "status": "error", "run_id": f"r-{n}",
                   "gpu_model": "NVIDIA-H20", "started_at": at, "finished_at": at, "checks": NOT_JUDGED,
                   "reason": "not judged, no baseline for a key check"} for n in ("gpu-001", "gpu-002", "gpu-003")])
    c = make_client(db_dsn, settings=Settings(tests=["nvbandwidth"]))
    page = c.get("/cluster-doctor/").text
    block = re.search(r'<div class="alert" role="alert" id="missing-baselines">(.*?)</div></div>', page, re.S).group(1)
    assert block.count('class="missing-baseline"') == 1
    assert "NVIDIA-H20: 3 node(s), nvbandwidth not judged" in block and "add the GPU model to baselines.yaml" in block


def test_no_line_without_a_missing_baseline(store, db_dsn):
    at = seed.NOW - dt.timedelta(hours=1)
    store.record([{"node_name": "gpu-001", "test_name": "nvbandwidth", "status": "error", "run_id": "r1",
                   "gpu_model": "H100", "started_at": at, "finished_at": at,
                   "checks": [{"name": "nvbw_d2d_write_ce", "status": "error", "code": "TOOL_OUTPUT_UNPARSEABLE"}]}])
    page = make_client(db_dsn, settings=Settings(tests=["nvbandwidth"])).get("/cluster-doctor/").text
    assert 'id="missing-baselines"' not in page
