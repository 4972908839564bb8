"""The daily report shows the suspect nodes ("suspect since T: evidence") and, for each failure, since when its
node fails: the first failing evidence after its last pass."""

import datetime as dt

from cluster_doctor.domain.signals import Evidence
from cluster_doctor.reports import daily
from cluster_doctor.store import inventory, suspects
from cluster_doctor.store.inventory import SeenNode


def test_the_report_names_suspects_and_since_when_a_failing_node_fails(store):
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    h = lambda n: now - dt.timedelta(hours=n)  # noqa: E731
    inventory.record_discovery(store.connect, [SeenNode(n, 8, "H100", inventory.FREE) for n in ("gpu-001", "gpu-002")],
                               seen_at=h(3), complete=True)
    store.record([{"node_name": "gpu-002", "test_name": "gpu_health", "status": "pass", "run_id": "r0",
                   "started_at": h(30), "finished_at": h(30)}])
    suspects.record(store.connect, [Evidence("gpu-001", "event", "u1", "XidHardwareFailure: Xid 79", h(2)),
                                    Evidence("gpu-002", "gpu allocatable", "7/8", "7 of its 8 GPUs allocatable")],
                    seen_at=h(2))
    store.record([{"node_name": "gpu-002", "test_name": "gpu_health", "status": "fail", "run_id": "r1",
                   "started_at": now - dt.timedelta(minutes=2), "finished_at": now - dt.timedelta(minutes=1),
                   "reason": "gpu_count: 7 < 8"}])  # a failure of the report's day, whenever the test runs
    suspects.resolve(store.connect, ["gpu_health"], now=now)
    data = daily.build(store, now.date(), tests=["gpu_health"], staleness_days=7, now=now)
    text = daily.render_markdown(data)
    assert "- gpu-001 suspect since " + f"{h(2):%Y-%m-%d %H:%M} UTC: event: XidHardwareFailure: Xid 79" in text
    assert [s["node_name"] for s in data["suspects"]] == ["gpu-001"]  # gpu-002's failure confirmed it
    assert (f"failing since {h(2):%Y-%m-%d %H:%M} UTC (gpu allocatable: 7 of its 8 GPUs allocatable); last pass "
            f"{h(30):%Y-%m-%d %H:%M} UTC") in text
    assert "failing since" in daily.render_html(data) and "suspect since" in daily.render_html(data)
