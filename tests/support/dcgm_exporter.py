"""A Prometheus that scraped dcgm-exporter, for the speed-signal tests: a local HTTP server answers the
instant query from the samples of an exposition text (the fixtures under
tests/plugins/cluster_doctor/kube/fixtures/dcgm_exporter, SOURCES.md there)."""

from __future__ import annotations

import contextlib
import http.server
import json
import re
import threading
import urllib.parse
from pathlib import Path


NODE = "r6i3n0"  # the exporter's Hostname label in the fixtures
FIXTURES = Path(__file__).resolve().parents[1] / "plugins" / "cluster_doctor" / "kube" / "fixtures" / "dcgm_exporter"
SAMPLE = re.compile(r'^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)\{(?P<labels>[^}]*)\}\s+(?P<value>\S+)$')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def exposition(text: str) -> list[tuple[dict[str, str], str]]:
    """The samples of a text exposition: (labels with __name__, value)."""
    out = []
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        m = SAMPLE.match(line)
        assert m, line
        out.append(({"__name__": m["name"], **dict(LABEL.findall(m["labels"]))}, m["value"]))
    return out


class Prometheus(http.server.BaseHTTPRequestHandler):
    """Answers /api/v1/query as Prometheus does: a vector per query, or a 400 with its error body. A query
    ``{__name__=~"A|B"}`` is answered from the scraped exposition samples (``scraped``), a bare metric name
    from ``answers`` (name -> [(labels, value)]); the metric BROKEN is a parse error."""

    scraped: list[tuple[dict[str, str], str]] = []
    answers: dict[str, list[tuple[dict[str, str], str]]] = {}
    asked: list[dict[str, str]] = []  # each query's parameters

    def do_GET(self):  # noqa: N802 - the handler's name
        url = urllib.parse.urlparse(self.path)
        query = urllib.parse.parse_qs(url.query)
        type(self).asked.append({k: v[0] for k, v in query.items()})
        q, at = query["query"][0], float(query["time"][0])
        metric = q.split(" ")[0]
        m = re.fullmatch(r'\{__name__=~"([^"]*)"\}', q)
        if url.path != "/api/v1/query" or metric == "BROKEN":
            body, code = {"status": "error", "errorType": "bad_data", "error": "parse error"}, 400
        else:
            if m:
                result = [{"metric": labels, "value": [at, value]}
                          for labels, value in self.scraped if labels["__name__"] in set(m[1].split("|"))]
            else:
                result = [{"metric": {"__name__": metric, **labels}, "value": [at, value]}
                          for labels, value in self.answers.get(metric, [])]
            body, code = {"status": "success", "data": {"resultType": "vector", "result": result}}, 200
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def queries() -> list[str]:
    """The queries the fake Prometheus was asked since it started serving."""
    return [a["query"] for a in Prometheus.asked]


@contextlib.contextmanager
def serving():
    """The address of a Prometheus answering from ``Prometheus.scraped`` while the block runs."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Prometheus)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    Prometheus.asked.clear()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        Prometheus.scraped, Prometheus.answers = [], {}  # the next test starts from an empty Prometheus

