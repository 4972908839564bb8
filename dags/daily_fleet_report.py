"""daily_fleet_report: the daily summary of the fleet's validation, as markdown and HTML files.

Thin on purpose: what the report contains and how it is computed lives in ``cluster_doctor.reports.daily``.
"""

from __future__ import annotations

import datetime as dt

from airflow.sdk import DAG, Param, get_current_context, task

DOC_MD = """
### Daily fleet report

Once a day (00:00 UTC) this DAG writes the summary of the day that just ended to the reports
directory (setting `reports_dir`; empty: `$AIRFLOW_HOME/cluster_doctor_reports`):
`daily/<YYYY-MM-DD>.md` and `daily/<YYYY-MM-DD>.html` (standalone page, no external assets).

It shows coverage (share of GPU nodes whose every enabled test has an executed result within the
staleness threshold) and its 14-day trend, the day's attempts per test and status, every failed
attempt of the day with its failing checks (device, value, threshold), per-GPU-model medians and
minimums of the key metrics, validation GPU-hours, and the fleet as of the end of the day (every
failing pair in full; stale and never-validated pairs as node ranges).

**write_report** reads `validation_history` (`validation_db`) as of the end of the day and writes
both files atomically. The fleet (the coverage denominator) is the GPU node inventory the
`continuous_validation` runs keep in the same database: every GPU node discovery has seen, attempted or
not (never-validated nodes are listed with why: busy, cordoned, not ready ...), a node that left the
cluster counted for `gone_node_grace_hours` — the same nodes the fleet page, `cluster-doctor status`
and the metrics count.

**Trigger form.** `day` (e.g. `2026-01-31`, UTC) regenerates the report of any past day as it was
then; empty means yesterday — or today so far when yesterday ended before discovery first saw the
fleet (a new install), so the first report is never an empty one. Backfill works too: one run per day
of the range. Days of the trend before the fleet was first seen read "no data".

**Unpaused at creation**: it validates nothing and holds no GPU. Each failure of the day links to its
node page and task log in the UI (`[api] base_url`); the UI shows the report live at *Daily report*
(navigation bar) and from the fleet page.
"""

with DAG(
    dag_id="daily_fleet_report",
    description="Daily summary of GPU node validation: coverage trend, failures, per-model figures",
    schedule="@daily",
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    catchup=False,
    max_active_runs=1,
    # it reads the results DB and writes two files: nothing to hold back, and a new install's stack can
    # trigger it (a paused DAG's triggered run stays queued)
    is_paused_upon_creation=False,
    dagrun_timeout=dt.timedelta(minutes=30),
    tags=["cluster-doctor", "gpu", "report"],
    doc_md=DOC_MD,
    default_args={"retries": 2, "retry_delay": dt.timedelta(minutes=2), "owner": "cluster-doctor"},
    params={
        "day": Param(
            None, type=["null", "string"], format="date", title="Day (UTC)",
            description="The day to report on, e.g. 2026-01-31. Empty: the day before the run's data "
                        "interval ends (yesterday for the scheduled run), or today so far when that day "
                        "ended before the fleet was first seen."),
    },
) as dag:

    @task
    def write_report() -> dict:
        from cluster_doctor.airflow import runtime
        from cluster_doctor.airflow.tasks import daily_report

        context = get_current_context()
        return daily_report.write_report(runtime.load_settings(), day=context["params"]["day"],
                                         data_interval_end=context.get("data_interval_end"))

    write_report()
