"""The fleet and node pages show peer tests: a failed peer test not yet blamed is
`suspect`, apart from fail, with the peer named."""

from __future__ import annotations

import datetime as dt
import re

from cluster_doctor.domain.attempts import Attempt
from cluster_doctor.domain.config import Settings

from tests.support import fleet_seed as seed
from tests.support.web import make_client


def cell(html: str, node: str) -> str:
    row = re.search(rf'<tr data-node="{node}">(.*?)</tr>', html, re.S).group(1)
    return re.search(r'<td class="cell peer"[^>]*>(.*?)</td>', row, re.S).group(0)


def test_suspect_and_blamed_nodes_on_the_fleet_and_node_pages(store, db_dsn):
    # gpu-001 failed with 002 and 003, who passed together: gpu-001 blamed; gpu-004 failed with 005: suspects
    store.record(seed.peer_test("gpu-001", "gpu-002", "fail", 30) + seed.peer_test("gpu-001", "gpu-003", "fail", 20)
                 + seed.peer_test("gpu-002", "gpu-003", "pass", 10) + seed.peer_test("gpu-004", "gpu-005", "fail", 5)
                 + [Attempt(node_name="gpu-006", test_name="gpu_health", status="pass",
                            finished_at=seed.NOW - dt.timedelta(hours=1), run_id="own")])
    c = make_client(db_dsn, settings=Settings(peer_tests=True))
    page = c.get("/cluster-doctor/?per_page=25").text
    assert 'id="peer-tests"' in page and "peer tests: suspect / blamed nodes" in page
    assert re.search(r'<span class="st-suspect-text">2</span> / 1', page)
    assert 'data-status="suspect"' in cell(page, "gpu-004") and "with gpu-005" in cell(page, "gpu-004")
    assert 'class="st-suspect"' in cell(page, "gpu-005")
    assert 'data-status="fail"' in cell(page, "gpu-001") and "with gpu-003" in cell(page, "gpu-001")
    assert 'data-status="pass"' in cell(page, "gpu-002")
    assert 'data-status="never"' in cell(page, "gpu-006")

    node = c.get("/cluster-doctor/nodes/gpu-004").text
    assert re.search(r'<p id="peer" data-status="suspect"><span class="status st-suspect">suspect</span>', node)
    assert "failed with gpu-005" in node and "not yet blamed on either side" in node
    history = c.get("/cluster-doctor/nodes/gpu-001?test=fabric_peer").text
    assert 'data-status="fail"' in history and "with <a" in history and "/nodes/gpu-003" in history


def test_no_peer_column_while_peer_tests_are_off(store, db_dsn):
    store.record(seed.peer_test("gpu-004", "gpu-005", "fail", 5))
    page = make_client(db_dsn).get("/cluster-doctor/").text
    assert 'id="peer-tests"' not in page and "peer test</th>" not in page
