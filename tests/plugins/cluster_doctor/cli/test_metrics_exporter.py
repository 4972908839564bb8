"""cluster_doctor.cli.metrics_exporter: `cluster-doctor metrics`, the standalone exporter, over real HTTP."""

from __future__ import annotations

import contextlib
import gzip
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from cluster_doctor.cli import metrics_exporter
from cluster_doctor.reports import metrics

from tests.conftest import dsn_to_url
from tests.support.metrics import samples, value



def test_exporter_once(small_db, capsys, monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_VALIDATION_DB", raising=False)
    assert metrics_exporter.main(["--once", "--db-url", dsn_to_url(small_db)]) == 0
    s = samples(capsys.readouterr().out)
    assert value(s, "cluster_doctor_up") == 1 and value(s, "cluster_doctor_fleet_gpu_nodes") == 8
    assert metrics_exporter.main(["--once", "--db-url", dsn_to_url({**small_db, "port": 1})]) == 1
    assert value(samples(capsys.readouterr().out), "cluster_doctor_up") == 0
    assert metrics_exporter.main(["--once", "--db-url", "mysql://nope"]) == 2
    assert "postgresql://" in capsys.readouterr().err


def _free_port() -> int:
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(url: str, headers: dict | None = None) -> tuple[int, dict, bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_standalone_exporter_over_http(small_db):
    """`cluster-doctor metrics` as Prometheus would scrape it: gzip, bearer token."""
    port = _free_port()
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
           metrics.TOKEN_ENV: "exporter-token", "CLUSTER_DOCTOR_TESTS": "gpu_health,nccl_loopback"}
    env.pop("AIRFLOW_CONN_VALIDATION_DB", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "cluster_doctor", "metrics", "--host", "127.0.0.1", "--port", str(port),
         "--db-url", dsn_to_url(small_db)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        deadline = time.monotonic() + 20
        while True:
            try:
                status, _, _ = _get(url)
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail(f"exporter did not start: {proc.stdout.read().decode() if proc.poll() is not None else ''}")
                time.sleep(0.1)
        assert status == 401
        status, headers, body = _get(url, {"Authorization": "Bearer exporter-token", "Accept-Encoding": "gzip"})
        assert status == 200 and headers["Content-Encoding"] == "gzip"
        s = samples(gzip.decompress(body).decode())
        assert value(s, "cluster_doctor_up") == 1
        # CLUSTER_DOCTOR_TESTS narrows the enabled suites: gpu-010 (gpu_health only) is covered now
        assert value(s, "cluster_doctor_fleet_covered_nodes") >= 1
        assert {dict(l)["test"] for n, l in s if n == "cluster_doctor_validation_status"} == \
            {"gpu_health", "nccl_loopback"}
        assert _get(f"http://127.0.0.1:{port}/nope")[0] == 404
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def test_exporter_binds_loopback_by_default_and_warns_without_a_token(small_db):
    assert metrics_exporter.build_parser().parse_args([]).host == "127.0.0.1"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", metrics.TOKEN_ENV, metrics.TOKEN_FILE_ENV)}
    for host, token, warned in (("0.0.0.0", None, True), ("0.0.0.0", "t0ken", False), ("127.0.0.1", None, False)):
        proc = subprocess.Popen(
            [sys.executable, "-m", "cluster_doctor", "metrics", "--host", host, "--port", str(_free_port()),
             "--db-url", dsn_to_url(small_db)],
            env={**env, **({metrics.TOKEN_ENV: token} if token else {})}, stderr=subprocess.PIPE, text=True)
        try:
            first = proc.stderr.readline()  # the warning comes before serving; else the "serving" log line
        finally:
            proc.terminate()
            proc.wait(timeout=10)
            proc.stderr.close()
        assert ("without a token" in first) is warned, (host, token, first)
        if warned:
            assert first.startswith("warning: serving metrics on 0.0.0.0") and first.count("\n") == 1
