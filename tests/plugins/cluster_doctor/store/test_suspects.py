"""cluster_doctor.store.suspects and the inventory's part of the signals, against a real
PostgreSQL: evidence kept once per (node, source, key), a node suspect until its bundle answers, since when
a failing node fails."""

from __future__ import annotations

import datetime as dt

from cluster_doctor.domain.signals import Evidence
from cluster_doctor.store import inventory, suspects
from cluster_doctor.store.inventory import SeenNode

T0 = (dt.datetime.now(dt.UTC) - dt.timedelta(days=2)).replace(hour=10, minute=0, second=0, microsecond=0)
M = dt.timedelta(minutes=1)
TESTS = ["gpu_health", "dl_unit"]
XID = Evidence("gpu-001", "event", "uid-1@t", "XidHardwareFailure: Xid 79", T0 - 2 * M)


def current(store, tests=TESTS) -> dict:
    with store.connect() as conn, conn.cursor() as cur:
        return suspects.current(cur, tests)


def attempt(node, test, status, started):
    return {"node_name": node, "test_name": test, "status": status, "started_at": started,
            "finished_at": started + M, "run_id": f"r-{test}-{started:%H%M}"}


def test_the_same_evidence_read_again_is_one_suspicion(store):
    first = suspects.record(store.connect, [XID], seen_at=T0)
    again = suspects.record(store.connect, [XID, Evidence("gpu-002", "reboot", "b2", "rebooted")], seen_at=T0 + 5 * M)
    assert [e.node_name for e in first.new] == ["gpu-001"] and first.again == 0
    assert [e.node_name for e in again.new] == ["gpu-002"] and again.again == 1
    found = current(store)
    assert found["gpu-001"].since == T0 - 2 * M  # when it happened, where the source says
    assert found["gpu-001"].describe() == f"suspect since {T0:%Y-%m-%d} 09:58 UTC: event: XidHardwareFailure: Xid 79"


def test_a_bundle_that_passes_after_the_evidence_clears_it_and_it_is_not_raised_again(store):
    suspects.record(store.connect, [XID], seen_at=T0)
    # a pass that started before the evidence was known does not answer it
    store.record([attempt("gpu-001", t, "pass", T0 - 30 * M) for t in TESTS])
    assert "gpu-001" in current(store)
    store.record([attempt("gpu-001", "gpu_health", "pass", T0 + M)])
    assert "gpu-001" in current(store)  # one suite is not the bundle
    store.record([attempt("gpu-001", "dl_unit", "pass", T0 + 3 * M)])
    assert current(store) == {}  # every view agrees at once
    assert suspects.resolve(store.connect, TESTS, now=T0 + 10 * M) == {"gpu-001": suspects.CLEARED}
    assert suspects.record(store.connect, [XID], seen_at=T0 + 20 * M).new == []  # answered already
    assert current(store) == {}


def test_a_failure_after_the_evidence_confirms_it_and_says_since_when(store):
    store.record([attempt("gpu-001", t, "pass", T0 - 5 * 60 * M) for t in TESTS])  # the last pass
    suspects.record(store.connect, [XID], seen_at=T0)
    store.record([attempt("gpu-001", "gpu_health", "fail", T0 + M)])
    assert suspects.resolve(store.connect, TESTS, now=T0 + 10 * M) == {"gpu-001": suspects.CONFIRMED}
    assert current(store) == {}  # failed, not suspect: the failure is the verdict
    with store.connect() as conn, conn.cursor() as cur:
        since = suspects.failing_since(cur, TESTS)
    assert since["gpu-001"].since == T0 - 2 * M and since["gpu-001"].first == "event: XidHardwareFailure: Xid 79"
    assert since["gpu-001"].last_pass == T0 - 5 * 60 * M + M


def test_a_failure_without_a_signal_fails_since_its_first_failed_attempt(store):
    store.record([attempt("gpu-002", "gpu_health", "pass", T0 - 60 * M),
                  attempt("gpu-002", "gpu_health", "fail", T0), attempt("gpu-002", "gpu_health", "fail", T0 + 60 * M)])
    with store.connect() as conn, conn.cursor() as cur:
        since = suspects.failing_since(cur, TESTS)["gpu-002"]
    assert (since.since, since.first, since.last_pass) == (T0 + M, "gpu_health fail", T0 - 59 * M)


def test_the_fast_path_triggers_once_per_evidence(store):
    suspects.record(store.connect, [XID], seen_at=T0)
    with store.connect() as conn, conn.cursor() as cur:
        assert list(suspects.untriggered(cur, TESTS)) == ["gpu-001"]
    assert suspects.mark_triggered(store.connect, ["gpu-001"], "suspects__x") == 1
    with store.connect() as conn, conn.cursor() as cur:
        assert suspects.untriggered(cur, TESTS) == {}
    suspects.record(store.connect, [Evidence("gpu-001", "reboot", "b9", "rebooted")], seen_at=T0 + M)
    with store.connect() as conn, conn.cursor() as cur:
        assert list(suspects.untriggered(cur, TESTS)) == ["gpu-001"]  # new evidence: a new trigger


def test_the_inventory_says_which_node_is_new_rebooted_or_uncordoned_after_quarantine(store):
    first = inventory.record_discovery(store.connect, [
        SeenNode("gpu-001", 8, "H100", inventory.FREE, boot_id="boot-a"),
        SeenNode("gpu-002", 8, "H100", "cordoned", boot_id="boot-b", quarantined=True),
        SeenNode("gpu-003", 8, "H100", "cordoned", boot_id="boot-c")], seen_at=T0, complete=True)
    assert first.changes == []  # the first discovery: every node is new, none is a signal
    update = inventory.record_discovery(store.connect, [
        SeenNode("gpu-001", 8, "H100", inventory.FREE, boot_id="boot-a2"),
        SeenNode("gpu-002", 8, "H100", inventory.FREE, boot_id="boot-b", quarantined=True),
        SeenNode("gpu-003", 8, "H100", inventory.FREE, boot_id="boot-c"),  # uncordoned, never quarantined
        SeenNode("gpu-004", 8, "H100", inventory.FREE, boot_id="boot-d")], seen_at=T0 + M, complete=True)
    assert [(c.node_name, c.kind) for c in update.changes] == [("gpu-001", "reboot"), ("gpu-002", "uncordoned"),
                                                               ("gpu-004", "new")]
    assert (update.changes[0].before, update.changes[0].after) == ("boot-a", "boot-a2")
