"""The daily report in the UI: one click from the fleet page, built live, its failures linked."""

from __future__ import annotations

import datetime as dt
import re

from cluster_doctor.domain.attempts import Attempt
from cluster_doctor.domain.config import Settings
from cluster_doctor.store import inventory

from tests.support.web import make_client
from tests.support import fleet_seed as seed


def test_the_fleet_page_links_to_the_report_of_today_so_far_on_a_new_install(store, db_dsn):
    # installed an hour ago (after midnight at the latest): yesterday has no data, the page shows today
    first = max(seed.NOW - dt.timedelta(hours=1), seed.NOW.replace(hour=0, minute=0, second=0, microsecond=0))
    inventory.record_discovery(store.connect, [inventory.SeenNode(n, 8, "NVIDIA-H100-80GB-HBM3", inventory.FREE)
                                               for n in ("gpu-001", "gpu-004")], seen_at=first, complete=True)
    store.record([Attempt(node_name="gpu-004", test_name="gpu_health", status="fail", finished_at=first + (seed.NOW - first) / 2,
                          started_at=first, run_id="manual__1", dag_id="continuous_validation", map_index=1,
                          reason="xid: Xid 94", action="reset_gpu")])
    c = make_client(db_dsn, settings=Settings(tests=["gpu_health"]))
    fleet = c.get("/cluster-doctor/").text
    assert re.search(r'<a id="daily-report-link" href="/cluster-doctor/reports/daily">', fleet)
    page = c.get("/cluster-doctor/reports/daily")
    assert page.status_code == 200 and "script-src" not in page.headers["Content-Security-Policy"]
    today = seed.NOW.date().isoformat()
    assert f"daily summary — {today} (UTC)" in page.text and "(day in progress)" in page.text
    assert "Action: reset_gpu" in page.text
    assert '<a href="/cluster-doctor/nodes/gpu-004">node page</a>' in page.text
    assert ('<a href="/dags/continuous_validation/runs/manual__1/tasks/validate.gpu_health/mapped/1?try_number=1" '
            'target="_top">task log</a>') in page.text
    # any day on request; a bad one is refused with why
    assert c.get(f"/cluster-doctor/reports/daily?day={today}").status_code == 200
    bad = c.get("/cluster-doctor/reports/daily?day=yesterday")
    assert bad.status_code == 400 and "day must be a date" in bad.text


def test_the_report_page_needs_the_uis_login(db_dsn):
    c = make_client(db_dsn, authenticated=False)
    assert c.get("/cluster-doctor/reports/daily").status_code in (401, 403)
