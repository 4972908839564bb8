"""The daily report shows a missing baseline once per node pool, with its action, near its top."""

import datetime as dt

from cluster_doctor.reports import daily

NOT_JUDGED = [{"name": "baseline", "status": "skip", "code": "BASELINE_MISSING"}]


def test_the_report_names_each_node_pool_without_a_baseline_once(store):
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    at = now - dt.timedelta(minutes=5)
    store.record([{"node_name": n, "test_name": "nvbandwidth", "status": "error", "run_id": f"r-{n}",
                   "gpu_model": "NVIDIA-H200-NVL", "started_at": at, "finished_at": at, "checks": NOT_JUDGED}
                  for n in ("gpu-001", "gpu-002", "gpu-003", "gpu-004")])
    data = daily.build(store, now.date(), tests=["nvbandwidth"], staleness_days=7, now=now)
    assert [(m["gpu_model"], m["nodes"]) for m in data["missing_baselines"]] == [("NVIDIA-H200-NVL", 4)]
    text = daily.render_markdown(data)
    assert text.count("no baseline for NVIDIA-H200-NVL: 4 node(s)") == 1
    assert "## Configuration: no baseline" in text and "add the GPU model to baselines.yaml" in text
    assert "no baseline for NVIDIA-H200-NVL" in daily.render_html(data)
