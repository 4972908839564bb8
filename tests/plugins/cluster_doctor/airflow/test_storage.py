"""Where results wait and reports land, whatever the executor: the spool and report locations as paths
or ObjectStoragePath URLs, the executor warning of discover (against the Kubernetes API emulator), and
what the summary, the verdict, the daily report and the metrics say about waiting results."""

from __future__ import annotations

import datetime as dt
import json
import pathlib

import pytest
from airflow.sdk import ObjectStoragePath
from airflow.sdk.exceptions import AirflowFailException
from cluster_doctor.airflow import storage, tasks
from cluster_doctor.domain.attempts import Attempt
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.payloads import AttemptLine, Plan, Recorded
from cluster_doctor.reports import ctrf, daily, metrics
from cluster_doctor.store import files, spool

NS = "cluster-doctor"
PVC = "cluster-doctor-results"
NOW = dt.datetime.now(dt.UTC).replace(microsecond=0)


pytestmark = pytest.mark.emulator(pvc=True)


@pytest.fixture
def cluster(validation_cluster):
    validation_cluster.add_gpu_node("gpu-001", gpus=8)
    return validation_cluster


def an_attempt(node="gpu-001", minutes_ago=30, run="r1", now=None):
    finished = (now or NOW) - dt.timedelta(minutes=minutes_ago)
    return Attempt.from_dict({"node_name": node, "test_name": "gpu_health", "status": "pass",
                              "finished_at": finished.isoformat(), "dag_id": "continuous_validation",
                              "run_id": run, "try_number": 1})


# ---------------------------------------------------------------------------- locations
def test_a_path_stays_a_path_and_a_url_becomes_an_object_storage_path(tmp_path):
    assert storage.location(str(tmp_path / "spool")) == tmp_path / "spool"
    remote = storage.location("s3://aws_default@bucket/cluster-doctor/spool")
    assert isinstance(remote, ObjectStoragePath) and remote.protocol == "s3"
    assert storage.spool(Settings(spool_dir=f"file://{tmp_path}/s")).directory == ObjectStoragePath(f"file://{tmp_path}/s")
    assert storage.spool(Settings(), env={"AIRFLOW_HOME": "/opt/airflow"}).directory == \
        pathlib.Path("/opt/airflow/cluster_doctor/spool")
    assert storage.reports_dir(Settings(reports_dir="gs://bucket/reports")).protocol in ("gs", "gcs")


@pytest.mark.parametrize("bad", ["relative/spool", "spool", "/x\nkind: Secret"])
def test_a_location_that_is_neither_a_path_nor_a_url_is_refused_in_one_line(bad):
    with pytest.raises(ValueError, match="setting spool_dir") as exc:
        Settings(spool_dir=bad)
    assert "\n" not in str(exc.value)


def test_reports_are_written_atomically_to_an_object_store(tmp_path):
    reports = ObjectStoragePath(f"file://{tmp_path}/bucket/reports")
    path = ctrf.write_ctrf({"results": {"ok": 1}}, reports, "continuous_validation", "manual__2026-11-25T10:00:00+00:00")
    assert isinstance(path, ObjectStoragePath)
    assert json.loads(path.read_bytes()) == {"results": {"ok": 1}}
    folder = tmp_path / "bucket" / "reports" / "continuous_validation"
    written = [p for p in folder.rglob("*") if p.is_file()]
    assert [p.name for p in written] == ["ctrf.json"]  # no temporary sibling left behind
    # one helper for both kinds of location: a local file keeps its mode and fsync'd rename
    local = files.write_atomic(tmp_path / "local" / "a.txt", "x", mode=0o640)
    assert local.read_text() == "x" and oct(local.stat().st_mode & 0o777) == "0o640"


# ---------------------------------------------------------------------------- the executor warning
@pytest.mark.parametrize("executor, warns", [
    (["LocalExecutor"], False),
    (["CeleryExecutor"], True),
    (["airflow.providers.cncf.kubernetes.executors.kubernetes_executor.KubernetesExecutor"], True),
    (["LocalExecutor", "gpu:airflow.providers.celery.executors.celery_executor.CeleryExecutor"], True),
])
def test_the_executor_warning_depends_on_the_executor_and_a_default_spool(executor, warns):
    assert bool(storage.executor_warning(Settings(), executor)) is warns
    assert storage.executor_warning(Settings(spool_dir="s3://aws_default@b/spool"), executor) is None


def test_discover_warns_in_its_log_and_the_verdict_when_celery_has_a_per_host_spool(cluster, store, caplog):
    settings = Settings(tests=["gpu_health"])  # spool_dir empty: the per-host default
    found = tasks.discover({}, settings, cluster.core_v1(), executors=["CeleryExecutor"])
    (warning,) = found.warnings
    assert "CeleryExecutor" in warning and "per-host default" in warning and "CLUSTER_DOCTOR_SPOOL_DIR" in warning
    assert warning in caplog.text
    plan = Plan(planned_at=NOW, dry_run=True, pairs=[])
    summary = tasks.summarize(found, plan, Recorded(), store)
    assert summary.warnings == [warning]
    caplog.clear()
    tasks.verdict(summary)  # a warning alone does not fail the run, but the verdict says it
    assert warning in caplog.text
    bad = summary.model_copy(update={"attempts": [AttemptLine(node_name="gpu-001", test_name="gpu_health",
                                                              status="fail", reason="ecc")]})
    with pytest.raises(AirflowFailException, match="CeleryExecutor runs tasks on several hosts"):
        tasks.verdict(bad)
    shared = tasks.discover({}, settings.replace(spool_dir="/shared/spool"), cluster.core_v1(),
                            executors=["CeleryExecutor"])
    assert shared.warnings == []


def test_the_verdict_and_summarize_say_when_results_wait(cluster, store, tmp_path, caplog):
    # ages against the clock now, not the module's import time: a long session runs this much later
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    box = spool.Spool(tmp_path / "spool")
    box.put([an_attempt(minutes_ago=90, now=now), an_attempt("gpu-002", minutes_ago=30, now=now)])
    settings = Settings(tests=["gpu_health"], spool_dir=str(box.directory))
    found = tasks.discover({}, settings, cluster.core_v1(), executors=["CeleryExecutor"])
    summary = tasks.summarize(found, Plan(planned_at=now, dry_run=True, pairs=[]), Recorded(), store)
    assert summary.spool.waiting == 2 and summary.spool.oldest_at == now - dt.timedelta(minutes=90)
    assert "2 attempt(s) wait in the spool" in summary.spool.line
    tasks.verdict(summary)
    assert "2 attempt(s) wait in the spool" in caplog.text and "oldest finished 1 h 30 min ago" in caplog.text
    assert "2 attempt(s) wait in the spool" in tasks.unrecorded(found)
    # the CTRF report went to the settings' reports location, not to the spool
    assert summary.ctrf_path is None or "spool" not in summary.ctrf_path


# ---------------------------------------------------------------------------- metrics and the daily report
def test_metrics_show_spooled_attempts_and_the_oldest_age_even_with_the_database_down(tmp_path):
    box = spool.Spool(tmp_path)
    box.put([an_attempt(minutes_ago=60), an_attempt("gpu-002", minutes_ago=10)])
    (tmp_path / "20261101T000000000000Z-x.json.rejected").write_text("{")

    def no_database(_settings):
        raise RuntimeError("results database down")

    collector = metrics.ClusterDoctorCollector(no_database, lambda: Settings(), clock=lambda: NOW,
                                               spool_provider=lambda s: box.status())
    body, _ = metrics.render(metrics.make_registry(collector))
    text = body.decode()
    assert "cluster_doctor_up 0.0" in text
    assert "cluster_doctor_spooled_attempts 2.0" in text
    assert "cluster_doctor_spool_oldest_age_seconds 3600.0" in text
    assert "cluster_doctor_spool_rejected_attempts 1.0" in text
    assert "cluster_doctor_spool_readable 1.0" in text
    unreadable = metrics.ClusterDoctorCollector(no_database, lambda: Settings(), clock=lambda: NOW,
                                                spool_provider=lambda s: spool.Spool(tmp_path / "gone").status())
    assert "cluster_doctor_spooled_attempts 0.0" in metrics.render(metrics.make_registry(unreadable))[0].decode()


def test_the_daily_report_shows_what_waits_in_the_spool(store, tmp_path):
    box = spool.Spool(tmp_path / "spool")
    box.put([an_attempt(minutes_ago=120)])
    reports = ObjectStoragePath(f"file://{tmp_path}/bucket/reports")
    out = daily.run(store, Settings(tests=["gpu_health"]), now=NOW, reports_dir=reports, spool=box.status())
    assert out["spooled"] == 1
    markdown = (tmp_path / "bucket" / "reports" / "daily" / f"{out['day']}.md").read_text()
    assert "Results waiting: 1 attempt(s) wait in the spool" in markdown
    html = pathlib.Path(out["html"].removeprefix("file://")).read_text()
    assert "1 attempt(s) wait in the spool" in html
