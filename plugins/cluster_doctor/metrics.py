"""Prometheus metrics of the fleet, computed from the results database at scrape time.

A custom collector queries ``validation_latest`` on every scrape (no counters kept in the process,
so any number of api-server workers or exporters report the same figures). When the database
cannot be reached the scrape still succeeds with ``cluster_doctor_up 0`` and a one-line warning in
the log, so Prometheus alerting sees the outage instead of a scrape error.

Served two ways:
- ``/cluster-doctor/metrics`` of the Airflow plugin (see ``cluster_doctor.webapp`` for its auth), and
- a standalone exporter: ``python -m cluster_doctor.metrics --port 9108 [--db-url URL]``.

Families and their labels are documented in docs/metrics.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import hmac
import logging
import math
import os
import re
import socketserver
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cluster_doctor import database, fleet, suites
from cluster_doctor.config import InvalidSettings, Settings

log = logging.getLogger(__name__)

PREFIX = "cluster_doctor"
# Values of the status label of cluster_doctor_validation_status: the latest executed status, or never.
STATES = ("pass", "fail", "error", "never")
TOKEN_ENV = "CLUSTER_DOCTOR_METRICS_TOKEN"
TOKEN_FILE_ENV = "CLUSTER_DOCTOR_METRICS_TOKEN_FILE"
DEFAULT_PORT = 9108
_RESERVED = {"up", "scrape_duration_seconds", "staleness_threshold_seconds", "node_info"}

DsnProvider = Callable[[Settings], Mapping[str, Any]]  # the settings name the Airflow connection
SettingsProvider = Callable[[], Settings]


def key_metric_name(key: str) -> str:
    """Prometheus family name of a suite key figure: cluster_doctor_<key>, sanitized."""
    name = re.sub(r"[^a-zA-Z0-9_]", "_", key).strip("_").lower() or "metric"
    if name in _RESERVED or name.startswith(("fleet_", "validation_")) or name[0].isdigit():
        name = f"suite_{name}"  # never shadow a fixed family
    return f"{PREFIX}_{name}"


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or exc.__class__.__name__
    return text[:300]


def build_families(summary: Mapping[str, Any], pairs: Sequence[Mapping[str, Any]],
                   tests: Sequence[str]) -> list[Metric]:
    """Every family but up/scrape duration, from FleetQueries.summary() and .pairs()."""
    out: list[Metric] = []

    def gauge(name: str, doc: str, value: float | None) -> None:
        g = GaugeMetricFamily(f"{PREFIX}_{name}", doc)
        g.add_metric([], math.nan if value is None else value)
        out.append(g)

    gauge("staleness_threshold_seconds", "Age after which a pair's last executed result is stale (setting "
          "staleness_days).", summary["staleness_s"])
    gauge("fleet_gpu_nodes", "GPU nodes known to the results database.", summary["gpu_nodes"])
    gauge("fleet_covered_nodes", "GPU nodes whose every enabled test has an executed result younger than "
          "the staleness threshold.", summary["covered_nodes"])
    gauge("fleet_coverage_ratio", "covered / GPU nodes (NaN when no node is known).", summary["coverage"])
    gauge("fleet_never_validated_nodes", "GPU nodes without any executed result on an enabled test.",
          summary["never_validated_nodes"])
    gauge("fleet_failing_nodes", "GPU nodes whose latest executed result of any enabled test is fail or "
          "error.", summary["failing_nodes"])
    gauge("fleet_stale_pairs", "Node-test pairs (enabled tests) whose last executed result is older than "
          "the threshold or missing.", summary["stale_pairs"])
    gauge("fleet_validation_gpu_hours_7d", "GPU-hours spent by validation pods in the last 7 days "
          "(duration x GPU count of pass/fail/error/preempted attempts).", summary["gpu_hours_7d"])

    labels = ["node", "test"]
    status = GaugeMetricFamily(
        f"{PREFIX}_validation_status",
        "Always 1; the status label is the pair's latest executed status (pass, fail, error), or never "
        "when the suite has not executed on the node yet.", labels=[*labels, "status"])
    executed_ts = GaugeMetricFamily(
        f"{PREFIX}_validation_last_executed_timestamp_seconds",
        "Unix time the latest executed attempt (pass/fail/error) of the pair finished.", labels=labels)
    since_ts = GaugeMetricFamily(
        f"{PREFIX}_validation_status_since_timestamp_seconds",
        "Unix time the pair's current executed status started (first attempt of the streak).", labels=labels)
    staleness = GaugeMetricFamily(
        f"{PREFIX}_validation_staleness_seconds",
        "Seconds since the latest executed attempt of the pair finished; +Inf when never executed.",
        labels=labels)
    info = GaugeMetricFamily(f"{PREFIX}_node_info", "Always 1; the node's GPU model (for joins).",
                             labels=["node", "gpu_model"])

    # One family per key figure named in the suite catalog, shared by the suites that report it.
    key_tests: dict[str, list[str]] = {}
    for test in tests:
        suite = suites.CATALOG.get(test)
        for key in (suite.key_metrics if suite else ()):
            key_tests.setdefault(key, []).append(test)
    figures = {
        key: GaugeMetricFamily(
            key_metric_name(key),
            f"Key figure {key} of the latest executed {'/'.join(ts)} result (from its metrics JSON).",
            labels=["node", "test", "gpu_model"])
        for key, ts in key_tests.items()
    }

    node_models: dict[str, str] = {}
    for pair in pairs:
        node, test = pair["node_name"], pair["test_name"]
        state = pair["status"] if pair["status"] in STATES else "never"
        # Only the current state is exposed (not a 0/1 row per state): a quarter of the series at
        # 5,000 nodes, and `== 1` / `count by (status)` alerting works the same.
        status.add_metric([node, test, state], 1.0)
        if state != "never":
            executed_ts.add_metric([node, test], pair["finished_at"].timestamp())
            if pair.get("status_since") is not None:
                since_ts.add_metric([node, test], pair["status_since"].timestamp())
        staleness.add_metric([node, test], math.inf if pair["age_s"] is None else max(0.0, pair["age_s"]))
        model = pair.get("gpu_model") or ""
        if model and node not in node_models:
            node_models[node] = model
        node_models.setdefault(node, "")
        if state != "never":
            metrics = pair.get("metrics") or {}
            for key, family in figures.items():
                if test in key_tests[key] and (value := _number(metrics.get(key))) is not None:
                    family.add_metric([node, test, model], value)
    for node, model in node_models.items():
        info.add_metric([node, model], 1.0)
    out += [status, executed_ts, since_ts, staleness, info, *figures.values()]
    return out


class ClusterDoctorCollector(Collector):
    """Queries the results database on every collect(); never raises."""

    def __init__(
        self,
        dsn_provider: DsnProvider,
        settings_provider: SettingsProvider = Settings.load,
        *,
        clock: Callable[[], dt.datetime] = fleet.utcnow,
    ):
        self.dsn_provider = dsn_provider
        self.settings_provider = settings_provider
        self.clock = clock

    def describe(self) -> Iterable[Metric]:
        # Nothing up front: registering must not query the database (families depend on the catalog).
        return []

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        try:
            settings = self.settings_provider()
            dsn = self.dsn_provider(settings)
            with fleet.open_for(settings, dsn, now=self.clock(), application_name="cluster-doctor-metrics") as queries:
                summary = queries.summary()
                pairs = queries.pairs()
            families = build_families(summary, pairs, queries.tests)
            up = 1.0
        except Exception as exc:  # any failure is a down scrape with a one-line reason, never a 500
            log.warning("cluster doctor metrics: results database not readable: %s", _one_line(exc))
            families, up = [], 0.0
        yield from families
        g = GaugeMetricFamily(f"{PREFIX}_up", "1 when the results database answered this scrape, else 0.")
        g.add_metric([], up)
        yield g
        d = GaugeMetricFamily(f"{PREFIX}_scrape_duration_seconds",
                              "Time this scrape spent querying and building.")
        d.add_metric([], time.perf_counter() - started)
        yield d


def make_registry(collector: Collector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def render(registry: CollectorRegistry, accept: str | None = None) -> tuple[bytes, str]:
    """(body, content type) in the format the scraper asked for (Prometheus text or OpenMetrics)."""
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry), content_type


# ---------------------------------------------------------------------------------------- auth
def configured_token(env: Mapping[str, str] | None = None) -> str | None:
    """The scrape token from $CLUSTER_DOCTOR_METRICS_TOKEN or the file $CLUSTER_DOCTOR_METRICS_TOKEN_FILE.

    Read on every request so a rotated token file takes effect without a restart."""
    env = os.environ if env is None else env
    if env.get(TOKEN_ENV):
        return env[TOKEN_ENV].strip() or None
    path = env.get(TOKEN_FILE_ENV)
    if path:
        try:
            with open(path, encoding="utf-8") as fh:
                return fh.read().strip() or None
        except OSError as exc:
            log.warning("cannot read the metrics token file %s: %s", path, exc)
    return None


def token_matches(authorization: str | None, token: str | None) -> bool:
    if not token or not authorization:
        return False
    scheme, _, credentials = authorization.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(credentials.strip().encode(), token.encode())


# ---------------------------------------------------------------------------------------- exporter
class _ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature of the base class
        pass  # one line per scrape is noise; failures are logged by the collector


def exporter_app(registry: CollectorRegistry, token: Callable[[], str | None] = configured_token):
    """WSGI app: GET /metrics (bearer token checked when one is configured), / a pointer to it."""

    def app(environ, start_response):
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            expected = token()
            if expected and not token_matches(environ.get("HTTP_AUTHORIZATION"), expected):
                start_response("401 Unauthorized", [("Content-Type", "text/plain"),
                                                    ("WWW-Authenticate", 'Bearer realm="cluster-doctor"')])
                return [b"bearer token required\n"]
            body, content_type = render(registry, environ.get("HTTP_ACCEPT"))
            headers = [("Content-Type", content_type)]
            if "gzip" in environ.get("HTTP_ACCEPT_ENCODING", ""):
                # ~10x smaller at 5,000 nodes; Prometheus asks for gzip by default
                body = gzip.compress(body, compresslevel=5)
                headers.append(("Content-Encoding", "gzip"))
            headers.append(("Content-Length", str(len(body))))
            start_response("200 OK", headers)
            return [body]
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [b'<html><body><a href="metrics">Cluster Doctor metrics</a></body></html>\n']
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found\n"]

    return app


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m cluster_doctor.metrics",
        description="Prometheus exporter of Cluster Doctor's results database (plain HTTP, /metrics).")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"listen port (default {DEFAULT_PORT})")
    parser.add_argument("--host", default="0.0.0.0",
                        help="listen address (default 0.0.0.0, so Prometheus in the cluster can reach it)")
    parser.add_argument("--db-url", default=None,
                        help="postgresql://user:pass@host:port/db (default: $AIRFLOW_CONN_VALIDATION_DB, else "
                             "the embedded PostgreSQL of the demo)")
    parser.add_argument("--once", action="store_true",
                        help="print one scrape to stdout and exit (1 when the database is down)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Exit codes: 0 ok, 1 database down (--once), 2 bad arguments or settings."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = Settings.load()  # CLUSTER_DOCTOR_* environment: tests, staleness_days
        dsn, source = database.resolve_cli_dsn(args.db_url)
    except (InvalidSettings, database.InvalidDatabaseUrl) as exc:
        print(f"error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except database.DatabaseUnavailable as exc:  # only the embedded fallback can fail here
        print(f"error: {_one_line(exc)}", file=sys.stderr)
        return 1
    registry = make_registry(ClusterDoctorCollector(lambda _settings: dsn, lambda: settings))
    if args.once:
        body, _ = render(registry)
        sys.stdout.write(body.decode())
        return 0 if f"\n{PREFIX}_up 1.0\n" in "\n" + body.decode() else 1
    try:
        server = make_server(args.host, args.port, exporter_app(registry), server_class=_ThreadingWSGIServer,
                             handler_class=_QuietHandler)
    except OSError as exc:
        print(f"error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    log.info("serving http://%s:%d/metrics from %s (%s)%s", args.host, server.server_port,
             database.describe(dsn), source, "; bearer token required" if configured_token() else "")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
