"""One action per node state on the node page: suites skipped because gpu_health failed show the
health failure's action, not retest; and an evidence log is a link only where it is a web address."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re

from cluster_doctor.domain import actions
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.planning import steps
from cluster_doctor.web import app as webapp
from fastapi import FastAPI
from fastapi.testclient import TestClient

from tests import clock
from tests.support import fleet_seed as seed


def make_client(dsn: dict) -> TestClient:
    """The app over ``dsn``, as an authenticated Airflow user would reach it."""
    sub = webapp.create_app(connector_provider=lambda s: dsn, settings_provider=Settings, clock=lambda: seed.NOW)
    sub.dependency_overrides[webapp.require_ui_access] = lambda: "test-user"
    root = FastAPI()
    root.mount(webapp.MOUNT_PREFIX, sub)
    return TestClient(root, follow_redirects=False)

XID = {"name": "xid", "status": "fail", "code": "XID_MEMORY_ERROR", "action": "reset_gpu", "device": "cuda:1",
       "message": "Xid 94 (ROBUST_CHANNEL_CONTAINED_ERROR, driver hint: RESTART_APP), 1 min ago"}
STOPPED = "stopped by gpu_health failing on this node (xid: Xid 94); no pod created"


def test_suites_stopped_by_a_failing_health_check_show_its_action(db_dsn, store):
    now = clock.now() - dt.timedelta(minutes=2)
    health = seed.attempt("gpu-001", "gpu_health", "fail", now, checks=[XID], reason="xid: Xid 94", map_index=3)
    skipped = [seed.attempt("gpu-001", test, "skipped", now + dt.timedelta(seconds=i + 1), reason=STOPPED,
                            duration_s=None, map_index=3) for i, test in enumerate(("dl_unit", "nccl_loopback"))]
    store.record([health, *skipped])
    assert health.action == "reset_gpu" and {a.action for a in skipped} == {"retest"}  # as recorded
    html = make_client(db_dsn).get("/cluster-doctor/nodes/gpu-001").text
    rows = re.findall(r'<tr data-test="(\w+)" data-status="(\w+)">.*?<span class="small action">action: ([^<]+)</span>',
                      html, re.S)
    assert sorted(rows) == [("dl_unit", "skipped", "reset_gpu (gpu_health failed)"),
                            ("gpu_health", "fail", "reset_gpu"),
                            ("nccl_loopback", "skipped", "reset_gpu (gpu_health failed)")]
    assert "action: retest" not in html


def test_a_skip_for_another_cause_keeps_its_own_action():
    assert steps.stopped_by_health(STOPPED) and actions.HEALTH_SUITE == steps.HEALTH_FIRST
    taken = "the node is no longer free (ml/job); no pod created"
    assert not steps.stopped_by_health(taken) and not steps.stopped_by_health(None)
    assert actions.for_node("skipped", "retest", steps.stopped_by_health(taken), "reset_gpu") == "retest"
    assert actions.for_node("fail", "reboot", True, "reset_gpu") == "reboot"  # an executed result: its own
    assert actions.for_node("skipped", "retest", True, None) == "retest"  # nothing known of the health fail


def test_evidence_logs_are_links_only_where_they_are_web_addresses(db_dsn, store):
    assert webapp.log_url("https://logs.example.com/cv/dl_unit_gpu-001.log") == \
        "https://logs.example.com/cv/dl_unit_gpu-001.log"
    for not_served in ("/data/continuous_validation/dl_unit/gpu-001/x.log", "javascript:alert(1)", "file:///etc/x",
                       "https://", None):
        assert webapp.log_url(not_served) is None
    now = clock.now() - dt.timedelta(minutes=2)
    on_volume = seed.attempt("gpu-002", "dl_unit", "fail", now, reason="slow")
    remote = dataclasses.replace(seed.attempt("gpu-002", "gpu_health", "fail", now, reason="xid"),
                                 log_path="https://logs.example.com/cv/gpu_health_gpu-002.log")
    store.record([on_volume, remote])
    html = make_client(db_dsn).get("/cluster-doctor/nodes/gpu-002").text
    assert '<a class="log-link" href="https://logs.example.com/cv/gpu_health_gpu-002.log"' in html
    assert html.count('class="log-link"') == 1  # the file on the results volume stays text
    assert on_volume.log_path in html
