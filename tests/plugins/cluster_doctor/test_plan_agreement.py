"""One planner, one plan: the same fleet planned by the DAG's prioritize task, by
``cluster-doctor plan`` (the CLI's main on a real results database) and by the simulator's hourly planning
step gives the same pairs in the same order — bundle_ahead_hours, a suspect pair, a reserved node,
max_pairs and the health sweep included. (Tests a volume problem blocks:
tests/plugins/cluster_doctor/cli/test_plan.py.)"""

from __future__ import annotations

import datetime as dt
import io
import json

from cluster_doctor.airflow import tasks
from cluster_doctor.cli import main as cli
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.nodes import parse_node_range
from cluster_doctor.domain.payloads import Discovered, GpuNode
from cluster_doctor.domain.planning import due
from cluster_doctor.domain.planning.params import RunParams
from cluster_doctor.simulator import simulate
from cluster_doctor.store import reservations

H, D = dt.timedelta(hours=1), dt.timedelta(days=1)
TESTS = ["gpu_health", "dl_unit", "nccl_loopback", "storage_fio"]  # the default enabled suites, in order
FREE = [f"gpu-00{i}" for i in (1, 2, 3, 4, 5, 6, 8, 9)]
MAX_PAIRS = 13
ROOMY = 16  # max_pairs with room for the health sweep after every due pair
RESERVED = "gpu-004"
BUNDLE_AHEAD_HOURS = 24  # not the default (48): a caller that ignored the setting would plan otherwise
# (node, test, status, age of its last executed attempt, a straggler verdict on it)
FLEET = [
    # the latest to fail (storage_fio, due for its retest), gpu_health due within bundle_ahead_hours
    ("gpu-001", "gpu_health", "pass", 6.5 * D, False), ("gpu-001", "dl_unit", "pass", 1 * D, False),
    ("gpu-001", "nccl_loopback", "pass", 1 * D, False), ("gpu-001", "storage_fio", "fail", 6.5 * H, False),
    # fresh, but nccl_loopback carries a straggler verdict: a suspect, retested like a failure
    *[("gpu-002", t, "pass", 1 * D, t == "nccl_loopback") for t in TESTS],
    # a failed dl_unit due for its retest; gpu_health and storage_fio due within 24 h, nccl_loopback in 36 h
    ("gpu-003", "gpu_health", "pass", 6.5 * D, False), ("gpu-003", "dl_unit", "fail", 7 * H, False),
    ("gpu-003", "nccl_loopback", "pass", 5.5 * D, False), ("gpu-003", "storage_fio", "pass", 6.2 * D, False),
    # reserved for validation: one stale suite
    *[(RESERVED, t, "pass", 8 * D if t == "storage_fio" else 1 * D, False) for t in TESTS],
    # gpu-005 never validated; gpu-006 failed dl_unit 2 h ago (not yet due), its other suites never ran
    ("gpu-006", "dl_unit", "fail", 2 * H, False),
    # every suite fresh: gpu-008's health check 3 h old (the sweep's), gpu-009's 20 minutes (not yet)
    *[("gpu-008", t, "pass", 3 * H if t == "gpu_health" else 1 * D, False) for t in TESTS],
    *[("gpu-009", t, "pass", H / 3 if t == "gpu_health" else 1 * D, False) for t in TESTS],
]
EXPECTED = [
    (RESERVED, "storage_fio"),  # reserved nodes first
    *[("gpu-005", t) for t in TESTS],  # never validated at all
    ("gpu-006", "gpu_health"), ("gpu-006", "nccl_loopback"), ("gpu-006", "storage_fio"),
    ("gpu-002", "nccl_loopback"),  # the suspect
    ("gpu-003", "gpu_health"), ("gpu-003", "dl_unit"), ("gpu-003", "storage_fio"),  # health first
    ("gpu-001", "storage_fio"),  # its bundle cut to the pairs max_pairs leaves: the retest, not gpu_health
]  # no room left for the health sweep: it never takes a due pair's place
# with room: gpu-001's whole bundle, then the health sweep of the free node with no due pair
EXPECTED_ROOMY = [*EXPECTED[:-1], ("gpu-001", "gpu_health"), ("gpu-001", "storage_fio"), ("gpu-008", "gpu_health")]


def seed(store, now: dt.datetime) -> None:
    store.record([{"node_name": n, "test_name": t, "status": s, "finished_at": (now - age).isoformat(),
                   "dag_id": "continuous_validation", "run_id": "earlier", "map_index": 0, "try_number": 1}
                  for n, t, s, age, _ in FLEET])
    with store.connection() as conn, conn.cursor() as cur:
        for node, test, *_ in (row for row in FLEET if row[4]):
            cur.execute("SELECT history_id FROM validation_pair_state WHERE node_name = %s AND test_name = %s",
                        (node, test))
            cur.execute("INSERT INTO validation_verdicts (history_id, node_name, test_name, metric, kind, value, "
                        "fleet_median) VALUES (%s, %s, %s, 'nccl_busbw_gbps', 'straggler', 400, 480)",
                        (cur.fetchone()[0], node, test))
        conn.commit()
    reservations.opened(store.connect, RESERVED, gpu_count=8, run_id="earlier", at=now - 3 * H)


def dag_plan(settings: Settings, store, now: dt.datetime, max_pairs: int = MAX_PAIRS) -> list[tuple[str, str, str]]:
    """discover's payload (one busy GPU node beside the free ones) → load_latest → prioritize, claiming."""
    run = RunParams(parse_node_range(""), TESTS, None, max_pairs, False)
    found = Discovered.of(settings=settings, params=run.to_params(), started_at=now,
                          free=[(n, 8, "NVIDIA-H100-80GB-HBM3") for n in FREE], ineligible=[("gpu-007", "busy")])
    latest = tasks.load_latest(found, store)
    plan = tasks.prioritize(found, latest, now=now, store=store, dag_id="continuous_validation", run_id="r1",
                            reserved=[RESERVED])
    assert plan.reserved == [RESERVED] and all(p.gpu_count == 8 for p in plan.pairs)
    return [(p.node_name, p.test_name, p.why) for p in plan.pairs]


def cli_plan(db_url: str, now: dt.datetime, max_pairs: int = MAX_PAIRS) -> list[tuple[str, str, str]]:
    out = io.StringIO()
    assert cli.main(["plan", "--nodes", "gpu-[001-006,008-009]", "--max-pairs", str(max_pairs), "--now",
                     now.isoformat(), "--format", "json", "--db-url", db_url], out=out) == 0
    return [(p["node_name"], p["test_name"], p["why"]) for p in json.loads(out.getvalue())]


def simulated_plan(now: dt.datetime, max_pairs: int = MAX_PAIRS) -> list[tuple[str, str, str]]:
    """The simulator's planning step on the same fleet: its own pair states (a suspect is a failure)."""
    cfg = simulate.SimConfig(nodes=len(FREE), suite_minutes={t: 10.0 for t in TESTS}, max_pairs=max_pairs,
                             staleness_days=7, failed_retest_hours=6, bundle_ahead_hours=BUNDLE_AHEAD_HOURS)
    states = {(n, t): due.PairState("fail" if suspect else s, now - age, now - age, s)
              for n, t, s, age, suspect in FLEET}
    free = [GpuNode(name=n, gpu_count=8) for n in FREE]
    found = simulate.plan_hour(cfg, free, states, now=now, reserved={RESERVED}, busy=["gpu-007"])
    return [(p.node_name, p.test_name, p.why) for p in found.pairs]


def test_the_dag_the_cli_and_the_simulator_plan_the_same_pairs(store, db_url, monkeypatch):
    monkeypatch.setenv("CLUSTER_DOCTOR_RESERVATION", '{"enabled": true}')
    monkeypatch.setenv("CLUSTER_DOCTOR_BUNDLE_AHEAD_HOURS", str(BUNDLE_AHEAD_HOURS))
    settings = Settings.load()  # what the CLI reads too
    assert (settings.staleness_days, settings.failed_retest_hours) == (7, 6)
    assert settings.tests == TESTS
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    seed(store, now)

    from_cli = cli_plan(db_url, now)  # first: planning only, it claims nothing
    from_dag = dag_plan(settings, store, now)
    from_simulator = simulated_plan(now)
    assert [(n, t) for n, t, _ in from_dag] == EXPECTED
    assert from_cli == from_dag
    assert from_simulator == from_dag
    # with room for the health sweep (the same run planning again: its own claims count as free)
    roomy = dag_plan(settings, store, now, ROOMY)
    assert [(n, t) for n, t, _ in roomy] == EXPECTED_ROOMY and roomy[-1][2] == "health sweep"
    assert cli_plan(db_url, now, ROOMY) == roomy
    assert simulated_plan(now, ROOMY) == roomy
