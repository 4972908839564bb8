"""The node page shows the node's life as a timeline, and the fleet and node pages name a repeat offender
with its action, replace."""

from __future__ import annotations

import datetime as dt
import re

from cluster_doctor.domain import transitions as life
from cluster_doctor.domain.attempts import Attempt
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.transitions import Transition
from cluster_doctor.store import transitions

from tests.support import fleet_seed as seed
from tests.support.web import make_client


def row(html: str, node: str) -> str:
    return re.search(rf'<tr data-node="{node}">(.*?)</tr>', html, re.S).group(1)


def test_the_life_of_a_node_and_a_repeat_offender_on_the_pages(store, db_dsn):
    hours = lambda h: seed.NOW - dt.timedelta(hours=h)  # noqa: E731
    store.record([Attempt(node_name=n, test_name="gpu_health", status="pass", finished_at=hours(30),
                          started_at=hours(30), run_id=f"r-{n}") for n in ("gpu-001", "gpu-002")])
    transitions.record(store.connect, [
        Transition("gpu-001", life.QUARANTINED, hours(200), "gpu_health: gpu_count (drain_and_service)"),
        Transition("gpu-001", life.REPAIRED, hours(190), "rebooted while quarantined (bootID a… → b…)"),
        Transition("gpu-001", life.RELEASED, hours(189), "passes every enabled test again"),
        Transition("gpu-001", life.QUARANTINED, hours(5), "gpu_health: gpu_count (drain_and_service)"),
        Transition("gpu-001", life.REPEAT_OFFENDER, hours(5), "confirmed failing again 7.8 days after its release")])
    c = make_client(db_dsn, settings=Settings(tests=["gpu_health"]))
    page = c.get("/cluster-doctor/").text
    assert re.search(r'id="repeat-offenders">\s*<div class="value">1</div>', page)
    assert "<b>repeat offender</b>: replace" in row(page, "gpu-001") and "repeat offender" not in row(page, "gpu-002")

    node = c.get("/cluster-doctor/nodes/gpu-001").text
    assert re.search(r'<p id="repeat-offender" class="alert"><b>Repeat offender</b> since '
                     + f"{hours(5):%Y-%m-%d %H:%M}" + r".*confirmed failing again 7.8 days.*<b>replace</b>", node)
    kinds = re.findall(r'<tr data-kind="([a-z_]+)">', node)
    assert kinds == ["repeat_offender", "quarantined", "released", "repaired", "quarantined"]  # newest first
    other = c.get("/cluster-doctor/nodes/gpu-002").text
    assert 'id="timeline"' not in other and 'id="repeat-offender"' not in other
