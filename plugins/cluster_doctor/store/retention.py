"""The retention of validation_history: attempts older than ``history_retention_days`` are deleted, a day
at a time, except those a pair's latest state rests on (migration 0010).

What is kept, whatever the setting:

- every attempt younger than the longest window a page, a report or a verdict reads (``floor_days``:
  the node page's 90 days of plots, the 30-day coverage SLO plus the staleness threshold, the fleet
  verdicts' windows, the peer tests' evidence, the node conditions' window): a setting below it is
  raised to it;
- per node and test, the few attempts its current state rests on: its latest attempt, its latest
  executed one, the first of its current status streak (``status_since``) and the executed one before
  that streak (``previous_status``). Recomputing the pair from what is left gives the state it has
  (``validation_latest`` never changes through a retention pass, a node failing for a year still says
  since when), so the deletes skip the recomputation (``cluster_doctor.retention``).

Each day is its own transaction (short locks, WAL in day-sized steps); the verdicts of deleted attempts
go with them (ON DELETE CASCADE), the hourly GPU-time sums subtract them (migration 0009).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import time
from typing import Any

from cluster_doctor.domain import coverage
from cluster_doctor.store import database, fleet, peers

log = logging.getLogger(__name__)

DAILY_REPORT_DAYS = 2.0  # the daily report reads yesterday, as of its end
# One day's deletes. Per pair, the attempts its state rests on stay: the latest attempt, the latest
# executed one, the first of the current status streak (at status_since) and the executed one before
# the streak (of previous_status, the latest at or before status_since). Recomputing the pair from
# what is left gives the same state: deleting any other attempt changes neither which attempt is the
# latest of each kind nor the streak's start.
DELETE_SQL = """
WITH anchor AS (
    SELECT s.node_name, s.test_name, s.status, s.finished_at, s.status_since, s.previous_status, s.last_attempt_at,
           (SELECT max(h.finished_at) FROM validation_history h
             WHERE h.node_name = s.node_name AND h.test_name = s.test_name
               AND h.status = s.previous_status AND h.finished_at <= s.status_since) AS previous_at
      FROM validation_pair_state s
)
DELETE FROM validation_history h USING anchor a
 WHERE h.finished_at >= %(since)s AND h.finished_at < %(until)s
   AND h.node_name = a.node_name AND h.test_name = a.test_name
   AND h.finished_at <> a.last_attempt_at AND h.finished_at IS DISTINCT FROM a.finished_at
   AND NOT coalesce(h.finished_at = a.status_since AND h.status = a.status, false)
   AND NOT coalesce(h.finished_at = a.previous_at AND h.status = a.previous_status, false)
"""
OLDEST_SQL = "SELECT min(finished_at) FROM validation_history"


def floor_days(settings: Any) -> float:
    """The longest window any reader of the history uses with these settings (days)."""
    policy = settings.fleet_verdicts
    windows = [fleet.PLOT_DAYS, coverage.SLO_DAYS + float(settings.staleness_days), policy.window_days,
               policy.drift_window_days, peers.EVIDENCE_CADENCES * float(settings.peer_cadence_days),
               settings.node_conditions.window_hours / 24.0, DAILY_REPORT_DAYS]
    return max(windows)


def retention_days(settings: Any) -> float | None:
    """The retention in force: the setting, raised to ``floor_days``; None when it is 0 (keep all)."""
    wanted = float(settings.history_retention_days)
    return None if wanted <= 0 else max(wanted, floor_days(settings))


@dataclasses.dataclass(frozen=True)
class Pruned:
    """What one retention pass did."""

    cutoff: dt.datetime | None
    deleted: int = 0
    days: int = 0
    seconds: float = 0.0

    def describe(self) -> str:
        if self.cutoff is None:
            return "history retention off (history_retention_days 0): nothing deleted"
        return (f"history retention: {self.deleted} attempt(s) older than {self.cutoff:%Y-%m-%d %H:%M} UTC deleted "
                f"over {self.days} day(s) in {self.seconds:.1f} s (each pair's latest state kept)")


def prune(connect: Any, settings: Any, *, now: dt.datetime, max_days: int | None = None) -> Pruned:
    """Delete the attempts the retention lets go, oldest day first, a transaction per day (at most
    ``max_days`` days per call: a first pass over a long history can be spread over several runs)."""
    days = retention_days(settings)
    if days is None:
        return Pruned(None)
    cutoff = now - dt.timedelta(days=days)
    connect = database.connector(connect)
    started, deleted, done = time.perf_counter(), 0, 0
    conn = connect(application_name="cluster-doctor-retention")
    try:
        with conn.cursor() as cur:
            cur.execute(OLDEST_SQL)
            oldest = cur.fetchone()[0]
        conn.commit()
        since = oldest
        while since is not None and since < cutoff and (max_days is None or done < max_days):
            until = min(cutoff, since + dt.timedelta(days=1))
            deleted += _prune_day(conn, since, until)
            done, since = done + 1, until
    finally:
        conn.close()
    result = Pruned(cutoff, deleted, done, time.perf_counter() - started)
    log.info("%s", result.describe())
    return result


def _prune_day(conn: Any, since: dt.datetime, until: dt.datetime) -> int:
    """One day's deletes in one transaction: the attempts older than both the day's end and their
    pair's anchor."""
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT set_config('cluster_doctor.retention', 'on', true)")
            cur.execute(DELETE_SQL, {"since": since, "until": until})
            count = cur.rowcount
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    return count
