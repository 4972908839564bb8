"""The repair loop closed and repeat offenders handed off, in the DAG's task
bodies against the Kubernetes API emulator (real client) and a real PostgreSQL: a quarantined node that
rebooted is validated at once — the fast path triggers a run for it and its whole bundle is planned, with the
reboot signal off and its failure younger than the 6-hour retest — and released when it passes; every
transition is recorded; a node failing again soon after its release is a repeat offender (action replace),
kept out until a person releases it, and posted once to a webhook (a real HTTP server on 127.0.0.1), which,
down, gets the post later, once."""

from __future__ import annotations

import datetime as dt
import http.server
import json
import socket
import threading

import pytest
from cluster_doctor.airflow import tasks
from cluster_doctor.airflow.tasks import signals
from cluster_doctor.domain import handoff as docs
from cluster_doctor.domain.planning import due
from cluster_doctor.domain import transitions as life
from cluster_doctor.domain.conditions import CONDITION_TYPE, ConditionPolicy
from cluster_doctor.domain.config import DEFAULT_TOLERATIONS, Settings
from cluster_doctor.domain.quarantine import ANN_ACTION, ANN_REPEAT, LABEL, TOLERATION
from cluster_doctor.domain.transitions import Transition
from cluster_doctor.kube import conditions
from cluster_doctor.store import transitions

NOW = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(hours=2)  # its later steps are past too
M, H = dt.timedelta(minutes=1), dt.timedelta(hours=1)
TESTS = ["gpu_health", "dl_unit"]
NODES = [f"gpu-{i:03d}" for i in range(1, 5)]
CHECKS = [{"name": "gpu_count", "code": "GPU_MISSING", "status": "fail", "action": "drain_and_service",
           "value": 7, "threshold": ">= 8", "message": "7 of 8 GPUs visible", "serial": "1650123456789"}]
SECRET = "s3cret"
CONN = "cd_tickets"


def settings(**changes):
    return Settings(tests=TESTS, tolerations=[*DEFAULT_TOLERATIONS, TOLERATION], signal_node_changes=["new"],
                    quarantine={"enabled": True, "taint": True, "max_share": 0.5}, **changes)


pytestmark = pytest.mark.emulator(pvc=True)


@pytest.fixture
def cluster(validation_cluster):
    for name in NODES:
        validation_cluster.add_gpu_node(name)
    return validation_cluster


def record(store, node, test, status, at, action=None):
    store.record([{"node_name": node, "test_name": test, "status": status, "started_at": at - M, "finished_at": at,
                   "run_id": f"r-{node}-{test}-{at:%d%H%M%S}", "gpu_model": "NVIDIA-H100-80GB-HBM3",
                   "checks": CHECKS if status == "fail" else [], "action": action or ("none" if status == "pass"
                                                                                      else "drain_and_service")}])


def healthy(store, at):
    for node in NODES:
        for test in TESTS:
            record(store, node, test, "pass", at)


def kinds(store, node):
    with store.connect() as conn, conn.cursor() as cur:
        return [t.kind for t in transitions.timeline(cur, node)]


def labels(cluster, node):
    got = cluster.core_v1().read_node(node)
    return got.metadata.labels or {}, got.metadata.annotations or {}, [t.key for t in got.spec.taints or []]


def test_a_rebooted_quarantined_node_is_validated_at_once_and_released(cluster, store):
    core, config = cluster.core_v1(), settings()
    found = tasks.discover({}, config, core, now=NOW, store=store)
    healthy(store, NOW - 30 * H)
    record(store, "gpu-004", "gpu_health", "fail", NOW - 8 * H)
    record(store, "gpu-004", "gpu_health", "fail", NOW - 2 * H)  # the retest failed: confirmed
    assert tasks.quarantine(found, store, core, run_id="r1", now=NOW + M).quarantined == ["gpu-004"]
    tasks.discover({}, config, core, now=NOW + 2 * M, store=store)  # sees the label
    cluster.patch_node("gpu-004", reboot=True)  # repaired
    decision = signals.tick(config, core, store, paused=False, active_runs=0, next_run=None, now=NOW + 5 * M)
    assert decision.nodes == ["gpu-004"]  # the fast path starts a run for it now, not in 6 hours
    run = tasks.discover({"node_range": "gpu-004"}, config, core, now=NOW + 6 * M, store=store)
    plan = tasks.prioritize(run, tasks.load_latest(run, store), NOW + 6 * M, store=store,
                            dag_id="continuous_validation", run_id=decision.run_id)
    assert [(p.node_name, p.test_name, p.why) for p in plan.pairs] == [
        ("gpu-004", "gpu_health", due.SUSPECT), ("gpu-004", "dl_unit", due.SUSPECT)]
    for test in TESTS:
        record(store, "gpu-004", test, "pass", NOW + 10 * M)
    report = tasks.quarantine(run, store, core, run_id=decision.run_id, now=NOW + 11 * M)
    assert report.released == ["gpu-004"] and LABEL not in labels(cluster, "gpu-004")[0]
    assert not labels(cluster, "gpu-004")[2]
    assert kinds(store, "gpu-004") == [life.QUARANTINED, life.REPAIRED, life.RELEASED]
    with store.connect() as conn, conn.cursor() as cur:
        spans = life.durations(transitions.of_released_since(cur, NOW), NOW)
    assert spans.in_quarantine == (10 * 60.0,) and spans.repair_to_release == (6 * 60.0,)


class Webhook:
    """A real HTTP server on 127.0.0.1 that keeps what it was posted."""

    def __init__(self, port: int = 0):
        self.posts: list[tuple[dict, bytes]] = []
        got = self.posts

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the stdlib's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                got.append((dict(self.headers), body))
                self.send_response(201)
                self.end_headers()

            def log_message(self, *args):
                pass

        http.server.ThreadingHTTPServer.allow_reuse_address = True
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def connection(monkeypatch):
    port = free_port()  # nothing listens there until a test starts its Webhook on it
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN.upper()}", json.dumps(
        {"conn_type": "http", "host": f"http://127.0.0.1:{port}/hooks/cluster-doctor", "password": SECRET}))
    return port


def handoff(store, now):
    return tasks.handoff(settings(handoff_conn_id=CONN, handoff_timeout_s=2), store, now=now,
                                sleep=lambda s: None, history_base="https://airflow.example")


def failing_again_after_a_release(cluster, store):
    core = cluster.core_v1()
    found = tasks.discover({}, settings(), core, now=NOW, store=store)
    transitions.record(store.connect, [Transition("gpu-002", life.QUARANTINED, NOW - 10 * 24 * H, "gpu_health: gpu_count"),
                                       Transition("gpu-002", life.RELEASED, NOW - 9 * 24 * H, "passes again")])
    healthy(store, NOW - 30 * H)
    record(store, "gpu-002", "gpu_health", "fail", NOW - 8 * H)
    record(store, "gpu-002", "gpu_health", "fail", NOW - 2 * H)
    return found, tasks.quarantine(found, store, core, run_id="r2", now=NOW)


def test_a_repeat_offender_is_named_kept_out_until_a_person_releases_it_and_posted_once(cluster, store, connection):
    found, report = failing_again_after_a_release(cluster, store)
    assert report.quarantined == ["gpu-002"] and report.repeat_offenders[0].startswith("gpu-002: confirmed failing")
    label, ann, taints = labels(cluster, "gpu-002")
    assert ann[ANN_ACTION] == life.REPLACE and "9.0 days after its release" in ann[ANN_REPEAT] and taints == [LABEL]
    conditions.publish_conditions(cluster.core_v1(), store.connect, ConditionPolicy(enabled=True, max_share=0.5), tests=TESTS,
                         stale_after=7 * 24 * H, now=NOW + M)
    got = {c.type: c for c in cluster.core_v1().read_node("gpu-002").status.conditions}[CONDITION_TYPE]
    assert (got.status, got.reason) == ("False", "RepeatOffender") and "action replace" in got.message
    hook = Webhook(connection)
    try:
        sent = handoff(store, NOW + M)
        assert sorted(k.split("/")[0] for k in sent.sent) == ["drain_and_service", "repeat_offender"]
        assert handoff(store, NOW + 2 * M).sent == []  # each document once
    finally:
        hook.close()
    posted = {json.loads(body)["kind"]: (headers, json.loads(body)) for headers, body in hook.posts}
    headers, doc = posted["repeat_offender"]
    assert headers[docs.KEY_HEADER] == doc["idempotency_key"] and len(hook.posts) == 2
    assert headers[docs.SIGNATURE_HEADER] == docs.signature(hook.posts[[json.loads(b)["kind"] for _, b in hook.posts]
                                                                      .index("repeat_offender")][1], SECRET)
    assert (doc["node"], doc["model"], doc["action"], doc["serial_numbers"]) == (
        "gpu-002", "NVIDIA-H100-80GB-HBM3", "replace", ["1650123456789"])
    assert doc["codes"] == ["gpu_health: gpu_count"] and doc["evidence"][0]["failed_checks"][0]["code"] == "GPU_MISSING"
    assert doc["history_url"] == "https://airflow.example/cluster-doctor/nodes/gpu-002"
    assert [line.split(" UTC ")[1].split(":")[0] for line in doc["history"]] == [
        "quarantined", "released", "quarantined", "repeat offender"]
    # it passes again, but stays out: a person releases it
    for test in TESTS:
        record(store, "gpu-002", test, "pass", NOW + 30 * M)
    core = cluster.core_v1()
    kept = tasks.quarantine(found, store, core, now=NOW + 31 * M)
    assert kept.released == [] and kept.kept_for_person == ["gpu-002"] and LABEL in labels(cluster, "gpu-002")[0]
    core.patch_node("gpu-002", {"metadata": {"labels": {LABEL: None}}})  # kubectl label node gpu-002 …/health-
    done = tasks.quarantine(found, store, core, now=NOW + 40 * M)
    _, ann, taints = labels(cluster, "gpu-002")  # our taint and annotations went with the label
    assert done.released_by_person == ["gpu-002"] and taints == [] and not [a for a in ann if "cluster-doctor" in a]
    assert kinds(store, "gpu-002")[-2:] == [life.REPEAT_OFFENDER, life.RELEASED]


def test_with_the_webhook_down_the_post_waits_in_the_outbox_and_arrives_later_once(cluster, store, connection):
    failing_again_after_a_release(cluster, store)
    down = handoff(store, NOW + M)  # nothing listens on the port
    assert down.sent == [] and down.waiting == 2 and "Connection refused" in down.failed[0]
    hook = Webhook(connection)
    try:
        first = handoff(store, NOW + 2 * M)  # the one not tried yet goes; the one refused waits for its next try
        assert len(first.sent) == 1 and first.waiting == 1
        later = handoff(store, NOW + 10 * M)
        assert len(later.sent) == 1 and later.waiting == 0
        assert handoff(store, NOW + 20 * M).sent == []
    finally:
        hook.close()
    assert sorted(h[docs.KEY_HEADER] for h, _ in hook.posts) == sorted(first.sent + later.sent)  # each arrived once
