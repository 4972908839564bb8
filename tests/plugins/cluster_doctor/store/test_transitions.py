"""cluster_doctor.store.transitions and the hand-off's outbox, against a real PostgreSQL: a
node's life kept with time and cause, the inventory's trigger that records a repair and makes the node
suspect whatever the signal settings, the repeat offenders now, and an outbox that keeps each document once
until it is sent."""

from __future__ import annotations

import datetime as dt

import pytest
from cluster_doctor.domain import handoff as docs
from cluster_doctor.domain import transitions as life
from cluster_doctor.domain.transitions import Transition
from cluster_doctor.store import handoff as outbox
from cluster_doctor.store import inventory, suspects, transitions
from cluster_doctor.store.inventory import SeenNode

T0 = (dt.datetime.now(dt.UTC) - dt.timedelta(days=3)).replace(microsecond=0)
H = dt.timedelta(hours=1)
TESTS = ["gpu_health", "dl_unit"]


def seen(name, boot, quarantined=False):
    return SeenNode(name, 8, "NVIDIA H200", inventory.FREE, boot_id=boot, quarantined=quarantined)


def life_of(store, node):
    with store.connect() as conn, conn.cursor() as cur:
        return [(t.kind, t.at) for t in transitions.timeline(cur, node)]


def test_a_quarantined_node_that_rebooted_is_repaired_and_suspect_at_once(store):
    inventory.record_discovery(store.connect, [seen("gpu-001", "boot-a", True), seen("gpu-002", "boot-x")],
                               seen_at=T0, complete=True)
    # the same boot again, and a node that rebooted without our label: neither is a repair
    inventory.record_discovery(store.connect, [seen("gpu-001", "boot-a", True), seen("gpu-002", "boot-y")],
                               seen_at=T0 + H, complete=True)
    assert life_of(store, "gpu-001") == [] and life_of(store, "gpu-002") == []
    inventory.record_discovery(store.connect, [seen("gpu-001", "boot-b", True), seen("gpu-002", "boot-y")],
                               seen_at=T0 + 2 * H, complete=True)
    assert life_of(store, "gpu-001") == [(life.REPAIRED, T0 + 2 * H)]
    with store.connect() as conn, conn.cursor() as cur:
        found = suspects.current(cur, TESTS)
        line = transitions.timeline(cur, "gpu-001")[0].line()
    assert list(found) == ["gpu-001"] and found["gpu-001"].since == T0 + 2 * H
    assert found["gpu-001"].evidence == ("reboot: rebooted while quarantined (bootID boot-a… → boot-b…): validated at once",)
    assert "repaired: rebooted while quarantined" in line
    # the reboot signal of the same boot is the same suspicion, not a second one
    assert suspects.record(store.connect, [suspects.Evidence("gpu-001", "reboot", "boot-b", "rebooted")],
                           seen_at=T0 + 2 * H).new == []


def test_repeat_offenders_are_open_until_a_release(store):
    transitions.record(store.connect, [
        Transition("gpu-001", life.QUARANTINED, T0, "gpu_health: gpu_count"),
        Transition("gpu-001", life.RELEASED, T0 + 5 * H, "passes every enabled test again"),
        Transition("gpu-001", life.QUARANTINED, T0 + 30 * H, "gpu_health: gpu_count"),
        Transition("gpu-001", life.REPEAT_OFFENDER, T0 + 30 * H, "confirmed failing again"),
        Transition("gpu-002", life.REPEAT_OFFENDER, T0, "quarantined 3 times"),
        Transition("gpu-002", life.RELEASED, T0 + H, "released by a person", {"by": "person"}),
    ])
    with store.connect() as conn, conn.cursor() as cur:
        assert list(transitions.repeat_offenders(cur)) == ["gpu-001"]
        assert transitions.repeat_offenders(cur)["gpu-001"].describe().endswith("action replace")
        assert list(transitions.in_quarantine(cur)) == ["gpu-001"]
        assert transitions.counts(cur, T0, T0 + 24 * H) == {"quarantined": 1, "released": 2, "repeat_offender": 1}
        assert transitions.totals(cur)["quarantined"] == 2
        spans = life.durations(transitions.of_released_since(cur, T0), T0)
    assert spans.in_quarantine == (5 * 3600.0,)


def test_a_bad_transition_is_refused_with_its_name():
    with pytest.raises(ValueError, match="transition kind 'fixed' is not one of"):
        Transition("gpu-001", "fixed", T0, "x")


def _doc(key, node="gpu-001"):
    return docs.document(docs.REPEAT_OFFENDER, key, node, action="replace", reason="repeat offender", codes=[],
                         evidence=[], history=[], history_url=None, now=T0)


def test_the_outbox_keeps_each_document_once_until_it_is_sent(store):
    assert outbox.enqueue(store.connect, [_doc("k1"), _doc("k2")], now=T0) == ["k1", "k2"]
    assert outbox.enqueue(store.connect, [_doc("k1")], now=T0 + H) == []  # written again: kept once
    for taken in outbox.due(store.connect, now=T0 + H):
        if taken.item.key == "k1":
            taken.sent(T0 + H)
        else:
            taken.failed("connection refused", T0 + 3 * H)
    assert [t.item.key for t in outbox.due(store.connect, now=T0 + 2 * H)] == []  # k2 waits for its next try
    with store.connect() as conn, conn.cursor() as cur:
        state = outbox.state(cur)
    assert (state.waiting, state.sent) == (1, 1)
    assert [t.item.key for t in outbox.due(store.connect, now=T0 + 3 * H)] == ["k2"]
