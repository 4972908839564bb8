"""cluster_doctor.store.inventory: the GPU node inventory every view of the fleet counts, against a real
PostgreSQL."""

from __future__ import annotations

import datetime as dt

import psycopg
import pytest
from cluster_doctor.store import inventory, migrations
from cluster_doctor.store.history import ResultStore
from cluster_doctor.store.inventory import SeenNode

from tests.support import fleet_seed as seed

T0 = dt.datetime(2026, 11, 20, 10, tzinfo=dt.UTC)
H = dt.timedelta(hours=1)
GRACE = dt.timedelta(hours=24)


def rows(store: ResultStore) -> dict[str, inventory.InventoryNode]:
    with store.connect() as conn, conn.cursor() as cur:
        return inventory.read(cur)


def counted(store: ResultStore, as_of: dt.datetime, grace: dt.timedelta = GRACE) -> list[str]:
    with store.connect() as conn, conn.cursor() as cur:
        return sorted(n.node_name for n in inventory.counted(cur, as_of=as_of, grace=grace))


def test_a_discovery_records_every_gpu_node_with_its_eligibility(store):
    update = inventory.record_discovery(store.connect, [
        SeenNode("gpu-001", 8, "H100", inventory.FREE),
        SeenNode("gpu-002", 8, "H100", "busy", "ml/trainer-0 requests 8 nvidia.com/gpu"),
        SeenNode("gpu-003", 4, None, "cordoned", "spec.unschedulable is set"),
    ], seen_at=T0, complete=True)
    assert update.new == ["gpu-001", "gpu-002", "gpu-003"] and update.gone == [] and update.seen == 3
    got = rows(store)
    assert got["gpu-002"].eligibility == "busy" and got["gpu-002"].eligibility_since == T0
    assert got["gpu-002"].describe() == "busy since 2026-11-20 10:00 UTC: ml/trainer-0 requests 8 nvidia.com/gpu"
    assert got["gpu-003"].gpu_count == 4 and got["gpu-003"].gpu_model is None
    assert got["gpu-001"].first_seen_at == got["gpu-001"].last_seen_at == T0 and got["gpu-001"].state == "free"


def test_since_moves_only_when_the_eligibility_changes(store):
    inventory.record_discovery(store.connect, [SeenNode("gpu-001", 8, "H100", "busy", "a/x")], seen_at=T0,
                               complete=True)
    inventory.record_discovery(store.connect, [SeenNode("gpu-001", 8, "H100", "busy", "a/y")], seen_at=T0 + H,
                               complete=True)
    node = rows(store)["gpu-001"]
    assert node.eligibility_since == T0 and node.last_seen_at == T0 + H and node.eligibility_detail == "a/y"
    inventory.record_discovery(store.connect, [SeenNode("gpu-001", 8, None, inventory.FREE)], seen_at=T0 + 2 * H,
                               complete=True)
    node = rows(store)["gpu-001"]
    assert node.eligibility == "free" and node.eligibility_since == T0 + 2 * H
    assert node.gpu_model == "H100"  # a node whose label vanished keeps the model it had
    assert node.first_seen_at == T0


def test_a_node_that_left_is_gone_then_stops_counting_after_the_grace_period(store):
    inventory.record_discovery(store.connect, [SeenNode(f"gpu-00{i}", 8, "H100", inventory.FREE) for i in (1, 2)],
                               seen_at=T0, complete=True)
    update = inventory.record_discovery(store.connect, [SeenNode("gpu-001", 8, "H100", inventory.FREE)],
                                        seen_at=T0 + H, complete=True)
    assert update.gone == ["gpu-002"]
    gone = rows(store)["gpu-002"]
    assert gone.state == "gone" and gone.gone_at == T0 + H and gone.describe() == "gone since 2026-11-20 11:00 UTC"
    assert counted(store, T0 + 2 * H) == ["gpu-001", "gpu-002"]  # still counted within the grace period
    assert counted(store, T0 + H + GRACE + H) == ["gpu-001"]
    assert counted(store, T0 + 2 * H, grace=dt.timedelta(0)) == ["gpu-001"]
    assert counted(store, T0 - H) == []  # nothing had been seen yet
    back = inventory.record_discovery(store.connect, [SeenNode(f"gpu-00{i}", 8, "H100", "busy", "b/z")
                                                      for i in (1, 2)], seen_at=T0 + 3 * H, complete=True)
    assert back.returned == ["gpu-002"] and rows(store)["gpu-002"].gone_at is None
    assert rows(store)["gpu-002"].eligibility_since == T0 + 3 * H


def test_a_run_over_a_node_range_never_marks_the_others_gone(store):
    inventory.record_discovery(store.connect, [SeenNode(f"gpu-00{i}", 8, "H100", inventory.FREE) for i in (1, 2)],
                               seen_at=T0, complete=True)
    update = inventory.record_discovery(store.connect, [SeenNode("gpu-001", 8, "H100", inventory.FREE)],
                                        seen_at=T0 + H, complete=False)
    assert update.gone == [] and rows(store)["gpu-002"].gone_at is None


def test_an_older_discovery_finishing_late_never_overwrites_a_newer_one(store):
    inventory.record_discovery(store.connect, [SeenNode("gpu-001", 8, "H100", "busy", "new")], seen_at=T0 + H,
                               complete=True)
    late = inventory.record_discovery(store.connect, [SeenNode("gpu-001", 8, "H100", inventory.FREE)],
                                      seen_at=T0, complete=True)
    assert late.stale == 1 and late.gone == []
    node = rows(store)["gpu-001"]
    assert node.eligibility == "busy" and node.last_seen_at == T0 + H  # the late one's row is left as it was


def test_bad_input_is_refused_and_nothing_is_written(store):
    with pytest.raises(ValueError, match="invalid Kubernetes node name"):
        inventory.record_discovery(store.connect, [SeenNode("gpu-001", 8, None, "free"),
                                                   SeenNode("GPU_002", 8, None, "free")], seen_at=T0, complete=True)
    with pytest.raises(ValueError, match="timezone-aware"):
        inventory.record_discovery(store.connect, [], seen_at=dt.datetime(2026, 1, 1), complete=True)
    with pytest.raises(psycopg.errors.CheckViolation):
        inventory.record_discovery(store.connect, [SeenNode("gpu-001", -1, None, "free")], seen_at=T0, complete=True)
    assert rows(store) == {}


def test_a_node_known_only_from_its_attempts_is_in_the_inventory(store):
    """Attempts recorded by hand (or before the inventory existed) name nodes discovery never wrote:
    they are added, eligibility unknown, so no result belongs to a node the fleet does not list."""
    store.record([seed.attempt("gpu-900", "gpu_health", "pass", T0), seed.attempt("gpu-900", "dl_unit", "fail", T0 - H)])
    node = rows(store)["gpu-900"]
    assert node.eligibility == "unknown" and node.first_seen_at == T0 - H and node.gpu_model == seed.H100
    inventory.record_discovery(store.connect, [SeenNode("gpu-900", 8, seed.H100, inventory.FREE)], seen_at=T0 + H,
                               complete=True)
    assert rows(store)["gpu-900"].eligibility == "free" and rows(store)["gpu-900"].first_seen_at == T0 - H


def test_the_migration_takes_the_nodes_of_the_history_recorded_before_it(db_dsn):
    """An existing results database: 0005 lists every node its history names."""
    with psycopg.connect(**db_dsn) as conn:  # db_dsn is at the current version: go back to before 0005
        with conn.cursor() as cur:
            cur.execute("DROP TABLE gpu_node_inventory CASCADE")
            cur.execute("DROP FUNCTION cluster_doctor_inventory_from_history()")
            cur.execute("DROP FUNCTION cluster_doctor_inventory_from_attempts() CASCADE")
            cur.execute(f"DELETE FROM {migrations.VERSION_TABLE} WHERE version >= 5")
            version_5 = [m for m in migrations.available() if m.version == 5]
            later = [m for m in migrations.available() if m.version > 5]
            for m in later:  # what a later migration made is left in place: it does not depend on 0005
                cur.execute(f"INSERT INTO {migrations.VERSION_TABLE} (version, name, checksum) VALUES (%s, %s, %s)",
                            (m.version, m.name, m.checksum))
        conn.commit()
    store = ResultStore(db_dsn)
    with psycopg.connect(**db_dsn) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO validation_history (node_name, test_name, status, finished_at, gpu_model, gpu_count, "
                    "run_id) VALUES ('gpu-001', 'dl_unit', 'pass', %s, 'A100', 8, 'r1'), "
                    "('gpu-001', 'dl_unit', 'timeout', %s, NULL, NULL, 'r2'), "
                    "('gpu-002', 'gpu_health', 'fail', %s, 'H100', 4, 'r2')", (T0 - H, T0, T0))
    report = store.upgrade()
    assert report.applied == [m.version for m in version_5]
    got = rows(store)
    assert set(got) == {"gpu-001", "gpu-002"}
    assert (got["gpu-001"].first_seen_at, got["gpu-001"].last_seen_at) == (T0 - H, T0)
    assert got["gpu-001"].gpu_model == "A100" and got["gpu-001"].eligibility == "unknown"
