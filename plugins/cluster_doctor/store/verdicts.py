"""Fleet-relative and drift verdicts, stored: the window of recent values read from the results
database, the verdicts of recorded attempts written to ``validation_verdicts`` and read back. The
judging itself is ``cluster_doctor.domain.fleet_verdicts``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cluster_doctor.domain.fleet_verdicts import (
    JUDGED_METRICS,
    BaselinePolicy,
    Sample,
    Verdict,
    _number,
    fleet_baseline,
    judge_attempt,
    node_value,
)
from cluster_doctor.domain.status import Status

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------- database
_JUDGED_STATUSES = (Status.PASS.value, Status.FAIL.value)  # an errored suite's numbers are not trusted


def _connect(connect: Any):
    from cluster_doctor.store import database

    return database.connector(connect)


def _attempt_ids(cur, attempts: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """History rows (id, node, test, model, finished_at, metrics) of the recorded attempts worth judging."""
    keys = [(a.get("dag_id") or "", a.get("run_id") or "", a["node_name"], a["test_name"], int(a.get("try_number", 1)))
            for a in attempts if a.get("status") in _JUDGED_STATUSES and a.get("test_name") in JUDGED_METRICS]
    if not keys:
        return []
    cur.execute(
        "SELECT h.id, h.node_name, h.test_name, h.gpu_model, h.finished_at, h.metrics "
        "  FROM validation_history h "
        "  JOIN unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::int[]) "
        "       AS k(dag_id, run_id, node_name, test_name, try_number) "
        "    ON (h.dag_id, h.run_id, h.node_name, h.test_name, h.try_number) = "
        "       (k.dag_id, k.run_id, k.node_name, k.test_name, k.try_number) "
        " WHERE h.status = ANY(%s) ORDER BY h.finished_at, h.id",
        [[k[i] for k in keys] for i in range(5)] + [list(_JUDGED_STATUSES)])
    cols = [d.name for d in cur.description]
    return [dict(zip(cols, row)) for row in cur.fetchall()]


def _json_number_first(data: bytes | str) -> Any:
    """A JSON value, parsing the common case (a bare number) with float(): ~50x cheaper than json.loads
    per value, and the same verdict input (``_number`` reads ints as floats; jsonb has no NaN)."""
    try:
        return float(data)
    except ValueError:
        return json.loads(data)


def _load_fleet(cur, test: str, gpu_model: str | None, since: dt.datetime,
                metrics: Sequence[str]) -> dict[str, dict[str, list[Sample]]]:
    """metric -> node -> samples of one suite and GPU model since ``since``, with stored flags."""
    from psycopg.types.json import set_json_loads  # here: the pure core above needs no driver

    selects = ", ".join("h.metrics -> %s" for _ in metrics)
    with cur.connection.cursor() as own:  # its own cursor: the number-first JSON loader stays here
        set_json_loads(_json_number_first, own)
        own.execute(
            f"SELECT h.id, h.node_name, h.finished_at, {selects}, "
            # NULL (no parsing at all) for the usual attempt without verdicts
            "       (SELECT jsonb_object_agg(v.metric, v.kinds) FROM "
            "          (SELECT metric, jsonb_agg(kind) AS kinds FROM validation_verdicts "
            "            WHERE history_id = h.id GROUP BY metric) v) "
            "  FROM validation_history h "
            " WHERE h.test_name = %s AND h.gpu_model IS NOT DISTINCT FROM %s AND h.status = ANY(%s) "
            "   AND h.finished_at >= %s",
            [*metrics, test, gpu_model, list(_JUDGED_STATUSES), since])
        rows = own.fetchall()
    fleet: dict[str, dict[str, list[Sample]]] = {m: defaultdict(list) for m in metrics}
    no_flags: frozenset[str] = frozenset()
    for row in rows:
        history_id, node, finished = row[0], row[1], row[2]
        flags = row[3 + len(metrics)] or {}
        for metric, raw in zip(metrics, row[3:3 + len(metrics)]):
            value = _number(raw)
            if value is not None:
                fleet[metric][node].append(Sample(history_id, node, finished, value,
                                                  frozenset(flags[metric]) if metric in flags else no_flags))
    return fleet


def fleet_bands(cur, gpu_model: str | None, tests: Iterable[str], policy: BaselinePolicy,
                *, now: dt.datetime) -> dict[tuple[str, str], dict[str, Any]]:
    """The fleet band of each judged metric of ``tests`` for one GPU model, as a straggler verdict
    would see it at ``now``: the baseline median over the kept per-node values of the window, with
    their p10 and p90 (one query per test). A metric with too few nodes has no band."""
    since = now - dt.timedelta(days=policy.window_days)
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for test in dict.fromkeys(tests):
        metrics = JUDGED_METRICS.get(test)
        if not metrics:
            continue
        for metric, per_node in _load_fleet(cur, test, gpu_model, since, metrics).items():
            values = {node: v for node, samples in per_node.items()
                      if (v := node_value([s for s in samples if s.finished_at <= now], policy)) is not None}
            base = fleet_baseline(values, policy)
            if base is not None:
                out[(test, metric)] = {"median": base.median, "p10": base.quantile(0.1), "p90": base.quantile(0.9),
                                       "nodes": base.nodes, "since": since, "gpu_model": gpu_model}
    return out


def _previous_flags(cur, history_id: int, node: str, test: str, finished_at: dt.datetime) -> dict[str, frozenset[str]]:
    """Verdict kinds per metric on the pair's executed attempt just before this one."""
    cur.execute(
        "SELECT v.metric, array_agg(v.kind) FROM validation_verdicts v WHERE v.history_id = ("
        "  SELECT id FROM validation_history WHERE node_name = %s AND test_name = %s "
        "     AND status IN ('pass', 'fail', 'error') AND (finished_at, id) < (%s, %s) "
        "   ORDER BY finished_at DESC, id DESC LIMIT 1) GROUP BY v.metric",
        (node, test, finished_at, history_id))
    return {metric: frozenset(kinds) for metric, kinds in cur.fetchall()}


_INSERT = (
    "INSERT INTO validation_verdicts (history_id, node_name, test_name, metric, kind, value, gpu_model, "
    "fleet_median, fleet_mad, fleet_nodes, percentile, own_median, own_samples, confirmed, judged_at) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
    "ON CONFLICT (history_id, metric, kind) DO UPDATE SET value = EXCLUDED.value, "
    "fleet_median = EXCLUDED.fleet_median, fleet_mad = EXCLUDED.fleet_mad, fleet_nodes = EXCLUDED.fleet_nodes, "
    "percentile = EXCLUDED.percentile, own_median = EXCLUDED.own_median, own_samples = EXCLUDED.own_samples, "
    "confirmed = EXCLUDED.confirmed, judged_at = EXCLUDED.judged_at"
)


def judge_recorded(connect: Any, attempts: Sequence[Mapping[str, Any]], policy: BaselinePolicy = BaselinePolicy(),
                   *, now: dt.datetime | None = None) -> list[Verdict]:
    """Judge recorded attempts (dicts with the attempt identity and status) against the stored history
    and store the verdicts, in one transaction. Idempotent: judging the same attempt again replaces its
    verdicts with the same ones. ``now``: the judgement's time (this host's clock, as every time the
    product compares: never the database server's), and the end of the windows, else each attempt's finish."""
    if not policy.enabled or not attempts:
        return []
    judged_at = now or dt.datetime.now(dt.UTC)
    conn = _connect(connect)()
    verdicts: list[Verdict] = []
    try:
        with conn.cursor() as cur:
            rows = _attempt_ids(cur, attempts)
            cache: dict[tuple[str, str | None], dict] = {}
            for row in rows:
                test, model = row["test_name"], row["gpu_model"]
                when = now or row["finished_at"]
                since = when - dt.timedelta(days=max(policy.window_days, policy.drift_window_days))
                if (test, model) not in cache:
                    cache[(test, model)] = _load_fleet(cur, test, model, since, JUDGED_METRICS[test])
                found = judge_attempt(
                    history_id=row["id"], node_name=row["node_name"], test_name=test, gpu_model=model,
                    finished_at=row["finished_at"], metrics=row["metrics"] or {}, fleet=cache[(test, model)],
                    previous_flags=_previous_flags(cur, row["id"], row["node_name"], test, row["finished_at"]),
                    policy=policy, now=when)
                cur.execute("DELETE FROM validation_verdicts WHERE history_id = %s", (row["id"],))
                for v in found:
                    cur.execute(_INSERT, (v.history_id, v.node_name, v.test_name, v.metric, v.kind, v.value,
                                          v.gpu_model, v.fleet_median, v.fleet_mad, v.fleet_nodes, v.percentile,
                                          v.own_median, v.own_samples, v.confirmed, judged_at))
                    _flag(cache[(test, model)][v.metric].get(v.node_name, []), v.history_id, v.kind)
                verdicts.extend(found)
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    finally:
        conn.close()
    for v in verdicts:
        (log.warning if v.confirmed else log.info)("%s", v.describe())
    return verdicts


def _flag(samples: list[Sample], history_id: int, kind: str) -> None:
    """Mark a just-judged sample as flagged, so later attempts of the same batch leave it out."""
    for i, s in enumerate(samples):
        if s.history_id == history_id:
            samples[i] = dataclasses.replace(s, flagged=s.flagged | {kind})


VERDICT_COLUMNS = ("node_name", "test_name", "metric", "kind", "value", "gpu_model", "fleet_median", "fleet_mad",
                   "fleet_nodes", "percentile", "own_median", "own_samples", "confirmed", "history_id", "judged_at")


def latest_verdicts(connect: Any, *, nodes: Iterable[str] | None = None, tests: Sequence[str] | None = None,
                    confirmed_only: bool = False) -> list[dict[str, Any]]:
    """Verdicts on the latest executed attempt of each pair (the ``validation_latest_verdicts`` view),
    for the latest view's readers: status, the fleet page, CTRF, metrics."""
    where, params = [], []
    if nodes is not None:
        where.append("node_name = ANY(%s)")
        params.append(sorted(set(nodes)))
    if tests:
        where.append("test_name = ANY(%s)")
        params.append(list(tests))
    if confirmed_only:
        where.append("confirmed")
    sql = f"SELECT {', '.join(VERDICT_COLUMNS)} FROM validation_latest_verdicts"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY node_name, test_name, metric, kind"
    conn = _connect(connect)()
    try:
        with conn.cursor() as cur:
            cur.execute(sql, params)
            return [dict(zip(VERDICT_COLUMNS, row)) for row in cur.fetchall()]
    finally:
        conn.close()


def mark_suspects(connect: Any, latest_rows: Sequence[Sequence[Any]]) -> list[list[Any]]:
    """The prioritizer's input (``tasks.load_latest`` rows: node, test, status, finished_at, ...) with
    every passing pair that carries a verdict on its latest executed attempt turned into a failing
    one, so the failed-retest path runs it again: that second run confirms or clears the verdict."""
    if not latest_rows:
        return []
    flagged = {(r["node_name"], r["test_name"]) for r in latest_verdicts(
        connect, nodes={r[0] for r in latest_rows}, tests=sorted({r[1] for r in latest_rows}))}
    out = []
    for row in latest_rows:
        row = list(row)
        if row[2] == Status.PASS and (row[0], row[1]) in flagged:
            row[2] = Status.FAIL
        out.append(row)
    return out
