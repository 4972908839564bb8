"""HTTP layer: a threading HTTP/1.1 server with keep-alive (Content-Length on every response, chunked
transfer only for followed logs), URL routing to the API/control layers, and the discovery documents that
kubectl and the python client read."""

from __future__ import annotations

import json
import logging
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from . import control
from .api import qbool
from .errors import ApiError, bad_request, method_not_allowed
from .resources import GROUPS, TYPES, type_for
from .tables import table
from .util import dumps

log = logging.getLogger("k8s_emulator.server")

VERSION = {
    "major": "1",
    "minor": "31",
    "gitVersion": "v1.31.4+k8s-emulator",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z",
    "goVersion": "go1.22.10",
    "compiler": "gc",
    "platform": "linux/amd64",
}
NOT_FOUND = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": "the server could not find the requested resource",
    "reason": "NotFound",
    "details": {},
    "code": 404,
}


def resource_list(group: str, version: str) -> dict:
    res = []
    for plural, t in TYPES.items():
        if t.group != group:
            continue
        res.append(
            {
                "name": plural,
                "singularName": t.kind.lower(),
                "namespaced": t.namespaced,
                "kind": t.kind,
                "verbs": list(t.verbs),
                **({"shortNames": list(t.short_names)} if t.short_names else {}),
                **({"categories": ["all"]} if plural == "pods" else {}),
            }
        )
        for sub in t.subresources:
            kind = {"eviction": "Eviction", "binding": "Binding"}.get(sub, t.kind)
            verbs = {"log": ["get"], "eviction": ["create"], "binding": ["create"]}.get(
                sub, ["get", "patch", "update"]
            )
            entry = {
                "name": f"{plural}/{sub}",
                "singularName": "",
                "namespaced": t.namespaced,
                "kind": kind,
                "verbs": verbs,
            }
            if sub == "eviction":
                entry.update(group="policy", version="v1")
            res.append(entry)
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": res}


def group_doc(name: str) -> dict:
    gv = {"groupVersion": f"{name}/{GROUPS[name]}", "version": GROUPS[name]}
    return {"kind": "APIGroup", "apiVersion": "v1", "name": name, "versions": [gv], "preferredVersion": gv}


class EmulatorHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(self, addr, cluster, verbose=False):
        self.cluster, self.verbose = cluster, verbose
        super().__init__(addr, Handler)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "k8s-emulator"
    disable_nagle_algorithm = (
        True  # headers and body are separate writes: avoid 40 ms Nagle/delayed-ACK stalls
    )

    def log_message(self, fmt, *args):
        if self.server.verbose:
            log.info("%s - %s", self.address_string(), fmt % args)

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")

    def do_PATCH(self):
        self._dispatch("PATCH")

    def do_DELETE(self):
        self._dispatch("DELETE")

    # ------------------------------------------------------------ plumbing
    def _read_body(self):
        te = self.headers.get("Transfer-Encoding", "")
        if te.lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                data += self.rfile.read(size)
                self.rfile.readline()
        else:
            n = int(self.headers.get("Content-Length") or 0)
            data = self.rfile.read(n) if n else b""
        if not data:
            return None
        try:
            return json.loads(data)
        except ValueError:
            try:
                import yaml

                return yaml.safe_load(data)
            except Exception as exc:  # noqa: BLE001
                raise bad_request(f"couldn't get version/kind; json parse error: {exc}") from None

    def _send(self, code: int, body: bytes, ctype: str = "application/json"):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.wfile.write(body)

    def _json(self, code: int, obj):
        self._send(code, dumps(obj))

    def _dispatch(self, method: str):
        cluster = self.server.cluster
        try:
            parsed = urlsplit(self.path)
            q = {k: v[-1] for k, v in parse_qs(parsed.query, keep_blank_values=True).items()}
            body = self._read_body()
            if parsed.path.startswith("/_emulator/"):
                code, payload = control.handle(cluster, method, parsed.path, q, body)
                self._json(code, payload)
            else:
                self._api(method, parsed.path, q, body)
        except ApiError as exc:
            self._json(exc.code, exc.status())
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # noqa: BLE001
            log.error("internal error on %s %s:\n%s", method, self.path, traceback.format_exc())
            self._json(
                500,
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "message": f"Internal error occurred: {exc}",
                    "reason": "InternalError",
                    "details": {},
                    "code": 500,
                },
            )

    # ------------------------------------------------------------ Kubernetes API
    def _api(self, method: str, path: str, q: dict, body):
        cluster = self.server.cluster
        api = cluster.api
        segs = [s for s in path.split("/") if s]
        if method == "GET":
            if segs == ["version"]:
                return self._json(200, VERSION)
            if segs in (["healthz"], ["readyz"], ["livez"]):
                return self._send(200, b"ok", "text/plain")
            if segs == ["api"]:
                host = self.headers.get("Host", "127.0.0.1")
                return self._json(
                    200,
                    {
                        "kind": "APIVersions",
                        "versions": ["v1"],
                        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}],
                    },
                )
            if segs == ["apis"]:
                return self._json(
                    200,
                    {
                        "kind": "APIGroupList",
                        "apiVersion": "v1",
                        "groups": [group_doc(g) for g in GROUPS if g and g != "policy"],
                    },
                )
            if len(segs) == 2 and segs[0] == "apis" and segs[1] in GROUPS and segs[1] != "policy":
                return self._json(200, group_doc(segs[1]))
        if segs[:1] == ["api"] and len(segs) >= 2 and segs[1] == "v1":
            group, rest = "", segs[2:]
        elif segs[:1] == ["apis"] and len(segs) >= 3 and segs[1] in GROUPS and segs[2] == GROUPS[segs[1]]:
            group, rest = segs[1], segs[3:]
        else:
            return self._json(404, NOT_FOUND)
        if not rest:
            if method != "GET":
                raise method_not_allowed("the server does not allow this method on the requested resource")
            return self._json(200, resource_list(group, "v1"))
        ns = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            ns, rest = rest[1], rest[2:]
        rt = type_for(group, rest[0])
        if rt is None or len(rest) > 3 or (ns is not None and not rt.namespaced):
            return self._json(404, NOT_FOUND)
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub is not None and sub not in rt.subresources:
            return self._json(404, NOT_FOUND)
        if rt.namespaced and name is not None and ns is None:
            return self._json(404, NOT_FOUND)
        resource = rt.plural + (f"/{sub}" if sub else "")

        if method == "GET" and name is None:
            cluster.count("watch" if qbool(q, "watch") else "list", resource)
            lr = api.list(rt, ns, q)
            meta = {"resourceVersion": str(lr.rv)}
            if lr.cont:
                meta["continue"] = lr.cont
            if lr.remaining:
                meta["remainingItemCount"] = lr.remaining
            if self._wants_table():
                return self._json(200, table(rt.plural, lr.items, meta))
            head = dumps({"kind": rt.kind + "List", "apiVersion": rt.api_version, "metadata": meta})
            return self._send(200, head[:-1] + b',"items":[' + b",".join(lr.items) + b"]}")
        if method == "GET":
            cluster.count("get", resource)
            if sub == "log":
                return self._log(ns, name, q)
            v = api.get(rt, ns, name)
            if self._wants_table() and sub is None:
                return self._json(200, table(rt.plural, [v.raw()], {"resourceVersion": str(v.rv)}))
            return self._send(200, v.raw())
        if method == "POST":
            cluster.count("create", resource)
            if name is None:
                if rt.namespaced and ns is None:
                    raise method_not_allowed(
                        "the server does not allow this method on the requested resource"
                    )
                v = api.create(rt, ns, body or {}, q)
                return self._send(201, v.raw())
            if sub == "eviction":
                return self._json(201, api.evict(ns, name, body or {}))
            if sub == "binding":
                return self._json(201, api.bind(ns, name, body or {}))
            raise method_not_allowed("the server does not allow this method on the requested resource")
        if name is None and method == "DELETE":
            cluster.count("deletecollection", resource)
            items = api.delete_collection(rt, ns, body, q)
            raws = [i.raw() if hasattr(i, "raw") else dumps(i) for i in items]
            head = dumps({"kind": rt.kind + "List", "apiVersion": rt.api_version, "metadata": {}})
            return self._send(200, head[:-1] + b',"items":[' + b",".join(raws) + b"]}")
        if name is None or sub in ("log", "eviction", "binding"):
            raise method_not_allowed("the server does not allow this method on the requested resource")
        if method == "PUT":
            cluster.count("update", resource)
            return self._send(200, api.update(rt, ns, name, body or {}, q, sub).raw())
        if method == "PATCH":
            cluster.count("patch", resource)
            ctype = self.headers.get("Content-Type", "")
            return self._send(200, api.patch(rt, ns, name, body, ctype, q, sub).raw())
        if method == "DELETE":
            cluster.count("delete", resource)
            res = api.delete(rt, ns, name, body, q)
            return self._send(200, res.raw()) if hasattr(res, "raw") else self._json(200, res)
        raise method_not_allowed("the server does not allow this method on the requested resource")

    def _wants_table(self) -> bool:
        # kubectl get asks for server-side printing: Accept: application/json;as=Table;v=v1;g=meta.k8s.io,...
        return "as=Table" in (self.headers.get("Accept") or "")

    def _log(self, ns: str, name: str, q: dict):
        container, opts = self.server.cluster.api.log_source(ns, name, q)
        if container is None:
            return self._send(200, b"", "text/plain")
        if not opts.pop("follow", False):
            return self._send(200, container.log.read(**opts), "text/plain")
        # follow: chunked stream until the container ends (or the client goes away)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        opts.pop("limit_bytes", None)
        try:
            for chunk in container.log.follow(**opts):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
