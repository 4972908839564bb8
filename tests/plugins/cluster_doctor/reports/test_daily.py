"""The daily summary against a real Postgres, on a seeded history whose numbers are worked out by hand
below (not by the product's SQL)."""

import datetime as dt
import itertools
import json
import os
import pathlib
import re

import pytest
from cluster_doctor.domain.attempts import Attempt
from cluster_doctor.domain.config import Settings
from cluster_doctor.reports import daily
from cluster_doctor.store import inventory

D = dt.date(2026, 11, 10)
T = dt.datetime(2026, 11, 10, tzinfo=dt.UTC)  # start of the reported day
NOW = T + dt.timedelta(days=1, hours=1)  # the scheduled run, an hour after the day ended
H100, A100 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"
TESTS = ["gpu_health", "dl_unit"]
SCRIPT = "<script>alert(1)</script> | cuda:5 NaN"

GEMM_FAIL = {"name": "gemm_bf16_tflops", "status": "fail", "value": 100.5, "unit": "TFLOPS",
             "threshold": ">= 620.5", "message": "GPU 3 is 84% below the model baseline", "device": "cuda:3"}
ECC_FAIL = {"name": "uncorrected_ecc", "status": "fail", "value": 2, "unit": None, "threshold": "== 0",
            "message": "uncorrected ECC errors", "device": "cuda:1"}
OK_CHECK = {"name": "matmul_fp32", "status": "pass", "value": 0.0, "unit": None, "threshold": "<= 1e-5",
            "message": "", "device": "cuda:0"}
WARN_CHECK = {"name": "memory_bandwidth", "status": "warn", "value": 2900, "unit": "GB/s", "threshold": ">= 2800",
              "message": "within tolerance", "device": "cuda:2"}

_run = itertools.count()


def at(days: float, hours: float = 0) -> dt.datetime:
    return T + dt.timedelta(days=days, hours=hours)


def a(node, test, status, finished, *, model=H100, gpus=8, duration=900.0, **kw):
    executed = status in ("pass", "fail", "error")
    return Attempt(node_name=node, test_name=test, status=status, finished_at=finished,
                   started_at=finished - dt.timedelta(seconds=duration) if duration else None,
                   duration_s=duration if (executed or status == "preempted") else None,
                   gpu_model=model, gpu_count=gpus, dag_id="continuous_validation", run_id=f"r{next(_run)}", **kw)


def seeded_history():
    """Times are offsets from the start of D. Coverage windows are [day end - 7 d, day end)."""
    return [
        # gpu-001: both tests fresh at the end of D; a later preempted attempt does not change that
        a("gpu-001", "gpu_health", "pass", at(-10, 12)), a("gpu-001", "gpu_health", "pass", at(-2, 12)),
        a("gpu-001", "dl_unit", "pass", at(-9, 12)), a("gpu-001", "dl_unit", "pass", at(-1, 12)),
        a("gpu-001", "dl_unit", "pass", at(0, 3), metrics={"gemm_bf16_tflops_min": 700.0,
                                                           "mem_bw_gbps_min": 3000.0}),
        a("gpu-001", "gpu_health", "preempted", at(0, 15), duration=450.0, reason="user pod ml/train-0 claimed the node"),
        # gpu-002: passes, then a NEW dl_unit failure on D (previous executed result passed)
        a("gpu-002", "gpu_health", "pass", at(-5, 12)), a("gpu-002", "dl_unit", "pass", at(-5, 13)),
        a("gpu-002", "dl_unit", "fail", at(0, 10), reason="gemm_bf16_tflops on cuda:3: 100.5 < 620.5",
          metrics={"gemm_bf16_tflops_min": 100.5}, checks=[OK_CHECK, GEMM_FAIL, WARN_CHECK],
          log_path="/data/continuous_validation/dl_unit/gpu-002/dl_unit_gpu-002_1794304800.log"),
        # gpu-003: gpu_health stale at the end of D; dl_unit errors on D with a hostile reason; a storage_fio
        # pass (not an enabled test) with a non-numeric metric and no GPU count; a pass AFTER D that must
        # not leak into D's report
        a("gpu-003", "gpu_health", "pass", at(-12, 12)), a("gpu-003", "dl_unit", "pass", at(-11, 12)),
        a("gpu-003", "dl_unit", "error", at(0, 14), reason=SCRIPT),
        a("gpu-003", "storage_fio", "pass", at(0, 11), gpus=None, duration=600.0,
          metrics={"fio_seq_read_mibps": 2000.0, "fio_seq_write_mibps": "n/a"}),
        a("gpu-003", "gpu_health", "pass", at(1, 0.5)),
        # gpu-004: attempted on D but never executed
        a("gpu-004", "gpu_health", "timeout", at(0, 8), reason="the pod was still Pending after 1200 s"),
        a("gpu-004", "dl_unit", "skipped", at(0, 8 + 5 / 60), reason="node busy at submit time"),
        # gpu-005 (A100): dl_unit failing since D-4 12:00 (its first result), failing again on D
        a("gpu-005", "dl_unit", "fail", at(-4, 12), model=A100, reason="ECC", checks=[ECC_FAIL]),
        a("gpu-005", "gpu_health", "pass", at(0, 6), model=A100, metrics={"gpus_visible": 8}),
        a("gpu-005", "dl_unit", "fail", at(0, 9), model=A100, reason="uncorrected ECC on cuda:1", checks=[ECC_FAIL]),
        # gpu-006: first validated on D
        a("gpu-006", "gpu_health", "pass", at(0, 1), metrics={"gpus_visible": 8}),
        a("gpu-006", "dl_unit", "pass", at(0, 2), metrics={"gemm_bf16_tflops_min": 720.0,
                                                           "mem_bw_gbps_min": 3100.0}),
        # gpu-099: validated 40 days ago, then left the cluster (see seeded)
        a("gpu-099", "gpu_health", "pass", at(-40)),
    ]


FLEET = [f"gpu-00{i}" for i in range(1, 7)]


def discovered(store, nodes=FLEET, when=None):
    """The GPU node inventory as the continuous_validation runs write it: a discovery of the whole
    cluster, at D-1 12:00 by default (a node it did not see is gone from then on)."""
    inventory.record_discovery(store.connect, [inventory.SeenNode(n, 8, H100, inventory.FREE) for n in nodes],
                               seen_at=when or at(-1, 12), complete=True)


@pytest.fixture
def seeded(store):
    store.record(seeded_history())
    discovered(store)  # gpu-099 gone since D-1 12:00: past the 24 h grace period at the end of D
    return store


@pytest.fixture
def data(seeded):
    return daily.build(seeded, D, tests=TESTS, staleness_days=7, now=NOW)


def test_day_counts_and_gpu_hours_are_the_seeded_ones(data):
    assert data["day"] == "2026-11-10" and data["as_of"] == "2026-11-11T00:00:00+00:00" and not data["partial_day"]
    assert data["day_counts"] == {"total": 11, "pass": 5, "fail": 2, "error": 1, "timeout": 1, "preempted": 1,
                                  "skipped": 1}
    assert data["day_counts_per_test"]["dl_unit"] == {"pass": 2, "fail": 2, "error": 1, "timeout": 0,
                                                      "preempted": 0, "skipped": 1}
    assert data["day_counts_per_test"]["storage_fio"]["pass"] == 1
    # executed: 7 attempts x 900 s x 8 GPUs = 14 GPU-hours (storage_fio has no GPU count: 0, flagged);
    # preempted: 450 s x 8 GPUs = 1 GPU-hour
    assert data["gpu_hours"] == {"total": 15.0, "executed": 14.0, "not_executed": 1.0, "attempts_without_gpu_count": 1}


def test_failures_of_the_day_with_their_numbers(data):
    failures = data["failures"]
    assert [(f["node_name"], f["test_name"], f["status"], f["new"]) for f in failures] == [
        ("gpu-002", "dl_unit", "fail", True), ("gpu-003", "dl_unit", "error", True),
        ("gpu-005", "dl_unit", "fail", False)]
    assert data["failures_total"] == 3 and data["failing_nodes_today"] == 3 and data["newly_failing_today"] == 2
    two = failures[0]
    assert two["checks"] == [{k: GEMM_FAIL[k] for k in ("name", "status", "device", "value", "unit", "threshold",
                                                          "message")}]  # pass and warn checks are left out
    assert two["previous_status"] == "pass" and two["finished_at"] == at(0, 10).isoformat()
    assert two["log_path"].endswith("dl_unit_gpu-002_1794304800.log")
    assert failures[2]["previous_status"] == "fail" and failures[2]["checks"][0]["device"] == "cuda:1"


def test_coverage_trend_on_a_hand_checked_scenario(data):
    # Worked out per node from the seeded times (day d covered when both tests have an executed
    # result in [d+1 - 7 d, d+1)):
    #   gpu-001 days -9..-4 and -1..0 · gpu-002 -5..0 · gpu-003 -11..-6 · gpu-005 and gpu-006 day 0 only
    #   gpu-004 never; gpu-003's pass after D does not count for D.
    expected = [0, 0, 1, 1, 2, 2, 2, 2, 2, 2, 1, 1, 2, 4]
    trend = data["coverage_trend"]
    assert [t["day"] for t in trend] == [(D - dt.timedelta(days=13 - i)).isoformat() for i in range(14)]
    assert [t["covered"] for t in trend] == expected
    # each day's fleet as of its end: a node from its first sighting (first attempt, or discovery at D-1
    # 12:00 for gpu-004 and gpu-006); gpu-099, gone at D-1 12:00, until its 24 h grace ends (not at D's end)
    assert [t["nodes"] for t in trend] == [1, 2, 2, 3, 3, 3, 3, 3, 4, 5, 5, 5, 7, 6]
    assert data["coverage"] == {"covered": 4, "nodes": 6, "coverage": round(4 / 6, 4)}
    assert data["fleet"]["covered_nodes"] == 4  # the fleet table agrees with the trend's last day


def test_coverage_window_boundaries_and_a_never_attempted_node(store):
    # exactly at day_end - 7 d is inside the window; exactly at day_end is the next day's
    store.record([a("gpu-101", "gpu_health", "pass", at(-6))])
    discovered(store, ["gpu-102", "gpu-101"], when=at(-20))  # gpu-102: seen, never attempted
    data = daily.build(store, D, tests=["gpu_health"], staleness_days=7, now=NOW)
    covered = {t["day"]: t["covered"] for t in data["coverage_trend"]}
    assert covered[(D - dt.timedelta(days=7)).isoformat()] == 0
    assert all(covered[(D - dt.timedelta(days=k)).isoformat()] == 1 for k in range(7))
    assert data["coverage"] == {"covered": 1, "nodes": 2, "coverage": 0.5}
    assert "inventory" in data["fleet_source"]
    assert data["fleet"]["stale_groups"] == [{"test_name": "gpu_health", "state": "never", "count": 1,
                                              "oldest": None, "oldest_age": None, "nodes": "gpu-102"}]
    assert data["fleet"]["never_why"] == [{"state": "free", "count": 1, "since": at(-20).isoformat(),
                                           "nodes": "gpu-102", "example": None}]


def test_a_node_that_left_counts_for_the_grace_period_only(store):
    store.record([a("gpu-101", "gpu_health", "pass", at(-1)), a("gpu-102", "gpu_health", "pass", at(-1))])
    discovered(store, ["gpu-101", "gpu-102"], when=at(-1, 1))
    discovered(store, ["gpu-101"], when=at(0, 12))  # gpu-102 left at noon on D
    assert daily.build(store, D, tests=["gpu_health"], staleness_days=7, now=NOW)["coverage"]["nodes"] == 2
    later = daily.build(store, D, tests=["gpu_health"], staleness_days=7, now=NOW, gone_grace_hours=6)
    assert later["coverage"] == {"covered": 1, "nodes": 1, "coverage": 1.0}


def test_fleet_as_of_the_end_of_the_day(data):
    fleet = data["fleet"]
    assert fleet["nodes"] == 6 and fleet["pairs"] == 12
    assert fleet["counts"] == {"pass": 6, "fail": 2, "error": 1, "stale": 1, "never": 2}
    assert fleet["per_test"]["gpu_health"] == {"pass": 4, "fail": 0, "error": 0, "stale": 1, "never": 1}
    rows = fleet["failing"]
    # oldest failure first: gpu-005 has been failing since D-4 12:00
    assert [(r["node_name"], r["status"], r["status_since"], r["previous_status"]) for r in rows] == [
        ("gpu-005", "fail", at(-4, 12).isoformat(), None),
        ("gpu-002", "fail", at(0, 10).isoformat(), "pass"),
        ("gpu-003", "error", at(0, 14).isoformat(), "pass")]
    assert rows[0]["since_age"] == "4 d 12 h" and rows[2]["reason"] == SCRIPT
    groups = {(g["test_name"], g["state"]): g for g in fleet["stale_groups"]}
    assert set(groups) == {("gpu_health", "never"), ("dl_unit", "never"), ("gpu_health", "stale")}
    assert groups[("gpu_health", "stale")]["nodes"] == "gpu-003"  # the pass after D is not seen
    assert groups[("gpu_health", "stale")]["oldest_age"] == "12 d 12 h"  # D-12 12:00 to the end of D
    assert groups[("dl_unit", "never")]["nodes"] == "gpu-004"


def test_per_gpu_model_figures_over_the_days_passes(data):
    models = {m["gpu_model"]: m for m in data["per_model"]}
    assert set(models) == {H100, A100}
    h100 = models[H100]
    assert (h100["nodes"], h100["attempts"], h100["pass"], h100["fail"], h100["error"]) == (4, 6, 4, 1, 1)
    metrics = {(x["test_name"], x["metric"]): x for x in h100["metrics"]}
    # the failed attempt's 100.5 TFLOPS is not a pass: median of 700 and 720
    assert metrics[("dl_unit", "gemm_bf16_tflops_min")] | {} == {
        "test_name": "dl_unit", "metric": "gemm_bf16_tflops_min", "n": 2, "median": 710.0, "min": 700.0}
    assert metrics[("dl_unit", "mem_bw_gbps_min")]["median"] == 3050.0
    assert metrics[("storage_fio", "fio_seq_read_mibps")]["n"] == 1
    assert ("storage_fio", "fio_seq_write_mibps") not in metrics  # "n/a" is not a number
    assert metrics[("gpu_health", "gpus_visible")]["median"] == 8.0
    a100 = models[A100]
    assert (a100["nodes"], a100["attempts"], a100["pass"], a100["fail"]) == (1, 2, 1, 1)


def test_markdown_and_html_show_the_numbers_and_escape_content(data):
    md, page = daily.render_markdown(data), daily.render_html(data)
    for text in (md, page):
        assert "<script>" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
        assert "gpu-002 · dl_unit — " in text and "66.7 %" in text
        assert "2026-11-10" in text
    assert "gpu-002 · dl_unit — FAIL at 10:00 UTC (new)" in md
    assert "| gemm_bf16_tflops | fail | cuda:3 | 100.5 TFLOPS | &gt;= 620.5 | GPU 3 is 84% below the model baseline |" in md
    assert "\\| cuda:5 NaN" in md  # a pipe in a reason does not break the table
    assert "| 2026-11-09 | 2 | 7 | 28.6 % |" in md
    assert f"| {H100} | dl_unit | gemm_bf16_tflops_min | 2 | 710 | 700 |" in md
    assert "Validation GPU-hours: 15" in md
    assert "| dl_unit | never validated | 1 |" in md and "gpu-004" in md
    # HTML: standalone (inline CSS, no external resource), every cell escaped
    assert page.startswith("<!DOCTYPE html>") and "<style>" in page
    assert not re.search(r"""src\s*=""", page)  # no external resource; links only to the Airflow UI
    assert all(h.startswith(("/cluster-doctor/nodes/", "/dags/")) for h in re.findall(r'href="([^"]*)"', page))
    assert "<td>&gt;= 620.5</td>" in page and "<td>cuda:3</td>" in page
    assert page.count("<table>") == page.count("</table>")


def test_files_are_written_atomically_to_the_daily_folder(data, tmp_path, monkeypatch):
    paths = daily.write(data, tmp_path)
    assert paths == {"markdown": str(tmp_path / "daily" / "2026-11-10.md"),
                     "html": str(tmp_path / "daily" / "2026-11-10.html")}
    before = pathlib.Path(paths["html"]).read_bytes()
    assert oct(os.stat(paths["html"]).st_mode & 0o777) == "0o644"

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        daily.write({**data, "generated_at": NOW.isoformat().replace("01:00", "02:00")}, tmp_path)
    monkeypatch.undo()
    # the old file is intact and no temporary file is left behind
    assert pathlib.Path(paths["html"]).read_bytes() == before
    assert sorted(p.name for p in (tmp_path / "daily").iterdir()) == ["2026-11-10.html", "2026-11-10.md"]


def test_run_resolves_reports_dir_and_defaults_to_the_day_before_the_interval_end(seeded, tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "home"))
    settings = Settings(tests=TESTS, reports_dir="")
    out = daily.run(seeded, settings, data_interval_end=T + dt.timedelta(days=1), now=NOW)
    assert out["day"] == "2026-11-10"
    assert out["markdown"] == str(tmp_path / "home" / "cluster_doctor_reports" / "daily" / "2026-11-10.md")
    assert out["coverage"]["covered"] == 4 and out["failures"] == 3 and out["failing_pairs"] == 3
    json.dumps(out)  # the task's XCom
    explicit = daily.run(seeded, settings.replace(reports_dir=str(tmp_path / "r")), day="2026-11-09", now=NOW)
    assert explicit["html"] == str(tmp_path / "r" / "daily" / "2026-11-09.html")
    assert explicit["failures"] == 0


def test_today_is_partial_and_the_future_is_refused(seeded):
    data = daily.build(seeded, D, tests=TESTS, staleness_days=7, now=at(0, 9, ) + dt.timedelta(minutes=30))
    assert data["partial_day"] and data["as_of"] == at(0, 9.5).isoformat()
    # only what finished before 09:30: gpu-005's fail at 09:00, not gpu-002's at 10:00
    assert [f["node_name"] for f in data["failures"]] == ["gpu-005"]
    with pytest.raises(ValueError, match="future"):
        daily.build(seeded, D + dt.timedelta(days=1), tests=TESTS, staleness_days=7, now=at(0, 12))
    with pytest.raises(ValueError, match="day must be a date"):
        daily.parse_day("yesterday")


def test_default_day():
    assert daily.default_day(dt.datetime(2026, 11, 11, tzinfo=dt.UTC), NOW) == D
    assert daily.default_day(None, dt.datetime(2026, 11, 11, 15, tzinfo=dt.UTC)) == D


def test_empty_database_renders(store):
    data = daily.build(store, D, tests=TESTS, staleness_days=7, now=NOW)
    assert data["coverage"] == {"covered": 0, "nodes": 0, "coverage": None}
    assert "No attempt finished on this day." in daily.render_markdown(data)
    assert "</html>" in daily.render_html(data)


def test_bounded_size_at_5000_nodes(store):
    """5,000 nodes x 4 tests: 1,000 failing dl_unit pairs (all failing on D), half the nodes stale on
    gpu_health, storage_fio never run. The report stays small: rows capped, stale pairs compressed."""
    nodes = [f"gpu-{i:04d}" for i in range(1, 5001)]
    rows = []
    for i, node in enumerate(nodes):
        rows.append(a(node, "gpu_health", "pass", at(-10 if i % 2 else -1, i % 24)))
        rows.append(a(node, "nccl_loopback", "pass", at(-2), metrics={"nccl_busbw_gbps": 400 + i % 50}))
        if i % 5 == 0:
            rows.append(a(node, "dl_unit", "fail", at(0, i % 24), reason=f"GPU {i % 8} slow " + "x" * 150,
                          checks=[GEMM_FAIL, ECC_FAIL, OK_CHECK]))
        else:
            rows.append(a(node, "dl_unit", "pass", at(-1), metrics={"gemm_bf16_tflops_min": 700 + i % 30}))
    for chunk in range(0, len(rows), 2000):  # one transaction takes an advisory lock per pair: keep it small
        store.record(rows[chunk:chunk + 2000])
    data = daily.build(store, D, tests=["gpu_health", "dl_unit", "nccl_loopback", "storage_fio"],
                       staleness_days=7, now=NOW)
    md, page = daily.render_markdown(data), daily.render_html(data)
    assert data["fleet"]["nodes"] == 5000 and data["fleet"]["failing_total"] == 1000
    assert len(data["fleet"]["failing"]) == daily.DEFAULT_MAX_ROWS and len(data["failures"]) == daily.DEFAULT_MAX_ROWS
    assert data["fleet"]["counts"]["stale"] == 2500 and data["fleet"]["counts"]["never"] == 5000
    assert "… and 500 more failing pair(s)" in md and "… and 500 more failed attempt(s)" in md
    groups = {(g["test_name"], g["state"]): g for g in data["fleet"]["stale_groups"]}
    assert groups[("storage_fio", "never")]["nodes"] == "gpu-[0001-5000]"
    assert len(md.encode()) < 1_000_000 and len(page.encode()) < 1_500_000


def test_markdown_neutralises_links_and_control_characters(store):
    hostile = "[click me](javascript:alert(1)) ![img](http://x/y.png) <https://evil> \x1b[31mred\x07 `code`"
    store.record([a("gpu-001", "dl_unit", "fail", at(0, 10), reason=hostile,
                    checks=[{**GEMM_FAIL, "message": "[x](javascript:void(0))"}])])
    data = daily.build(store, D, tests=TESTS, staleness_days=7, now=NOW)
    md = daily.render_markdown(data)
    # no link or image syntax survives: every bracket is escaped, no raw autolink
    assert not re.search(r"(?<!\\)[\[\]]", md.split("\n", 2)[2]) and "<https" not in md
    assert "javascript:" not in md
    assert "\x1b" not in md and "\x07" not in md
    assert "\\[click me\\]" in md and "\\`code\\`" in md
    page = daily.render_html(data)
    assert "<script" not in page and "\x1b" not in page.replace("&#27;", "")
    assert "[click me](javascript:alert(1))" in page  # literal text in HTML (escaped, never a link)
    # the only links are the report's own: the node page and the task log in the UI
    assert re.findall(r'href="([^"]*)"', page) == [
        "/cluster-doctor/nodes/gpu-001", re.search(r'"(/dags/continuous_validation/runs/[^"]+)"', page).group(1)]


def test_unrepresentable_stored_values_do_not_fail_the_report(store, db_dsn):
    """A JSON number beyond float8 in a key metric (NumericValueOutOfRange on main), a huge check value
    and a time past year 9999: the report is written, the values are skipped and counted."""
    import psycopg
    from cluster_doctor.domain import numbers
    from psycopg.types.json import Jsonb

    store.record([a("gpu-001", "dl_unit", "pass", at(0, 3), metrics={"gemm_bf16_tflops_min": 700.0})])
    discovered(store, ["gpu-001", "gpu-002", "gpu-003", "gpu-004"], when=at(0))
    before = dict(numbers.SKIPPED_VALUES)
    # written around the Attempt boundary on purpose: rows stored before it, or by another writer
    with psycopg.connect(**db_dsn) as conn:
        conn.execute("INSERT INTO validation_history (node_name, test_name, status, started_at, finished_at, checks, "
                     "dag_id, run_id, map_index, try_number) VALUES ('gpu-002', 'dl_unit', 'fail', %s, %s, %s, 'd', "
                     "'huge-check', 0, 1)", (at(0, 3), at(0, 4), Jsonb([{**GEMM_FAIL, "value": 10 ** 400}])))
        conn.execute("INSERT INTO validation_history (node_name, test_name, status, started_at, finished_at, metrics, "
                     "dag_id, run_id, map_index, try_number) VALUES ('gpu-003', 'dl_unit', 'pass', %s, %s, %s, 'd', "
                     "'huge', 0, 1)", (at(0, 5), at(0, 6), Jsonb({"gemm_bf16_tflops_min": 10 ** 400})))
        conn.execute("INSERT INTO validation_history (node_name, test_name, status, finished_at, dag_id, run_id, "
                     "map_index, try_number) VALUES ('gpu-004', 'dl_unit', 'pass', '20000-01-01T00:00:00Z', 'd', "
                     "'future', 0, 1)")
    data = daily.build(store, D, tests=TESTS, staleness_days=7, now=NOW)
    metric = {(m["test_name"], m["metric"]): m for m in data["per_model"][0]["metrics"]}
    assert metric[("dl_unit", "gemm_bf16_tflops_min")]["n"] == 1  # the huge value is not a sample
    assert metric[("dl_unit", "gemm_bf16_tflops_min")]["median"] == 700.0
    assert numbers.SKIPPED_VALUES["metric"] >= before.get("metric", 0) + 1
    md = daily.render_markdown(data)
    assert "out of range" in md  # the huge check value
    assert "gpu-004" in md  # its unreadable result counts as not fresh, not as a crash
    assert "</html>" in daily.render_html(data)


def test_reservations_of_the_day_are_one_line_with_their_cost(seeded):
    """Taints applied and removed, and the idle GPU-hours they cost; no line when unused."""
    from cluster_doctor.store import reservations as rows

    assert daily.build(seeded, D, tests=TESTS, staleness_days=7, now=NOW)["reservations"] is None
    rows.opened(seeded.connect, "gpu-001", gpu_count=8, run_id="r1", at=at(0, 2))
    rows.closed(seeded.connect, "gpu-001", reason="validated", at=at(0, 3), free=True)
    rows.opened(seeded.connect, "gpu-002", gpu_count=8, run_id="r1", at=at(0, 4))
    data = daily.build(seeded, D, tests=TESTS, staleness_days=7, now=NOW)
    assert data["reservations"] == {"applied": 2, "released": {"validated": 1}, "open_now": 1,
                                    "idle_gpu_hours": 8.0, "idle_share": round(8 / (6 * 8 * 24), 5)}
    line = ("Reservations of overdue nodes: 2 taint(s) applied, 1 removed (1 validated), 1 reserved now; idle "
            "while reserved 8 GPU-hours (0.69% of all GPU-hours of the day)")
    assert line in daily.render_markdown(data) and line in daily.render_html(data)


def test_a_pass_with_checks_not_run_is_counted_as_incomplete_not_as_a_clean_pass(store):
    """A pass some of whose checks could not run says so in the report's headline."""
    store.record([a("gpu-101", "gpu_health", "pass", at(0, 2), incomplete=True, checks_not_run=2),
                  a("gpu-102", "gpu_health", "pass", at(0, 3)),
                  a("gpu-103", "gpu_health", "pass", at(0, 4), incomplete=True, checks_not_run=1)])
    discovered(store, ["gpu-101", "gpu-102", "gpu-103"])
    data = daily.build(store, D, tests=["gpu_health"], staleness_days=7, now=NOW)
    assert (data["fleet"]["incomplete_passes"], data["fleet"]["incomplete_nodes"]) == (2, "gpu-[101,103]")
    assert ("Passes with checks not run (incomplete, not a clean pass): 2 pair(s) on gpu-[101,103]"
            in daily.headline(data))
    store.record([a("gpu-101", "gpu_health", "pass", at(0, 5)), a("gpu-103", "gpu_health", "pass", at(0, 6))])
    clean = daily.build(store, D, tests=["gpu_health"], staleness_days=7, now=NOW)
    assert clean["fleet"]["incomplete_passes"] == 0
    assert not any(line.startswith("Passes with checks not run") for line in daily.headline(clean))


def _new_install(store):
    """A stack installed at D 23:45: discovery first saw its three nodes then; one node validated before
    midnight, one after."""
    discovered(store, nodes=["gpu-001", "gpu-002", "gpu-003"], when=at(0, 23.75))
    store.record([a("gpu-001", "gpu_health", "pass", at(0, 23.9), duration=60.0),
                  a("gpu-001", "dl_unit", "pass", at(0, 23.95), duration=60.0),
                  a("gpu-002", "gpu_health", "pass", at(1, 0.1), duration=60.0),
                  a("gpu-002", "dl_unit", "pass", at(1, 0.15), duration=60.0)])
    return at(1, 0.25)  # now: a quarter past midnight


def test_the_trend_starts_when_the_fleet_was_first_seen_and_agrees_with_that_days_report(store):
    now = _new_install(store)
    yesterday = daily.build(store, D, tests=TESTS, staleness_days=7, now=now - dt.timedelta(minutes=1))
    today = daily.build(store, D + dt.timedelta(days=1), tests=TESTS, staleness_days=7, now=now)
    trend = {t["day"]: t for t in today["coverage_trend"]}
    before = [t for day, t in trend.items() if day < D.isoformat()]
    # the 12 days before the install: no fleet, no coverage — never 0 % of today's fleet
    assert len(before) == 12 and all(t["nodes"] == 0 and t["coverage"] is None for t in before)
    # the install day, as its own report says it
    assert yesterday["coverage"] == {"covered": 1, "nodes": 3, "coverage": round(1 / 3, 4)}
    assert {k: trend[D.isoformat()][k] for k in ("covered", "nodes", "coverage")} == yesterday["coverage"]
    assert today["coverage"] == {"covered": 2, "nodes": 3, "coverage": round(2 / 3, 4)}
    section = daily.render_markdown(today).split("## Coverage trend")[1].split("\n## ")[0]
    assert section.count("| no data |") == 12 and "0.0 %" not in section
    assert "33.3 %" in section and "66.7 %" in section
    assert "no data" in daily.render_html(today)


def test_a_report_before_the_fleet_was_first_seen_says_no_data(store):
    _new_install(store)
    data = daily.build(store, D - dt.timedelta(days=1), tests=TESTS, staleness_days=7, now=at(1, 0.25))
    assert data["coverage"] == {"covered": 0, "nodes": 0, "coverage": None}
    assert "(no data)" in daily.headline(data)[0]


def test_a_run_without_a_day_reports_today_so_far_when_yesterday_has_no_data(store, tmp_path):
    now = _new_install(store)  # yesterday (D) has data: the install was at 23:45
    settings = Settings(tests=TESTS, reports_dir=str(tmp_path))
    assert daily.run(store, settings, data_interval_end=at(1), now=now)["day"] == D.isoformat()
    assert daily.report_day(D, at(0, 23.75), now) == D
    # installed after midnight: yesterday would be empty, so today so far (an empty inventory: the same)
    assert daily.report_day(D, at(1, 0.1), now) == D + dt.timedelta(days=1)
    assert daily.report_day(D, None, now) == D + dt.timedelta(days=1)
    assert daily.report_day(D, at(1, 0.1), at(0, 12)) == D  # today is D already: nothing earlier to take


def test_a_new_install_run_without_a_day_writes_a_report_of_today(store, tmp_path):
    discovered(store, nodes=["gpu-001", "gpu-002"], when=at(0, 9))
    store.record([a("gpu-001", "gpu_health", "pass", at(0, 9.5), duration=60.0)])
    settings = Settings(tests=["gpu_health"], reports_dir=str(tmp_path))
    out = daily.run(store, settings, data_interval_end=at(0), now=at(0, 10))  # a manual run at 10:00
    assert out["day"] == D.isoformat() and out["coverage"]["covered"] == 1
    assert (tmp_path / "daily" / f"{D.isoformat()}.md").read_text().count("(day in progress)") == 1


def test_failures_of_the_day_carry_the_action_and_links_to_the_node_page_and_the_log(store):
    store.record([a("gpu-004", "gpu_health", "fail", at(0, 10), reason="xid: Xid 94", action="reset_gpu",
                    checks=[{"name": "xid", "status": "fail", "device": "GPU3", "value": 94, "unit": None,
                             "threshold": "none", "message": "Xid 94", "action": "reset_gpu"}])])
    data = daily.build(store, D, tests=["gpu_health"], staleness_days=7, now=NOW, ui_base="http://127.0.0.1:8080")
    (f,) = data["failures"]
    run_id = f["run_id"]
    assert f["action"] == "reset_gpu"
    assert f["node_url"] == "http://127.0.0.1:8080/cluster-doctor/nodes/gpu-004"
    assert f["log_url"] == (f"http://127.0.0.1:8080/dags/continuous_validation/runs/{run_id}/tasks/validate.gpu_health"
                            "?try_number=1")
    md = daily.render_markdown(data)
    assert "Action: reset_gpu" in md and "node page: http://127.0.0.1:8080/cluster-doctor/nodes/gpu-004" in md
    page = daily.render_html(data)
    assert '<p class="action">Action: reset_gpu</p>' in page
    assert '<a href="http://127.0.0.1:8080/cluster-doctor/nodes/gpu-004">node page</a>' in page
    assert f'<a href="{f["log_url"]}" target="_top">task log</a>' in page


def test_the_links_point_where_the_ui_serves_them():
    from cluster_doctor.web import app as webapp

    assert daily.NODE_PAGE.startswith(webapp.MOUNT_PREFIX.lstrip("/") + "/nodes/")
    assert daily.TASK_LOG.endswith(f"/tasks/{webapp.VALIDATE_GROUP}.{{test}}")
