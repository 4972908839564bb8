"""`cluster-doctor status` shows peer tests: suspects apart from blamed nodes, the peer named."""

import datetime as dt
import json

from tests.support.cli import cli


def test_status_names_suspect_and_blamed_peers(db_url, tmp_path):
    now = dt.datetime.now(dt.UTC)

    def both(a, b, status, hours_ago):
        at = (now - dt.timedelta(hours=hours_ago)).isoformat()
        return [{"node_name": n, "test_name": "fabric_peer", "status": status, "finished_at": at, "peer": p,
                 "run_id": f"r{hours_ago}", "reason": "busbw 120 GB/s < 360" if status == "fail" else None}
                for n, p in ((a, b), (b, a))]

    attempts = (both("gpu-001", "gpu-002", "fail", 30) + both("gpu-001", "gpu-003", "fail", 20)
                + both("gpu-002", "gpu-003", "pass", 10) + both("gpu-004", "gpu-005", "fail", 5))
    path = tmp_path / "peers.json"
    path.write_text(json.dumps(attempts))
    assert cli("record", "--attempts", str(path), "--db-url", db_url).returncode == 0
    out = cli("status", "--db-url", db_url, env={"CLUSTER_DOCTOR_PEER_TESTS": "true"}).stdout
    assert "peer tests: 2 suspect, 1 blamed, 2 passed (5 node(s) peer-tested)" in out
    assert "gpu-004  suspect  with gpu-005: failed with gpu-005" in out
    assert "gpu-001  fail  with gpu-003: failed with gpu-002 and gpu-003" in out
    row = next(line for line in out.splitlines() if line.startswith("gpu-005") and "fabric_peer" in line)
    assert "suspect: fail" in row
    assert "peer tests:" not in cli("status", "--db-url", db_url).stdout  # off: not a word of it
