"""The fleet and node pages show "suspect since T: evidence" and since when a failing node fails: its first
failing evidence, signal or attempt, and its last pass."""

from __future__ import annotations

import datetime as dt
import re

from cluster_doctor.domain.attempts import Attempt
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.signals import Evidence
from cluster_doctor.store import suspects

from tests.support import fleet_seed as seed
from tests.support.web import make_client


def row(html: str, node: str) -> str:
    return re.search(rf'<tr data-node="{node}">(.*?)</tr>', html, re.S).group(1)


def test_suspect_and_failing_since_on_the_fleet_and_node_pages(store, db_dsn):
    hours = lambda h: seed.NOW - dt.timedelta(hours=h)  # noqa: E731
    store.record([Attempt(node_name=n, test_name="gpu_health", status="pass", finished_at=hours(30), started_at=hours(30),
                          run_id=f"r-{n}") for n in ("gpu-001", "gpu-002", "gpu-003")])
    suspects.record(store.connect, [Evidence("gpu-001", "event", "u1", "XidHardwareFailure: Xid 79", hours(2)),
                                    Evidence("gpu-002", "reboot", "b2", "rebooted (bootID 1 → 2)")], seen_at=hours(2))
    store.record([Attempt(node_name="gpu-002", test_name="gpu_health", status="fail", started_at=hours(1),
                          finished_at=hours(1), run_id="r-fail", reason="gpu_count 7 < 8")])
    c = make_client(db_dsn, settings=Settings(tests=["gpu_health"]))
    page = c.get("/cluster-doctor/").text
    assert re.search(r'id="suspects">\s*<div class="value">1</div>', page)
    assert "suspect since " + f"{hours(2):%Y-%m-%d %H:%M}" in row(page, "gpu-001")
    assert "event: XidHardwareFailure: Xid 79" in row(page, "gpu-001")
    assert f"failing since {hours(2):%Y-%m-%d %H:%M}" in row(page, "gpu-002")  # the signal came first
    assert "reboot: rebooted" in row(page, "gpu-002") and "suspect since" not in row(page, "gpu-002")
    assert "suspect since" not in row(page, "gpu-003") and "failing since" not in row(page, "gpu-003")

    node = c.get("/cluster-doctor/nodes/gpu-001").text
    assert re.search(r'<p id="suspect" class="suspect"><b>Suspect</b> since ' + f"{hours(2):%Y-%m-%d %H:%M}", node)
    failing = c.get("/cluster-doctor/nodes/gpu-002").text
    assert (f'<p id="failing-since"><b>Failing since</b> {hours(2):%Y-%m-%d %H:%M}') in failing
    assert f"last pass {hours(30):%Y-%m-%d %H:%M}" in failing and 'id="suspect"' not in failing
