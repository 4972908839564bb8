"""record: one validation_history row per attempt (step 6)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from cluster_doctor.airflow import storage
from cluster_doctor.airflow.tasks import peers
from cluster_doctor.airflow.tasks._common import _now, log
from cluster_doctor.domain import fleet_verdicts
from cluster_doctor.domain.attempts import UNREPORTED, Attempt, InvalidAttempt
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.errors import one_line
from cluster_doctor.domain.payloads import PeerTests, Plan, PlannedPair, Recorded
from cluster_doctor.domain.status import Status
from cluster_doctor.store import claims, spool, verdicts
from cluster_doctor.store import fail_slow as stored_fail_slow
from cluster_doctor.store.history import ResultStore


def record(
    planned: Plan,
    reported: Sequence[Mapping[str, Any] | None],
    store: ResultStore,
    *,
    dag_id: str,
    run_id: str,
    now: dt.datetime | None = None,
    settings: Settings | None = None,
) -> Recorded:
    """Write every attempt of the run (``reported``: the validate tasks' ``attempt`` XComs, each
    checked here); a planned pair whose task never reported gets a row too. Then judge the executed
    ones against the fleet and their own past (straggler/drift verdicts)."""
    now = now or _now()
    attempts: dict[tuple[str, str], Attempt] = {}
    for item in reported:
        if not item:
            continue
        try:
            attempt = Attempt.from_dict(item)
        except InvalidAttempt as exc:
            log.error("ignoring a malformed attempt from XCom: %s", exc)
            continue
        attempts[(attempt.node_name, attempt.test_name)] = attempt
    if not planned.dry_run:
        group_index = {node: i for i, node in enumerate(planned.nodes())}  # the validate group's map index
        for pair in planned.pairs:
            key = (pair.node_name, pair.test_name)
            if key not in attempts:
                attempts[key] = Attempt(
                    node_name=key[0], test_name=key[1], status=Status.SKIPPED, finished_at=now,
                    reason=UNREPORTED, gpu_model=pair.gpu_model, gpu_count=pair.gpu_count, dag_id=dag_id,
                    run_id=run_id, map_index=group_index[pair.node_name], try_number=0)
    # Whatever any run on any worker spooled first (quiet runs too); if writing this run's attempts
    # fails, they are spooled durably (settings.spool_dir, shared by every worker) and the task fails.
    given, settings = settings, settings if settings is not None else Settings.load()
    result = spool.record_or_spool(store, list(attempts.values()), storage.spool(settings))
    if planned.creates_pods:
        _release_claims(store, planned.pairs, dag_id=dag_id, run_id=run_id)
    if attempts:
        log.info("recorded %d attempt(s) (%d already written by the validation tasks)",
                 result.inserted, result.duplicates)
        judged = [a.to_dict() for a in attempts.values()]
        verdicts.judge_recorded(store.connect, judged,
                                given.fleet_verdicts if given else fleet_verdicts.BaselinePolicy())
        probe_suspects(store, judged, settings, now)
    return Recorded(attempts=list(attempts.values()))


def reported_attempts(steps: Any, peer_attempts: Any, peer_tests: PeerTests | None, *, dag_id: str,
                      run_id: str) -> list[Any]:
    """What record writes: the validate and sweep steps' ``attempt`` XComs (one dict when a single step
    reported), then the peer tests' (``peers.reported``: a skipped row for a side that never reported)."""
    reported = steps or []
    if isinstance(reported, dict):
        reported = [reported]
    return list(reported) + peers.reported(peer_attempts, peer_tests, dag_id=dag_id, run_id=run_id)


def probe_suspects(store: ResultStore, judged: Sequence[Mapping[str, Any]], settings: Settings,
                   now: dt.datetime) -> None:
    """A flagged speed probe makes its node a suspect, as a signal does (its bundle first, reservation may
    hold it); the next probe answers it (``store.fail_slow.record_probe_suspects``). Best effort: the
    attempts and their verdicts are stored already, and the slow view (status, pages, quarantine) reads
    the probe itself."""
    try:
        found = stored_fail_slow.record_probe_suspects(
            store.connect, judged, now=now, window=dt.timedelta(hours=settings.slow_signal_window_hours),
            spacing=dt.timedelta(hours=settings.slow_confirm_spacing_hours))
    except Exception as exc:  # noqa: BLE001 - a suspect is an addition to the run's results, not a condition
        log.warning("speed probe suspects not recorded (%s)", one_line(exc, 300))
        return
    for node in found.suspect:
        log.warning("SUSPECT %s: its speed probe was flagged (retested %g h after it)", node,
                    settings.slow_confirm_spacing_hours)
    for node, resolution in sorted(found.answered.items()):
        log.info("%s: its speed probe suspicion %s by the next probe", node, resolution)


def _release_claims(store: ResultStore, pairs: Sequence[PlannedPair], *, dag_id: str, run_id: str) -> None:
    """The run is done with its nodes once their attempts are stored. Best effort: the rows are
    committed already, and a claim not released just expires (claims.ttl_s)."""
    try:
        released = claims.release(store.connect, dag_id=dag_id, run_id=run_id, nodes=[p.node_name for p in pairs])
    except Exception as exc:
        log.warning("could not release this run's claims on %d node(s) (%s); they expire on their own",
                    len(pairs), one_line(exc, 300))
        return
    log.info("released this run's claims on %d node(s)", released)
