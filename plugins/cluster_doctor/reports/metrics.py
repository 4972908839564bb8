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
import dataclasses
import datetime as dt
import gzip
import hmac
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qs

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cluster_doctor.domain import numbers, suites
from cluster_doctor.domain.config import Settings
from cluster_doctor.domain.errors import one_line
from cluster_doctor.domain.peers import PeerVerdictValue
from cluster_doctor.reports import exposition
from cluster_doctor.reports.pair_families import (  # noqa: F401 - STATES and key_metric_name: this module's too
    PREFIX,
    STATES,
    PairLayout,
    PairText,
    add_pairs,
    key_metric_name,
)
from cluster_doctor.domain import transitions as life
from cluster_doctor.store import database, fleet, transitions

log = logging.getLogger(__name__)

TOKEN_ENV = "CLUSTER_DOCTOR_METRICS_TOKEN"
TOKEN_FILE_ENV = "CLUSTER_DOCTOR_METRICS_TOKEN_FILE"
DEFAULT_PORT = 9108
DEFAULT_HOST = "127.0.0.1"
DEFAULT_CACHE_TTL_S = 10.0
# gzip level of a scrape: level 1 writes 7 MB of exposition in ~12 ms (337 KB), the library's 9 in ~140 ms
# (268 KB); Prometheus reads both alike.
GZIP_LEVEL = 1

ConnectorProvider = Callable[[Settings], database.Connector]  # the settings name the Airflow connection
SettingsProvider = Callable[[], Settings]
SpoolProvider = Callable[[Settings], Any]  # the settings' attempt spool's SpoolStatus (store.spool)


def build_families(summary: Mapping[str, Any], pairs: Sequence[Mapping[str, Any]],
                   tests: Sequence[str]) -> list[Metric]:
    """Every family but up/scrape duration/skipped values, from FleetQueries.summary() and .pairs(), as
    prometheus_client families (the scrape writes the per-pair ones as text: ``pair_families.PairText``).

    Cardinality at 5,000 nodes x 4 tests: per pair its status and staleness (the alerting signals),
    the status start only for pairs that are not passing (where "since when" matters), the key
    figures per node, and the fleet aggregates; about 75,000 series."""
    layout = PairLayout(tests)
    families = layout.families()
    add_pairs(families, layout, pairs)
    return [*summary_families(summary), *families]


def summary_families(summary: Mapping[str, Any]) -> list[Metric]:
    """The fleet-wide gauges of FleetQueries.summary() (None: NaN)."""
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
          "error, or failing by speed (code SLOW).", summary["failing_nodes"])
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
    return out


def reservation_family(idle_gpu_hours: float | None) -> Metric:
    """What reserving overdue nodes (setting reservation) has cost: GPU-hours reserved nodes
    stood idle waiting for their validation, over every released reservation (``node_reservations``)."""
    family = CounterMetricFamily(
        f"{PREFIX}_reservation_idle_gpu_hours",
        "GPU-hours reserved nodes stood idle, tainted for validation, summed over every released reservation.")
    if idle_gpu_hours is not None:
        family.add_metric([], idle_gpu_hours)
    return family


def peer_family(counts: Mapping[str, int] | None) -> Metric:
    """Peer tests: peer-tested nodes by verdict, suspects (a failed peer test not yet blamed
    on either side) apart from blamed nodes; every verdict 0 while peer tests are off. ``counts`` None:
    the family without samples (describe)."""
    family = GaugeMetricFamily(
        f"{PREFIX}_fleet_peer_nodes", "Peer-tested GPU nodes by the verdict of their peer tests: pass, fail "
        "(blamed by triangulation) or suspect (a failed peer test not yet blamed on either side).",
        labels=["verdict"])
    if counts is not None:
        for verdict in PeerVerdictValue:
            family.add_metric([verdict], float(counts.get(verdict, 0)))
    return family


def suspect_families(since: Mapping[str, float] | None) -> list[Metric]:
    """Suspect nodes: a signal said they may be broken and their bundle has not answered yet;
    how many, and since when each (Unix time of its earliest open evidence). ``since`` None: the families
    without samples (describe)."""
    count = GaugeMetricFamily(f"{PREFIX}_fleet_suspect_nodes", "GPU nodes suspect now: a signal (allocatable "
                              "below capacity, a node condition, an event, a DCGM field, a failed user pod, a "
                              "reboot...) said they may be broken and their bundle has not passed since.")
    each = GaugeMetricFamily(f"{PREFIX}_node_suspect_since_timestamp_seconds", "Since when a suspect node is "
                             "suspect: Unix time of its earliest evidence not yet answered by its bundle.",
                             labels=["node"])
    if since is not None:
        count.add_metric([], float(len(since)))
        for node, at in sorted(since.items()):
            each.add_metric([node], at)
    return [count, each]


def slow_families(slow: Mapping[str, Any] | None) -> list[Metric]:
    """Slow nodes (fail-slow: ``store.fail_slow.SlowNode``): how many suspect and failing (code SLOW), and
    each one with its evidence, the flagged probe figures and the speed signals. ``slow`` None: the families
    without samples (describe)."""
    count = GaugeMetricFamily(f"{PREFIX}_fleet_slow_nodes", "GPU nodes slow now by state: suspect (one "
                              "sighting: a speed probe judged low against the fleet, or a speed signal) or "
                              "failing (code SLOW: two flagged probes in a row, or a probe and a signal).",
                              labels=["state"])
    each = GaugeMetricFamily(f"{PREFIX}_node_slow_since_timestamp_seconds", "A slow node, since its last flagged "
                             "probe (else its first speed signal), Unix time; `evidence` names the probe's "
                             "verdicts and the signals.", labels=["node", "state", "evidence"])
    if slow is not None:
        for state in ("suspect", "failing"):
            count.add_metric([state], float(sum(s.state.value == state for s in slow.values())))
        for node, s in sorted(slow.items()):
            evidence = "; ".join([*(f"probe {p}" for p in s.probes), *(f"signal {x}" for x in s.signals)])
            each.add_metric([node, s.state.value, evidence[:MAX_EVIDENCE]], s.since.timestamp() if s.since else 0.0)
    return [count, each]


MAX_EVIDENCE = 300  # a label value: the first pieces of evidence, enough to say what is slow


# How far back the quarantine durations reach: the releases of the last 30 days.
LIFECYCLE_WINDOW = dt.timedelta(days=30)


def lifecycle(cur: Any, now: dt.datetime) -> dict[str, Any]:
    """What the lifecycle families need, from an open cursor: transitions by kind ever, the
    repeat offenders now, and the durations of the quarantines released within ``LIFECYCLE_WINDOW``."""
    spans = life.durations(transitions.of_released_since(cur, now - LIFECYCLE_WINDOW), now - LIFECYCLE_WINDOW)
    return {"totals": transitions.totals(cur), "offenders": len(transitions.repeat_offenders(cur)),
            "in_quarantine": life.Durations.quantiles(spans.in_quarantine),
            "repair_to_release": life.Durations.quantiles(spans.repair_to_release)}


def lifecycle_families(read: Mapping[str, Any] | None) -> list[Metric]:
    """The node lifecycle: transitions counted by kind, repeat offenders, how long quarantines last
    and how long from a repair to the release. ``read`` None: the families without samples (describe)."""
    total = CounterMetricFamily(f"{PREFIX}_node_transitions", "Transitions of GPU nodes recorded so far, by kind: "
                                "quarantined, repaired (rebooted while quarantined), accepted, released, "
                                "repeat_offender, gated (the acceptance gate's taint).", labels=["kind"])
    offenders = GaugeMetricFamily(f"{PREFIX}_fleet_repeat_offender_nodes", "GPU nodes that are repeat offenders "
                                  "now (action replace, kept in quarantine until a person releases them).")
    held = GaugeMetricFamily(f"{PREFIX}_quarantine_duration_seconds", "How long the quarantines released in the "
                             "last 30 days lasted, from quarantined to released (quantile 0.5 and 0.9).",
                             labels=["quantile"])
    repaired = GaugeMetricFamily(f"{PREFIX}_repair_to_release_seconds", "From a quarantined node's repair (its "
                                 "first reboot seen while quarantined) to its release, over the releases of the "
                                 "last 30 days (quantile 0.5 and 0.9).", labels=["quantile"])
    if read is not None:
        for kind in life.KINDS:
            total.add_metric([kind], float(read["totals"].get(kind, 0)))
        offenders.add_metric([], float(read["offenders"]))
        for family, key in ((held, "in_quarantine"), (repaired, "repair_to_release")):
            for quantile, value in sorted(read[key].items()):
                family.add_metric([quantile], float(value))
    return [total, offenders, held, repaired]


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


@dataclasses.dataclass
class _Scrape:
    """What one database read gives a scrape: the summary, the fleet assessment, the peer verdict counts
    and what reservations cost; ``chunks`` its families as exposition chunks, once written."""

    key: tuple
    at: float  # time.monotonic() of the read
    summary: dict[str, Any]
    assessment: Any  # coverage.Assessment
    tests: list[str]
    peer_counts: dict[str, int]
    idle_gpu_hours: float | None
    chunks: list[exposition.Chunk] | None = None
    suspect_since: dict[str, float] = dataclasses.field(default_factory=dict)  # node -> Unix time
    slow: dict[str, Any] = dataclasses.field(default_factory=dict)  # node -> store.fail_slow.SlowNode
    lifecycle: dict[str, Any] | None = None  # transitions, repeat offenders, durations


class ClusterDoctorCollector(Collector):
    """Queries the results database on collect() and exposition(); never raises.

    What a read gives is kept for ``cache_ttl_s`` seconds (per settings), so scrapers that poll together
    (a Prometheus HA pair, a UI refresh) cost the database one query set. ``exposition`` (the scrape's
    own path) writes the per-pair families from text kept per node between reads (``PairText``);
    ``collect`` yields the same families as prometheus_client objects, for any other registry."""

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
        self._cache: _Scrape | None = None
        self._text: PairText | None = None
        self._lock = threading.Lock()

    def describe(self) -> Iterable[Metric]:
        """Every family a scrape may hold, without samples, from the code alone (registering must not
        query the database): the registry learns the names, so the library's ``name[]`` filter works."""
        yield from build_families(collections.defaultdict(lambda: None), [], list(suites.CATALOG))
        yield reservation_family(None)
        yield peer_family(None)
        yield from suspect_families(None)
        yield from slow_families(None)
        yield from lifecycle_families(None)
        if self.spool_provider is not None:
            yield from spool_families(None, self.clock())
        yield from _self_families(0.0, 0.0)

    def _read(self) -> _Scrape:
        """The database's answer for this scrape (the kept one while it is younger than the TTL); the
        caller holds the lock."""
        settings = self.settings_provider()
        connect = self.connector_provider(settings)
        key = (str(connect), tuple(settings.tests), settings.staleness_days, settings.peer_tests,
               settings.peer_cadence_days, settings.slow_signal_window_hours, settings.slow_confirm_spacing_hours)
        cached = self._cache
        if cached and cached.key == key and time.monotonic() - cached.at < self.cache_ttl_s:
            return cached
        with fleet.open_for(settings, connect, now=self.clock(), application_name="cluster-doctor-metrics") as q:
            # one assessment per scrape: the summary and the pairs are the same one's
            read = _Scrape(key, time.monotonic(), q.summary(), q.assessment(), list(q.tests), q.peer_counts(),
                           q.reservation_idle_gpu_hours(),
                           suspect_since={n: s.since.timestamp() for n, s in q.suspects().items()},
                           slow=q.slow_nodes())  # the settings' window and spacing, as the summary's failing
            with q.conn.cursor() as cur:
                read.lifecycle = lifecycle(cur, q.now)
        self._cache = read if self.cache_ttl_s > 0 else None
        return read

    def _chunks(self, read: _Scrape) -> list[exposition.Chunk]:
        """The database's families as exposition chunks, the per-pair ones from the kept text."""
        if read.chunks is None:
            if self._text is None or self._text.layout.tests != tuple(read.tests):
                self._text = PairText(PairLayout(read.tests))
            small = [*summary_families(read.summary)]
            tail = [peer_family(read.peer_counts), reservation_family(read.idle_gpu_hours),
                    *suspect_families(read.suspect_since), *slow_families(read.slow),
                    *lifecycle_families(read.lifecycle)]
            read.chunks = [*map(exposition.Chunk, small), *self._text.chunks(read.assessment),
                           *map(exposition.Chunk, tail)]
        return read.chunks

    def _database(self, as_text: bool) -> tuple[list[Any], float]:
        """(the database's families or chunks, up); a failure is up 0 with a one-line reason, never a 500."""
        try:
            with self._lock:  # concurrent scrapes wait for one query set instead of running their own
                read = self._read()
                if as_text:
                    return self._chunks(read), 1.0
                families = build_families(read.summary, read.assessment.pairs, read.tests)
                return [*families, peer_family(read.peer_counts), reservation_family(read.idle_gpu_hours),
                        *suspect_families(read.suspect_since), *slow_families(read.slow),
                        *lifecycle_families(read.lifecycle)], 1.0
        except Exception as exc:  # noqa: BLE001 - any failure is a down scrape
            log.warning("cluster doctor metrics: results database not readable: %s", one_line(exc, 300))
            return [], 0.0

    def collect(self) -> Iterator[Metric]:
        started = time.perf_counter()
        families, up = self._database(as_text=False)
        yield from families
        yield from self._spool_families()
        yield from _self_families(up, time.perf_counter() - started)

    def exposition(self, accept: str | None = None, names: Iterable[str] | None = None) -> tuple[bytes, str]:
        """(body, content type) of a scrape in the format ``accept`` asks for: the bytes the library's
        encoder writes for collect()'s families, at a fraction of the cost (``exposition.segments``)."""
        pieces, content_type = self.pieces(accept, names)
        return b"".join(pieces), content_type

    def pieces(self, accept: str | None = None, names: Iterable[str] | None = None) -> tuple[list[bytes], str]:
        """exposition() as consecutive pieces: a family's text that did not change is the same bytes
        object as in the previous scrape (the scrape's gzip compresses it once: ``exposition.Gzip``)."""
        started = time.perf_counter()
        chunks, up = self._database(as_text=True)
        small = [*self._spool_families(), *_self_families(up, time.perf_counter() - started)]
        openmetrics, content_type = exposition.negotiate(accept)
        return exposition.segments([*chunks, *map(exposition.Chunk, small)], openmetrics=openmetrics,
                                   names=names), content_type

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


class _Registry(CollectorRegistry):
    """A registry of one collector; the scrape asks the collector for its exposition directly when it
    has one (ClusterDoctorCollector), else the library encodes."""

    def __init__(self, collector: Collector):
        super().__init__(auto_describe=False)
        self.register(collector)
        self.collector = collector

    @property
    def direct(self) -> Callable[..., tuple[bytes, str]] | None:
        return getattr(self.collector, "exposition", None)

    @property
    def pieces(self) -> Callable[..., tuple[list[bytes], str]] | None:
        return getattr(self.collector, "pieces", None)


def make_registry(collector: Collector) -> CollectorRegistry:
    return _Registry(collector)


def render(registry: CollectorRegistry, accept: str | None = None,
           names: Iterable[str] | None = None) -> tuple[bytes, str]:
    """(body, content type) of one scrape in the format ``accept`` asks for (Prometheus text, or
    OpenMetrics): the collector's own exposition, else the library's encoder."""
    direct = getattr(registry, "direct", None)
    if direct is not None:
        return direct(accept, names)
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry.restricted_registry(names) if names is not None else registry), content_type


def metrics_app(registry: CollectorRegistry):
    """The scrape's WSGI app over ``registry``: prometheus_client's app (any path; gzip when accepted,
    OpenMetrics when asked, ``name[]`` filter, OPTIONS and 405 as it answers them), a GET answered from
    the collector's own exposition when it has one (gzip compressing only what changed), its answers
    marked as varying with the format and encoding asked for."""
    library = make_wsgi_app(registry)
    compressor = exposition.Gzip(GZIP_LEVEL)

    def app(environ, start_response):
        def start(status, headers, exc_info=None):
            headers = [*headers, ("Vary", "Accept, Accept-Encoding")]
            return start_response(status, headers) if exc_info is None else start_response(status, headers, exc_info)

        pieces_of = getattr(registry, "pieces", None)
        if pieces_of is None or environ.get("REQUEST_METHOD") != "GET" or environ.get("PATH_INFO") == "/favicon.ico":
            return library(environ, start)
        names = parse_qs(environ.get("QUERY_STRING", "")).get("name[]")
        pieces, content_type = pieces_of(environ.get("HTTP_ACCEPT"), names)
        headers = [("Content-Type", content_type)]
        if gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING", "")):
            body = compressor.compress(pieces) if names is None else gzip.compress(b"".join(pieces), GZIP_LEVEL)
            headers.append(("Content-Encoding", "gzip"))
        else:
            body = b"".join(pieces)
        start("200 OK", headers)
        return [body]

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
