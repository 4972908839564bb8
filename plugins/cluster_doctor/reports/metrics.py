"""Prometheus metrics of the fleet, computed from the results database at scrape time.

A custom collector queries ``validation_latest`` on every scrape (no counters kept in the process,
so any number of api-server workers or exporters report the same figures). When the database
cannot be reached the scrape still succeeds with ``cluster_doctor_up 0`` and a one-line warning in
the log, so Prometheus alerting sees the outage instead of a scrape error.

Exposition is prometheus_client's: its WSGI app (``make_wsgi_app``: content negotiation with
OpenMetrics, gzip, ``name[]`` filtering) serves both
- ``/cluster-doctor/metrics`` of the Airflow plugin, behind Airflow's own login (``cluster_doctor.web.app``),
  called from a worker thread (the library's ASGI app would collect on the api-server's event loop), and
- the standalone exporter ``cluster-doctor metrics`` (``cluster_doctor.cli.metrics_exporter``), wrapped
  by ``exporter_app`` for its optional bearer token.

Families and their labels are documented in docs/metrics.md.
"""

from __future__ import annotations

import collections
import datetime as dt
import hmac
import logging
import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cluster_doctor.domain import actions, numbers, suites
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.errors import one_line
from cluster_doctor.domain.status import EXECUTED, FAILING
from cluster_doctor.store import database, fleet, reservations

log = logging.getLogger(__name__)

PREFIX = "cluster_doctor"
# Values of the status label of cluster_doctor_validation_status: the latest executed status, or never.
STATES = (*EXECUTED, "never")
TOKEN_ENV = "CLUSTER_DOCTOR_METRICS_TOKEN"
TOKEN_FILE_ENV = "CLUSTER_DOCTOR_METRICS_TOKEN_FILE"
DEFAULT_PORT = 9108
DEFAULT_HOST = "127.0.0.1"
DEFAULT_CACHE_TTL_S = 10.0
_RESERVED = {"up", "scrape_duration_seconds", "staleness_threshold_seconds", "node_info", "skipped_values",
             "skipped_values_total"}

ConnectorProvider = Callable[[Settings], database.Connector]  # the settings name the Airflow connection
SettingsProvider = Callable[[], Settings]
SpoolProvider = Callable[[Settings], Any]  # the settings' attempt spool's SpoolStatus (store.spool)


def key_metric_name(key: str) -> str:
    """Prometheus family name of a suite key figure: cluster_doctor_<key>, sanitized."""
    name = re.sub(r"[^a-zA-Z0-9_]", "_", key).strip("_").lower() or "metric"
    if name in _RESERVED or name.startswith(("fleet_", "validation_")) or name[0].isdigit():
        name = f"suite_{name}"  # never shadow a fixed family
    return f"{PREFIX}_{name}"


def build_families(summary: Mapping[str, Any], pairs: Sequence[Mapping[str, Any]],
                   tests: Sequence[str]) -> list[Metric]:
    """Every family but up/scrape duration/skipped values, from FleetQueries.summary() and .pairs().

    Cardinality at 5,000 nodes x 4 tests: per pair its status and staleness (the alerting signals),
    the status start only for pairs that are not passing (where "since when" matters), the key
    figures per node, and the fleet aggregates; about 75,000 series."""
    out: list[Metric] = []

    def gauge(name: str, doc: str, value: float | None) -> None:
        g = GaugeMetricFamily(f"{PREFIX}_{name}", doc)
        g.add_metric([], math.nan if value is None else value)
        out.append(g)

    gauge("staleness_threshold_seconds", "Age after which a pair's last executed result is stale (setting "
          "staleness_days).", summary["staleness_s"])
    gauge("fleet_gpu_nodes", "GPU nodes of the inventory: every node discovery has seen, attempted or not (one "
          "that left counted for the grace period).", summary["gpu_nodes"])
    by_state = GaugeMetricFamily(f"{PREFIX}_fleet_nodes_by_eligibility", "GPU nodes of the inventory by what the "
                                 "last discovery saw: free, or why not (busy, cordoned, not ready, tainted ...), "
                                 "unknown (known from results only) or gone (left the cluster).",
                                 labels=["eligibility"])
    for state, count in (summary.get("nodes_by_eligibility") or {}).items():
        by_state.add_metric([state], count)
    out.append(by_state)
    gauge("fleet_covered_nodes", "GPU nodes whose every enabled test has an executed result younger than "
          "the staleness threshold.", summary["covered_nodes"])
    gauge("fleet_coverage_ratio", "covered / GPU nodes (NaN when no node is known).", summary["coverage"])
    gauge("fleet_never_validated_nodes", "GPU nodes without any executed result on an enabled test.",
          summary["never_validated_nodes"])
    gauge("fleet_failing_nodes", "GPU nodes whose latest executed result of any enabled test is fail or "
          "error.", summary["failing_nodes"])
    gauge("fleet_stale_pairs", "Node-test pairs (enabled tests) whose last executed result is older than "
          "the threshold or missing.", summary["stale_pairs"])
    gauge("fleet_pair_coverage_ratio", "Coverage SLO now: share of node-test pairs (enabled tests) with an "
          "executed result younger than the staleness threshold.", summary.get("pair_coverage"))
    gauge("fleet_pair_coverage_ratio_30d", "Coverage SLO over the last 30 days: mean of the daily samples "
          "(end of each UTC day) of the pair coverage of today's fleet.", summary.get("pair_coverage_30d"))
    gauge("fleet_worst_staleness_seconds", "Age of the oldest pair's last executed result; +Inf when a "
          "pair never executed.", summary.get("worst_staleness_s"))
    gauge("fleet_validation_gpu_hours_7d", "GPU-hours spent by validation pods in the last 7 days "
          "(duration x GPU count of pass/fail/error/preempted attempts).", summary["gpu_hours_7d"])

    status, since_ts, staleness, info = _pair_families()
    action, not_run = _judgement_families()
    key_tests = _key_tests(tests)
    figures = {key: _figure_family(key, ts) for key, ts in key_tests.items()}

    node_models: dict[str, str] = {}
    for pair in pairs:
        node, test = pair["node_name"], pair["test_name"]
        state = pair["status"] if pair["status"] in STATES else "never"
        # Only the current state is exposed (not a 0/1 row per state): a quarter of the series at
        # 5,000 nodes, and `== 1` / `count by (status)` alerting works the same.
        status.add_metric([node, test, state], 1.0)
        if state in FAILING and pair.get("since_ts") is not None:
            since_ts.add_metric([node, test], pair["since_ts"])
        _add_judgement(action, not_run, pair, state)
        staleness.add_metric([node, test], math.inf if pair["age_s"] is None else pair["age_s"])
        if not node_models.get(node):
            node_models[node] = pair.get("gpu_model") or ""
        if state != "never":
            for key, value in (pair.get("metrics") or {}).items():
                family = figures.get(key)
                if family is not None and test in key_tests[key]:
                    family.add_metric([node, test], value)
    for node, model in node_models.items():
        info.add_metric([node, model], 1.0)
    out += [status, since_ts, staleness, info, action, not_run, *figures.values()]
    return out


def _judgement_families() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
    # Sparse on purpose (a series only where there is something to do or something was not checked):
    # at 5,000 nodes a series per pair each would add 40,000 series for mostly "none" and 0.
    labels = ["node", "test"]
    return (
        GaugeMetricFamily(
            f"{PREFIX}_validation_action",
            "Always 1; the recommended action of the pair's latest executed result (retest, check_storage, "
            "check_fabric, reset_gpu, reboot, drain_and_service, or unknown when not recorded); only for pairs "
            "whose action is not none.", labels=[*labels, "action"]),
        GaugeMetricFamily(
            f"{PREFIX}_validation_checks_not_run",
            "Checks that could not run in the pair's latest executed result (its pass is incomplete, not a "
            "clean pass); only for pairs where some did not run.", labels=labels),
    )


def _add_judgement(action: GaugeMetricFamily, not_run: GaugeMetricFamily, pair: Mapping[str, Any],
                   state: str) -> None:
    if state == "never":
        return
    node, test = pair["node_name"], pair["test_name"]
    token = actions.shown(pair.get("action"))
    if token != "none":
        action.add_metric([node, test, token], 1.0)
    count = pair.get("checks_not_run") or 0
    if count > 0 or pair.get("incomplete"):
        not_run.add_metric([node, test], float(count))


def _pair_families() -> tuple[GaugeMetricFamily, ...]:
    labels = ["node", "test"]
    return (
        GaugeMetricFamily(
            f"{PREFIX}_validation_status",
            "Always 1; the status label is the pair's latest executed status (pass, fail, error), or never "
            "when the suite has not executed on the node yet.", labels=[*labels, "status"]),
        GaugeMetricFamily(
            f"{PREFIX}_validation_status_since_timestamp_seconds",
            "Unix time the pair's current executed status started (first attempt of the streak); only for "
            "pairs whose status is fail or error.", labels=labels),
        GaugeMetricFamily(
            f"{PREFIX}_validation_staleness_seconds",
            "Seconds since the latest executed attempt of the pair finished; +Inf when never executed.", labels=labels),
        GaugeMetricFamily(f"{PREFIX}_node_info", "Always 1; the node's GPU model (for joins).",
                          labels=["node", "gpu_model"]),
    )


def _key_tests(tests: Iterable[str]) -> dict[str, list[str]]:
    """Key figure -> the tests that report it (one family per key figure of the suite catalog)."""
    key_tests: dict[str, list[str]] = {}
    for test in tests:
        suite = suites.CATALOG.get(test)
        for key in (suite.key_metrics if suite else ()):
            key_tests.setdefault(key, []).append(test)
    return key_tests


def _figure_family(key: str, tests: Sequence[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(
        key_metric_name(key),
        f"Key figure {key} of the node's latest executed {'/'.join(tests)} result (join cluster_doctor_node_info "
        "on node for the GPU model).", labels=["node", "test"])


def reservation_family(idle_gpu_hours: float | None) -> Metric:
    """What reserving overdue nodes (setting reservation, issue 21 §2) has cost: GPU-hours reserved nodes
    stood idle waiting for their validation, over every released reservation (``node_reservations``)."""
    family = CounterMetricFamily(
        f"{PREFIX}_reservation_idle_gpu_hours",
        "GPU-hours reserved nodes stood idle, tainted for validation, summed over every released reservation.")
    if idle_gpu_hours is not None:
        family.add_metric([], idle_gpu_hours)
    return family


def peer_family(counts: Mapping[str, int] | None) -> Metric:
    """Peer tests (issue 23 §2): peer-tested nodes by verdict, suspects (a failed peer test not yet blamed
    on either side) apart from blamed nodes; every verdict 0 while peer tests are off. ``counts`` None:
    the family without samples (describe)."""
    family = GaugeMetricFamily(
        f"{PREFIX}_fleet_peer_nodes", "Peer-tested GPU nodes by the verdict of their peer tests: pass, fail "
        "(blamed by triangulation) or suspect (a failed peer test not yet blamed on either side).",
        labels=["verdict"])
    if counts is not None:
        for verdict in ("pass", "fail", "suspect"):
            family.add_metric([verdict], float(counts.get(verdict, 0)))
    return family


def skipped_family() -> Metric:
    family = CounterMetricFamily(
        f"{PREFIX}_skipped_values", "Stored values left out of pages, reports and scrapes because they cannot "
        "be represented (a number beyond float range or not finite, a time past year 9999), by kind; since "
        "the process started.", labels=["kind"])
    for kind in ("metric", "timestamp", *sorted(set(numbers.SKIPPED_VALUES) - {"metric", "timestamp"})):
        family.add_metric([kind], float(numbers.SKIPPED_VALUES.get(kind, 0)))
    return family


def spool_families(status: Any, now: dt.datetime) -> list[Metric]:
    """The attempt spool: results the database has not taken yet. Read from the spool itself, not the
    database, so they are there when the database is down (when they matter most). ``status`` None:
    the families without samples (describe)."""
    specs = (
        ("spool_readable", "1 when the attempt spool (setting spool_dir) could be listed at this scrape, else 0."),
        ("spooled_attempts", "Attempts waiting in the spool for the results database (recorded by the next "
                             "record task that reaches it)."),
        ("spool_oldest_age_seconds", "Age of the oldest waiting attempt (since it finished); 0 when none waits."),
        ("spool_rejected_attempts", "Spooled attempts set aside as *.rejected (unreadable or refused by the "
                                    "database): a person decides."),
    )
    families = [GaugeMetricFamily(f"{PREFIX}_{name}", doc) for name, doc in specs]
    if status is not None:
        readable = status.error is None
        values = (1.0 if readable else 0.0, status.waiting, status.age_s(now) or 0.0, status.rejected)
        for family, value in zip(families, values) if readable else zip(families[:1], values[:1]):
            family.add_metric([], float(value))
    return families


class ClusterDoctorCollector(Collector):
    """Queries the results database on collect(); never raises.

    The collected families are kept for ``cache_ttl_s`` seconds (per settings), so scrapers that
    poll together (a Prometheus HA pair, a UI refresh) cost the database one query set."""

    def __init__(
        self,
        connector_provider: ConnectorProvider,
        settings_provider: SettingsProvider = Settings.load,
        *,
        clock: Callable[[], dt.datetime] = fleet.utcnow,
        cache_ttl_s: float = DEFAULT_CACHE_TTL_S,
        spool_provider: SpoolProvider | None = None,
    ):
        self.connector_provider = connector_provider
        self.settings_provider = settings_provider
        self.spool_provider = spool_provider
        self.clock = clock
        self.cache_ttl_s = cache_ttl_s
        self._cache: tuple[Any, float, list[Metric]] | None = None
        self._lock = threading.Lock()

    def describe(self) -> Iterable[Metric]:
        """Every family a scrape may hold, without samples, from the code alone (registering must not
        query the database): the registry learns the names, so the library's ``name[]`` filter works."""
        yield from build_families(collections.defaultdict(lambda: None), [], list(suites.CATALOG))
        yield reservation_family(None)
        yield peer_family(None)
        if self.spool_provider is not None:
            yield from spool_families(None, self.clock())
        yield from _self_families(0.0, 0.0)

    def _families(self) -> list[Metric]:
        settings = self.settings_provider()
        connect = self.connector_provider(settings)
        key = (str(connect), tuple(settings.tests), settings.staleness_days, settings.peer_tests,
               settings.peer_cadence_days)
        with self._lock:  # concurrent scrapes wait for one query set instead of running their own
            cached = self._cache
            if cached and cached[0] == key and time.monotonic() - cached[1] < self.cache_ttl_s:
                return cached[2]
            with fleet.open_for(settings, connect, now=self.clock(),
                                application_name="cluster-doctor-metrics") as queries:
                summary = queries.summary()
                pairs = queries.pairs()
                peer_counts = queries.peer_counts()
            families = build_families(summary, pairs, queries.tests)
            families.append(peer_family(peer_counts))
            families.append(reservation_family(reservations.idle_total(connect)))
            self._cache = (key, time.monotonic(), families) if self.cache_ttl_s > 0 else None
            return families

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        try:
            families, up = self._families(), 1.0
        except Exception as exc:  # any failure is a down scrape with a one-line reason, never a 500
            log.warning("cluster doctor metrics: results database not readable: %s", one_line(exc, 300))
            families, up = [], 0.0
        yield from families
        yield from self._spool_families()
        yield from _self_families(up, time.perf_counter() - started)

    def _spool_families(self) -> list[Metric]:
        if self.spool_provider is None:
            return []
        try:
            status = self.spool_provider(self.settings_provider())
        except Exception as exc:  # noqa: BLE001 - settings or the location unusable: a readable=0 sample
            log.warning("cluster doctor metrics: attempt spool not readable: %s", one_line(exc, 300))
            return spool_families(_Unreadable(), self.clock())
        return spool_families(status, self.clock())


class _Unreadable:
    error = "unreadable"
    waiting = rejected = 0

    def age_s(self, now: dt.datetime) -> None:
        return None


def _self_families(up: float, duration_s: float) -> list[Metric]:
    g = GaugeMetricFamily(f"{PREFIX}_up", "1 when the results database answered this scrape, else 0.")
    g.add_metric([], up)
    d = GaugeMetricFamily(f"{PREFIX}_scrape_duration_seconds", "Time this scrape spent querying and building.")
    d.add_metric([], duration_s)
    return [g, skipped_family(), d]


def make_registry(collector: Collector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def render(registry: CollectorRegistry, accept: str | None = None) -> tuple[bytes, str]:
    """(body, content type) of one scrape in the format ``accept`` asks for (Prometheus text, or
    OpenMetrics), by the library's encoder."""
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry), content_type


def metrics_app(registry: CollectorRegistry):
    """prometheus_client's WSGI app over ``registry`` (any path; gzip when accepted, OpenMetrics when
    asked, ``name[]`` filter), its answers marked as varying with the format and encoding asked for."""
    library = make_wsgi_app(registry)

    def app(environ, start_response):
        def start(status, headers, exc_info=None):
            headers = [*headers, ("Vary", "Accept, Accept-Encoding")]
            return start_response(status, headers) if exc_info is None else start_response(status, headers, exc_info)

        return library(environ, start)

    return app


def wsgi_get(app, *, accept: str | None = None, accept_encoding: str | None = None,
             query: str = "") -> tuple[int, list[tuple[str, str]], bytes]:
    """(status, headers, body) of a GET /metrics answered by the WSGI ``app``, for a server that is not
    WSGI: the plugin's FastAPI route, which runs it in a worker thread."""
    answer: dict[str, Any] = {}

    def start_response(status, headers, exc_info=None):
        answer.update(status=int(status.split(" ", 1)[0]), headers=list(headers))

    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics", "QUERY_STRING": query or "",
               "HTTP_ACCEPT": accept or "", "HTTP_ACCEPT_ENCODING": accept_encoding or ""}
    body = b"".join(app(environ, start_response))
    return answer["status"], answer["headers"], body


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
def exporter_app(registry: CollectorRegistry, token: Callable[[], str | None] = configured_token):
    """The standalone exporter's WSGI app: /metrics is the library's app behind the bearer token (when
    one is configured), / a pointer to it, anything else 404."""
    scrape = metrics_app(registry)

    def app(environ, start_response):
        path = environ.get("PATH_INFO") or "/"
        if path == "/metrics":
            expected = token()
            if expected and not token_matches(environ.get("HTTP_AUTHORIZATION"), expected):
                start_response("401 Unauthorized", [("Content-Type", "text/plain"),
                                                    ("WWW-Authenticate", 'Bearer realm="cluster-doctor"')])
                return [b"bearer token required\n"]
            return scrape(environ, start_response)
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [b'<html><body><a href="metrics">Cluster Doctor metrics</a></body></html>\n']
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found\n"]

    return app
